"""The Prometheus exporter: what a launcher counts as things happen, and the gauges read from
the run log at scrape time (docs/monitoring.md lists every metric).

`LauncherMetrics` is a launcher's own counters and histograms, kept in memory and updated by
its loops where things happen (a run started, ended, a lease lost, an executor error): a scrape
reads them, never the run log's history. `Exporter` is one launcher's (or one `runlane web`'s)
exporter: its own `CollectorRegistry` (never the library's global one, so two exporters in one
process, as in the tests, never share a series), the launcher's counters when there is a
launcher, and a few gauges read through indexed, bounded queries (the queue depth through the
partial index of the queued runs, the running count through that of the running runs, the
outbox's oldest unpublished row, the heartbeat table), cached for `GAUGE_CACHE_SECONDS` so that
scrapes in quick succession cost one set of queries.

Labels are the run log's column names (`job`, `trigger`, `executor`, `status`); no label takes
a value per run (no run id), and a job name not in the catalog (an SDK child scope's) is counted
as `OTHER_JOB`, so the series are bounded by the catalog.
"""

from __future__ import annotations

import asyncio
import platform
import time
from bisect import bisect_left
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from runlane import __version__
from runlane.core.runs import Run, RunStatus, Trigger
from runlane.errors import StoreError

if TYPE_CHECKING:
    from runlane.catalog import Catalog
    from runlane.ports import Store

# Run durations: a second to a day (a job's deadline is capped by `max_deadline`).
DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0,
                    14400.0, 43200.0, 86400.0)  # fmt: skip
# Pickup latency (due → claimed) and schedule lag (slot → claimed): milliseconds to an hour.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                   300.0, 900.0, 3600.0)  # fmt: skip
# A claim's round trip (the launcher's claim of queued runs): a millisecond to the database
# bound's statement timeout (5 s by default).
CLAIM_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
GAUGE_CACHE_SECONDS = 2.0
# The statuses a run's own execution ends in: their series exist at zero from the start, so a
# failure ratio or an `increase` is 0, not "no data"; `skipped` and `cancelled` show once one
# happens (a series each for every job and trigger would be most of a large catalog's scrape).
PRIMED_STATUSES = (RunStatus.SUCCESS.value, RunStatus.FAILURE.value, RunStatus.TIMEOUT.value)
PERSON_TRIGGERS = (Trigger.MANUAL.value, Trigger.CLI.value, Trigger.MCP.value)
# The `job` label of a run whose job is not in the catalog the launcher primed on: an SDK child
# scope's row (its name is whatever the job's code passed to `run_scope()`, one per item, say),
# or a job since removed. One value for them all keeps the series bounded by the catalog; no
# catalog job can be named so (names start with a letter or digit).
OTHER_JOB = "_other"


class Histogram:
    """A labelled histogram kept as plain counts: `observe` is a bisect and two additions (the
    launcher observes on its busy thread); cumulative buckets are worked out at scrape time."""

    __slots__ = ("_series", "buckets")

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        # labels → [count per bucket (the last: +Inf), sum]
        self._series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def prime(self, labels: tuple[str, ...]) -> None:
        """Make the series exist (at zero) before anything is observed."""
        if labels not in self._series:
            self._series[labels] = ([0] * (len(self.buckets) + 1), [0.0])

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        series = self._series.get(labels)
        if series is None:
            self.prime(labels)
            series = self._series[labels]
        series[0][bisect_left(self.buckets, value)] += 1
        series[1][0] += value

    def family(self, name: str, doc: str, labelnames: list[str]) -> HistogramMetricFamily:
        family = HistogramMetricFamily(name, doc, labels=labelnames)
        bounds = [*(_bound(b) for b in self.buckets), "+Inf"]
        for labels, (counts, total) in sorted(self._series.items()):
            cumulative, running = [], 0
            for bound, n in zip(bounds, counts, strict=True):
                running += n
                cumulative.append((bound, float(running)))
            family.add_metric(list(labels), cumulative, total[0])
        return family


def _bound(value: float) -> str:
    return f"{value:g}" if value < 1e6 else repr(value)


class AlertCounters(Protocol):
    """What the launcher's alert loop counts (service/alerts `AlertStats`), read at scrape
    time: plain values by target and by rule, every target and rule present from the start."""

    def notifications_sent(self) -> Mapping[str, int]: ...
    def notifications_failed(self) -> Mapping[str, int]: ...
    def open_incidents_by_rule(self) -> Mapping[str, int]: ...


class LauncherMetrics:
    """One launcher's counters and histograms, updated by its loops as things happen.

    `prime` (called when the launcher starts) makes the series of every catalog job exist at
    zero: a job that never ran shows 0, not nothing, so a rate or an `increase` over it works
    and an alert on it can tell "none" from "unknown"."""

    def __init__(self) -> None:
        self.started: dict[tuple[str, str, str], int] = {}  # (job, trigger, executor)
        self.finished: dict[tuple[str, str, str, str], int] = {}  # (…, status)
        self.lease_losses: dict[tuple[str, str], int] = {}  # (job, executor)
        self.executor_errors: dict[tuple[str, str], int] = {}  # (executor, code)
        self.loop_failures: dict[tuple[str], int] = {}  # (loop,)
        self.duration = Histogram(DURATION_BUCKETS)  # (job, executor, status)
        self.pickup = Histogram(LATENCY_BUCKETS)  # (executor,)
        self.schedule_lag = Histogram(LATENCY_BUCKETS)  # (job,)
        self.claims = Histogram(CLAIM_BUCKETS)  # ()
        # The launcher's alert loop's counters, when it has one (set by the launcher).
        self.alerts: AlertCounters | None = None
        self.launcher_id: str | None = None
        self.executors: tuple[str, ...] = ("inline",)
        self.jobs: frozenset[str] | None = None  # the catalog's (None: not primed, any name)

    def prime(self, catalog: Catalog, executors: Collection[str], launcher_id: str) -> None:
        """Series at zero for every job of `catalog`, with each trigger that can start it and
        the executor its runs use here (`inline` for a pod job on a host without a cluster)."""
        self.launcher_id = launcher_id
        self.executors = tuple(executors)
        self.jobs = frozenset(catalog.job_names())
        scheduled_chain_jobs: set[str] = set()
        chain_jobs: set[str] = set()
        for chain in catalog.chains.values():
            jobs = {chain.step_job(step) for step in chain.steps}
            chain_jobs |= jobs
            if chain.schedule is not None:
                scheduled_chain_jobs |= jobs
        for name in catalog.job_names():
            job = catalog.resolve(name)
            executor: str = job.executor if job.executor in executors else "inline"
            triggers = list(PERSON_TRIGGERS)
            if job.schedules or name in scheduled_chain_jobs:
                # (Its schedule lag histogram shows from the first scheduled claim: 18 series
                # a job at zero would be most of a scrape of a large catalog.)
                triggers.append(Trigger.SCHEDULE.value)
            if name in chain_jobs:
                triggers.append(Trigger.CHAIN.value)
            if job.on_event:
                triggers.append(Trigger.EVENT.value)
            if job.max_attempts > 1:
                triggers.append(Trigger.RETRY.value)
            for trigger in triggers:
                self.started.setdefault((name, trigger, executor), 0)
                for status in PRIMED_STATUSES:
                    self.finished.setdefault((name, trigger, executor, status), 0)
            self.lease_losses.setdefault((name, executor), 0)
        for executor in executors:
            self.pickup.prime((executor,))
        self.claims.prime(())

    def _job(self, run: Run) -> str:
        """`run`'s `job` label: its job, or `OTHER_JOB` for a name not in the catalog."""
        return run.job if self.jobs is None or run.job in self.jobs else OTHER_JOB

    # ------------------------------------------------------------------ the launcher's hooks

    def claim_took(self, seconds: float) -> None:
        """One claim of queued runs (whatever it found): its round trip to the database."""
        self.claims.observe((), seconds)

    def run_claimed(self, run: Run, db_now: datetime) -> None:
        """A run was claimed (not taken over): how long it waited once due, and for a
        scheduled run how late its slot started."""
        due = run.queued_at if run.not_before is None else max(run.queued_at, run.not_before)
        self.pickup.observe((run.executor,), max(0.0, (db_now - due).total_seconds()))
        if run.scheduled_for is not None and run.trigger == "schedule":
            lag = max(0.0, (db_now - run.scheduled_for).total_seconds())
            self.schedule_lag.observe((self._job(run),), lag)

    def run_started(self, run: Run) -> None:
        """A run's execution started (a reattach is not a start)."""
        key = (self._job(run), run.trigger, run.executor)
        self.started[key] = self.started.get(key, 0) + 1

    def run_finished(self, run: Run, status: str, duration: float | None = None) -> None:
        """This launcher ended `run` as `status` (its outcome saved, its queue TTL expired, an
        orphan swept, a slot recorded skipped); `duration`: its execution's, when it ran."""
        job = self._job(run)
        key = (job, run.trigger, run.executor, status)
        self.finished[key] = self.finished.get(key, 0) + 1
        if duration is not None:
            self.duration.observe((job, run.executor, status), max(0.0, duration))

    def lease_lost(self, run: Run) -> None:
        key = (self._job(run), run.executor)
        self.lease_losses[key] = self.lease_losses.get(key, 0) + 1

    def executor_error(self, executor: str, code: str) -> None:
        """An executor call failed (temporary or permanent), by its error code."""
        key = (executor, code)
        self.executor_errors[key] = self.executor_errors.get(key, 0) + 1

    def loop_failed(self, loop: str) -> None:
        """One of the launcher's background loops raised what it does not handle (it is
        started again)."""
        key = (loop,)
        self.loop_failures[key] = self.loop_failures.get(key, 0) + 1

    # ------------------------------------------------------------------ the families

    def families(self) -> Iterator[Metric]:
        yield _counter(
            "runlane_runs_started",
            "Runs whose execution this launcher started.",
            ["job", "trigger", "executor"],
            self.started.items(),
        )
        yield _counter(
            "runlane_runs_finished",
            "Runs this launcher ended, by final status.",
            ["job", "trigger", "executor", "status"],
            self.finished.items(),
        )
        yield self.duration.family(
            "runlane_run_duration_seconds",
            "Execution time of the runs this launcher ended (start to end).",
            ["job", "executor", "status"],
        )
        yield self.pickup.family(
            "runlane_run_pickup_latency_seconds",
            "From a run being due (queued, or its retry backoff over) to its claim.",
            ["executor"],
        )
        yield self.schedule_lag.family(
            "runlane_schedule_lag_seconds",
            "From a scheduled run's slot to its claim.",
            ["job"],
        )
        yield self.claims.family(
            "runlane_claim_duration_seconds",
            "This launcher's claims of queued runs: each one's round trip to the database.",
            [],
        )
        yield _counter(
            "runlane_lease_losses",
            "Runs this launcher lost to another launcher (its lease expired and was taken).",
            ["job", "executor"],
            self.lease_losses.items(),
        )
        yield _counter(
            "runlane_executor_errors",
            "Executor calls that failed (start, reattach), by error code.",
            ["executor", "code"],
            self.executor_errors.items(),
        )
        yield _counter(
            "runlane_launcher_loop_failures",
            "Failures of this launcher's background loops that they do not handle (a bug): "
            "each is logged as launcher.loop_failed and the loop started again.",
            ["loop"],
            self.loop_failures.items(),
        )
        alerts = self.alerts
        yield _counter(
            "runlane_notifications_sent",
            "Alert notifications sent, by target.",
            ["target"],
            [((t,), n) for t, n in (alerts.notifications_sent() if alerts else {}).items()],
        )
        yield _counter(
            "runlane_notifications_failed",
            "Alert notification sends that failed, by target.",
            ["target"],
            [((t,), n) for t, n in (alerts.notifications_failed() if alerts else {}).items()],
        )
        incidents = GaugeMetricFamily(
            "runlane_open_incidents",
            "Alert incidents open, by rule (as of the alert loop's last evaluation).",
            labels=["rule"],
        )
        for rule, n in sorted((alerts.open_incidents_by_rule() if alerts else {}).items()):
            incidents.add_metric([rule], float(n))
        yield incidents


def _counter(
    name: str, doc: str, labelnames: list[str], values: Iterable[tuple[tuple[str, ...], int]]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=labelnames)
    for labels, n in sorted(values):
        family.add_metric(list(labels), float(n))
    return family


@dataclass(frozen=True, slots=True)
class RunLogGauges:
    """What a scrape reads from the database: indexed, bounded queries only."""

    queued: Mapping[str, int]
    running: Mapping[str, int]
    outbox_oldest_seconds: float
    heartbeat_ages: Mapping[str, float]


async def read_gauges(store: Store) -> RunLogGauges:
    """The run log's gauges now (database time)."""
    now = await store.now()
    queued = await store.queued_by_executor()
    running: dict[str, int] = {}
    for by_executor in (await store.running_by_launcher()).values():
        for executor, n in by_executor.items():
            running[executor] = running.get(executor, 0) + n
    oldest = await store.outbox_oldest_pending()
    ages: dict[str, float] = {}
    for beat in await store.launchers():
        seen = beat.beat_at or beat.started_at
        ages[beat.launcher_id] = max(0.0, (now - seen).total_seconds())
    return RunLogGauges(
        queued=queued,
        running=running,
        outbox_oldest_seconds=0.0 if oldest is None else max(0.0, (now - oldest).total_seconds()),
        heartbeat_ages=ages,
    )


class Exporter:
    """One exporter: its own registry, over the launcher's counters (`launcher`, None for
    `runlane web`: it has no launcher, so it serves only what the database says) and the run
    log's gauges. `scrape` is the Prometheus text."""

    def __init__(
        self,
        store: Store,
        launcher: LauncherMetrics | None = None,
        *,
        cache_seconds: float = GAUGE_CACHE_SECONDS,
    ) -> None:
        self._store = store
        self.launcher = launcher
        # Executors whose gauges show even at zero: the launcher's; `inline` without one.
        self._executors = ("inline",) if launcher is None else launcher.executors
        self._cache_seconds = cache_seconds
        self._gauges: RunLogGauges | None = None
        self._read_at = -1e9
        self._database_up = False
        self._lock = asyncio.Lock()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_ExporterCollector(self))

    async def refresh(self) -> None:
        """Read the gauges unless they were read less than `cache_seconds` ago. A database
        that fails keeps the last values and says so (`runlane_database_up 0`)."""
        async with self._lock:
            if time.monotonic() - self._read_at < self._cache_seconds:
                return
            try:
                self._gauges = await read_gauges(self._store)
                self._database_up = True
            except StoreError:
                self._database_up = False
            self._read_at = time.monotonic()

    async def scrape(self) -> bytes:
        """The exposition text (Prometheus text format 0.0.4)."""
        await self.refresh()
        return generate_latest(self.registry)

    def families(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "runlane_build_info",
            "The runlane version and Python serving these metrics (always 1).",
            labels=["version", "python"],
        )
        info.add_metric([__version__, platform.python_version()], 1.0)
        yield info
        up = GaugeMetricFamily(
            "runlane_database_up", "1 if the last read of the run log's gauges succeeded."
        )
        up.add_metric([], 1.0 if self._database_up else 0.0)
        yield up
        gauges = self._gauges
        queued = GaugeMetricFamily(
            "runlane_runs_queued",
            "Runs queued in the run log now, by executor.",
            labels=["executor"],
        )
        running = GaugeMetricFamily(
            "runlane_runs_running",
            "Runs running in the run log now (every launcher's), by executor.",
            labels=["executor"],
        )
        outbox = GaugeMetricFamily(
            "runlane_outbox_oldest_pending_seconds",
            "Age of the oldest outbox row not yet published (0 when none waits).",
        )
        ages = GaugeMetricFamily(
            "runlane_launcher_heartbeat_age_seconds",
            "Seconds since each launcher's last heartbeat (database time).",
            labels=["launcher"],
        )
        if gauges is not None:
            for executor in sorted({*self._executors, *gauges.queued, *gauges.running}):
                queued.add_metric([executor], float(gauges.queued.get(executor, 0)))
                running.add_metric([executor], float(gauges.running.get(executor, 0)))
            outbox.add_metric([], gauges.outbox_oldest_seconds)
            for launcher_id, age in sorted(gauges.heartbeat_ages.items()):
                ages.add_metric([launcher_id], age)
        yield from (queued, running, outbox, ages)
        if self.launcher is not None:
            yield from self.launcher.families()


class _ExporterCollector(Collector):
    def __init__(self, exporter: Exporter) -> None:
        self._exporter = exporter

    def collect(self) -> Iterable[Metric]:
        return list(self._exporter.families())


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
