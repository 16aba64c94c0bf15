"""The inline executor alone: runs of `true`, 16 in flight, no database, no launcher.

Isolates the executor's own cost per run (spawn, output pipe, exit watch, guardian, outcome)
from the store's and the launcher's, with far less noise than bench/throughput.py: use it to
compare executor changes side by side (alternate the two trees, several repetitions each).
CPU is this process's user + system time (the runs excluded); a warm-up of 200 runs first.

    .venv/bin/python bench/inline_executor.py --runs 3000 --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
import uuid

from _common import median

from runlane.adapters.local.executor import InlineExecutor
from runlane.core.runs import RunStatus
from runlane.ports import ExecutionSpec

CONCURRENCY = 16


async def measure(log_dir: str, runs: int) -> tuple[float, float]:
    executor = InlineExecutor(log_dir)
    slots = asyncio.Semaphore(CONCURRENCY)
    failures: list[str] = []

    async def one() -> None:
        async with slots:
            spec = ExecutionSpec(
                run_id=str(uuid.uuid4()),
                job="noop",
                attempt=1,
                trigger="cli",
                command=["true"],
                params={},
                env={"RUN_ID": "bench", "RUNLANE_PARAMS": "{}"},
                deadline_seconds=300.0,
                kill_grace_seconds=1.0,
            )
            execution = await executor.start(spec)
            async for event in executor.events(execution):
                if event.kind == "finished" and (
                    event.outcome is None or event.outcome.status is not RunStatus.SUCCESS
                ):
                    failures.append(repr(event.outcome))

    try:
        await asyncio.gather(*(one() for _ in range(200)))  # warm-up: imports, the guardian
        before = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(runs)))
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        executor.close()
    if failures:
        raise SystemExit(f"{len(failures)} runs did not succeed, e.g. {failures[0]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return runs / wall, 1000 * cpu / runs


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rates, cpus = [], []
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            rate, cpu = asyncio.run(measure(tmp, args.runs))
        rates.append(rate)
        cpus.append(cpu)
        print(f"[#{i + 1}] runs_per_s={rate:.0f} cpu_ms_per_run={cpu:.3f}", flush=True)
    print(
        f"[median of {args.repeat}] runs_per_s={median(rates):.0f} "
        f"cpu_ms_per_run={median(cpus):.3f}"
    )


if __name__ == "__main__":
    main()
