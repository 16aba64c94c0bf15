"""The Slurm executor on a real one-node Slurm (the test cluster of tests/support/slurm.py).

1. Submissions: `--runs` runs of `true`, `--concurrency` starts in flight, each followed to its
   end: submissions per second (sbatch answers), and the launcher's CPU per Slurm run — this
   process plus the client tools it ran (sbatch, squeue, scontrol, scancel), the jobs excluded.
2. One poll: `--pending` runs held PENDING (`--begin=now+1hour`), watched for `--window`
   seconds at the executor's `--poll-interval`: `scontrol show job` calls per minute (one per
   interval, whatever the number of runs) and how long one such call takes.

    .venv/bin/python bench/slurm.py --runs 200 --pending 1000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path

import structlog
from _common import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: tests.support

from tests.support.slurm import SlurmCluster, slurm_cluster

from runlane.adapters.slurm.executor import SlurmExecutor
from runlane.core.runs import RunStatus
from runlane.ports import ExecutionSpec


def spec(command: list[str], profile: dict[str, object] | None = None) -> ExecutionSpec:
    run_id = str(uuid.uuid4())
    return ExecutionSpec(
        run_id=run_id,
        job="bench",
        attempt=1,
        trigger="cli",
        command=command,
        params={},
        env={"RUN_ID": run_id, "RUNLANE_PARAMS": "{}"},
        deadline_seconds=600.0,
        kill_grace_seconds=1.0,
        profile=profile or {},
    )


def cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    tools = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + tools.ru_utime + tools.ru_stime


async def submissions(cluster: SlurmCluster, log_dir: str, runs: int, concurrency: int) -> str:
    executor = SlurmExecutor(log_dir, poll_interval=0.5, slurm_env=cluster.env)
    slots = asyncio.Semaphore(concurrency)
    submitted: list[float] = []
    failures: list[str] = []

    async def one() -> None:
        async with slots:
            execution = await executor.start(spec(["true"]))
            submitted.append(time.perf_counter())
        async for event in executor.events(execution):
            if event.kind == "finished" and (
                event.outcome is None or event.outcome.status is not RunStatus.SUCCESS
            ):
                failures.append(str(event.outcome))

    cpu0, t0 = cpu(), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(runs)))
    cpu_ms = (cpu() - cpu0) * 1000 / runs
    await executor.aclose()
    if failures:
        raise SystemExit(f"{len(failures)} runs did not succeed: {failures[0]}")
    per_s = runs / (max(submitted) - t0)
    return f"submissions_per_s={per_s:.1f} cpu_ms_per_run={cpu_ms:.1f} (runs={runs})"


async def one_poll(
    cluster: SlurmCluster, log_dir: str, pending: int, window: float, interval: float
) -> tuple[float, float]:
    executor = SlurmExecutor(log_dir, poll_interval=interval, slurm_env=cluster.env)
    held = {"slurm": {"extra_args": ["--begin=now+3600"]}}
    slots = asyncio.Semaphore(8)

    async def submit() -> None:
        async with slots:
            await executor.start(spec(["true"], held))

    await asyncio.gather(*(submit() for _ in range(pending)))
    poll = executor.poll
    await poll.poll_once()  # every job submitted is in slurmctld: one poll sees them all
    if poll.watched_count != pending:
        raise SystemExit(f"{poll.watched_count} runs watched, not {pending}")
    calls0, t0 = poll.calls, time.perf_counter()
    await asyncio.sleep(window)  # measuring a rate over a window, not waiting for a condition
    per_minute = (poll.calls - calls0) * 60 / (time.perf_counter() - t0)
    started = time.perf_counter()
    await poll.poll_once()
    call_ms = (time.perf_counter() - started) * 1000
    await executor.aclose()
    cluster.tool("scancel", "--full", "--user", "root")
    return per_minute, call_ms


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--pending", type=int, default=1000)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--poll-interval", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with slurm_cluster() as cluster, tempfile.TemporaryDirectory() as tmp:
        lines = []
        for i in range(args.repeat):
            line = await submissions(cluster, f"{tmp}/s{i}", args.runs, args.concurrency)
            print(f"[submit #{i + 1}] {line}", flush=True)
            lines.append(line)
        rates = [float(ln.split("submissions_per_s=")[1].split()[0]) for ln in lines]
        cpus = [float(ln.split("cpu_ms_per_run=")[1].split()[0]) for ln in lines]
        print(
            f"[submit median of {args.repeat}] submissions_per_s={median(rates):.1f} "
            f"cpu_ms_per_run={median(cpus):.1f}"
        )
        per_minute, call_ms = await one_poll(
            cluster, f"{tmp}/p", args.pending, args.window, args.poll_interval
        )
        print(
            f"[poll] pending_runs={args.pending} interval={args.poll_interval:g}s "
            f"scontrol_calls_per_min={per_minute:.1f} one_call_ms={call_ms:.0f}"
        )


if __name__ == "__main__":
    asyncio.run(main())
