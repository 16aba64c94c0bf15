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
    helper_cpu_ms_per_run: float


def _helper_pids(executor: InlineExecutor) -> list[int]:
    guardian = executor.guardian_pid
    return [guardian] if guardian is not None else executor.spawner_pids


def _helper_cpu(executor: InlineExecutor) -> tuple[float, float]:
    """CPU seconds of the executor's (unreaped, so not in RUSAGE_CHILDREN) guardian or spawner
    processes, and of the children they reaped (the spawners' runs)."""
    own = reaped = 0
    for pid in _helper_pids(executor):
        fields = [
            int(f) for f in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1:]
        ]
        fields.insert(0, 0)  # (the state letter)
        own += fields[11] + fields[12]
        reaped += fields[13] + fields[14]
    tick = os.sysconf("SC_CLK_TCK")
    return own / tick, reaped / tick


def _guardian_rss_kib(executor: InlineExecutor) -> int | None:
    """The helper processes' resident set sizes, summed."""
    pids = _helper_pids(executor)
    if not pids:
        return None
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total


def _cpu(executor: InlineExecutor) -> tuple[float, float, float]:
    """CPU seconds so far of the launcher, of its guardian or spawner, and of the runs."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    helper, runs = _helper_cpu(executor)
    return me.ru_utime + me.ru_stime, helper, kids.ru_utime + kids.ru_stime + runs


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

    self0, helper0, kids0 = _cpu(executor)
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    elapsed = time.perf_counter() - t0
    self1, helper1, kids1 = _cpu(executor)
    return Sample(
        runs_per_s=spawns / elapsed,
        cpu_ms_per_run=((self1 - self0) + (helper1 - helper0) + (kids1 - kids0)) * 1000 / spawns,
        launcher_cpu_ms_per_run=(self1 - self0) * 1000 / spawns,
        helper_cpu_ms_per_run=(helper1 - helper0) * 1000 / spawns,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawns", type=int, default=2000)
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", default="guardian,guardian-loop,spawner,setpriv,prctl,none")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]

    def executor_for(mode: str, log_dir: Path) -> InlineExecutor:
        if mode == "spawner":
            return InlineExecutor(log_dir, spawn_process=True)
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
    print(
        f"{'method':<14}{'runs/s':>10}{'CPU ms/run':>12}{'launcher ms/run':>17}"
        f"{'helper ms/run':>15}"
    )
    for mode, rows in samples.items():
        print(
            f"{mode:<14}"
            f"{statistics.median(s.runs_per_s for s in rows):>10.0f}"
            f"{statistics.median(s.cpu_ms_per_run for s in rows):>12.3f}"
            f"{statistics.median(s.launcher_cpu_ms_per_run for s in rows):>17.3f}"
            f"{statistics.median(s.helper_cpu_ms_per_run for s in rows):>15.3f}"
        )
    for mode, kib in rss.items():
        if kib is not None:
            print(f"{mode}: helper process RSS {kib / 1024:.1f} MiB")


if __name__ == "__main__":
    asyncio.run(main())
