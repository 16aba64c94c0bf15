"""Alert latency: from a failed `alert: critical` run to its notification, and from a stale
heartbeat to its notification, with a real launcher (SQLite file, or PostgreSQL with --pg) and
the default 30 s evaluation interval. Prints the figures; checks nothing about the machine.

- local: failures of runs this launcher ran (its finisher nudges the rule: seconds, not 30);
- remote: failures written by another process (no nudge: found at the next evaluation);
- stale: another launcher's last beat, `heartbeat_stale` (10 s here) → notification.

    python bench/alerts.py [--pg] [--samples N] [--interval SECONDS]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime

os.environ.setdefault("RUNLANE_HTTP_ADDR", "off")

from runlane.catalog.loader import parse_catalog_text
from runlane.core.records import Heartbeat
from runlane.core.runs import NewRun, Outcome, RunStatus, Trigger
from runlane.ports.notifier import Notification
from runlane.service.accept import RunRequest, accept_run
from runlane.service.alerts.targets import Target
from runlane.service.config import Settings
from runlane.service.launcher import Launcher
from runlane.service.wiring import build_executors, store_from_url

PY = sys.executable


class Clocked:
    """A notifier that notes when each fingerprint's first firing arrived (wall clock)."""

    name = "bench"

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}

    async def send(self, notification: Notification, *, within: float) -> None:
        if notification.state == "firing":
            self.arrived.setdefault(notification.fingerprint, time.time())


def catalog(jobs: int) -> str:
    lines = [
        "version: 1",
        "defaults: {executor: inline, overlap: allow, max_attempts: 1, deadline: 1m}",
        "alerts: {heartbeat_stale: 10s}",
        "jobs:",
    ]
    for i in range(jobs):
        lines.append(f"  fail-{i}: {{command: [{PY}, -c, 'raise SystemExit(1)'], alert: critical}}")
    return "\n".join(lines) + "\n"


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def show(name: str, values: list[float]) -> None:
    print(
        f"{name:8} n={len(values):3}  p50={statistics.median(values):6.2f}s  "
        f"p99={pct(values, 99):6.2f}s  max={max(values):6.2f}s"
    )


async def wait_for(check: object, within: float) -> None:
    deadline = time.monotonic() + within
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit("bench: notifications did not arrive in time")
        await asyncio.sleep(0.05)


async def main(args: argparse.Namespace) -> None:
    tmp = tempfile.mkdtemp(prefix="runlane-bench-alerts-")
    url = args.pg_url if args.pg else f"sqlite:///{tmp}/alerts.db"
    n = args.samples
    cat = parse_catalog_text(catalog(3 * n))
    store = store_from_url(url)
    await store.open()
    await store.upgrade()
    recorder = Clocked()
    settings = Settings(
        database_url=url,
        log_dir=f"{tmp}/logs",
        alert_interval=args.interval,
        launcher_id=f"bench-{uuid.uuid4().hex[:6]}",
    )
    launcher = Launcher(
        store=store,
        catalog=cat,
        executors=build_executors(settings),
        settings=settings,
        alert_targets=[Target("bench", "bench", ("critical",), recorder)],
    )
    task = asyncio.create_task(launcher.run())
    try:
        # local: runs this launcher executes
        ids = []
        for i in range(n):
            result = await accept_run(store, cat, RunRequest(job=f"fail-{i}", trigger="manual"))
            ids.append((f"fail-{i}", result.run.id))
            await asyncio.sleep(random.uniform(0, 0.5))
        await wait_for(lambda: all(f"run_failed:{j}" in recorder.arrived for j, _ in ids), 120)
        local = []
        for job, run_id in ids:
            run = await store.get_run(run_id)
            assert run.finished_at is not None
            local.append(recorder.arrived[f"run_failed:{job}"] - run.finished_at.timestamp())
        show("local", local)
        # remote: failures another process writes (spread over one interval)
        remote_jobs = [f"fail-{n + i}" for i in range(n)]
        finished: dict[str, float] = {}
        for job in remote_jobs:
            run_id = str(uuid.uuid4())
            await store.accept(
                NewRun(run_id, job, Trigger.MANUAL, run_id, executor="slurm", overlap="allow")
            )
            (claimed,) = await store.claim(
                "elsewhere", limit=1, lease_ttl=30, executors=["slurm"], executor_caps={}
            )
            done = await store.finish(
                claimed.lease, Outcome(RunStatus.FAILURE, "exit", exit_code=1)
            )
            assert done.finished_at is not None
            finished[job] = done.finished_at.timestamp()
            await asyncio.sleep(random.uniform(0, 2 * args.interval / n))
        await wait_for(
            lambda: all(f"run_failed:{j}" in recorder.arrived for j in remote_jobs),
            4 * args.interval + 60,
        )
        show("remote", [recorder.arrived[f"run_failed:{j}"] - finished[j] for j in remote_jobs])
        # stale: other launchers' last beats, 10 s stale
        stale_ids = [f"ghost-{i}" for i in range(max(3, n // 4))]
        beats: dict[str, float] = {}
        for ghost in stale_ids:
            await store.beat(
                Heartbeat(
                    ghost, "nowhere", 1, "0", started_at=datetime.now(UTC), heartbeat_interval=1.0
                )
            )
            beats[ghost] = time.time()
            await asyncio.sleep(random.uniform(0, args.interval / len(stale_ids)))
        await wait_for(
            lambda: all(f"launcher_stale:{g}" in recorder.arrived for g in stale_ids),
            4 * args.interval + 60,
        )
        show("stale", [recorder.arrived[f"launcher_stale:{g}"] - beats[g] for g in stale_ids])
        print("(stale counts from the last beat: heartbeat_stale is 10s; target ≤ 10s + interval)")
    finally:
        launcher.stop()
        await task
        await store.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg", action="store_true", help="PostgreSQL (RUNLANE_TEST_POSTGRES_URL)")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--interval", type=float, default=30.0)
    parsed = parser.parse_args()
    parsed.pg_url = os.environ.get(
        "RUNLANE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
    )
    asyncio.run(main(parsed))
