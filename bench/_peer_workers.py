"""The other Python job queues that bench/peers.py measures: how each enqueues and works.

Run by bench/peers.py as a subprocess, never imported by it (nor by runlane: these packages are
the `peers` extra). Two commands:

    _peer_workers.py enqueue PEER --url URL --queue NAME --jobs N
        installs the peer's schema when it has one, enqueues N jobs one by one through its
        ordinary API and prints `enqueue_per_s=...`.
    _peer_workers.py work PEER --url URL --queue NAME --concurrency C --out FILE
        builds the peer's worker (imports, connections where the peer opens them up front),
        prints `ready ...` on stdout, waits for a line `go` on stdin (blocked in a read: no CPU),
        then works until SIGTERM. With `--processes P` (the thread-based peers) it forks P
        such workers, each built on its own and each with C threads, as `dramatiq --processes P
        --threads C` does, and lets them go together. Every job appends one fixed-size record `start end` (monotonic
        clock, shared by all processes on the machine) to FILE with a single O_APPEND write:
        the harness learns the count from the file's size and the span from its records without
        asking the peer anything.

The job is the same everywhere: spawn `true` and wait for it, with `subprocess.run` in the
thread-based peers (Dramatiq, Celery) and `asyncio.create_subprocess_exec` in the asyncio ones
(procrastinate, PgQueuer). The worker dies with the harness (PR_SET_PDEATHSIG), so a harness
killed halfway leaves no worker behind.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

RECORD = 38  # bytes of one record: b"%018.6f %018.6f\n"
_out_fd = -1
_status_fd = 1


def _record(started: float) -> None:
    os.write(_out_fd, b"%018.6f %018.6f\n" % (started, time.monotonic()))


def true_sync() -> None:
    started = time.monotonic()
    subprocess.run(["true"], check=True)
    _record(started)


async def true_async() -> None:
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec("true")
    if await proc.wait() != 0:
        raise RuntimeError(f"true exited {proc.returncode}")
    _record(started)


def status(line: str) -> None:
    """A line for the harness, on the stdout it gave us (the peers' own prints go to stderr)."""
    os.write(_status_fd, (line + "\n").encode())


def wait_for_go() -> None:
    line = sys.stdin.readline()
    if line.strip() != "go":
        raise SystemExit(f"expected 'go' on stdin, got {line!r}")


async def wait_for_go_async() -> None:
    """The same wait without a thread: the loop watches stdin's descriptor."""
    loop = asyncio.get_running_loop()
    ready = asyncio.Event()
    loop.add_reader(sys.stdin.fileno(), ready.set)
    try:
        await ready.wait()
    finally:
        loop.remove_reader(sys.stdin.fileno())
    wait_for_go()


def ready_note() -> str:
    return f"pid={os.getpid()} threads={threading.active_count()}"


# --- Dramatiq: RabbitMQ, the default pika broker, no publisher confirms ------------------------


def dramatiq_actor(url: str, queue: str) -> Any:
    import dramatiq
    from dramatiq.brokers.rabbitmq import RabbitmqBroker

    broker = RabbitmqBroker(url=url)  # confirm_delivery=False is its default
    dramatiq.set_broker(broker)
    return dramatiq.actor(true_sync, actor_name="noop", queue_name=queue, broker=broker)


def sends_per_second(send: Any, jobs: int) -> float:
    """Call `send()` `jobs` times; how many a second (the sync peers' enqueue)."""
    t0 = time.perf_counter()
    for _ in range(jobs):
        send()
    return jobs / (time.perf_counter() - t0)


def dramatiq_enqueue(args: argparse.Namespace) -> float:
    actor = dramatiq_actor(args.url, args.queue)
    rate = sends_per_second(actor.send, args.jobs)
    actor.broker.close()
    return rate


def dramatiq_work(args: argparse.Namespace) -> None:
    import dramatiq

    actor = dramatiq_actor(args.url, args.queue)
    # What `dramatiq --processes 1 --threads C` runs in its one worker process, minus the
    # supervising parent and its log pipe.
    worker = dramatiq.Worker(actor.broker, worker_threads=args.concurrency)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    status(f"ready {ready_note()}")
    wait_for_go()
    worker.start()
    stop.wait()
    worker.stop(timeout=10_000)
    actor.broker.close()


# --- Celery: RabbitMQ through py-amqp, no result backend ------------------------------------


def celery_task(url: str, queue: str) -> Any:
    from celery import Celery

    app = Celery("peers", broker=url, set_as_current=True)
    app.conf.update(
        task_default_queue=queue,
        task_ignore_result=True,
        result_backend=None,
        # One worker alone: no remote control (its pidbox queue), events are off by default.
        worker_enable_remote_control=False,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
    )
    return app.task(name="noop", ignore_result=True)(true_sync)


def celery_enqueue(args: argparse.Namespace) -> float:
    task = celery_task(args.url, args.queue)
    rate = sends_per_second(task.delay, args.jobs)
    task.app.close()
    return rate


def celery_work(args: argparse.Namespace) -> None:
    from celery.signals import worker_ready

    task = celery_task(args.url, args.queue)

    @worker_ready.connect(weak=False)
    def gate(**_: object) -> None:
        # Sent once the consumer is connected and consuming, before its loop runs: the task
        # messages wait (RabbitMQ may have pushed up to the prefetch count) until `go`.
        status(f"ready {ready_note()}")
        wait_for_go()

    # `celery worker` as from the command line; SIGTERM is its warm shutdown.
    task.app.worker_main(
        [
            "worker",
            "--pool",
            args.celery_pool,
            "--concurrency",
            str(args.concurrency),
            "--prefetch-multiplier",
            str(args.celery_prefetch),
            "--loglevel",
            "WARNING",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
            "--hostname",
            f"{args.queue}@%h",
            "--queues",
            args.queue,
        ]
    )


# --- procrastinate: PostgreSQL, psycopg 3 async connector -----------------------------------


def procrastinate_task(url: str, queue: str) -> Any:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
    return app, app.task(name="noop", queue=queue)(true_async)


async def procrastinate_enqueue(args: argparse.Namespace) -> float:
    app, task = procrastinate_task(args.url, args.queue)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        t0 = time.perf_counter()
        for _ in range(args.jobs):
            await task.defer_async()
        return args.jobs / (time.perf_counter() - t0)


async def procrastinate_work(args: argparse.Namespace) -> None:
    app, _ = procrastinate_task(args.url, args.queue)
    async with app.open_async():
        status(f"ready {ready_note()}")
        await wait_for_go_async()
        # Its own SIGTERM handler stops it gracefully.
        await app.run_worker_async(queues=[args.queue], concurrency=args.concurrency, wait=True)


# --- PgQueuer: PostgreSQL through asyncpg (its CLI's default driver), on asyncio's own loop ----


async def pgqueuer_queries(args: argparse.Namespace) -> Any:
    """Queries over one connection, as `pgq run` builds them. Its psycopg driver holds the
    connection for up to a second in each wait for a notification, and every query waits
    behind it (about 16 jobs a second here): asyncpg is its default for good reason."""
    from pgqueuer import Queries

    if args.pgqueuer_driver == "asyncpg":
        import asyncpg
        from pgqueuer import AsyncpgDriver

        conn = await asyncpg.connect(args.url)
        return Queries(AsyncpgDriver(conn)), conn.close
    import psycopg
    from pgqueuer import PsycopgDriver

    pconn = await psycopg.AsyncConnection.connect(args.url, autocommit=True)
    return Queries(PsycopgDriver(pconn)), pconn.close


async def pgqueuer_enqueue(args: argparse.Namespace) -> float:
    queries, close = await pgqueuer_queries(args)
    try:
        await queries.install()
        t0 = time.perf_counter()
        for _ in range(args.jobs):
            await queries.enqueue(args.queue, None)
        return args.jobs / (time.perf_counter() - t0)
    finally:
        await close()


async def pgqueuer_work(args: argparse.Namespace) -> None:
    from pgqueuer import QueueManager

    queries, close = await pgqueuer_queries(args)
    try:
        qm = QueueManager(queries)

        @qm.entrypoint(args.queue)
        async def noop(job: object) -> None:
            await true_async()

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, qm.shutdown.set)
        loop = type(asyncio.get_running_loop())
        status(f"ready {ready_note()} loop={loop.__module__}.{loop.__name__}")
        await wait_for_go_async()
        # At most C jobs picked at once (`pgq run --max-concurrent-tasks C`); the dequeue batch
        # may be at most half of that. C = 0 is `pgq run`'s default: no cap, batches of 10.
        if args.concurrency:
            await qm.run(
                batch_size=max(1, args.concurrency // 2), max_concurrent_tasks=args.concurrency
            )
        else:
            await qm.run()
    finally:
        await close()


PEERS = {
    "dramatiq": (dramatiq_enqueue, dramatiq_work),
    "celery": (celery_enqueue, celery_work),
    "procrastinate": (procrastinate_enqueue, procrastinate_work),
    "pgqueuer": (pgqueuer_enqueue, pgqueuer_work),
}


def run(fn: Any, args: argparse.Namespace) -> Any:
    if not asyncio.iscoroutinefunction(fn):
        return fn(args)
    if args.loop == "uvloop":
        import uvloop

        return uvloop.run(fn(args))
    return asyncio.run(fn(args))


def die_with_parent() -> None:
    """SIGTERM when the harness goes away, however it goes (Linux's PR_SET_PDEATHSIG)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)
    if os.getppid() == 1:  # the harness died before the line above
        raise SystemExit("the harness is gone")


def forked(work: Any, args: argparse.Namespace) -> None:
    """`args.processes` workers, forked from here before any peer is imported, each built on
    its own; this process is their supervisor (as the `dramatiq` command's parent is): it says
    `ready` once every one of them is, passes `go` on to each, forwards SIGTERM and waits."""
    global _status_fd
    ready_r, ready_w = os.pipe()
    children: list[tuple[int, int]] = []
    for _ in range(args.processes):
        go_r, go_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # a worker: its `ready` goes to the supervisor, its `go` comes from it
            os.close(ready_r)
            os.close(go_w)
            for _, w in children:
                os.close(w)
            os.dup2(go_r, 0)
            os.close(go_r)
            _status_fd = ready_w
            try:
                die_with_parent()  # fork() clears the parent-death signal
                run(work, args)
            finally:
                os._exit(0)
        os.close(go_r)
        children.append((pid, go_w))
    os.close(ready_w)
    with os.fdopen(ready_r, "rb") as ready:
        for _ in children:
            if not ready.readline().startswith(b"ready"):
                raise SystemExit("a worker process exited before it was ready")
    pids = " ".join(str(pid) for pid, _ in children)
    status(f"ready {ready_note()} processes={args.processes} pids={pids}")
    signal.signal(signal.SIGTERM, lambda *_: [os.kill(pid, signal.SIGTERM) for pid, _ in children])
    wait_for_go()
    for _, go_w in children:
        os.write(go_w, b"go\n")
        os.close(go_w)
    for pid, _ in children:
        while True:
            try:
                os.waitpid(pid, 0)
                break
            except ChildProcessError:
                break
            except InterruptedError:  # pragma: no cover - PEP 475 retries for us
                continue


def main() -> None:
    global _out_fd, _status_fd
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["enqueue", "work"])
    ap.add_argument("peer", choices=sorted(PEERS))
    ap.add_argument("--url", required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--jobs", type=int, default=0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--processes", type=int, default=1, help="worker processes (Dramatiq, Celery)")
    ap.add_argument("--out")
    ap.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    ap.add_argument("--pgqueuer-driver", choices=["asyncpg", "psycopg"], default="asyncpg")
    ap.add_argument("--celery-pool", default="threads")
    ap.add_argument("--celery-prefetch", type=int, default=4)
    args = ap.parse_args()
    die_with_parent()
    # Anything the peers print goes where their logs go (stderr); stdout is the harness's.
    _status_fd = os.dup(1)
    os.dup2(2, 1)
    enqueue, work = PEERS[args.peer]
    if args.command == "enqueue":
        status(f"enqueue_per_s={run(enqueue, args):.2f}")
        return
    _out_fd = os.open(args.out, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    if args.processes > 1:
        forked(work, args)
    else:
        run(work, args)


if __name__ == "__main__":
    main()
