"""How fast is this machine right now? The two spawn rates issue 2 quotes as its reference.

The VM's speed drifts over a day by up to half again, and every figure moves with it. Issue 2
gives two plain-Python reference rates measured when its targets were set: spawning `true` with
asyncio, 16 in flight, "~1.3k/s", and with `subprocess.run` from 16 threads, "~2.2k/s". Run
this next to a benchmark to tell which speed its figures were taken at.

    .venv/bin/python bench/calibrate.py --spawns 3000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from _common import median

IN_FLIGHT = 16


async def asyncio_rate(spawns: int) -> float:
    slots = asyncio.Semaphore(IN_FLIGHT)

    async def one() -> None:
        async with slots:
            proc = await asyncio.create_subprocess_exec("true")
            if await proc.wait() != 0:
                raise SystemExit("`true` failed")

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(spawns)))
    return spawns / (time.perf_counter() - t0)


def threads_rate(spawns: int) -> float:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        for done in pool.map(lambda _: subprocess.run(["true"], check=False), range(spawns)):
            if done.returncode != 0:
                raise SystemExit("`true` failed")
    return spawns / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--spawns", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    aio, thr = [], []
    for i in range(args.repeat):
        aio.append(asyncio.run(asyncio_rate(args.spawns)))
        thr.append(threads_rate(args.spawns))
        print(
            f"[#{i + 1}] asyncio_16_in_flight={aio[-1]:.0f}/s threads_16={thr[-1]:.0f}/s",
            flush=True,
        )
    print(
        f"[median of {args.repeat}] asyncio_16_in_flight={median(aio):.0f}/s "
        f"threads_16={median(thr):.0f}/s (issue 2's reference: ~1300/s and ~2200/s)"
    )


if __name__ == "__main__":
    main()
