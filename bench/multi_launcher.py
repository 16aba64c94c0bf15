"""Throughput with several launchers against one PostgreSQL vs one launcher (issue 4's figure).

N manual runs of `true` are enqueued first; then K `runlane serve` processes (concurrency 16
each) work them off; the span from the first start to the last finish (database timestamps)
gives runs/s. On a 2-core machine more launchers mostly add contention: the figure shows what
the fenced claim path costs when launchers share the queue.

    .venv/bin/python bench/multi_launcher.py --runs 2000 --launchers 1 3 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from _common import CATALOG, median, runlane_cmd, scratch_database

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


def one(n: int, launchers: int) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "catalog.yaml").write_text(CATALOG)
        with scratch_database("postgres", work) as url:
            env = dict(
                os.environ,
                RUNLANE_DATABASE_URL=url,
                RUNLANE_CATALOG=str(work / "catalog.yaml"),
                RUNLANE_LOG_DIR=str(work / "logs"),
                RUNLANE_CONCURRENCY="16",
                RUNLANE_LOG_LEVEL="warning",
            )
            subprocess.run(
                [*runlane_cmd(), "db", "upgrade"], env=env, check=True, capture_output=True
            )
            asyncio.run(enqueue(url, work / "catalog.yaml", n))
            procs = [subprocess.Popen([*runlane_cmd(), "serve"], env=env) for _ in range(launchers)]
            try:
                with psycopg.connect(url, autocommit=True) as conn:
                    while True:
                        row = conn.execute(
                            "SELECT count(*) FROM run_log WHERE status = 'success'"
                        ).fetchone()
                        if row is not None and row[0] >= n:
                            break
                        time.sleep(0.25)
                    span, owners = conn.execute(
                        "SELECT extract(epoch FROM max(finished_at) - min(started_at)), "
                        "count(DISTINCT lease_owner) FROM run_log"
                    ).fetchone() or (0.0, 0)
            finally:
                for p in procs:
                    p.send_signal(signal.SIGTERM)
                for p in procs:
                    p.wait(30)
            return n / float(span), int(owners)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--launchers", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for k in args.launchers:
        rates = []
        for i in range(args.repeat):
            rate, owners = one(args.runs, k)
            rates.append(rate)
            print(
                f"[{k} launcher(s) #{i + 1}] {rate:.0f} runs/s, work shared by {owners} launcher(s)",
                flush=True,
            )
        print(f"[{k} launcher(s) median of {args.repeat}] {median(rates):.0f} runs/s", flush=True)


if __name__ == "__main__":
    main()
