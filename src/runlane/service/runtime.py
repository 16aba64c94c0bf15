"""The context every operation runs in: an open store, the catalog (loaded on first use) and the
settings, and how to open them. `serve` runs the launcher on it.

Faces (CLI, API, MCP) call `runlane.service.operations` with a `Runtime`; none of them talks SQL
or picks an adapter (`service.wiring` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import structlog

from runlane.core.runs import AcceptResult, Run, RunStatus
from runlane.errors import BusTopologyMismatch, BusUnavailable, ConfigError, DatabaseUnavailable
from runlane.ports import BrokerBus, Bus, QueueDepths, Store
from runlane.service.accept import RunRequest, accept_run, prepare_run
from runlane.service.config import Settings
from runlane.service.wiring import (
    available_executors,
    build_bus,
    build_executors,
    refuse_pods,
    store_from_url,
)

if TYPE_CHECKING:
    from runlane.catalog import Catalog
    from runlane.service.launcher import Launcher, LauncherHook
    from runlane.service.metrics import LauncherMetrics

GC_YOUNG_THRESHOLD = 20_000  # see _serve

log = structlog.get_logger("runlane.runtime")


def event_loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop RUNLANE_EVENT_LOOP names, as a factory for `asyncio.Runner`; None for
    asyncio's own. `auto`: uvloop where it is installed. uvloop runs asyncio's callbacks, timers
    and I/O readiness in C: the launcher spends 0.01-0.02 ms less CPU a run on it (4-8% of its
    own), measured in docs/performance.md ("Nineteenth session")."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError as exc:
        if choice == "uvloop":
            raise ConfigError(
                "RUNLANE_EVENT_LOOP='uvloop': uvloop is not installed here "
                f"({exc}); install it, or set RUNLANE_EVENT_LOOP=asyncio"
            ) from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def _load_catalog(path: str) -> Catalog:
    # Imported here: the models cost ~0.2 s, which commands without a catalog should not pay.
    from runlane.catalog.loader import load_catalog

    return load_catalog(path)


@dataclass
class Runtime:
    """The context every operation runs in: the open store, the catalog (loaded on first use
    when not given) and the settings. `accept` is the one accept path, with the executors this
    host can use."""

    settings: Settings
    store: Store
    catalog: Catalog | None

    def require_catalog(self) -> Catalog:
        if self.catalog is None:
            self.catalog = _load_catalog(self.settings.catalog_path)
        return self.catalog

    async def accept(self, request: RunRequest) -> AcceptResult:
        refuse_pods(self.require_catalog(), request.job)
        return await accept_run(
            self.store,
            self.require_catalog(),
            request,
            available_executors=available_executors(),
            pod_fallback=self.settings.pod_fallback,
        )

    def check_accept(self, request: RunRequest) -> None:
        """Raise what `accept` would refuse `request` with, writing nothing."""
        refuse_pods(self.require_catalog(), request.job)
        prepare_run(
            self.require_catalog(),
            request,
            available_executors=available_executors(),
            pod_fallback=self.settings.pod_fallback,
        )

    async def find_log(self, run: Run) -> Path:
        """Where `run`'s log file is, for `runlane logs` and `run --wait`: where this process's
        RUNLANE_LOG_DIR puts it (relative to the current directory, as the default is) when a
        file is there, which costs one look; else, for an inline run that has been claimed, in
        the log directory its launcher's heartbeat reports (`launcher_log_dirs`): a launcher
        started in another directory writes under its own. The local path when neither has it
        (the caller shows the saved tail, or says there is no output)."""
        name = f"{run.id}.{run.attempt}.log"
        local = Path(self.settings.log_dir) / name
        # A queued run is not writing a log: waiting for its start looks up no heartbeats.
        if local.is_file() or run.executor != "inline" or run.status is RunStatus.QUEUED:
            return local
        for directory in await self.launcher_log_dirs(run):
            found = Path(directory) / name
            if found.is_file():
                return found
        return local

    async def launcher_log_dirs(self, run: Run) -> list[str]:
        """The log directories (from heartbeats) where `run`'s inline log may be: that of the
        launcher that claimed it (its lease owner, kept after the run ends) when its heartbeat
        is there and on this host; else those of the live launchers on this host. A directory
        on another host names another machine's files; a stopped launcher has no heartbeat."""
        # Imported here: with it come the catalog models (~85 ms), which a file found here
        # does not need.
        from runlane.service.catalog_stamp import live_launchers, on_this_host

        launchers = await self.store.launchers()
        owner = next((h for h in launchers if h.launcher_id == run.lease_owner), None)
        if owner is not None and on_this_host(owner):
            candidates = [owner]
        else:
            live = live_launchers(
                launchers, await self.store.now(), self.settings.launcher_stale_after
            )
            candidates = [h for h in live if on_this_host(h)]
        return [h.log_dir for h in candidates if h.log_dir is not None]


@contextlib.asynccontextmanager
async def open_runtime(
    settings: Settings,
    *,
    catalog: bool = True,
    check_schema: bool = True,
    application_name: str = "runlane",
    create: bool = False,
    bounded: bool = False,
) -> AsyncIterator[Runtime]:
    """The store (opened) and the catalog. `create=True` only for what sets a database up
    (`runlane db upgrade`, the demo): otherwise a SQLite file that is not there is an error
    ("no database at PATH"), not a new empty database. `bounded=True` (the launcher): every
    database call is bounded by `settings.db_timeout`."""
    store = store_from_url(
        settings.database_url,
        application_name=application_name,
        create=create,
        db_timeout=settings.db_timeout if bounded else None,
        outbox=settings.bus == "rabbitmq",
    )
    cat = _load_catalog(settings.catalog_path) if catalog else None
    await store.open()
    try:
        if check_schema:
            await store.ensure_current()
        yield Runtime(settings=settings, store=store, catalog=cat)
    finally:
        await store.close()


async def probe_writable(store: Store) -> None:
    """Refuse to start a launcher on a database it cannot write (a read-only SQLite file, a
    read-only PostgreSQL transaction or standby): it would fail every claim forever. A database
    that is unreachable right now is not refused here: the launcher rides out outages."""
    try:
        await store.check_writable()
    except DatabaseUnavailable as exc:
        log.warning("launcher.database_unavailable", error=str(exc))


async def open_bus(bus: Bus) -> None:
    """Connect a broker bus at start and declare its topology. Neither a broker that is down
    nor one whose topology differs stops the launcher (runs start from the database; the relay
    keeps the outbox): it is logged once here, in one line, and tried again in the loops."""
    if bus.name != "rabbitmq":
        return
    try:
        await cast("BrokerBus", bus).open()
    except BusTopologyMismatch as exc:
        log.error("launcher.bus_topology_mismatch", error=exc.message)
    except BusUnavailable as exc:
        log.warning("launcher.bus_unavailable", error=exc.message)


def queue_depths_of(bus: Bus) -> Callable[[], Awaitable[QueueDepths | None]] | None:
    """What the heartbeat records of the broker: the ready messages of job_runs and
    job_runs.dlq on the RabbitMQ bus (None while the broker is down); nothing on the database
    bus, which has no queues of its own."""
    if bus.name != "rabbitmq":
        return None
    return cast("BrokerBus", bus).depths


def dlq_depth_of(bus: Bus) -> Callable[[], Awaitable[int | None]] | None:
    """What the alert rule on the dead-letter depth reads: `job_runs.dlq`'s ready messages on
    the RabbitMQ bus (None while the broker is down: the rule keeps its state); nothing on the
    database bus, which has no dead-letter queue."""
    read = queue_depths_of(bus)
    if read is None:
        return None

    async def depth() -> int | None:
        depths = await read()
        return None if depths is None else depths.job_runs_dlq

    return depth


async def serve(
    settings: Settings,
    *,
    hook: LauncherHook | None = None,
    stop: asyncio.Event | None = None,
    install_signals: bool = True,
    freeze_gc: bool = False,
    metrics: LauncherMetrics | None = None,
) -> None:
    """`runlane serve`: run the launcher until SIGTERM/SIGINT (or `stop` is set).

    `freeze_gc` (the `runlane serve` process): once started, everything allocated so far (the
    imported modules, the catalog, the connections: ~68,000 objects) is moved out of the cyclic
    garbage collector's sight, so its collections under load look only at what runs allocate
    (bench/throughput.py: ~11 of 33 ms of collections per 2,000 runs saved), and collects its
    young generation less often while it runs (`GC_YOUNG_THRESHOLD`). `metrics`: the
    counters the launcher keeps, for the exporter that serves them (its own otherwise).

    The signals are taken from the first moment (before the database and the broker are
    opened, which can take a connect timeout each) until the bus is closed: a SIGTERM during
    start-up stops the launcher cleanly before it claims anything, and one during shutdown
    hurries it, instead of killing the process with the signal's default action."""
    loop = asyncio.get_running_loop()
    asked = asyncio.Event()  # a signal came; the launcher is told as soon as it exists
    started: list[Launcher] = []

    def on_signal() -> None:
        asked.set()
        for launcher in started:
            launcher.stop()

    if install_signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
    try:
        await _serve(settings, hook, stop, freeze_gc, metrics, asked, started)
    finally:
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)


async def _serve(
    settings: Settings,
    hook: LauncherHook | None,
    stop: asyncio.Event | None,
    freeze_gc: bool,
    metrics: LauncherMetrics | None,
    asked: asyncio.Event,
    started: list[Launcher],
) -> None:
    async with open_runtime(
        settings, application_name=f"runlane-launcher:{settings.launcher_id}", bounded=True
    ) as rt:
        if asked.is_set():
            log.info("launcher.stopped_before_start", launcher=settings.launcher_id)
            return
        await probe_writable(rt.store)
        from runlane.service.launcher import Launcher  # only `serve` needs it (~45 ms to import)
        from runlane.service.metrics import LauncherMetrics

        catalog = rt.require_catalog()
        bus = build_bus(rt.store, settings, catalog)
        await open_bus(bus)
        launcher = Launcher(
            store=rt.store,
            bus=bus,
            catalog=catalog,
            executors=build_executors(settings, start_timeout=catalog.global_.start_timeout),
            settings=settings,
            hook=hook,
            executor_caps={"pod": catalog.global_.max_concurrent_pods},
            retry_base_seconds=settings.retry_base,
            metrics=LauncherMetrics() if metrics is None else metrics,
            dlq_depth=dlq_depth_of(bus),
            queue_depths=queue_depths_of(bus),
        )
        started.append(launcher)
        if asked.is_set():  # a signal while the broker was opened: nothing was claimed yet
            await bus.close()
            log.info("launcher.stopped_before_start", launcher=settings.launcher_id)
            return
        watcher = None
        if stop is not None:

            async def _watch() -> None:
                await stop.wait()
                launcher.stop()

            watcher = asyncio.create_task(_watch())
        thresholds = gc.get_threshold()
        if freeze_gc:
            gc.collect()
            gc.freeze()
            # A young generation of 20,000 objects, not 700: a run's supervision allocates a few
            # hundred that mostly die within it, and at 700 the collector ran ~27 times per
            # 1,000 runs (6.5 us of CPU a run at 64 in flight, gc.callbacks); at 20,000 it did
            # not run in 6,000 runs. Memory held by garbage cycles waits at most that long.
            gc.set_threshold(GC_YOUNG_THRESHOLD, *thresholds[1:])
        try:
            await launcher.run()
        finally:
            gc.set_threshold(*thresholds)
            if watcher is not None:
                watcher.cancel()
            await bus.close()
