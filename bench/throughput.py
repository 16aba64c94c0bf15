"""Throughput, CPU per run and memory of a real `runlane serve` process.

2,000 manual runs of a job whose command is `true`, concurrency 16: runs are enqueued through the
accept path first, then a launcher is started and timed from its first start to its last finish
(database timestamps). CPU per run counts the launcher process and its guardian (runs excluded;
the runs are held while the launcher starts, and its CPU is read once it is idle, so start-up
is not counted) plus the PostgreSQL processes that serve the scratch database (its backends and
the shared WAL writer, checkpointer and background writer; other sessions on the server are
left out). Of the launcher's, `helpers_cpu_ms_per_run` is its spawners' (or guardian's) share;
`runs_cpu_ms_per_run` is the runs' own (the `true`s, reaped by the spawners), not in the rest.
Then, the launcher idle, `--pickup-runs` more runs are accepted one at a time at a steady pace
below capacity: their pickup (queued_at to started_at, database timestamps: the claim, not the
process's start; `bench/latency.py` measures enqueue to process started) gives p50/p99; then,
every run done, the idle launcher's CPU over 2 s (`idle_cpu_pct`, percent of a core).
`machine_idle_pct` is the share of the machine's CPU time left idle from the first run's start
to the last one's finish (/proc/stat sampled every 10 ms). Prints one line per repetition and
the medians. The launcher logs at `runlane serve`'s default level, info (a `run.finished` line
per run, to a file in the scratch directory); before the twenty-sixth session the bench ran it
at warning, ~0.01 ms of launcher CPU a run less since then (~0.045 before).

`--bus rabbitmq` runs the launcher with RUNLANE_BUS=rabbitmq on a fresh vhost (rabbitmqctl as
root; otherwise runlane's queues in RUNLANE_TEST_RABBITMQ_URL's vhost are deleted first), the
runs accepted through the outbox as the CLI and the API do on that bus (a command and the facts
per run); the outbox rows are held with the queue, and CPU is read once the outbox and job_runs
are empty, so the relay's and the consumer's work is counted. With the broker on this machine,
`broker_cpu_ms_per_run` is its own process's CPU (beam.smp, all of it) over the same span, not
in `cpu_ms_per_run`: on two cores it is what bounds that bus's runs/s. `--bus both` alternates
database and RabbitMQ rounds (`--repeat` of each) and prints the medians of each.

    .venv/bin/python bench/throughput.py --db postgres --runs 2000 --repeat 3
    .venv/bin/python bench/throughput.py --db sqlite --runs 2000 --repeat 3
    .venv/bin/python bench/throughput.py --bus both --runs 2000 --repeat 3   # RabbitMQ vs database
    .venv/bin/python bench/throughput.py --quick      # a smoke run (tests/integration/test_bench_smoke.py)
    .venv/bin/python bench/throughput.py --log-level warning   # without the line per run
    PATH=.venv/bin:$PATH .venv/bin/python bench/throughput.py --runs 4000 --repeat 1 \
        --profile /tmp/serve.txt                        # where the launcher's time goes (py-spy)
    .venv/bin/python bench/throughput.py --runs 3000 --repeat 1 --cprofile /tmp/serve.prof
                                                        # cProfile of the loop thread's CPU
    .venv/bin/python bench/throughput.py --runs 3000 --repeat 1 --statements
                                                        # statements per run, by statement
    .venv/bin/python bench/throughput.py --in-flight 1,4,16,64,256 --runs 2000 --repeat 1
                                                        # the curve: one line per concurrency
    .venv/bin/python bench/throughput.py --history 1000000 --runs 3000 --repeat 1
                                                        # with 1M finished rows in run_log first
    .venv/bin/python bench/throughput.py --runs 10000 --repeat 1   # 10,000 runs queued at once

`--history` reuses `bench/api_runs.py`'s seeder (generate_series; its queued and running rows
are deleted, so only finished history is left) and times only the bench's own `noop` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from _common import (
    CATALOG,
    MachineLoad,
    cpu_seconds,
    held_queue,
    helper_cpu_seconds,
    median,
    percentile,
    postgres_cpu_delta,
    postgres_cpu_seconds,
    rabbitmq_cpu_seconds,
    rss_mib,
    runlane_cmd,
    runs_cpu_seconds,
    scratch_database,
    wait_for_span,
    wait_for_successes,
)
from api_runs import seed

from runlane.catalog import load_catalog
from runlane.core.runs import Trigger
from runlane.service.accept import RunRequest, accept_run
from runlane.service.wiring import store_from_url

IDLE_SECONDS = 2.0  # the idle launcher's CPU is read over this long, after the runs
AMQP_URL = os.environ.get("RUNLANE_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")


async def enqueue(
    url: str, catalog_path: Path, n: int, *, outbox: bool, pace: float = 0.0
) -> float:
    """Accept `n` runs (through the outbox on the RabbitMQ bus, with the facts a launcher of
    that bus turns on), `pace` seconds apart; the accept rate."""
    catalog = load_catalog(catalog_path)
    store = store_from_url(url, outbox=outbox)
    await store.open()
    try:
        if outbox:
            await store.set_bus_facts(True)
        t0 = time.perf_counter()
        for _ in range(n):
            await accept_run(store, catalog, RunRequest(job="noop", trigger=Trigger.CLI))
            if pace:
                await asyncio.sleep(pace)
        return n / (time.perf_counter() - t0)
    finally:
        await store.close()


@contextlib.contextmanager
def rabbitmq_vhost() -> Iterator[str]:
    """The AMQP URL of a fresh vhost (deleted afterwards), or of RUNLANE_TEST_RABBITMQ_URL's
    with runlane's queues deleted first when the broker cannot be administered from here."""
    ctl = shutil.which("rabbitmqctl")
    if ctl is None or os.geteuid() != 0:
        from bus import delete_topology  # bench/bus.py: the same broker, the same names

        from runlane.adapters.rabbitmq import Topology

        asyncio.run(delete_topology(Topology()))
        yield AMQP_URL
        return
    name = f"runlane-bench-{uuid.uuid4().hex[:8]}"
    parts = urlsplit(AMQP_URL)
    subprocess.run([ctl, "add_vhost", name], check=True, capture_output=True, timeout=60)
    try:
        subprocess.run(
            [ctl, "set_permissions", "-p", name, parts.username or "guest", ".*", ".*", ".*"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        yield urlunsplit(parts._replace(path="/" + quote(name, safe="")))
    finally:
        subprocess.run([ctl, "delete_vhost", name], check=False, capture_output=True, timeout=60)


async def bus_backlog(url: str, amqp_url: str) -> int:
    """Outbox rows unpublished + commands waiting in job_runs (0: the bus work is done)."""
    import aio_pika

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM outbox WHERE published_at IS NULL").fetchone()
    connection = await aio_pika.connect(amqp_url, timeout=10)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue("job_runs", passive=True)
        ready = queue.declaration_result.message_count or 0
    return (row[0] if row else 0) + ready


def wait_bus_idle(url: str, amqp_url: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while asyncio.run(bus_backlog(url, amqp_url)) > 0:
        if time.monotonic() > deadline:
            raise SystemExit(f"the outbox or job_runs was not empty after {timeout:g} s")
        time.sleep(0.25)


def time_pairs_ms(url: str, sql: str) -> list[float]:
    """Milliseconds from the first to the second time of each row `sql` reads."""
    if url.startswith("sqlite:"):
        with contextlib.closing(sqlite3.connect(url.split(":///", 1)[1], timeout=30)) as db:
            rows = [
                (datetime.fromisoformat(a), datetime.fromisoformat(b))
                for a, b in db.execute(sql).fetchall()
            ]
    else:
        with psycopg.connect(url) as conn:
            rows = conn.execute(sql).fetchall()
    return [1000 * (b - a).total_seconds() for a, b in rows]


def pickups_ms(url: str, after: int) -> list[float]:
    """Pickup (queued_at to started_at) of the runs accepted after the first `after`."""
    # The bench's own job only: seeded history (`--history`) is of other jobs.
    sql = "SELECT queued_at, started_at FROM run_log WHERE job = 'noop' ORDER BY queued_at"
    return time_pairs_ms(url, sql)[after:]


def in_flight_ms(url: str, n: int) -> list[float]:
    """Claim to exit (started_at to finished_at; finished_at is the exit's time, not the
    outcome's save) of the first `n` runs: the time a run holds one of the launcher's slots."""
    sql = (
        "SELECT started_at, finished_at FROM run_log WHERE job = 'noop'"
        f" ORDER BY queued_at LIMIT {int(n)}"
    )
    return time_pairs_ms(url, sql)


def steady_rate(url: str, n: int) -> float:
    """Runs per second between the 10th and the 90th percentile of the first `n` runs' starts:
    the steady rate, without the first claims' ramp-up and the last runs' drain."""
    # Each start as its time after the first (ms), read through the one helper.
    sql = (
        "SELECT min(started_at) OVER (), started_at FROM run_log WHERE job = 'noop'"
        f" ORDER BY started_at LIMIT {int(n)}"
    )
    starts = time_pairs_ms(url, sql)
    lo, hi = len(starts) // 10, len(starts) * 9 // 10
    if hi <= lo:
        return 0.0
    return 1000 * (hi - lo) / max(1e-6, starts[hi] - starts[lo])


def py_spy() -> str:
    """py-spy from PATH or next to this interpreter (a venv's bin need not be on PATH)."""
    found = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if found is None:
        raise SystemExit("--profile needs py-spy: pip install py-spy")
    return found


def seed_history(url: str, rows: int) -> float:
    """`rows` finished runs of other jobs in run_log (api_runs.py's seeder, without the few
    queued and running rows it adds: those would be claimed or recovered by the launcher)."""
    seconds = seed(url, rows)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM run_log WHERE status IN ('queued', 'running')")
        # The seed's million rows and index builds written out now: otherwise the checkpoint
        # that writes them runs during the timed runs and counts as their PostgreSQL CPU (the
        # checkpointer and WAL writer are counted; 0.4 vs 1.3 ms a run in two rounds here).
        with contextlib.suppress(psycopg.Error):  # CHECKPOINT needs a superuser
            conn.execute("CHECKPOINT")
    return seconds


def statements_per_run(path: Path, n: int) -> dict[str, float]:
    """The launcher's statements (counted by `_statement_count.py`) per run, by statement."""
    counts: dict[str, int] = json.loads(path.read_text())
    total = sum(v for k, v in counts.items() if not k.startswith("("))
    print(f"statements per run: {total / n:.2f} ({total} for {n} runs)")
    for key, value in counts.items():
        print(f"  {value / n:7.3f}  {key}")
    return {"statements_per_run": total / n}


def one(
    kind: str,
    n: int,
    concurrency: int,
    profile: str | None = None,
    log_level: str = "info",
    *,
    bus: str = "db",
    pickup_runs: int = 0,
    pickup_pace: float = 0.02,
    cprofile: str | None = None,
    statements: bool = False,
    history: int = 0,
) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        (work / "catalog.yaml").write_text(CATALOG)
        amqp_url = stack.enter_context(rabbitmq_vhost()) if bus == "rabbitmq" else ""
        with scratch_database(kind, work) as url:
            env = dict(
                os.environ,
                RUNLANE_DATABASE_URL=url,
                RUNLANE_CATALOG=str(work / "catalog.yaml"),
                RUNLANE_LOG_DIR=str(work / "logs"),
                RUNLANE_CONCURRENCY=str(concurrency),
                RUNLANE_LOG_LEVEL=log_level,
                RUNLANE_BUS="rabbitmq" if bus == "rabbitmq" else "database",
            )
            if amqp_url:
                env["RUNLANE_RABBITMQ_URL"] = amqp_url
            subprocess.run(
                [*runlane_cmd(), "db", "upgrade"], env=env, check=True, capture_output=True
            )
            if history:
                print(f"seeded {history:,} finished rows in {seed_history(url, history):.0f} s")
            outbox = bus == "rabbitmq"
            enqueue_rate = asyncio.run(enqueue(url, work / "catalog.yaml", n, outbox=outbox))
            database = url.rsplit("/", 1)[1]
            proc: subprocess.Popen[bytes] | None = None
            try:
                with held_queue(url) as release:
                    # The launcher starts on a held queue: its start-up (imports, connections) is
                    # over and it is idle when its memory and CPU are read; then every run is let go
                    # at once.
                    # Its log goes to a file: at info that is a line per run, as in production.
                    log_file = stack.enter_context((work / "serve.log").open("wb"))
                    serve = [*runlane_cmd(), "serve"]
                    if cprofile:  # the loop thread only, by its own CPU clock
                        wrapper = Path(__file__).with_name("_thread_cprofile.py")
                        serve = [sys.executable, str(wrapper), cprofile, "serve"]
                    counted = work / "statements.json"
                    if statements:
                        counter = Path(__file__).with_name("_statement_count.py")
                        serve = [sys.executable, str(counter), str(counted), "serve"]
                    proc = subprocess.Popen(serve, env=env, stdout=log_file, stderr=log_file)
                    time.sleep(2.0)
                    idle_rss = rss_mib(proc.pid)
                    startup_helpers = helper_cpu_seconds(proc.pid)
                    startup_cpu = cpu_seconds(proc.pid) + startup_helpers
                    startup_runs = runs_cpu_seconds(proc.pid)
                    pg_before = postgres_cpu_seconds(database) if kind == "postgres" else {}
                    broker_before = rabbitmq_cpu_seconds() if amqp_url else None
                    spy = (
                        subprocess.Popen(
                            [
                                py_spy(),
                                "record",
                                "--nonblocking",
                                "--format",
                                "raw",
                                "--rate",
                                "250",
                                "-o",
                                profile,
                                "--pid",
                                str(proc.pid),
                            ],
                            stdout=subprocess.DEVNULL,
                        )
                        if profile
                        else None
                    )
                    load = stack.enter_context(MachineLoad())
                    release()
                try:
                    first, last = wait_for_span(url, n, job="noop" if history else None)
                    span, machine_idle = last - first, load.idle_pct(first, last)
                except BaseException:
                    # Show why: the launcher's own log is in the scratch directory.
                    log_file.flush()
                    tail = (work / "serve.log").read_text(errors="replace").splitlines()[-20:]
                    print("\n".join(["launcher log (last lines):", *tail]), file=sys.stderr)
                    raise
                bus_drain = time.monotonic()
                if amqp_url:  # the relay's and the consumer's work done too
                    wait_bus_idle(url, amqp_url)
                bus_drain = time.monotonic() - bus_drain
                helpers_total = helper_cpu_seconds(proc.pid)
                launcher_cpu = cpu_seconds(proc.pid) + helpers_total
                helpers_cpu = max(0.0, helpers_total - startup_helpers)
                runs_cpu = max(0.0, runs_cpu_seconds(proc.pid) - startup_runs)
                if spy is not None:
                    spy.send_signal(signal.SIGINT)
                    spy.wait(30)
                peak = rss_mib(proc.pid, "VmHWM")
                pg_cpu = (
                    postgres_cpu_delta(pg_before, postgres_cpu_seconds(database))
                    if kind == "postgres"
                    else 0.0
                )
                broker_cpu = None
                if (
                    broker_before is not None
                    and (broker_after := rabbitmq_cpu_seconds()) is not None
                ):
                    broker_cpu = max(0.0, broker_after - broker_before)
                launcher_cpu = max(0.0, launcher_cpu - startup_cpu)
                flights = in_flight_ms(url, n)
                steady = steady_rate(url, n)
                # Pickup: runs accepted one at a time to the idle launcher (none: not timed).
                pickups: list[float] = []
                if pickup_runs:
                    asyncio.run(
                        enqueue(
                            url, work / "catalog.yaml", pickup_runs, outbox=outbox, pace=pickup_pace
                        )
                    )
                    wait_for_successes(url, n + pickup_runs, job="noop" if history else None)
                    pickups = pickups_ms(url, n)
                # Idle: every run done, nothing queued; what waiting costs (the wake-up's
                # watch, heartbeats, polls), in percent of one core.
                idle_from = cpu_seconds(proc.pid) + helper_cpu_seconds(proc.pid)
                time.sleep(IDLE_SECONDS)
                idle_cpu = cpu_seconds(proc.pid) + helper_cpu_seconds(proc.pid) - idle_from
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
                extra = statements_per_run(counted, n) if statements else {}
            finally:
                # Never leave the launcher behind when the bench fails halfway.
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait(30)
            return {
                "runs_per_s": n / span,
                "steady_runs_per_s": steady,
                "enqueue_per_s": enqueue_rate,
                "cpu_ms_per_run": 1000 * (launcher_cpu + pg_cpu) / n,
                "launcher_cpu_ms_per_run": 1000 * launcher_cpu / n,
                "pg_cpu_ms_per_run": 1000 * pg_cpu / n,
                # Of the launcher's: its spawner and guardian processes (a spawn's own
                # vfork and exec wait, the pipe protocol), already in launcher_cpu_ms_per_run.
                "helpers_cpu_ms_per_run": 1000 * helpers_cpu / n,
                # The runs' own (each `true`'s exec and exit), reaped by the spawners: with
                # cpu_ms_per_run, what the machine spent a run, to set beside the spawn floor's
                # CPU a spawn (bench/peers.py).
                "runs_cpu_ms_per_run": 1000 * runs_cpu / n,
                "startup_cpu_s": startup_cpu,
                "idle_rss_mib": idle_rss,
                "peak_rss_mib": peak,
                # A run's claim to its exit, and the share of slot-time runs held: how much of
                # the span each of the `concurrency` slots was used for runs.
                "in_flight_p50_ms": percentile(flights, 50),
                "slots_busy": sum(flights) / 1000 / (span * concurrency),
                "idle_cpu_pct": 100 * idle_cpu / IDLE_SECONDS,
                # The machine's CPUs idle while the runs ran (first start to last finish).
                "machine_idle_pct": machine_idle,
                **(
                    {
                        "pickup_p50_ms": percentile(pickups, 50),
                        "pickup_p99_ms": percentile(pickups, 99),
                    }
                    if pickups
                    else {}
                ),
                # After the last run finished, until the outbox and job_runs were empty.
                **({"bus_drain_s": bus_drain} if amqp_url else {}),
                # RabbitMQ's own process (beam.smp, all of it) over the same span, when it runs
                # on this machine: not in cpu_ms_per_run.
                **(
                    {"broker_cpu_ms_per_run": 1000 * broker_cpu / n}
                    if broker_cpu is not None
                    else {}
                ),
                **extra,
            }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3, help="rounds (of each bus with --bus both)")
    ap.add_argument(
        "--bus",
        choices=["db", "rabbitmq", "both"],
        default="db",
        help="the launcher's bus: the database's, RabbitMQ (RUNLANE_BUS=rabbitmq), or both in "
        "alternate rounds",
    )
    ap.add_argument("--pickup-runs", type=int, default=200, help="paced runs timed for pickup")
    ap.add_argument(
        "--pickup-pace", type=float, default=0.02, help="seconds between the paced runs"
    )
    ap.add_argument(
        "--in-flight",
        metavar="N,N,...",
        help="the curve: each repetition runs at each of these concurrencies in turn",
    )
    ap.add_argument(
        "--history", type=int, default=0, metavar="ROWS", help="seed ROWS finished runs first"
    )
    ap.add_argument("--cprofile", metavar="FILE", help="run the launcher under cProfile -o FILE")
    ap.add_argument(
        "--statements", action="store_true", help="count the launcher's statements per run"
    )
    ap.add_argument(
        "--profile",
        metavar="FILE",
        help="sample the launcher with py-spy (on PATH) into FILE, collapsed stacks",
    )
    ap.add_argument("--quick", action="store_true", help="50 runs, once: checks the script works")
    ap.add_argument(
        "--log-level",
        default="info",
        help="the launcher's RUNLANE_LOG_LEVEL: info (`runlane serve`'s default) logs a line "
        "per run, to a file; warning leaves it out",
    )
    args = ap.parse_args()
    if args.quick:
        args.runs, args.repeat, args.pickup_runs = 50, 1, 20
    if args.bus != "db" and args.db != "postgres":
        ap.error("--bus rabbitmq needs --db postgres (its outbox is held with the queue there)")
    buses = ["db", "rabbitmq"] if args.bus == "both" else [args.bus]
    levels = [int(c) for c in args.in_flight.split(",")] if args.in_flight else [args.concurrency]
    results: dict[tuple[str, int], list[dict[str, float]]] = {
        (b, c): [] for b in buses for c in levels
    }

    def tag(bus: str, c: int) -> str:  # "[postgres]" as before on the database bus alone
        name = args.db if buses == ["db"] else f"{args.db}/{bus}"
        return f"{name} c={c}" if args.in_flight else name

    for i in range(args.repeat):
        for c in levels:  # alternating: each repetition takes every concurrency and bus in turn
            for bus in buses:  # so a load change hits both alike
                r = one(
                    args.db,
                    args.runs,
                    c,
                    args.profile,
                    args.log_level,
                    bus=bus,
                    pickup_runs=args.pickup_runs,
                    pickup_pace=args.pickup_pace,
                    cprofile=args.cprofile,
                    statements=args.statements,
                    history=args.history,
                )
                results[bus, c].append(r)
                print(
                    f"[{tag(bus, c)} #{i + 1}] " + "  ".join(f"{k}={v:.2f}" for k, v in r.items()),
                    flush=True,
                )
    for (bus, c), rows in results.items():
        print(
            f"[{tag(bus, c)} median of {len(rows)}] "
            + "  ".join(f"{k}={median([r[k] for r in rows if k in r]):.2f}" for k in rows[0])
        )


if __name__ == "__main__":
    main()
