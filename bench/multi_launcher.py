"""Throughput with several launchers against one PostgreSQL vs one launcher (issue 4's figure).

N manual runs of `true` are enqueued first; then K `runlane serve` processes (concurrency 16
each) work them off; the span from the first start to the last finish (database timestamps)
gives runs/s. On a 2-core machine more launchers mostly add contention: the figure shows what
the fenced claim path costs when launchers share the queue.

With `--in-flight T` the launchers share T slots (T // K each), so one launcher and several are
compared at the same total in flight (issue 21 section 3: several launcher processes per host
against one launcher's thread spawns). Rounds alternate between the launcher counts. `--hold`
keeps the queue from every launcher until all have started (4 s), so no launcher works alone
while another is still importing, and prints the share of the machine left idle over the span;
`--spawners N` sets each launcher's RUNLANE_SPAWNERS. CPU per run
is the launchers' own (utime + stime of the serve processes and their guardians; the runs
excluded) plus the
scratch database's PostgreSQL backends', read from /proc just before the launchers stop.

    .venv/bin/python bench/multi_launcher.py --runs 2000 --launchers 1 3 --repeat 3
    .venv/bin/python bench/multi_launcher.py --runs 3000 --launchers 1 2 --in-flight 16
    .venv/bin/python bench/multi_launcher.py --runs 8000 --launchers 1 2 --in-flight 128 --hold
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
from _common import CATALOG, MachineLoad, held_queue, median, runlane_cmd, scratch_database

from runlane.catalog import load_catalog
from runlane.core.runs import Trigger
from runlane.service.accept import RunRequest, accept_run
from runlane.service.wiring import store_from_url


async def enqueue(url: str, catalog_path: Path, n: int) -> None:
    catalog = load_catalog(catalog_path)
    store = store_from_url(url)
    await store.open()
    try:
        for _ in range(n):
            await accept_run(store, catalog, RunRequest(job="noop", trigger=Trigger.CLI))
    finally:
        await store.close()


TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` (its children excluded)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def backends_of(database: str) -> list[int]:
    """The PostgreSQL backends connected to `database` (by their process title)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if title.startswith("postgres: ") and f" {database} " in title:
            pids.append(int(entry.name))
    return pids


def guardians_of(parents: list[int]) -> list[int]:
    """The launchers' guardian processes (part of the launcher's cost, unlike the runs)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            title = (entry / "cmdline").read_bytes().decode(errors="replace")
        except (OSError, IndexError):
            continue
        if int(stat[1]) in parents and "guardian" in title:
            pids.append(int(entry.name))
    return pids


def total_cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            total += cpu_seconds(pid)
        except (OSError, IndexError):
            continue
    return total


def one(
    n: int, launchers: int, in_flight: int | None, *, hold: bool = False, spawners: int = 2
) -> tuple[float, int, float, float, float]:
    """runs/s, launchers that took runs, CPU ms a run (launchers, PostgreSQL), machine idle %
    over the span (NaN without `hold`)."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "catalog.yaml").write_text(CATALOG)
        with scratch_database("postgres", work) as url:
            env = dict(
                os.environ,
                RUNLANE_DATABASE_URL=url,
                RUNLANE_CATALOG=str(work / "catalog.yaml"),
                RUNLANE_LOG_DIR=str(work / "logs"),
                RUNLANE_CONCURRENCY=str(16 if in_flight is None else in_flight // launchers),
                RUNLANE_LOG_LEVEL="warning",
                RUNLANE_SPAWNERS=str(spawners),
            )
            subprocess.run(
                [*runlane_cmd(), "db", "upgrade"], env=env, check=True, capture_output=True
            )
            asyncio.run(enqueue(url, work / "catalog.yaml", n))
            database = urlsplit(url).path.lstrip("/")
            db_cpu0 = total_cpu(backends_of(database))
            with contextlib.ExitStack() as stack:
                release = stack.enter_context(held_queue(url)) if hold else None
                procs = [
                    subprocess.Popen([*runlane_cmd(), "serve"], env=env) for _ in range(launchers)
                ]
                idle = float("nan")
                try:
                    load = None
                    if release is not None:
                        time.sleep(4.0)  # every launcher up and idle
                        load = stack.enter_context(MachineLoad())
                        release()
                    with psycopg.connect(url, autocommit=True) as conn:
                        while True:
                            row = conn.execute(
                                "SELECT count(*) FROM run_log WHERE status = 'success'"
                            ).fetchone()
                            if row is not None and row[0] >= n:
                                break
                            time.sleep(0.25)
                        first, last, owners = conn.execute(
                            "SELECT extract(epoch FROM min(started_at)), "
                            "extract(epoch FROM max(finished_at)), "
                            "count(DISTINCT lease_owner) FROM run_log"
                        ).fetchone() or (0.0, 0.0, 0)
                    span = float(last) - float(first)
                    if load is not None:
                        idle = load.idle_pct(float(first), float(last))
                    serving = [p.pid for p in procs]
                    launcher_cpu = total_cpu(serving + guardians_of(serving))
                    # (The backends that lived through the run; this one's own share is tiny.)
                    db_cpu = total_cpu(backends_of(database)) - db_cpu0
                finally:
                    for p in procs:
                        p.send_signal(signal.SIGTERM)
                    for p in procs:
                        p.wait(30)
            return n / span, int(owners), launcher_cpu * 1000 / n, db_cpu * 1000 / n, idle


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--launchers", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--in-flight",
        type=int,
        default=None,
        help="total slots shared by the launchers (default: 16 per launcher)",
    )
    ap.add_argument("--hold", action="store_true", help="release the runs once all launchers run")
    ap.add_argument("--spawners", type=int, default=2, help="RUNLANE_SPAWNERS of each launcher")
    args = ap.parse_args()
    rates: dict[int, list[float]] = {k: [] for k in args.launchers}
    cpus: dict[int, list[float]] = {k: [] for k in args.launchers}
    for i in range(args.repeat):
        for k in args.launchers:  # alternating rounds, in the same minutes
            rate, owners, launcher_ms, db_ms, idle = one(
                args.runs, k, args.in_flight, hold=args.hold, spawners=args.spawners
            )
            rates[k].append(rate)
            cpus[k].append(launcher_ms + db_ms)
            print(
                f"[{k} launcher(s) #{i + 1}] {rate:.0f} runs/s, work shared by {owners} "
                f"launcher(s); CPU per run: launchers {launcher_ms:.3f} ms + PostgreSQL "
                f"{db_ms:.3f} ms; machine idle {idle:.1f}%; load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    for k in args.launchers:
        print(
            f"[{k} launcher(s) median of {args.repeat}] {median(rates[k]):.0f} runs/s, "
            f"{median(cpus[k]):.3f} ms CPU per run (launchers + PostgreSQL)",
            flush=True,
        )


if __name__ == "__main__":
    main()
