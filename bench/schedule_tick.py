"""Benchmark: CPU of one planning tick with 5,000 jobs on varied schedules and zones.

Prints the median of 3 for: (a) the pure planner over every schedule (`plan_schedule` for all
5,000, each with a slot due: the worst case), (b) the scheduler's steady tick over a SQLite store
when nothing is due (it keeps each schedule's next slot), (c) its first tick (anchoring every
schedule, computing 5,000 next slots and one state write).

    .venv/bin/python bench/schedule_tick.py [--jobs 5000] [--short]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from runlane.adapters.sqlite import SqliteStore
from runlane.catalog import parse_catalog_text
from runlane.core.schedule import ScheduleSpec, plan_schedule
from runlane.service.scheduler import Scheduler
from runlane.testing.clock import FixedClock

CRONS = [
    "* * * * *",
    "*/5 * * * *",
    "0 * * * *",
    "15,45 * * * *",
    "0 */6 * * *",
    "30 2 * * *",
    "0 9 * * 1-5",
    "45 21 * * *",
    "0 16 * * TUE",
    "0 0 1 * *",
    "0 12 * * 0,6",
    "*/30 8-18 * * *",
]
ZONES = [
    "UTC",
    "America/Chicago",
    "Europe/Berlin",
    "Asia/Kolkata",
    "Australia/Lord_Howe",
    "Asia/Kathmandu",
    "America/St_Johns",
    "Pacific/Auckland",
    "America/Havana",
    "Asia/Tokyo",
]


def catalog_text(jobs: int) -> str:
    rng = random.Random(7)
    lines = ["version: 1", "defaults: {executor: inline, overlap: allow}", "jobs:"]
    for i in range(jobs):
        cron, zone = rng.choice(CRONS), rng.choice(ZONES)
        lines.append(
            f'  job-{i}: {{command: ["true"], schedules: [{{cron: "{cron}", tz: {zone}, catch_up: 1h}}]}}'
        )
    return "\n".join(lines) + "\n"


def pure_tick(specs: list[ScheduleSpec], now: datetime) -> float:
    start = time.process_time()
    for spec in specs:
        plan_schedule(spec, now - timedelta(minutes=1), now)
    return time.process_time() - start


async def scheduler_ticks(text: str, workdir: Path) -> tuple[float, float]:
    catalog = parse_catalog_text(text, "bench.yaml")
    clock = FixedClock(datetime(2031, 6, 3, 10, 0, 30, tzinfo=UTC))
    store = SqliteStore(str(workdir / f"tick-{time.monotonic_ns()}.db"), clock=clock)
    await store.open()
    await store.upgrade()

    async def accept(request: object) -> object:
        raise AssertionError("nothing is due in this benchmark")

    sched = Scheduler(store, catalog, accept)  # type: ignore[arg-type]
    t0 = time.process_time()
    await sched.tick()
    first = time.process_time() - t0
    clock.advance(10)  # 10:00:40: nothing due
    t0 = time.process_time()
    await sched.tick()
    steady = time.process_time() - t0
    await store.close()
    return first, steady


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--short", action="store_true", help="a quick check that it still works")
    args = parser.parse_args()
    jobs = 200 if args.short else args.jobs
    text = catalog_text(jobs)
    catalog = parse_catalog_text(text, "bench.yaml")
    specs = [
        ScheduleSpec("job", n, s.cron, s.tz or "UTC", s.catch_up)
        for n, j in catalog.jobs.items()
        for s in j.schedules
    ]
    now = datetime(2031, 6, 3, 10, 0, 30, tzinfo=UTC)
    pure_tick(specs, now)  # warm the zone-transition caches, as a running launcher has them
    pure = [pure_tick(specs, now + timedelta(minutes=i)) for i in range(3)]
    with tempfile.TemporaryDirectory() as tmp:
        runs = [asyncio.run(scheduler_ticks(text, Path(tmp))) for _ in range(3)]
    print(f"jobs: {jobs}")
    print(
        f"pure planner, every schedule planned: {statistics.median(pure) * 1000:.1f} ms CPU (median of 3)"
    )
    print(
        f"scheduler first tick (anchor all):    {statistics.median(r[0] for r in runs) * 1000:.1f} ms CPU"
    )
    print(
        f"scheduler steady tick (nothing due):  {statistics.median(r[1] for r in runs) * 1000:.1f} ms CPU"
    )


if __name__ == "__main__":
    main()
