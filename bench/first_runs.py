"""The first runs of a launcher: how long they wait for the inline executor's helper processes.

The launcher starts the inline executor's spawner processes and guardian as it starts
(`Executor.prepare`); before, they started at the first run that needed them (15-20 ms to come
up, 5-8 ms of it on the launcher's loop). Two cases, each with the step (`prepare=on`) and
without it (`off`: the launcher's `_prepare_executors` replaced by a no-op, the old behaviour),
in alternate turns, on a scratch PostgreSQL database, the launcher in this process on `serve`'s
default event loop, read through its hook:

  backlog   `--backlog` runs of `noop` (`true`) are queued before the launcher starts (a launcher
            restarted under load); 128 in flight. Prints, after the first claim, when the first
            run had started, when the last had, and when every one had finished (ms).
  busy      the launcher starts with nothing queued and goes idle; a run of `sleep 0.2` is
            accepted (an idle launcher spawns it on its own loop), then once it has started a
            `noop` run: the first run that goes to a spawner. Prints claimed -> started of that
            second run (ms).

Medians of the rounds.

    .venv/bin/python bench/first_runs.py --repeat 6
    .venv/bin/python bench/first_runs.py --quick     # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import structlog
from _common import CATALOG, median, scratch_database

from runlane.catalog import Catalog, load_catalog
from runlane.core.runs import Trigger
from runlane.ports import Store
from runlane.service.accept import RunRequest, accept_run
from runlane.service.config import Settings
from runlane.service.launcher import Launcher
from runlane.service.runtime import event_loop_factory
from runlane.service.wiring import build_executors, store_from_url

# A job that stays live while the next run is started beside it.
BUSY_CATALOG = CATALOG + "  slow:\n    command: [sleep, '0.2']\n"
PREPARE = Launcher._prepare_executors


def launcher_for(
    url: str, work: Path, concurrency: int, hook: Callable[[str, str], None]
) -> tuple[Catalog, Store, Launcher]:
    catalog = load_catalog(work / "catalog.yaml")
    settings = Settings(
        database_url=url,
        catalog_path=str(work / "catalog.yaml"),
        log_dir=str(work / "logs"),
        concurrency=concurrency,
        claim_interval=10.0,  # runs start from the wake-up, not the poll
    )
    store = store_from_url(url)
    launcher = Launcher(
        store=store,
        catalog=catalog,
        executors=build_executors(settings),
        settings=settings,
        hook=hook,
    )
    return catalog, store, launcher


async def backlog(url: str, work: Path, n: int) -> tuple[float, float, float]:
    """ms after the first claim: the first run started, the last started, all finished."""
    times: dict[str, list[float]] = {"claimed": [], "started": [], "finished": []}
    done = asyncio.Event()

    def hook(event: str, run_id: str) -> None:
        if event in times:
            times[event].append(time.perf_counter())
            if event == "finished" and len(times["finished"]) == n:
                done.set()

    catalog, store, launcher = launcher_for(url, work, 128, hook)
    await store.open()
    await store.upgrade()
    try:
        for _ in range(n):
            await accept_run(store, catalog, RunRequest(job="noop", trigger=Trigger.CLI))
        task = asyncio.create_task(launcher.run())
        await asyncio.wait_for(done.wait(), 60)
        launcher.stop()
        await task
    finally:
        await store.close()
    first = times["claimed"][0]
    return (
        (times["started"][0] - first) * 1000,
        (times["started"][-1] - first) * 1000,
        (times["finished"][-1] - first) * 1000,
    )


async def busy(url: str, work: Path) -> float:
    """ms from the claim of the first run that goes to a spawner to its process started."""
    claimed: dict[str, float] = {}
    started: dict[str, float] = {}
    events: asyncio.Queue[str] = asyncio.Queue()

    def hook(event: str, run_id: str) -> None:
        if event == "claimed":
            claimed[run_id] = time.perf_counter()
        elif event == "started":
            started[run_id] = time.perf_counter()
            events.put_nowait(run_id)

    catalog, store, launcher = launcher_for(url, work, 16, hook)
    await store.open()
    await store.upgrade()
    try:
        task = asyncio.create_task(launcher.run())
        await asyncio.sleep(0.5)  # idle
        first = await accept_run(store, catalog, RunRequest(job="slow", trigger=Trigger.CLI))
        while await asyncio.wait_for(events.get(), 30) != first.run.id:
            pass
        second = await accept_run(store, catalog, RunRequest(job="noop", trigger=Trigger.CLI))
        while await asyncio.wait_for(events.get(), 30) != second.run.id:
            pass
        launcher.stop()
        await task
    finally:
        await store.close()
    return (started[second.run.id] - claimed[second.run.id]) * 1000


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--repeat", type=int, default=6)
    ap.add_argument("--backlog", type=int, default=64)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.repeat, args.backlog = 1, 8
    results: dict[str, dict[str, list[float]]] = {
        mode: {"first": [], "last": [], "finished": [], "busy": []} for mode in ("on", "off")
    }
    for i in range(args.repeat):
        for mode in ("on", "off") if i % 2 == 0 else ("off", "on"):
            Launcher._prepare_executors = PREPARE if mode == "on" else lambda self: None  # type: ignore[method-assign]
            got = results[mode]
            for case in ("backlog", "busy"):
                with tempfile.TemporaryDirectory() as tmp:
                    work = Path(tmp)
                    (work / "catalog.yaml").write_text(BUSY_CATALOG)
                    with (
                        scratch_database("postgres", work) as url,
                        asyncio.Runner(loop_factory=event_loop_factory("auto")) as runner,
                    ):
                        if case == "backlog":
                            first, last, finished = runner.run(backlog(url, work, args.backlog))
                            got["first"].append(first)
                            got["last"].append(last)
                            got["finished"].append(finished)
                        else:
                            got["busy"].append(runner.run(busy(url, work)))
            print(
                f"[prepare={mode} #{i + 1}] backlog of {args.backlog}: first started "
                f"{got['first'][-1]:.1f} ms, last {got['last'][-1]:.1f} ms, all finished "
                f"{got['finished'][-1]:.1f} ms after the first claim; busy: the first spawner "
                f"run claimed -> started {got['busy'][-1]:.2f} ms",
                flush=True,
            )
    Launcher._prepare_executors = PREPARE  # type: ignore[method-assign]
    for mode, got in results.items():
        print(
            f"[prepare={mode} median of {args.repeat}] backlog of {args.backlog}: first started "
            f"{median(got['first']):.1f} ms, last {median(got['last']):.1f} ms, all finished "
            f"{median(got['finished']):.1f} ms; busy: claimed -> started "
            f"{median(got['busy']):.2f} ms"
        )


if __name__ == "__main__":
    main()
