"""Status and doctor: the launchers (and whether each runs the catalog file as it is now), queue
depth, runs stuck, and every check `runlane doctor` makes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from runlane.ports import Heartbeat
from runlane.service.operations.notices import Notice
from runlane.service.runtime import Runtime

if TYPE_CHECKING:
    from runlane.catalog import Catalog
    from runlane.service.alerts.health import AlertHealth
    from runlane.service.doctor import Finding, Stuck

# `runlane.service.doctor` and `catalog_stamp` bring the catalog models (~0.2 s): imported by
# the operations that use them.


@dataclass(frozen=True, slots=True)
class LauncherState:
    """A launcher's heartbeat as seen now. A stale launcher's last counts are history, not the
    present: `queue_depth` and `running` are None for it. `catalog_current`: True when it runs
    the catalog file as it is now, False when the file changed since it loaded it, None when
    that cannot be told (the file does not load, or no digest reported)."""

    heartbeat: Heartbeat
    last_seen_seconds: float | None
    stale: bool
    queue_depth: int | None
    running: Mapping[str, int] | None
    catalog_current: bool | None
    bus_queue_depth: int | None = None  # the broker's job_runs, as this launcher last read it
    bus_dlq_depth: int | None = None  # and job_runs.dlq


@dataclass(frozen=True, slots=True)
class BusQueues:
    """The broker's run-command queues as the freshest live launcher last recorded them (its
    heartbeat reads them: `runlane status` never talks to the broker itself)."""

    job_runs: int
    job_runs_dlq: int
    launcher_id: str
    seen_seconds: float | None


@dataclass(frozen=True, slots=True)
class StatusReport:
    """`runlane status`. `warnings`: a `launcher_catalog_changed` warning per live launcher on
    an older catalog, then a `catalog_unreadable` note when the file could not be compared."""

    now: datetime
    queued: int
    running: int
    stuck: tuple[Stuck, ...]
    catalog_path: str
    catalog_digest: str | None
    catalog_error: str | None
    launchers: tuple[LauncherState, ...]
    warnings: tuple[Notice, ...]
    alerts: AlertHealth | None = None  # open incidents, targets failing (service/alerts)
    bus_queues: BusQueues | None = None  # None on the database bus, or no live launcher read them


@dataclass(frozen=True, slots=True)
class DoctorReport:
    findings: tuple[Finding, ...]

    @property
    def healthy(self) -> bool:
        """No check found an error (`runlane doctor` exits 1 otherwise)."""
        return not any(f.level == "error" for f in self.findings)


def catalog_file_digest(path: str) -> tuple[str | None, str | None]:
    """The digest of the catalog file as it is now, or None and the one line saying why it
    cannot be read (status reports the launchers all the same)."""
    from runlane.catalog import load_catalog
    from runlane.errors import CatalogError
    from runlane.service.catalog_stamp import catalog_digest

    try:
        return catalog_digest(load_catalog(path)), None
    except CatalogError as exc:
        return None, exc.message


async def status(rt: Runtime) -> StatusReport:
    """The launchers, the queue, the runs stuck (the catalog file is read, not required)."""
    from runlane.service.catalog_stamp import catalog_state, changed_message, stale_bound
    from runlane.service.doctor import stuck_runs

    settings = rt.settings
    file_digest, file_error = catalog_file_digest(settings.catalog_path)
    launchers = await rt.store.launchers()
    now = await rt.store.now()
    queued = await rt.store.count_queued()
    # Live from the run log, by launcher: a heartbeat's counts are as old as its beat.
    running = await rt.store.running_by_launcher()
    stuck = await stuck_runs(rt.store)
    from runlane.service.alerts.health import alert_health

    states: list[LauncherState] = []
    warnings: list[Notice] = []
    for h in launchers:
        seen = None if h.beat_at is None else max(0.0, (now - h.beat_at).total_seconds())
        stale = seen is None or seen > stale_bound(h, settings.launcher_stale_after)
        state = catalog_state(h, file_digest)
        if state == "changed" and not stale:
            warnings.append(
                Notice("launcher_catalog_changed", changed_message(h, settings.catalog_path))
            )
        states.append(
            LauncherState(
                heartbeat=h,
                last_seen_seconds=None if seen is None else round(seen, 3),
                stale=stale,
                queue_depth=None if stale else h.queue_depth,
                running=None if stale else running.get(h.launcher_id, {}),
                catalog_current=None if state == "unknown" else state == "current",
                bus_queue_depth=None if stale else h.bus_queue_depth,
                bus_dlq_depth=None if stale else h.bus_dlq_depth,
            )
        )
    if file_error is not None and any(h.catalog_digest for h in launchers):
        warnings.append(
            Notice(
                "catalog_unreadable",
                f"{file_error}: the launchers' catalogs are not compared with it",
                "note",
            )
        )
    return StatusReport(
        now=now,
        queued=queued,
        running=sum(sum(by_executor.values()) for by_executor in running.values()),
        stuck=tuple(stuck),
        catalog_path=settings.catalog_path,
        catalog_digest=file_digest,
        catalog_error=file_error,
        launchers=tuple(states),
        warnings=tuple(warnings),
        alerts=await alert_health(rt.store, _catalog_of(rt)),
        bus_queues=freshest_bus_queues(states),
    )


def freshest_bus_queues(states: Sequence[LauncherState]) -> BusQueues | None:
    """The queue depths of the live launcher that beat last and read them (None: none did)."""
    best: LauncherState | None = None
    for state in states:
        if state.bus_queue_depth is None or state.bus_dlq_depth is None:
            continue
        if best is None or (state.last_seen_seconds or 0.0) < (best.last_seen_seconds or 0.0):
            best = state
    if best is None or best.bus_queue_depth is None or best.bus_dlq_depth is None:
        return None
    return BusQueues(
        job_runs=best.bus_queue_depth,
        job_runs_dlq=best.bus_dlq_depth,
        launcher_id=best.heartbeat.launcher_id,
        seen_seconds=best.last_seen_seconds,
    )


def _catalog_of(rt: Runtime) -> Catalog | None:
    from runlane.errors import CatalogError

    try:
        return rt.require_catalog()
    except CatalogError:
        return None


async def list_launchers(rt: Runtime) -> tuple[LauncherState, ...]:
    """Every launcher that has reported, live or stale (as `status` shows them)."""
    return (await status(rt)).launchers


async def doctor(rt: Runtime) -> DoctorReport:
    """Every check of `runlane doctor`, in a stable order; reads only, changes nothing."""
    from runlane.service.doctor import diagnose

    findings = await diagnose(rt.settings, rt.store)
    return DoctorReport(tuple(findings))
