"""Spawn cost of the inline executor: runs/s and CPU per run of `true`, by parent-death method.

    .venv/bin/python bench/spawn.py                 # 2,000 spawns, 16 in flight, median of 3
    .venv/bin/python bench/spawn.py --spawns 50 --repeats 1   # CI smoke: it still works

Methods: `guardian` (the default: glibc's vfork posix_spawn through ctypes on worker threads,
the GIL released during the vfork wait; each run's process group is registered with a helper
process that kills the registered groups when the launcher dies — its CPU is counted too, read
from /proc), `guardian-loop` (the same with os.posix_spawn on the event-loop thread, the GIL
held), `setpriv` (argv prefixed with `setpriv --pdeathsig KILL --`, vfork spawn), `prctl`
(`preexec_fn` calling prctl(PR_SET_PDEATHSIG) — forces fork()), `none` (plain spawn, no
parent-death signal; the floor). Each run goes through the whole executor: pipe, pidfd, log file,
outcome. CPU = launcher + reaped children (+ the guardian) (user + system), per run. The
guardian's resident set size is printed after the table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from runlane.adapters.local.executor import InlineExecutor
from runlane.adapters.local.pdeathsig import PdeathsigMode
from runlane.ports import ExecutionSpec


@dataclass(frozen=True)
class Sample:
    runs_per_s: float
    cpu_ms_per_run: float
    launcher_cpu_ms_per_run: float


def _guardian_cpu(executor: InlineExecutor) -> float:
    """CPU seconds of the executor's (unreaped, so not in RUSAGE_CHILDREN) guardian process."""
    pid = executor.guardian_pid
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _guardian_rss_kib(executor: InlineExecutor) -> int | None:
    pid = executor.guardian_pid
    if pid is None:
        return None
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def _cpu(executor: InlineExecutor) -> tuple[float, float]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime + _guardian_cpu(executor)


async def _one_round(executor: InlineExecutor, spawns: int, in_flight: int, tag: str) -> Sample:
    next_index = 0

    async def worker() -> None:
        nonlocal next_index
        while next_index < spawns:
            i = next_index
            next_index += 1
            spec = ExecutionSpec(
                run_id=f"{tag}-{i}",
                job="bench",
                attempt=1,
                trigger="manual",
                command=["true"],
                params={},
                env={"RUN_ID": f"{tag}-{i}"},
                deadline_seconds=60,
                kill_grace_seconds=1,
            )
            execution = await executor.start(spec)
            async for event in executor.events(execution):
                if event.kind == "finished":
                    assert event.outcome is not None
                    assert event.outcome.exit_code == 0, event.outcome

    self0, kids0 = _cpu(executor)
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    elapsed = time.perf_counter() - t0
    self1, kids1 = _cpu(executor)
    return Sample(
        runs_per_s=spawns / elapsed,
        cpu_ms_per_run=((self1 - self0) + (kids1 - kids0)) * 1000 / spawns,
        launcher_cpu_ms_per_run=(self1 - self0) * 1000 / spawns,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawns", type=int, default=2000)
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", default="guardian,guardian-loop,setpriv,prctl,none")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]

    def executor_for(mode: str, log_dir: Path) -> InlineExecutor:
        pdeathsig: PdeathsigMode = mode.removesuffix("-loop")  # type: ignore[assignment]
        return InlineExecutor(
            log_dir, pdeathsig=pdeathsig, spawn_off_loop=False if mode.endswith("-loop") else None
        )

    with tempfile.TemporaryDirectory(prefix="runlane-bench-") as tmp:
        executors = {m: executor_for(m, Path(tmp) / m) for m in modes}
        for mode, executor in executors.items():
            assert executor.pdeathsig_mode == mode.removesuffix("-loop"), mode
            await _one_round(executor, min(100, args.spawns), args.in_flight, f"warm-{mode}")
        samples: dict[str, list[Sample]] = {m: [] for m in modes}
        # Interleave the modes so drift in machine load is shared between them.
        for r in range(args.repeats):
            for mode, executor in executors.items():
                samples[mode].append(
                    await _one_round(executor, args.spawns, args.in_flight, f"{mode}-{r}")
                )
        rss = {m: _guardian_rss_kib(e) for m, e in executors.items()}
        for executor in executors.values():
            executor.close()

    print(
        f"python {sys.version.split()[0]}, {args.spawns} spawns of `true`, "
        f"{args.in_flight} in flight, median of {args.repeats}"
    )
    print(f"{'method':<14}{'runs/s':>10}{'CPU ms/run':>12}{'launcher ms/run':>17}")
    for mode, rows in samples.items():
        print(
            f"{mode:<14}"
            f"{statistics.median(s.runs_per_s for s in rows):>10.0f}"
            f"{statistics.median(s.cpu_ms_per_run for s in rows):>12.3f}"
            f"{statistics.median(s.launcher_cpu_ms_per_run for s in rows):>17.3f}"
        )
    for mode, kib in rss.items():
        if kib is not None:
            print(f"{mode}: helper process RSS {kib / 1024:.1f} MiB")


if __name__ == "__main__":
    asyncio.run(main())
