"""Is the GIL held while a child is spawned? Spawns/s of `true` from 1, 2, 4 and 16 threads.

Each thread spawns `/usr/bin/true` and waits for it (the wait releases the GIL), N spawns in
all, three ways: `os.posix_spawn` (CPython's, glibc's vfork inside), glibc's posix_spawn through
ctypes (`runlane.adapters.local.libcspawn`: a foreign call, the GIL released), and
`subprocess.Popen`. If a way holds the GIL through the vfork wait, more threads barely help it;
if it releases it, spawns overlap on a machine with two cores or more. `call_ms` is the median
time inside the spawn call, `parent_cpu_ms` this process's CPU per spawn (children excluded).

    .venv/bin/python bench/gil_spawn.py                   # 1,500 spawns a cell, median of 3
    .venv/bin/python bench/gil_spawn.py --spawns 40 --repeat 1   # smoke
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import threading
import time

from runlane.adapters.local.libcspawn import LibcSpawn, available
from runlane.adapters.local.process import RESTORED_SIGNALS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spawns", type=int, default=1500)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", default="1,2,4,16")
    args = ap.parse_args()
    true = shutil.which("true") or "/bin/true"
    env = dict(os.environ)
    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    libc = LibcSpawn(RESTORED_SIGNALS) if available() else None

    def one(way: str, inside: list[float]) -> None:
        t = time.perf_counter()
        if way == "os.posix_spawn":
            pid = os.posix_spawn(true, ["true"], env)
        elif way == "ctypes":
            assert libc is not None
            pid = libc.spawn(true, ["true"], env, devnull, devnull)
        else:
            proc = subprocess.Popen([true], env=env)
            pid = proc.pid
        inside.append(time.perf_counter() - t)
        if way == "popen":
            proc.wait()
        else:
            os.waitpid(pid, 0)

    def cell(way: str, threads: int) -> tuple[float, float, float]:
        inside: list[float] = []
        each = max(1, args.spawns // threads)

        def loop() -> None:
            for _ in range(each):
                one(way, inside)

        workers = [threading.Thread(target=loop) for _ in range(threads)]
        c0, t0 = os.times(), time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed, c1 = time.perf_counter() - t0, os.times()
        n = each * threads
        cpu = (c1.user + c1.system) - (c0.user + c0.system)
        return n / elapsed, 1000 * statistics.median(inside), 1000 * cpu / n

    ways = ["os.posix_spawn", *(["ctypes"] if libc is not None else []), "popen"]
    counts = [int(t) for t in args.threads.split(",")]
    cells: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    for _ in range(args.repeat):  # every cell once a round: drift is shared
        for way in ways:
            for k in counts:
                cells.setdefault((way, k), []).append(cell(way, k))
    print(
        f"{args.spawns} spawns of `true` a cell, median of {args.repeat}, load {os.getloadavg()[0]:.1f}"
    )
    print(f"{'way':<16}{'threads':>8}{'spawns/s':>10}{'call_ms':>9}{'parent_cpu_ms':>15}")
    for (way, k), rows in cells.items():
        rate, call, cpu = (statistics.median(r[i] for r in rows) for i in range(3))
        print(f"{way:<16}{k:>8}{rate:>10.0f}{call:>9.3f}{cpu:>15.3f}")


if __name__ == "__main__":
    main()
