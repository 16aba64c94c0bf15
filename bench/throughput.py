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
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def one(
    kind: str, n: int, concurrency: int, profile: str | None = None, log_level: str = "warning"
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
                    proc = subprocess.Popen(
                        [*runlane_cmd(), "serve"], env=env, stdout=log_file, stderr=log_file
                    )
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
                    span = wait_for_successes(url, n)
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
            }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=16)
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
    results = []
    for i in range(args.repeat):
        r = one(args.db, args.runs, args.concurrency, args.profile, args.log_level)
        results.append(r)
        print(
            f"[{args.db} #{i + 1}] " + "  ".join(f"{k}={v:.2f}" for k, v in r.items()), flush=True
        )
    keys = results[0].keys()
    print(
        f"[{args.db} median of {len(results)}] "
        + "  ".join(f"{k}={median([r[k] for r in results]):.2f}" for k in keys)
    )


if __name__ == "__main__":
    main()
