"""Pickup latency on an idle launcher: enqueue → process started, one run at a time.

The launcher runs in this process with a long poll interval (10 s), so a fast pickup can only
come from the wake-up path (LISTEN/NOTIFY on PostgreSQL). Runs are enqueued by another process
(as `runlane run` or the API would), which reads the clock just before it accepts each run; the
launcher's hook reads it when the run's process has been started (CLOCK_MONOTONIC, the same for
both processes). The launcher runs on the event loop `runlane serve` runs on by default (uvloop
where installed). Prints p50/p99 over the samples, median of the repetitions.

`--floor` adds a turn of the same measurement without runlane, in every repetition: the least a
durable queue pays on this machine for the same path. The client commits one row and its NOTIFY
in one autocommit statement; a listener on its own connection wakes, claims the row with one
autocommit `UPDATE ... FOR UPDATE SKIP LOCKED` (so both writes are durable, as runlane's are),
and `os.posix_spawn`s `true`; the pickup ends when the spawn returns. Both sides use psycopg's
blocking calls, no event loop and no pool, on a two-column table with one index. The figure
moves with the machine (an idle VM's wake-ups and its disk's flush) as runlane's does, so
`runlane_vs_floor` (runlane's p50 over the floor's, round by round) is what to compare across
days; what runlane adds to it is its own.

    .venv/bin/python bench/latency.py --db postgres --samples 200 --repeat 3
    .venv/bin/python bench/latency.py --inline-spawn loop,thread   # both, in alternate turns
    .venv/bin/python bench/latency.py --floor --repeat 4           # beside the bare floor
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import os
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

import psycopg
import structlog
from _common import CATALOG, median, percentile, scratch_database

from runlane.catalog import load_catalog
from runlane.core.runs import Trigger
from runlane.service.accept import RunRequest, accept_run
from runlane.service.config import Settings
from runlane.service.launcher import Launcher
from runlane.service.runtime import event_loop_factory
from runlane.service.wiring import build_executors, store_from_url


def enqueuer(url: str, catalog_path: str, pipe: Connection) -> None:
    """The client process: for each request on `pipe`, accept one run and answer with its id
    and the clock read just before the accept began and just after it returned."""

    async def serve() -> None:
        catalog = load_catalog(catalog_path)
        client = store_from_url(url)
        await client.open()
        try:
            pipe.send("ready")
            while pipe.recv() == "go":
                t0 = time.perf_counter()
                result = await accept_run(
                    client, catalog, RunRequest(job="noop", trigger=Trigger.CLI)
                )
                pipe.send((result.run.id, t0, time.perf_counter()))
        finally:
            await client.close()

    asyncio.run(serve())


FLOOR = "floor"  # the turn of the bare durable pickup (--floor)
FLOOR_TABLE = "pickup_floor"


def floor_client(url: str, pipe: Connection) -> None:
    """The floor's client process: for each "go", one row and its NOTIFY in one autocommit
    statement; answers with the clock read before it and after it returned."""
    with psycopg.connect(url, autocommit=True) as conn:
        pipe.send("ready")
        while pipe.recv() == "go":
            t0 = time.perf_counter()
            conn.execute(
                f"WITH i AS (INSERT INTO {FLOOR_TABLE} (status) VALUES ('queued') RETURNING id) "
                "SELECT pg_notify('pickup_floor', ''), (SELECT id FROM i)"
            )
            pipe.send((t0, time.perf_counter()))


def measure_floor(url: str, samples: int) -> tuple[list[float], list[float], list[float]]:
    """The bare durable pickup (module docstring): latencies (enqueue -> `true` spawned), and
    when the insert had returned and when the claim had, in ms after enqueue."""
    with psycopg.connect(url, autocommit=True) as setup:
        setup.execute(
            f"CREATE TABLE {FLOOR_TABLE} (id bigserial PRIMARY KEY, status text NOT NULL)"
        )
    ours, theirs = multiprocessing.Pipe()
    client = multiprocessing.get_context("spawn").Process(
        target=floor_client, args=(url, theirs), daemon=True
    )
    client.start()
    if not ours.poll(60) or ours.recv() != "ready":
        raise SystemExit("the floor's client did not start")
    latencies, accepted, claims = [], [], []
    with (
        psycopg.connect(url, autocommit=True) as listen,
        psycopg.connect(url, autocommit=True) as claim,
    ):
        listen.execute("LISTEN pickup_floor")
        try:
            time.sleep(1.0)  # idle, as the launcher is before its samples
            for _ in range(samples):
                ours.send("go")
                for _notify in listen.notifies(timeout=30, stop_after=1):
                    pass
                row = claim.execute(
                    f"UPDATE {FLOOR_TABLE} SET status = 'running' WHERE id = ("
                    f"SELECT id FROM {FLOOR_TABLE} WHERE status = 'queued' ORDER BY id LIMIT 1 "
                    "FOR UPDATE SKIP LOCKED) RETURNING id"
                ).fetchone()
                t_claimed = time.perf_counter()
                pid = os.posix_spawn("/bin/true", ["true"], os.environ)
                t_started = time.perf_counter()
                os.waitpid(pid, 0)
                t0, t1 = ours.recv()
                if row is None:
                    raise SystemExit("the floor's claim found no row")
                latencies.append((t_started - t0) * 1000)
                accepted.append((t1 - t0) * 1000)
                claims.append((t_claimed - t0) * 1000)
                time.sleep(0.02)  # idle again before the next sample
        finally:
            ours.send("stop")
            client.join(10)
    return latencies, accepted, claims


async def measure(
    url: str, work: Path, samples: int, inline_spawn: str = "auto"
) -> tuple[list[float], list[float], list[float]]:
    """Pickup latencies (enqueue -> process started), and for each sample when the accept had
    returned to the client and when the launcher had claimed the run (ms after enqueue)."""
    catalog = load_catalog(work / "catalog.yaml")
    settings = Settings(
        database_url=url,
        catalog_path=str(work / "catalog.yaml"),
        log_dir=str(work / "logs"),
        claim_interval=10.0,
        lease_ttl=30.0,
        lease_renew_interval=10.0,
        inline_spawn=inline_spawn,
    )
    launcher_store = store_from_url(url)
    await launcher_store.open()
    await launcher_store.upgrade()
    started: dict[str, float] = {}
    claimed: dict[str, float] = {}
    finished: asyncio.Queue[str] = asyncio.Queue()

    def hook(event: str, run_id: str) -> None:
        if event == "started":
            started[run_id] = time.perf_counter()
        elif event == "claimed":
            claimed[run_id] = time.perf_counter()
        elif event == "finished":
            finished.put_nowait(run_id)

    ours, theirs = multiprocessing.Pipe()
    client = multiprocessing.get_context("spawn").Process(
        target=enqueuer, args=(url, str(work / "catalog.yaml"), theirs), daemon=True
    )
    client.start()
    if not ours.poll(60) or ours.recv() != "ready":
        raise SystemExit("the enqueuer did not start")
    launcher = Launcher(
        store=launcher_store,
        catalog=catalog,
        executors=build_executors(settings),
        settings=settings,
        hook=hook,
    )
    task = asyncio.create_task(launcher.run())
    latencies, accepted, claims = [], [], []
    try:
        await asyncio.sleep(1.0)  # let the launcher go idle: this measures an idle launcher
        for _ in range(samples):
            # The enqueuer's answer is read once the run has finished, not as it arrives: read
            # on this loop during the pickup, it would delay the launcher it measures (the
            # answer lands while the claim is in flight).
            ours.send("go")
            run_id = await asyncio.wait_for(finished.get(), 30)
            got, t0, t1 = ours.recv()
            assert got == run_id, (got, run_id)
            latencies.append((started[run_id] - t0) * 1000)
            accepted.append((t1 - t0) * 1000)
            claims.append((claimed[run_id] - t0) * 1000)
            await asyncio.sleep(0.02)  # idle again before the next sample
    finally:
        ours.send("stop")
        client.join(10)
        launcher.stop()
        await task
        await launcher_store.close()
    return latencies, accepted, claims


def main() -> None:
    # The launcher runs in this process: warnings only, not structlog's default of printing
    # every debug line. (`runlane serve` logs at info, one `run.finished` line per run, which
    # comes after the process has started: outside what this measures.)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    # PostgreSQL only: on SQLite a run accepted by another process is found by the poll
    # (RUNLANE_CLAIM_INTERVAL), so its pickup latency is that interval by design.
    ap.add_argument("--db", choices=["postgres"], default="postgres")
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument(
        "--inline-spawn",
        default="auto",
        help="RUNLANE_INLINE_SPAWN for the launcher; several, comma-separated, run in turns",
    )
    ap.add_argument(
        "--floor",
        action="store_true",
        help="a turn of the bare durable pickup (no runlane) in every repetition",
    )
    args = ap.parse_args()
    if args.quick:
        args.samples, args.repeat = 10, 1
    modes = [m.strip() for m in args.inline_spawn.split(",") if m.strip()]
    turns = [*modes, FLOOR] if args.floor else modes
    p50s: dict[str, list[float]] = {m: [] for m in turns}
    p99s: dict[str, list[float]] = {m: [] for m in turns}

    def tag(mode: str) -> str:
        if mode == FLOOR:
            return "floor"
        return args.db if modes == ["auto"] else f"{args.db} spawn={mode}"

    for i in range(args.repeat):
        for mode in turns[i % len(turns) :] + turns[: i % len(turns)]:
            with tempfile.TemporaryDirectory() as tmp:
                work = Path(tmp)
                (work / "catalog.yaml").write_text(CATALOG)
                with scratch_database(args.db, work) as url:
                    if mode == FLOOR:
                        lat, accepted, claims = measure_floor(url, args.samples)
                    else:
                        # On the event loop `runlane serve` runs on by default (uvloop where
                        # installed: RUNLANE_EVENT_LOOP=auto).
                        with asyncio.Runner(loop_factory=event_loop_factory("auto")) as runner:
                            lat, accepted, claims = runner.run(
                                measure(url, work, args.samples, mode)
                            )
            p50s[mode].append(percentile(lat, 50))
            p99s[mode].append(percentile(lat, 99))
            print(
                f"[{tag(mode)} #{i + 1}] pickup p50={p50s[mode][-1]:.2f} ms "
                f"p99={p99s[mode][-1]:.2f} ms max={max(lat):.2f} ms (n={len(lat)}); p50 of: "
                f"accept returned {percentile(accepted, 50):.2f} ms, "
                f"claimed {percentile(claims, 50):.2f} ms",
                flush=True,
            )
    for mode in turns:
        print(
            f"[{tag(mode)} median of {args.repeat}] pickup p50={median(p50s[mode]):.2f} ms "
            f"p99={median(p99s[mode]):.2f} ms"
        )
    if args.floor:
        # Round by round: the floor and runlane measured in the same minutes.
        for mode in modes:
            ratios = [a / b for a, b in zip(p50s[mode], p50s[FLOOR], strict=True)]
            print(f"[{tag(mode)}] runlane_vs_floor p50={median(ratios):.2f}x")


if __name__ == "__main__":
    main()
