"""Option A of docs/performance.md "Off the event loop", measured before it was built: a spawner
process that starts the runs, waits out their vfork and reaps them, fed by an asyncio loop.
(Built since as the default on Linux: `adapters/local/spawner.py`; `bench/spawn.py --modes
spawner` measures the real one.)

The question it answers: how much launcher CPU per run is left when the spawn, the reaping and
the output leave the launcher's process, and what the spawner costs instead. It is a model, not
the executor: the spawner (stdlib only, as the guardian is) reads `<id> <argv...>` lines, spawns
each with `os.posix_spawn` in a process group of its own, reaps on SIGCHLD and writes
`<id> <exit status>` lines back, as many as are ready in one write. Two ways with the output:
`spawner, log file` (the child writes the log file the spawner opened: no pipe, no bound on
the log) and `spawner, pipe` (stdout and stderr on a pipe the spawner reads into the log file,
bounded at 10 MiB; a run is over when it has exited and its pipe is at EOF, as in the
executor). The "launcher" keeps `--in-flight` runs going, one future per run, and is woken by
the spawner's pipe. Beside it, in alternating rounds, the real inline executor in guardian mode
with spawns on threads (the default) and on the loop (`bench/spawn.py`'s rounds: pidfds,
bounded logs, the guardian).

    .venv/bin/python bench/spawner_proto.py --spawns 4000 --repeat 3
    .venv/bin/python bench/spawner_proto.py --spawns 50 --repeat 1      # smoke

CPU per run: the launcher's own (RUSAGE_SELF), the spawner's (/proc/<pid>/stat utime+stime),
and the runs' (the spawner's reaped children: cutime+cstime; the executor's: RUSAGE_CHILDREN).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPAWNER = r"""
import os, selectors, signal, sys
logdir, mode = sys.argv[1], sys.argv[2]  # mode "file": the child writes its log; "pipe": we do
env = dict(os.environ)
devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
signal.set_wakeup_fd(wfd)
signal.signal(signal.SIGCHLD, lambda *a: None)
sel = selectors.DefaultSelector()
sel.register(0, selectors.EVENT_READ, "in")
sel.register(rfd, selectors.EVENT_READ, "chld")
live = {}  # pid -> run id
runs = {}  # run id -> [log fd, pipe fd or None, exit status or None, bytes written]
LOG_MAX = 10 << 20
buf = b""
out = sys.stdout.buffer
resolved = {}
done = []

def end(rid):
    log, pipe, status, _ = runs.pop(rid)
    os.close(log)
    done.append(f"{rid} {status}\n")

while True:
    for key, _ in sel.select():
        if key.data == "in":
            data = os.read(0, 65536)
            if not data:
                sys.exit(0)
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                rid, *argv = line.decode().split(" ")
                prog = resolved.get(argv[0])
                if prog is None:
                    prog = resolved[argv[0]] = next(
                        os.path.join(d, argv[0]) for d in os.get_exec_path(env)
                        if os.access(os.path.join(d, argv[0]), os.X_OK))
                log = os.open(f"{logdir}/{rid}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
                if mode == "pipe":
                    pipe, target = os.pipe2(os.O_CLOEXEC)
                else:
                    pipe, target = None, log
                pid = os.posix_spawn(prog, argv, env, file_actions=[
                    (os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, target, 1),
                    (os.POSIX_SPAWN_DUP2, target, 2)], setpgroup=0)
                if pipe is not None:
                    os.close(target)
                    os.set_blocking(pipe, False)
                    sel.register(pipe, selectors.EVENT_READ, rid)
                live[pid] = rid
                runs[rid] = [log, pipe, None, 0]
        elif key.data == "chld":
            try:
                os.read(rfd, 4096)
            except BlockingIOError:
                pass
        else:  # a run's output
            run = runs[key.data]
            try:
                data = os.read(run[1], 65536)
            except BlockingIOError:
                continue
            if data:
                if run[3] < LOG_MAX:
                    run[3] += os.write(run[0], data[: LOG_MAX - run[3]])
                continue
            sel.unregister(run[1])
            os.close(run[1])
            run[1] = None
            if run[2] is not None:
                end(key.data)
    while live:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        rid = live.pop(pid)
        runs[rid][2] = os.waitstatus_to_exitcode(status)
        if runs[rid][1] is None:
            end(rid)
    if done:
        out.write("".join(done).encode())
        out.flush()
        done.clear()
"""


def proc_cpu(pid: int, children: bool = False) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[13]) + int(fields[14]) if children else int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


async def spawner_round(n: int, in_flight: int, logdir: str, mode: str) -> dict[str, float]:
    proc = subprocess.Popen(  # noqa: ASYNC220 - started before anything is timed
        [sys.executable, "-I", "-S", "-c", SPAWNER, logdir, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    loop = asyncio.get_running_loop()
    waiting: dict[str, asyncio.Future[int]] = {}
    out_fd = proc.stdout.fileno()
    os.set_blocking(out_fd, False)
    buf = b""

    def readable() -> None:
        nonlocal buf
        data = os.read(out_fd, 65536)
        buf += data
        *lines, buf = buf.split(b"\n")
        for line in lines:
            rid, status = line.split()
            waiting.pop(rid.decode()).set_result(int(status))

    loop.add_reader(out_fd, readable)
    pending: list[bytes] = []
    flush_scheduled = False

    def flush() -> None:
        nonlocal flush_scheduled
        flush_scheduled = False
        os.write(proc.stdin.fileno(), b"".join(pending))  # type: ignore[union-attr]
        pending.clear()

    async def one(i: int) -> None:
        nonlocal flush_scheduled
        rid = f"r{i}"
        fut = loop.create_future()
        waiting[rid] = fut
        pending.append(f"{rid} true\n".encode())
        if not flush_scheduled:
            flush_scheduled = True
            loop.call_soon(flush)
        await fut

    await asyncio.sleep(0.3)  # the spawner's start-up, not counted
    sem = asyncio.Semaphore(in_flight)

    async def gated(i: int) -> None:
        async with sem:
            await one(i)

    r0 = resource.getrusage(resource.RUSAGE_SELF)
    s0, c0 = proc_cpu(proc.pid), proc_cpu(proc.pid, children=True)
    t0 = time.monotonic()
    await asyncio.gather(*(gated(i) for i in range(n)))
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    s1, c1 = proc_cpu(proc.pid), proc_cpu(proc.pid, children=True)
    loop.remove_reader(out_fd)
    proc.stdin.close()
    proc.wait(10)
    return {
        "runs_per_s": n / wall,
        "launcher_ms": 1000 * (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / n,
        "spawner_ms": 1000 * (s1 - s0) / n,
        "runs_ms": 1000 * (c1 - c0) / n,
    }


async def executor_round(executor: object, n: int, in_flight: int, tag: str) -> dict[str, float]:
    """bench/spawn.py's round: the real inline executor (guardian mode), `n` runs of `true`."""
    import spawn as spawn_bench  # bench/spawn.py

    sample = await spawn_bench._one_round(executor, n, in_flight, tag)
    return {
        "runs_per_s": sample.runs_per_s,
        "launcher_ms": sample.launcher_cpu_ms_per_run,
        "spawner_ms": 0.0,  # (its guardian's CPU is in "runs ms", with the runs')
        "runs_ms": sample.cpu_ms_per_run - sample.launcher_cpu_ms_per_run,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--spawns", type=int, default=4000)
    ap.add_argument("--in-flight", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    asyncio.run(measure(args))


async def measure(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from runlane.adapters.local.executor import InlineExecutor

    names = ("spawner, log file", "spawner, pipe", "executor, threads", "executor, loop")
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        executors = {
            "executor, threads": InlineExecutor(Path(tmp) / "t", pdeathsig="guardian"),
            "executor, loop": InlineExecutor(
                Path(tmp) / "l", pdeathsig="guardian", spawn_off_loop=False
            ),
        }
        for name, executor in executors.items():
            await executor_round(
                executor, min(100, args.spawns), args.in_flight, f"warm{name[-4:]}"
            )
        (Path(tmp) / "s").mkdir()
        for r in range(args.repeat):
            for name in names:
                executor = executors.get(name)
                if executor is None:
                    mode = "pipe" if name.endswith("pipe") else "file"
                    got = await spawner_round(
                        args.spawns, args.in_flight, str(Path(tmp) / "s"), mode
                    )
                else:
                    got = await executor_round(
                        executor, args.spawns, args.in_flight, f"{r}{name[-4:]}"
                    )
                rows[name].append(got)
                print(f"{name:18}", {k: round(v, 3) for k, v in got.items()}, flush=True)
        for executor in executors.values():
            executor.close()
    print(f"\nmedians of {args.repeat}, {args.spawns} runs of `true`, {args.in_flight} in flight")
    print(f"{'':18} {'runs/s':>8} {'launcher ms':>12} {'spawner ms':>11} {'runs ms':>8}")
    for name, samples in rows.items():
        med = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
        print(
            f"{name:18} {med['runs_per_s']:8.0f} {med['launcher_ms']:12.3f}"
            f" {med['spawner_ms']:11.3f} {med['runs_ms']:8.3f}"
        )


if __name__ == "__main__":
    main()
