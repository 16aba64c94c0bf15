"""Throughput, CPU per run and memory of a real `runlane serve` process.

2,000 manual runs of a job whose command is `true`, concurrency 16: runs are enqueued through the
accept path first, then a launcher is started and timed from its first start to its last finish
(database timestamps). CPU per run counts the launcher process and its guardian (runs excluded;
the runs are held while the launcher starts, and its CPU is read once it is idle, so start-up
is not counted) plus the PostgreSQL processes that serve the scratch database (its backends and
the shared WAL writer, checkpointer and background writer; other sessions on the server are
left out). Prints one line per repetition and the medians.

    .venv/bin/python bench/throughput.py --db postgres --runs 2000 --repeat 3
    .venv/bin/python bench/throughput.py --db sqlite --runs 2000 --repeat 3
    .venv/bin/python bench/throughput.py --quick      # a smoke run (tests/integration/test_bench_smoke.py)
    .venv/bin/python bench/throughput.py --log-level info   # with the launcher's default log level
    PATH=.venv/bin:$PATH .venv/bin/python bench/throughput.py --runs 4000 --repeat 1 \
        --profile /tmp/serve.txt                        # where the launcher's time goes (py-spy)
    .venv/bin/python bench/throughput.py --runs 3000 --repeat 1 --cprofile /tmp/serve.prof
                                                        # the same with cProfile (loop thread)
    .venv/bin/python bench/throughput.py --runs 3000 --repeat 1 --statements
                                                        # statements per run, by statement
    .venv/bin/python bench/throughput.py --in-flight 1,4,16,64,256 --runs 2000 --repeat 1
                                                        # the curve: one line per concurrency
    .venv/bin/python bench/throughput.py --history 1000000 --runs 3000 --repeat 1
                                                        # with 1M finished rows in run_log first
    .venv/bin/python bench/throughput.py --runs 10000 --repeat 1   # 10,000 runs queued at once

`--history` reuses `bench/api_runs.py`'s seeder (generate_series; its queued and running rows
are deleted, so only finished history is left) and times only the bench's own `noop` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from _common import (
    CATALOG,
    cpu_seconds,
    held_queue,
    helper_cpu_seconds,
    median,
    postgres_cpu_delta,
    postgres_cpu_seconds,
    rss_mib,
    runlane_cmd,
    scratch_database,
    wait_for_successes,
)
from api_runs import seed

from runlane.catalog import load_catalog
from runlane.core.runs import Trigger
from runlane.service.accept import RunRequest, accept_run
from runlane.service.wiring import store_from_url


async def enqueue(url: str, catalog_path: Path, n: int) -> float:
    catalog = load_catalog(catalog_path)
    store = store_from_url(url)
    await store.open()
    try:
        t0 = time.perf_counter()
        for _ in range(n):
            await accept_run(store, catalog, RunRequest(job="noop", trigger=Trigger.CLI))
        return n / (time.perf_counter() - t0)
    finally:
        await store.close()


def py_spy() -> str:
    """py-spy from PATH or next to this interpreter (a venv's bin need not be on PATH)."""
    found = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if found is None:
        raise SystemExit("--profile needs py-spy: pip install py-spy")
    return found


def seed_history(url: str, rows: int) -> float:
    """`rows` finished runs of other jobs in run_log (api_runs.py's seeder, without the few
    queued and running rows it adds: those would be claimed or recovered by the launcher)."""
    seconds = seed(url, rows)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM run_log WHERE status IN ('queued', 'running')")
    return seconds


def statements_per_run(path: Path, n: int) -> dict[str, float]:
    """The launcher's statements (counted by `_statement_count.py`) per run, by statement."""
    counts: dict[str, int] = json.loads(path.read_text())
    total = sum(v for k, v in counts.items() if not k.startswith("("))
    print(f"statements per run: {total / n:.2f} ({total} for {n} runs)")
    for key, value in counts.items():
        print(f"  {value / n:7.3f}  {key}")
    return {"statements_per_run": total / n}


def one(
    kind: str,
    n: int,
    concurrency: int,
    profile: str | None = None,
    log_level: str = "warning",
    *,
    cprofile: str | None = None,
    statements: bool = False,
    history: int = 0,
) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        (work / "catalog.yaml").write_text(CATALOG)
        with scratch_database(kind, work) as url:
            env = dict(
                os.environ,
                RUNLANE_DATABASE_URL=url,
                RUNLANE_CATALOG=str(work / "catalog.yaml"),
                RUNLANE_LOG_DIR=str(work / "logs"),
                RUNLANE_CONCURRENCY=str(concurrency),
                RUNLANE_LOG_LEVEL=log_level,
            )
            subprocess.run(
                [*runlane_cmd(), "db", "upgrade"], env=env, check=True, capture_output=True
            )
            if history:
                print(f"seeded {history:,} finished rows in {seed_history(url, history):.0f} s")
            enqueue_rate = asyncio.run(enqueue(url, work / "catalog.yaml", n))
            database = url.rsplit("/", 1)[1]
            proc: subprocess.Popen[bytes] | None = None
            try:
                with held_queue(url) as release:
                    # The launcher starts on a held queue: its start-up (imports, connections) is
                    # over and it is idle when its memory and CPU are read; then every run is let go
                    # at once.
                    # Its log goes to a file: at info that is a line per run, as in production.
                    log_file = stack.enter_context((work / "serve.log").open("wb"))
                    serve = [*runlane_cmd(), "serve"]
                    if cprofile:  # the loop thread only (cProfile sees the main thread)
                        serve = [sys.executable, "-m", "cProfile", "-o", cprofile, "-m", "runlane"]
                        serve.append("serve")
                    counted = work / "statements.json"
                    if statements:
                        counter = Path(__file__).with_name("_statement_count.py")
                        serve = [sys.executable, str(counter), str(counted), "serve"]
                    proc = subprocess.Popen(serve, env=env, stdout=log_file, stderr=log_file)
                    time.sleep(2.0)
                    idle_rss = rss_mib(proc.pid)
                    startup_cpu = cpu_seconds(proc.pid) + helper_cpu_seconds(proc.pid)
                    pg_before = postgres_cpu_seconds(database) if kind == "postgres" else {}
                    spy = (
                        subprocess.Popen(
                            [
                                py_spy(),
                                "record",
                                "--nonblocking",
                                "--format",
                                "raw",
                                "--rate",
                                "250",
                                "-o",
                                profile,
                                "--pid",
                                str(proc.pid),
                            ],
                            stdout=subprocess.DEVNULL,
                        )
                        if profile
                        else None
                    )
                    release()
                try:
                    span = wait_for_successes(url, n, job="noop" if history else None)
                except BaseException:
                    # Show why: the launcher's own log is in the scratch directory.
                    log_file.flush()
                    tail = (work / "serve.log").read_text(errors="replace").splitlines()[-20:]
                    print("\n".join(["launcher log (last lines):", *tail]), file=sys.stderr)
                    raise
                launcher_cpu = cpu_seconds(proc.pid) + helper_cpu_seconds(proc.pid)
                if spy is not None:
                    spy.send_signal(signal.SIGINT)
                    spy.wait(30)
                peak = rss_mib(proc.pid, "VmHWM")
                pg_cpu = (
                    postgres_cpu_delta(pg_before, postgres_cpu_seconds(database))
                    if kind == "postgres"
                    else 0.0
                )
                launcher_cpu = max(0.0, launcher_cpu - startup_cpu)
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
                extra = statements_per_run(counted, n) if statements else {}
            finally:
                # Never leave the launcher behind when the bench fails halfway.
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait(30)
            return {
                "runs_per_s": n / span,
                "enqueue_per_s": enqueue_rate,
                "cpu_ms_per_run": 1000 * (launcher_cpu + pg_cpu) / n,
                "launcher_cpu_ms_per_run": 1000 * launcher_cpu / n,
                "pg_cpu_ms_per_run": 1000 * pg_cpu / n,
                "startup_cpu_s": startup_cpu,
                "idle_rss_mib": idle_rss,
                "peak_rss_mib": peak,
                **extra,
            }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument(
        "--in-flight",
        metavar="N,N,...",
        help="the curve: each repetition runs at each of these concurrencies in turn",
    )
    ap.add_argument(
        "--history", type=int, default=0, metavar="ROWS", help="seed ROWS finished runs first"
    )
    ap.add_argument("--cprofile", metavar="FILE", help="run the launcher under cProfile -o FILE")
    ap.add_argument(
        "--statements", action="store_true", help="count the launcher's statements per run"
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--profile",
        metavar="FILE",
        help="sample the launcher with py-spy (on PATH) into FILE, collapsed stacks",
    )
    ap.add_argument("--quick", action="store_true", help="50 runs, once: checks the script works")
    ap.add_argument(
        "--log-level",
        default="warning",
        help="the launcher's RUNLANE_LOG_LEVEL (info logs a line per run, to a file)",
    )
    args = ap.parse_args()
    if args.quick:
        args.runs, args.repeat = 50, 1
    levels = [int(c) for c in args.in_flight.split(",")] if args.in_flight else [args.concurrency]
    results: dict[int, list[dict[str, float]]] = {c: [] for c in levels}
    for i in range(args.repeat):
        for c in levels:  # alternating: each repetition takes every concurrency in turn
            r = one(
                args.db,
                args.runs,
                c,
                args.profile,
                args.log_level,
                cprofile=args.cprofile,
                statements=args.statements,
                history=args.history,
            )
            results[c].append(r)
            print(
                f"[{args.db} c={c} #{i + 1}] " + "  ".join(f"{k}={v:.2f}" for k, v in r.items()),
                flush=True,
            )
    for c, rows in results.items():
        print(
            f"[{args.db} c={c} median of {len(rows)}] "
            + "  ".join(f"{k}={median([r[k] for r in rows]):.2f}" for k in rows[0])
        )


if __name__ == "__main__":
    main()
