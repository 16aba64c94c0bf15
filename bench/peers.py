"""Other Python job queues doing bench/throughput.py's work on this machine, for scale.

The machine's speed drifts by ±30% over a day, so a peer's figure means something only beside
runlane's taken in the same minutes: this runs them in turns (each repetition runs every chosen
peer once, starting with a different one each time), runlane included through
bench/throughput.py.

The work is throughput.py's: N jobs that each spawn `true` and wait for it, 16 in flight, all
enqueued first (not timed) through the peer's ordinary API, one by one. Then one worker process
is started; once it is built and idle (imports done, connections open where the peer opens them
up front) it is told to go. Per repetition:

  jobs_per_s      N / (last job's end - first job's start). Each job appends its start and end
                  (the machine's monotonic clock) to a file with one write; the harness watches
                  the file's size, so waiting costs the peer nothing. runlane's figure is the
                  span from its run log's timestamps: first claim to last outcome saved, a
                  little longer than spawn to exit (so it counts against runlane).
  cpu_ms_per_job  worker_cpu_ms_per_job + broker_cpu_ms_per_job:
                  the worker process's (and its own worker processes') utime + stime from the
                  moment it was idle and ready to just after the last job (its children, the
                  `true`s, excluded); plus the broker's: RabbitMQ's beam.smp process (all of it:
                  nothing else on this machine is expected to use RabbitMQ), or the PostgreSQL
                  backends of the scratch database and the shared WAL writer, checkpointer and
                  background writer (as throughput.py counts them for runlane).
  jobs_cpu_ms_per_job
                  the jobs' own CPU: the `true`s, reaped by the worker (its processes' cutime +
                  cstime; runlane's, by its spawners). Not in cpu_ms_per_job.
  startup_cpu_s   the worker's CPU until it was ready (not in the per-job figures).
  idle_rss_mib, load_rss_mib, peak_rss_mib
                  the worker processes' VmRSS summed: when ready, the largest sample during the
                  run (every 0.25 s), and VmHWM (the peak since start, as throughput.py reports).
                  Summed over a prefork pool's processes, pages they share count once per process.
                  runlane's are its launcher's alone (its guardian adds ~9 MiB).
  machine_idle_pct
                  the share of all CPUs' time left idle (iowait included) from the first job's
                  start to the last one's end (/proc/stat sampled every 10 ms): a queue whose
                  pipeline leaves cores idle is slower than its CPU a job says.

The spawn floor (`floor/16 threads`) runs in every repetition too: 16 threads each running
`subprocess.run(["true"])` in a loop, in a process of its own, N spawns in all. It is what
spawning alone costs this machine now, so `runlane_vs_floor` (runlane's rate over the floor's,
round by round, then the median) holds when the machine's speed drifts or other work loads it.
Its CPU a spawn is given whole (`cpu_ms_per_spawn`) and in its parts: the spawning process's
own (`spawner_cpu_ms_per_spawn`: fork_exec, the wait, Popen's Python) and the `true`s'. The
"CPU ms a job beyond the floor's" line sets each queue's whole CPU a job (cpu_ms_per_job +
jobs_cpu_ms_per_job) beside the floor's a spawn, round by round: what is left is the queue's own
work beyond spawning, which issue 21's "launcher + database CPU a run <= 0.3 ms" budget is about
(its 70%-of-the-floor target is 0.72 ms of spawn plus 0.3 ms of the rest). A runlane spawner's
vfork and reaping are spawn work the floor pays too, in its own process; launcher_cpu_ms_per_run
counts them with the launcher's. The last line says where the machine went while each queue
ran: its whole CPU a job, the share of the machine's CPU that accounts for at its rate, and the
share left idle. jobs/s is that share of the cores over the CPU a job, so a queue cheaper a job
can still be slower if its pipeline leaves the machine idle (runlane against Dramatiq's best,
issue 21). Each ratio comes with its rounds' range: one round's figure can stray that far.

The peers (bench/_peer_workers.py has how each is set up; `pip install -e ".[peers]"`), each at
its documented default and at a small sweep (`settings()` lists them; --defaults-only skips the
sweep). Why it is fair: the default is what a new user gets; the sweep is what a user tuning for
this work would try; runlane is compared with the best of them, median against median, and
round by round in `runlane_vs_best_peer`. The tag names the setting: `dramatiq@2x8` is two
processes of 8 threads.
  dramatiq       RabbitMQ, its default pika broker, no publisher confirms. Default: one process
                 per CPU x 8 threads (the `dramatiq` command's); sweep 1x16, CPUSx16, CPUSx32,
                 CPUSx64, 4x4. Each
                 process is built as `dramatiq` builds its worker processes, forked from a small
                 supervisor (counted too).
  celery         RabbitMQ (py-amqp), prefetch multiplier 4, results ignored, no result backend,
                 without mingle/gossip/heartbeat/remote control (one worker needs none). Default:
                 the prefork pool, one process per CPU; sweep prefork x16, threads 1x16 and
                 CPUS processes of threads.
  procrastinate  PostgreSQL through its psycopg 3 async connector (its default pool), one
                 worker. Default: concurrency 1 (a worker's default); sweep 16, 32.
  pgqueuer       PostgreSQL through asyncpg (its CLI's default driver; its psycopg driver does
                 ~16 jobs/s here, --pgqueuer-driver psycopg), on asyncio's own loop: its CLI
                 runs uvloop, whose fork()-based spawn costs more CPU per child (issue 2: 3.6 ms
                 instead of 1.1, 205 jobs/s instead of 735; --pgqueuer-loop uvloop to see it).
                 Default: `pgq run`'s, batches of 10 and no cap; sweep at most 16 and 32 picked
                 at once (batches of half that).
  runlane        bench/throughput.py --db postgres (its launcher and spawners are the worker),
                 at every setting with `runlane serve`'s log level, info (a line per run that
                 ends, written to a file; before the twenty-sixth session: warning).
                 Default: 16 in flight (RUNLANE_CONCURRENCY's default); sweep 32, 64 and 128,
                 as the fastest peer's sweep goes to CPUSx64 (128 threads on two CPUs). Its ratios
                 are given for both: the
                 default's (`runlane_vs_*`) and the best setting's (`runlane_best_vs_*`).
                 With --runlane-also thread,loop again in those RUNLANE_INLINE_SPAWN modes
                 (the default, `auto`, is `process` on Linux: the spawner processes).
Dramatiq and Celery without publisher confirms are not durable: a published job can be lost.
Celery acknowledges a job before running it (its default), Dramatiq after.

    .venv/bin/python bench/peers.py                          # 3,000 jobs, 16 in flight, 3 turns
    .venv/bin/python bench/peers.py --peers runlane,dramatiq --repeat 5
    .venv/bin/python bench/peers.py --quick                  # 50 jobs once, defaults only
    .venv/bin/python bench/peers.py --runlane-also thread    # runlane's spawn modes side by side
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from _common import (
    MachineLoad,
    children_cpu_seconds,
    cpu_seconds,
    median,
    postgres_cpu_delta,
    postgres_cpu_seconds,
    rss_mib,
    scratch_database,
)
from _common import (
    rabbitmq_cpu_seconds as local_rabbitmq_cpu_seconds,
)

BENCH = Path(__file__).resolve().parent
WORKERS = BENCH / "_peer_workers.py"
RECORD = 38  # bytes of one job's record, as _peer_workers.py writes it
AMQP_URL = os.environ.get("RUNLANE_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
BROKER = {
    "runlane": "postgres",
    "dramatiq": "rabbitmq",
    "celery": "rabbitmq",
    "procrastinate": "postgres",
    "pgqueuer": "postgres",
}
CPUS = os.cpu_count() or 1
FLOOR_THREADS = 16
READY_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0


class PeerFailed(Exception):
    pass


# --- the broker's side -----------------------------------------------------------------------


def rabbitmq_cpu_seconds() -> float:
    """utime + stime of the RabbitMQ server (its Erlang VM, beam.smp) on this machine."""
    seconds = local_rabbitmq_cpu_seconds()
    if seconds is None:
        raise PeerFailed("no beam.smp process: RabbitMQ is not running on this machine")
    return seconds


@contextlib.contextmanager
def scratch_rabbitmq_queue() -> Iterator[str]:
    """A fresh queue name; the queues and exchange the peers declare for it are deleted after."""
    name = f"runlane_peers_{uuid.uuid4().hex[:8]}"
    try:
        yield name
    finally:
        try:
            import pika  # the peers extra; only needed once a peer on RabbitMQ ran

            params = pika.URLParameters(AMQP_URL)
            params.socket_timeout = params.blocked_connection_timeout = 10
            params.stack_timeout = 15
            with contextlib.closing(pika.BlockingConnection(params)) as conn:
                channel = conn.channel()
                # Dramatiq's queue, delay queue and dead letters; Celery's queue and exchange.
                for queue in (name, f"{name}.DQ", f"{name}.XQ"):
                    channel.queue_delete(queue)
                channel.exchange_delete(name)
        except Exception as e:  # say so, without hiding why the peer failed
            print(f"could not delete the scratch queue {name}: {e!r}", file=sys.stderr)


class Broker:
    """CPU readings of the server a peer works against."""

    def __init__(self, kind: str, database: str | None) -> None:
        self.kind, self.database = kind, database

    def reading(self) -> object:
        if self.kind == "rabbitmq":
            return rabbitmq_cpu_seconds()
        return postgres_cpu_seconds(self.database)

    def delta(self, before: object, after: object) -> float:
        if isinstance(before, float) and isinstance(after, float):
            return after - before
        assert isinstance(before, dict)
        assert isinstance(after, dict)
        return postgres_cpu_delta(before, after)


# --- the worker's processes ------------------------------------------------------------------


def process_tree(root: int) -> list[int]:
    """`root` and its descendants, less the jobs' own `true` processes."""
    parent: dict[int, int] = {}
    comm: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = stat.split(" (", 1)[1].rsplit(")", 1)
        parent[int(entry.name)], comm[int(entry.name)] = int(rest.split()[1]), name
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        if comm.get(pid, "true") != "true":
            found.append(pid)
        todo.extend(child for child, ppid in parent.items() if ppid == pid)
    return found


def start_time(pid: int) -> int | None:
    """When the process started (clock ticks since boot): with the pid, names it for sure."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def tree_cpu(pids: list[int], read: Callable[[int], float] = cpu_seconds) -> float:
    """`read` (a process's own CPU; `children_cpu_seconds` for its reaped children's, the
    jobs' `true`s: each worker reaps its own) summed over `pids`."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += read(pid)
    return total


def tree_rss(pids: list[int], field: str = "VmRSS") -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            rss = rss_mib(pid, field)
            total += 0.0 if math.isnan(rss) else rss  # a zombie has none
    return total


def read_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    """The worker's next stdout line, or PeerFailed once `timeout` passed or it exited."""
    assert proc.stdout is not None
    fd, buf = proc.stdout.fileno(), b""
    deadline = time.monotonic() + timeout
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise PeerFailed(f"the worker was not ready after {timeout:g} s")
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 4096)
            if not chunk:
                raise PeerFailed(f"the worker exited before it was ready (exit {proc.wait(5)})")
            buf += chunk
    return buf.decode().strip()


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (each peer's graceful stop), then SIGKILL to every process of the worker still
    there: the worker and its own processes (Celery's prefork pool), each named by its pid and
    start time, so a pid reused meanwhile by another process is left alone."""
    procs = [(pid, start_time(pid)) for pid in process_tree(proc.pid)]
    if proc.stdin is not None:
        # A worker still waiting for `go` (something failed before it was sent) reads end of
        # file and exits: most peers' SIGTERM handlers only set a flag it would never look at.
        with contextlib.suppress(OSError):
            proc.stdin.close()
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)
    for pid, started in procs:
        if started is not None and start_time(pid) == started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def log_tail(path: Path) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "worker log (last lines):\n" + tail(text)


# --- one repetition of one peer --------------------------------------------------------------


def one_peer(peer: str, setting: Setting, n: int, opts: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        if BROKER[peer] == "rabbitmq":
            url, queue, database = AMQP_URL, stack.enter_context(scratch_rabbitmq_queue()), None
        else:
            url = stack.enter_context(scratch_database("postgres", work))
            queue, database = "noop", url.rsplit("/", 1)[1]
        base = [sys.executable, str(WORKERS)]
        common = [
            "--url",
            url,
            "--queue",
            queue,
            "--loop",  # asyncio's own, but for PgQueuer when told otherwise
            opts.pgqueuer_loop if peer == "pgqueuer" else "asyncio",
            "--pgqueuer-driver",
            opts.pgqueuer_driver,
            *setting.args,
        ]
        try:
            done = subprocess.run(
                [*base, "enqueue", peer, *common, "--jobs", str(n)],
                capture_output=True,
                text=True,
                timeout=opts.timeout or 60 + n / 20,
                check=False,
            )
        except subprocess.TimeoutExpired as e:
            raise PeerFailed(f"enqueueing {n} jobs took over {e.timeout:g} s") from None
        if done.returncode != 0:
            raise PeerFailed(f"enqueue failed (exit {done.returncode}):\n{tail(done.stderr)}")
        enqueue_rate = float(done.stdout.strip().rsplit("=", 1)[1])

        records, log_path = work / "records", work / "worker.log"
        broker = Broker(BROKER[peer], database)
        log = stack.enter_context(log_path.open("wb"))
        proc: subprocess.Popen[bytes] | None = None
        try:
            proc = subprocess.Popen(
                [*base, "work", peer, *common, "--out", str(records)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
            ready = read_line(proc, opts.timeout or READY_TIMEOUT)
            if peer == "pgqueuer" and ("uvloop" in ready) != (opts.pgqueuer_loop == "uvloop"):
                raise PeerFailed(f"not on the event loop asked for: {ready}")
            pids = process_tree(proc.pid)
            startup_cpu = tree_cpu(pids)
            startup_jobs_cpu = tree_cpu(pids, children_cpu_seconds)
            idle_rss = tree_rss(pids)
            broker_before = broker.reading()
            load = stack.enter_context(MachineLoad())
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
            timeout = opts.timeout or 60 + n / 20
            deadline, load_rss, next_rss = time.monotonic() + timeout, idle_rss, 0.0
            while (size := records.stat().st_size if records.exists() else 0) < n * RECORD:
                now = time.monotonic()
                if proc.poll() is not None:
                    raise PeerFailed(
                        f"the worker exited ({proc.returncode}) after {size // RECORD} of {n} jobs"
                    )
                if now > deadline:
                    raise PeerFailed(f"{size // RECORD} of {n} jobs done after {timeout:g} s")
                if now >= next_rss:
                    load_rss, next_rss = max(load_rss, tree_rss(pids)), now + 0.25
                time.sleep(0.05)
            # Worker processes started since (none expected) count in full.
            tree = sorted({*pids, *process_tree(proc.pid)})
            worker_cpu = tree_cpu(tree) - startup_cpu
            jobs_cpu = tree_cpu(tree, children_cpu_seconds) - startup_jobs_cpu
            broker_cpu = broker.delta(broker_before, broker.reading())
            peak_rss = tree_rss(pids, "VmHWM")
        except PeerFailed as e:
            log.flush()
            raise PeerFailed(f"{e}\n{log_tail(log_path)}") from None
        finally:
            if proc is not None:
                stop(proc)  # never leave a worker behind
        data = records.read_bytes()
        starts = [float(data[i : i + 18]) for i in range(0, len(data), RECORD)]
        ends = [float(data[i + 19 : i + 37]) for i in range(0, len(data), RECORD)]
        machine_idle = load.idle_pct(min(starts), max(ends), monotonic=True)
        return {
            "jobs": float(len(starts)),
            "jobs_per_s": n / (max(ends) - min(starts)),
            "enqueue_per_s": enqueue_rate,
            "cpu_ms_per_job": 1000 * (worker_cpu + broker_cpu) / n,
            "worker_cpu_ms_per_job": 1000 * worker_cpu / n,
            "broker_cpu_ms_per_job": 1000 * broker_cpu / n,
            "jobs_cpu_ms_per_job": 1000 * jobs_cpu / n,
            "startup_cpu_s": startup_cpu,
            "idle_rss_mib": idle_rss,
            "load_rss_mib": load_rss,
            "peak_rss_mib": peak_rss,
            "machine_idle_pct": machine_idle,
        }


# runlane's own figures, by throughput.py's names
RUNLANE_KEYS = {
    "runs_per_s": "jobs_per_s",
    "enqueue_per_s": "enqueue_per_s",
    "cpu_ms_per_run": "cpu_ms_per_job",
    "launcher_cpu_ms_per_run": "worker_cpu_ms_per_job",
    "pg_cpu_ms_per_run": "broker_cpu_ms_per_job",
    "runs_cpu_ms_per_run": "jobs_cpu_ms_per_job",
    "startup_cpu_s": "startup_cpu_s",
    "idle_rss_mib": "idle_rss_mib",
    "peak_rss_mib": "peak_rss_mib",
    "machine_idle_pct": "machine_idle_pct",
}


def one_runlane(
    n: int, concurrency: int, opts: argparse.Namespace, spawn: str = "auto"
) -> dict[str, float]:
    args = [
        "--db",
        "postgres",
        "--runs",
        str(n),
        "--concurrency",
        str(concurrency),
        "--repeat",
        "1",
        "--log-level",
        "info",  # `runlane serve`'s (throughput.py's default too): a line per run that ends
    ]
    try:
        done = subprocess.run(
            [sys.executable, str(BENCH / "throughput.py"), *args],
            capture_output=True,
            text=True,
            timeout=opts.timeout or 120 + n / 20,
            check=False,
            cwd=BENCH.parent,
            env=dict(os.environ, RUNLANE_INLINE_SPAWN=spawn),
        )
    except subprocess.TimeoutExpired as e:
        raise PeerFailed(f"bench/throughput.py took over {e.timeout:g} s") from None
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("[postgres #1]")), None)
    if done.returncode != 0 or line is None:
        raise PeerFailed(
            f"bench/throughput.py failed (exit {done.returncode}):\n{tail(done.stderr)}"
        )
    found = dict(re.findall(r"(\w+)=([\d.]+|nan)", line))
    # throughput.py fails unless every run succeeded
    return {
        "jobs": float(n),
        **{ours: float(found[theirs]) for theirs, ours in RUNLANE_KEYS.items()},
    }


def show(values: dict[str, float], n: int) -> str:
    figures = "  ".join(f"{k}={v:.2f}" for k, v in values.items() if k != "jobs")
    return f"jobs={values['jobs']:.0f}/{n}  {figures}"


# --- the machine's spawn floor -----------------------------------------------------------------


def spawn_floor(n: int, threads: int = FLOOR_THREADS) -> dict[str, float]:
    """`threads` threads each running `subprocess.run(["true"])` in a loop until `n` spawns are
    done, in a process of its own (this one's threads and memory stay out of it): spawns a
    second, and the CPU per spawn of that process and its children (the `true`s) together."""
    code = (
        "import os, subprocess, sys, threading, time\n"
        "n, k = int(sys.argv[1]), int(sys.argv[2])\n"
        "left = [n]\n"
        "lock = threading.Lock()\n"
        "def loop():\n"
        "    while True:\n"
        "        with lock:\n"
        "            if left[0] <= 0: return\n"
        "            left[0] -= 1\n"
        "        subprocess.run(['true'], check=True)\n"
        "ts = [threading.Thread(target=loop) for _ in range(k)]\n"
        "c0, t0 = os.times(), time.perf_counter()\n"
        "for t in ts: t.start()\n"
        "for t in ts: t.join()\n"
        "dt, c1 = time.perf_counter() - t0, os.times()\n"
        "own, kids = sum(c1[:2]) - sum(c0[:2]), sum(c1[2:4]) - sum(c0[2:4])\n"
        "print(f'{n / dt:.2f} {1000 * own / n:.4f} {1000 * kids / n:.4f}')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(n), str(threads)],
        capture_output=True,
        text=True,
        timeout=60 + n / 20,
        check=False,
    )
    if done.returncode != 0:
        raise PeerFailed(f"the spawn floor failed (exit {done.returncode}):\n{tail(done.stderr)}")
    per_s, own, kids = map(float, done.stdout.split())
    return {
        "jobs": float(n),
        "spawns_per_s": per_s,
        "cpu_ms_per_spawn": own + kids,
        # The spawning process's own share (fork_exec, the wait, Popen's Python), and the
        # `true`s': a queue's worker pays the first kind too, inside its worker CPU.
        "spawner_cpu_ms_per_spawn": own,
        "jobs_cpu_ms_per_job": kids,
    }


# --- the settings ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One way to run a peer: `_peer_workers.py` arguments, and whether it is the default."""

    peer: str
    label: str
    args: tuple[str, ...]
    default: bool = False

    @property
    def tag(self) -> str:
        return f"{self.peer}@{self.label}/{BROKER[self.peer]}"


def settings(concurrency: int) -> list[Setting]:
    """Each peer at its documented default and at the points of a small sweep around it.

    The defaults, as a new user gets them on this machine (CPUS = its CPU count):
      dramatiq       `dramatiq` starts one process per CPU with 8 threads each (its CLI's
                     --processes / --threads defaults).
      celery         `celery worker`: the prefork pool with one process per CPU, prefetch
                     multiplier 4.
      procrastinate  a worker's concurrency is 1.
      pgqueuer       `pgq run`: batches of 10 and no cap on jobs in flight.
    The sweep is what a user tuning for this load would try: `concurrency` (16) slots split
    into processes x threads, twice that, and Dramatiq at CPUS x twice and four times that (as
    many threads as runlane's widest setting has runs in flight); Celery with
    prefork processes or threads; procrastinate and PgQueuer at `concurrency` and twice it. Every peer's best setting is
    the one runlane is compared with, so none is held to a setting that does not suit it.
    """
    c, c2, c4 = concurrency, 2 * concurrency, 4 * concurrency
    return [
        Setting("dramatiq", f"{CPUS}x8", ("--processes", str(CPUS), "--concurrency", "8"), True),
        Setting("dramatiq", f"1x{c}", ("--processes", "1", "--concurrency", str(c))),
        Setting("dramatiq", f"{CPUS}x{c}", ("--processes", str(CPUS), "--concurrency", str(c))),
        Setting("dramatiq", f"{CPUS}x{c2}", ("--processes", str(CPUS), "--concurrency", str(c2))),
        Setting("dramatiq", f"{CPUS}x{c4}", ("--processes", str(CPUS), "--concurrency", str(c4))),
        Setting("dramatiq", "4x4", ("--processes", "4", "--concurrency", "4")),
        Setting(
            "celery",
            f"prefork{CPUS}",
            ("--celery-pool", "prefork", "--concurrency", str(CPUS)),
            True,
        ),
        Setting("celery", f"prefork{c}", ("--celery-pool", "prefork", "--concurrency", str(c))),
        Setting("celery", f"threads1x{c}", ("--celery-pool", "threads", "--concurrency", str(c))),
        Setting(
            "celery",
            f"threads{CPUS}x{c // CPUS}",
            ("--celery-pool", "threads", "--processes", str(CPUS), "--concurrency", str(c // CPUS)),
        ),
        Setting("procrastinate", "c1", ("--concurrency", "1"), True),
        Setting("procrastinate", f"c{c}", ("--concurrency", str(c))),
        Setting("procrastinate", f"c{c2}", ("--concurrency", str(c2))),
        Setting("pgqueuer", "uncapped", ("--concurrency", "0"), True),
        Setting("pgqueuer", f"c{c}", ("--concurrency", str(c))),
        Setting("pgqueuer", f"c{c2}", ("--concurrency", str(c2))),
    ]


def medians_of(rs: list[dict[str, float]]) -> dict[str, float]:
    return {k: median([r[k] for r in rs]) for k in rs[0]}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--peers",
        default=",".join(BROKER),
        help=f"comma-separated, run in this order each repetition (default: {','.join(BROKER)})",
    )
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=16, help="runlane's, and the sweep's base")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--defaults-only", action="store_true", help="each peer at its default setting only"
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="50 jobs, once each, defaults only: checks the script works",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=0.0,
        help="seconds each step of a peer may take: enqueue, start, the jobs (default 60 + jobs/20; 30 with --quick)",
    )
    ap.add_argument(
        "--runlane-also",
        default="",
        metavar="MODES",
        help="runlane again with each of these RUNLANE_INLINE_SPAWN modes (thread, loop, "
        "process), comma-separated: diagnostics beside the default, not settings in the sweep",
    )
    ap.add_argument("--pgqueuer-loop", choices=["asyncio", "uvloop"], default="asyncio")
    ap.add_argument("--pgqueuer-driver", choices=["asyncpg", "psycopg"], default="asyncpg")
    args = ap.parse_args()
    if args.quick:
        # Each step of each peer within 30 s (unless told otherwise): the smoke test's own limit
        # is above the sum, so a stuck peer is reported here, with the others' lines.
        args.jobs, args.repeat, args.defaults_only = 50, 1, True
        args.timeout = args.timeout or 30.0
    if args.jobs < 1 or args.repeat < 1 or args.concurrency < 2:
        ap.error("--jobs and --repeat must be at least 1, --concurrency at least 2")
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in peers if p not in BROKER]
    if unknown:
        ap.error(f"unknown peers {unknown}: choose from {','.join(BROKER)}")
    chosen = [s for s in settings(args.concurrency) if s.peer in peers]
    if args.defaults_only:
        chosen = [s for s in chosen if s.default]
    swept = {f"runlane@{k * args.concurrency}": k * args.concurrency for k in (2, 4, 8)}
    also = {f"runlane@{m}": m for m in args.runlane_also.split(",") if m}
    ours = [
        "runlane",
        *([] if args.defaults_only else swept),
        *also,
    ]
    runs: list[str | Setting] = ["floor", *(ours if "runlane" in peers else []), *chosen]

    # Per repetition, by tag: the figures (rounds that failed are absent).
    results: dict[str, dict[int, dict[str, float]]] = {}
    failed = 0
    for i in range(args.repeat):
        # A different one first in each repetition: none always runs on a machine that has
        # just been idle, or just been busy. The floor runs in every repetition too.
        for item in runs[i % len(runs) :] + runs[: i % len(runs)]:
            if item == "floor":
                tag = "floor/16 threads"
            elif item == "runlane":
                tag = "runlane/postgres"
            elif item in also or item in swept:
                tag = f"{item}/postgres"
            else:
                assert isinstance(item, Setting)
                tag = item.tag
            try:
                if item == "floor":
                    r = spawn_floor(args.jobs)
                elif item == "runlane":
                    r = one_runlane(args.jobs, args.concurrency, args)
                elif item in also:
                    r = one_runlane(args.jobs, args.concurrency, args, spawn=also[item])
                elif isinstance(item, str) and item in swept:
                    r = one_runlane(args.jobs, swept[item], args)
                else:
                    assert isinstance(item, Setting)
                    r = one_peer(item.peer, item, args.jobs, args)
            except Exception as e:  # one peer failing leaves the others to run
                failed += 1
                print(f"[{tag} #{i + 1}] FAILED: {e}", flush=True)
                continue
            if r["jobs"] != args.jobs:
                failed += 1
                print(f"[{tag} #{i + 1}] FAILED: {show(r, args.jobs)}", flush=True)
                continue
            results.setdefault(tag, {})[i] = r
            print(f"[{tag} #{i + 1}] {show(r, args.jobs)}", flush=True)
    summarise(results, chosen, args.jobs, frozenset(f"{item}/postgres" for item in also))
    if failed:
        print(f"{failed} of {args.repeat * len(runs)} runs failed", file=sys.stderr)
        sys.exit(1)


def summarise(
    results: dict[str, dict[int, dict[str, float]]],
    chosen: list[Setting],
    n: int,
    diagnostics: frozenset[str] = frozenset(),
) -> None:
    """Medians per setting; each peer's default and best; runlane's ratios to the best peer
    setting and to the spawn floor, round by round (so a machine that drifts between rounds
    moves both sides of each ratio), then their median."""
    for tag, by_round in results.items():
        print(f"[{tag} median of {len(by_round)}] {show(medians_of(list(by_round.values())), n)}")
    rate = "jobs_per_s"
    best: Setting | None = None
    for peer in dict.fromkeys(s.peer for s in chosen):
        mine = [s for s in chosen if s.peer == peer and s.tag in results]
        if not mine:
            continue
        top = max(mine, key=lambda s: medians_of(list(results[s.tag].values()))[rate])
        default = next((s for s in mine if s.default), None)
        got = {s.label: medians_of(list(results[s.tag].values()))[rate] for s in mine}
        print(
            f"[{peer}] default {default.label if default else '-'}="
            f"{got[default.label] if default else float('nan'):.2f}  "
            f"best {top.label}={got[top.label]:.2f} jobs/s"
        )
        if best is None or got[top.label] > medians_of(list(results[best.tag].values()))[rate]:
            best = top
    floor = results.get("floor/16 threads", {})
    # runlane at its default, and at its best setting of the sweep (the spawn-mode variants are
    # diagnostics, not settings a user would pick).
    mine = [t for t in results if t.startswith("runlane") and t not in diagnostics]
    top = max(mine, key=lambda t: medians_of(list(results[t].values()))[rate], default=None)
    lines = []
    for name, tag in (("runlane", "runlane/postgres"), ("runlane_best", top)):
        if tag is None or tag not in results or (name == "runlane_best" and len(mine) < 2):
            continue
        ours = results[tag]
        label = "" if name == "runlane" else f"{tag}, "
        if floor:
            ratios = [ours[i][rate] / floor[i]["spawns_per_s"] for i in ours if i in floor]
            if ratios:
                lines.append(
                    f"{name}_vs_floor={median(ratios):.3f} ({label}rounds={len(ratios)}: "
                    f"{spread(ratios)})"
                )
        if best is not None:
            theirs = results[best.tag]
            ratios = [ours[i][rate] / theirs[i][rate] for i in ours if i in theirs]
            if ratios:
                lines.append(
                    f"{name}_vs_best_peer={median(ratios):.3f} "
                    f"({label}{best.tag}, rounds={len(ratios)}: {spread(ratios)})"
                )
    if best is not None and floor:
        theirs = results[best.tag]
        ratios = [theirs[i][rate] / floor[i]["spawns_per_s"] for i in theirs if i in floor]
        if ratios:
            lines.append(
                f"best_peer_vs_floor={median(ratios):.3f} (rounds={len(ratios)}: {spread(ratios)})"
            )
    if lines:
        print("[ratios, median over rounds] " + "  ".join(lines))
    named = [
        ("runlane", "runlane/postgres"),
        ("runlane_best", top if len(mine) >= 2 else None),
        ("best_peer", best.tag if best is not None else None),
    ]
    if floor:
        print(cpu_over_floor(results, floor, named))
    print(machine_use(results, named))


def spread(values: list[float]) -> str:
    """The rounds' lowest and highest value: how far one round's figure can stray (the
    machine's speed moves between rounds more than most changes move a figure)."""
    return f"{min(values):.3f}-{max(values):.3f}"


def machine_use(
    results: dict[str, dict[int, dict[str, float]]], named: list[tuple[str, str | None]]
) -> str:
    """Where the machine went while each queue ran, median over rounds: its whole CPU a job
    (worker + broker + the job's own `true`), the share of the machine's CPU that accounts for
    at its rate (jobs/s x CPU a job over CPUS cores), and the share left idle. A queue that is
    cheaper a job but leaves more of the machine idle can still be slower: jobs/s is the
    counted share times the cores over the CPU a job."""
    parts = []
    for name, tag in named:
        if tag is None or tag not in results:
            continue
        rounds = [r for r in results[tag].values() if "jobs_cpu_ms_per_job" in r]
        if not rounds:
            continue
        whole = [r["cpu_ms_per_job"] + r["jobs_cpu_ms_per_job"] for r in rounds]
        counted = [
            r["jobs_per_s"] * w / (CPUS * 1000.0) * 100.0
            for r, w in zip(rounds, whole, strict=True)
        ]
        idle = [
            r["machine_idle_pct"] for r in rounds if r["machine_idle_pct"] == r["machine_idle_pct"]
        ]
        idle_text = f"{median(idle):.1f}" if idle else "nan"
        parts.append(
            f"{name}={median(whole):.3f} ms a job, {median(counted):.1f}% counted, "
            f"{idle_text}% idle ({tag})"
        )
    return "[the machine's CPU while each ran, median over rounds] " + "  ".join(parts)


def cpu_over_floor(
    results: dict[str, dict[int, dict[str, float]]],
    floor: dict[int, dict[str, float]],
    named: list[tuple[str, str | None]],
) -> str:
    """What a job cost the machine beyond what spawning it costs, round by round, then the
    median: (worker + broker + the job's own `true`) CPU a job, less the floor's (the spawning
    process's + its `true`'s) CPU a spawn. Both sides pay a parent's spawn and a child's exec,
    so what is left is the queue's own work; issue 21 asks runlane's to be at most 0.3 ms."""
    parts = []
    for name, tag in named:
        if tag is None or tag not in results:
            continue
        ours = results[tag]
        extra = [
            ours[i]["cpu_ms_per_job"]
            + ours[i]["jobs_cpu_ms_per_job"]
            - floor[i]["cpu_ms_per_spawn"]
            for i in ours
            if i in floor and "jobs_cpu_ms_per_job" in ours[i]
        ]
        if extra:
            parts.append(f"{name}={median(extra):.3f} ({tag})")
    floor_cpu = median([r["cpu_ms_per_spawn"] for r in floor.values()])
    return (
        f"[CPU ms a job beyond the floor's {floor_cpu:.3f} ms a spawn, median over rounds] "
        + "  ".join(parts)
    )


if __name__ == "__main__":
    main()
