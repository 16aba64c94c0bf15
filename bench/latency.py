"""Pickup latency on an idle launcher: enqueue → process started, one run at a time.

The launcher runs in this process with a long poll interval (10 s), so a fast pickup can only
come from the wake-up path (LISTEN/NOTIFY on PostgreSQL). Runs are enqueued by another process
(as `runlane run` or the API would), which reads the clock just before it accepts each run; the
launcher's hook reads it when the run's process has been started (CLOCK_MONOTONIC, the same for
both processes). Prints p50/p99 over the samples, median of the repetitions.

    .venv/bin/python bench/latency.py --db postgres --samples 200 --repeat 3
    .venv/bin/python bench/latency.py --inline-spawn loop,thread   # both, in alternate turns
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

import structlog
from _common import CATALOG, median, percentile, scratch_database

from runlane.catalog import load_catalog
from runlane.core.runs import Trigger
from runlane.service.accept import RunRequest, accept_run
from runlane.service.config import Settings
from runlane.service.launcher import Launcher
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
    # The launcher runs in this process: log as `runlane serve` does under the throughput bench
    # (warnings only), not structlog's default of printing every debug line.
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
    args = ap.parse_args()
    if args.quick:
        args.samples, args.repeat = 10, 1
    modes = [m.strip() for m in args.inline_spawn.split(",") if m.strip()]
    p50s: dict[str, list[float]] = {m: [] for m in modes}
    p99s: dict[str, list[float]] = {m: [] for m in modes}
    for i in range(args.repeat):
        for mode in modes[i % len(modes) :] + modes[: i % len(modes)]:
            tag = args.db if modes == ["auto"] else f"{args.db} spawn={mode}"
            with tempfile.TemporaryDirectory() as tmp:
                work = Path(tmp)
                (work / "catalog.yaml").write_text(CATALOG)
                with scratch_database(args.db, work) as url:
                    lat, accepted, claims = asyncio.run(measure(url, work, args.samples, mode))
            p50s[mode].append(percentile(lat, 50))
            p99s[mode].append(percentile(lat, 99))
            print(
                f"[{tag} #{i + 1}] pickup p50={p50s[mode][-1]:.2f} ms "
                f"p99={p99s[mode][-1]:.2f} ms max={max(lat):.2f} ms (n={len(lat)}); p50 of: "
                f"accept returned {percentile(accepted, 50):.2f} ms, "
                f"claimed {percentile(claims, 50):.2f} ms",
                flush=True,
            )
    for mode in modes:
        tag = args.db if modes == ["auto"] else f"{args.db} spawn={mode}"
        print(
            f"[{tag} median of {args.repeat}] pickup p50={median(p50s[mode]):.2f} ms "
            f"p99={median(p99s[mode]):.2f} ms"
        )


if __name__ == "__main__":
    main()
