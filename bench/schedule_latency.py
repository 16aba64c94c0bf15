"""Benchmark: 200 jobs due on the same slot; how late does each run start (PostgreSQL, inline
`true`)? Prints p50/p99/max of `started_at - scheduled_for` per round and the median p99 of 3.

    .venv/bin/python bench/schedule_latency.py [--jobs 200] [--db postgres|sqlite] [--short]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import scratch_database

from runlane.catalog import parse_catalog_text
from runlane.ports import RunFilter
from runlane.service.config import Settings
from runlane.service.launcher import Launcher
from runlane.service.wiring import build_executors, store_from_url


async def one_round(url: str, jobs: int, workdir: Path) -> list[float]:
    store = store_from_url(url)
    await store.open()
    await store.upgrade()
    second = (datetime.now(UTC) + timedelta(seconds=8)).second
    lines = ["version: 1", "defaults: {executor: inline, overlap: allow, deadline: 1m}", "jobs:"]
    lines += [
        f'  j{i}: {{command: ["true"], schedules: [{{cron: "{second} * * * * *", tz: UTC}}]}}'
        for i in range(jobs)
    ]
    catalog = parse_catalog_text("\n".join(lines) + "\n", "bench.yaml")
    finished: set[str] = set()
    done = asyncio.Event()

    def hook(event: str, run_id: str) -> None:
        if event == "finished":
            finished.add(run_id)
            if len(finished) >= jobs:
                done.set()

    settings = Settings(
        database_url=url,
        log_dir=str(workdir / "logs"),
        concurrency=jobs + 16,
        claim_interval=0.2,
        launcher_id=f"bench-{uuid.uuid4().hex[:6]}",
    )
    launcher = Launcher(
        store=store,
        catalog=catalog,
        executors=build_executors(settings),
        settings=settings,
        hook=hook,
    )
    task = asyncio.create_task(launcher.run())
    async with asyncio.timeout(120):
        await done.wait()
    launcher.stop()
    await task
    runs = await store.list_runs(RunFilter(limit=jobs * 2))
    await store.close()
    queued = sorted(
        (r.queued_at - r.scheduled_for).total_seconds() for r in runs if r.scheduled_for
    )
    print(
        f"  accepted: p50 {pct(queued, 0.5) * 1000:.0f} ms, max {queued[-1] * 1000:.0f} ms after the slot"
    )
    return sorted(
        (r.started_at - r.scheduled_for).total_seconds()
        for r in runs
        if r.started_at is not None and r.scheduled_for is not None
    )


def pct(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--db", choices=["postgres", "sqlite"], default="postgres")
    parser.add_argument("--short", action="store_true")
    args = parser.parse_args()
    jobs = 20 if args.short else args.jobs
    rounds = 1 if args.short else 3
    p99s = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            with scratch_database(args.db, Path(tmp)) as url:
                lags = asyncio.run(one_round(url, jobs, Path(tmp)))
            p99s.append(pct(lags, 0.99))
            print(
                f"round {i + 1}: {len(lags)} runs, start lag p50 {pct(lags, 0.5) * 1000:.0f} ms, "
                f"p99 {pct(lags, 0.99) * 1000:.0f} ms, max {lags[-1] * 1000:.0f} ms"
            )
    print(
        f"{args.db}, {jobs} jobs on one slot: p99 start lag {statistics.median(p99s) * 1000:.0f} ms (median of {rounds})"
    )


if __name__ == "__main__":
    main()
