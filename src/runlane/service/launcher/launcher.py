"""The launcher: claims queued runs and hands each to a supervisor task, around the finisher,
the lease keeper and the heartbeat it owns.

One asyncio process runs these loops:
- consumer: expire stale queued runs, claim due ones up to the free capacity, recover runs whose
  lease expired, end the executions someone asked to cancel, start one supervisor task per
  claimed run (supervisor.py);
- finisher: saves the outcomes in batches (finisher.py);
- lease keeper: renews the leases of every supervised run (leases.py);
- heartbeat: one `launcher_heartbeat` row, every `heartbeat_interval` (heartbeat.py);
- alerts: the alert rules, incidents and notifications (service/alerts);
- the scheduler and the chain advancer, unless `triggers` is off.

Shutdown (SIGTERM/SIGINT): stop claiming, give running inline runs `shutdown_grace`, then end
them as `failure` / `launcher_shutdown` (retried if attempts remain). Pod and Slurm executions are
never ended by a shutdown: the next launcher reattaches to them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import structlog

from runlane.catalog import Catalog
from runlane.core.runs import AcceptResult
from runlane.errors import DatabaseUnavailable, RunRefused, StoreError
from runlane.ports import BrokerBus, Bus, Executor, Store, Wakeups
from runlane.service.accept import choose_executor
from runlane.service.alerts.engine import AlertEngine, DlqDepth
from runlane.service.alerts.targets import Target, build_targets, close_targets
from runlane.service.config import Settings
from runlane.service.launcher.finisher import Finisher
from runlane.service.launcher.heartbeat import HeartbeatWriter, QueueDepthsReader
from runlane.service.launcher.journal import OutcomeJournal
from runlane.service.launcher.leases import ExternalIdWrites, LeaseKeeper, LeaseWrites
from runlane.service.launcher.signals import EXPIRED, ORPHANED, LauncherHook
from runlane.service.launcher.supervised import Supervised, loop_time, wait_until
from runlane.service.launcher.supervisor import Supervisor
from runlane.service.metrics import LauncherMetrics
from runlane.service.wiring import absolute_url

if TYPE_CHECKING:
    from runlane.service.accept import RunRequest

log = structlog.get_logger("runlane.launcher")

CLAIM_COALESCE_SECONDS = 0.01
# A background loop that raised something it does not handle starts again after this pause,
# doubled at each failure up to the maximum, and back to the first after it ran this long.
LOOP_RESTART_FIRST = 1.0
LOOP_RESTART_MAX = 30.0
LOOP_HEALTHY_AFTER = 60.0
# A provider's own end time (a pod run's Job completion time, to the second, by the cluster's
# clock) is recorded as the run's end only when it is this much older than the launcher's
# sighting: then the run ended while no launcher watched (a restart, a takeover). Closer than
# that, the launcher's own sighting is the more precise of the two.
PROVIDER_END_TRUSTED_AFTER = 5.0


@dataclass
class Launcher:
    """The launcher process's loops around one store, one catalog and its executors.

    `store`, `catalog`, `executors`, `hook` and `bus` are handed to its parts when it is built:
    set them then, not afterwards. The tunables (`retry_base_seconds`, `repair_retry_seconds`,
    `provider_end_trusted_after`) are read where they are used, so a test may change them."""

    store: Store
    catalog: Catalog
    executors: Mapping[str, Executor]
    settings: Settings
    hook: LauncherHook | None = None
    executor_caps: Mapping[str, int] = field(default_factory=dict)
    retry_base_seconds: float = 5.0
    triggers: bool = True  # run the scheduler and chain loops (service/scheduler.py, chains.py)
    trigger_interval: float = 1.0
    repair_retry_seconds: float = 300.0
    provider_end_trusted_after: float = PROVIDER_END_TRUSTED_AFTER
    # The run log's transport, for its wake-ups (`service.wiring.build_bus`); None: the store's
    # own, which is what the database bus is.
    bus: Bus | None = None
    # What the exporter reads (service/metrics.py): given by whoever serves /metrics, else its own.
    metrics: LauncherMetrics = field(default_factory=LauncherMetrics)
    # Alerts (service/alerts): the notification targets (None: built from the catalog's
    # `alerts:` section and the environment) and the dead-letter depth (None: no broker).
    alert_targets: Sequence[Target] | None = None
    dlq_depth: DlqDepth | None = None
    # The broker's queue depths, recorded by the heartbeat for `runlane status` (None: no broker).
    queue_depths: QueueDepthsReader | None = None

    def __post_init__(self) -> None:
        settings = self.settings
        self.metrics.prime(self.catalog, tuple(self.executors), settings.launcher_id)
        self._wakeups: Wakeups = self.store if self.bus is None else self.bus
        self.owner = settings.launcher_id
        self._active: dict[str, Supervised] = {}  # the runs this launcher holds a lease on
        self._wake = asyncio.Event()  # a slot is free, or runs may be due: claim now
        self._stopping = asyncio.Event()
        self._hurry = asyncio.Event()  # a second stop: end the inline runs' grace period now
        self._tasks: list[asyncio.Task[Any]] = []
        # Monotonic time each periodic look of the consumer was last taken.
        self._last_expire = self._last_orphan_check = 0.0
        self._last_cancel_poll = self._last_recover = 0.0
        self._backlog = False  # the last claim filled every free slot: more runs may be due
        self._claim_batch_min = max(1, settings.concurrency // 2)
        journal = OutcomeJournal(settings.log_dir, self.owner)
        lease_writes = LeaseWrites(self.store, settings.lease_ttl)
        self._finisher = Finisher(
            self.store,
            lease_writes,
            journal,
            self._active,
            self,
            lease_ttl=settings.lease_ttl,
        )
        self._external_ids = ExternalIdWrites(lease_writes, self._finisher.write_until_landed)
        self._leases = LeaseKeeper(
            lease_writes,
            self._active,
            self._finisher.unsaved,
            renew_interval=settings.lease_renew_interval,
            database_failed=self._finisher.database_failed,
            database_answered=self._finisher.database_answered,
        )
        self._heartbeat = HeartbeatWriter(
            self.store, self.catalog, settings, self._active, queue_depths=self.queue_depths
        )
        self._supervisor = Supervisor(
            self.store,
            self.catalog,
            self.executors,
            self._finisher,
            self._external_ids,
            journal,
            self._active,
            self._wake,
            self.hook,
            self,
            owner=self.owner,
            # A relative SQLite path made absolute, so the SDK in a run that changes directory
            # records child rows in this database, not another.
            run_database_url=absolute_url(settings.database_url),
            launcher_stale_after=settings.launcher_stale_after,
            metrics=self.metrics,
        )
        self._own_targets: list[Target] = []
        if self.alert_targets is None:
            self._own_targets, problems = build_targets(self.catalog.alerts)
            for problem in problems:
                log.error("alerts.target_unusable", target=problem.name, error=problem.problem)
        self.alerts = AlertEngine(
            self.store,
            self.catalog,
            self._own_targets if self.alert_targets is None else self.alert_targets,
            owner=self.owner,
            interval=settings.alert_interval,
            dlq_depth=self.dlq_depth,
        )
        self._finisher.alert_nudge = self.alerts.nudge
        self.metrics.alerts = self.alerts.stats  # notifications and incidents, for /metrics

    # ------------------------------------------------------------------ lifecycle

    @property
    def running_count(self) -> int:
        return len(self._active)

    def stop(self) -> None:
        """Ask the launcher to shut down gracefully (what SIGTERM/SIGINT do). Asked again
        while it shuts down, it ends the running inline runs at once instead of waiting out
        the grace period (their outcomes are still saved)."""
        if self._stopping.is_set() and not self._hurry.is_set():
            log.warning("launcher.stop_now", running=len(self._active))
            self._hurry.set()
        self._stopping.set()
        self._wake.set()

    async def beat(self) -> None:
        """Write this launcher's heartbeat row now."""
        await self._heartbeat.beat()

    async def run(self) -> None:
        """Run until `stop()`; then shut down gracefully and return."""
        log.info(
            "launcher.start",
            launcher=self.owner,
            executors=sorted(self.executors),
            concurrency=self.settings.concurrency,
            event_loop=_event_loop_name(),
            inline=getattr(self.executors.get("inline"), "spawn_mode", None),
        )
        # First: the executors' helper processes start up while the launcher's other loops and
        # its first heartbeat do.
        self._prepare_executors()
        self._tasks = [
            self._background("wakeup", self._wakeup_pump),
            self._background("finisher", self._finisher.run),
            self._background("external-ids", self._external_ids.run),
            self._background("leases", self._leases.run),
            self._background("heartbeat", self._heartbeat.run),
            self._background("alerts", partial(self.alerts.run, self._stopping)),
        ]
        if self.triggers:
            self._tasks.extend(self._start_trigger_loops())
        self._tasks.extend(self._start_bus_loops())
        try:
            # Beat first: a launcher that hands a run of a job it does not know to "a live
            # launcher that has it" must see this one before the runs below are due.
            with contextlib.suppress(StoreError):
                await self.beat()
            await self._retry_repairs_now()
            await self._consume_loop()
        finally:
            await self._shutdown()

    def _prepare_executors(self) -> None:
        """Before the first claim, start what the executors this catalog's jobs run on need
        (an inline executor's spawner processes and guardian), so the first runs do not wait for
        it. Each job counts for the executor an accept here would give its runs
        (`choose_executor`: a pod job without a cluster runs inline, unless
        RUNLANE_POD_FALLBACK=refuse); an executor no job uses starts nothing. Runs are claimed
        by the executor their row names, so a run accepted where fewer executors were configured
        (or under an older catalog) may still need one not prepared here: it starts it then, as
        before. Never raises: the launcher starts whatever an executor's `prepare` does."""
        used: set[str] = set()
        for job in self.catalog.jobs:
            try:
                name, _ = choose_executor(
                    self.catalog.resolve(job), self.executors, self.settings.pod_fallback
                )
            except RunRefused:
                continue  # no executor here takes its runs
            used.add(name)
        for name in sorted(used):
            try:
                self.executors[name].prepare()
            except Exception:  # the port says it never raises; a launcher must start anyway
                log.exception("launcher.prepare_failed", executor=name)

    async def _retry_repairs_now(self) -> None:
        """Runs a launcher kept for repair because it did not know their job (its catalog was
        older) are due at once if this launcher knows the job: the restart that applies a
        catalog change starts them, rather than their next repair look minutes later."""
        try:
            ids = await self.store.retry_repairs_now("unknown_job", self.catalog.job_names())
        except StoreError as exc:  # DatabaseUnavailable included: they are due later anyway
            log.warning("launcher.repair_retry_failed", error=str(exc))
            return
        if ids:
            log.info("launcher.repairs_due_now", runs=len(ids), error_code="unknown_job")
            self._wake.set()

    async def _accept(self, request: RunRequest) -> AcceptResult:
        """The one accept path, for what the launcher itself starts (schedules, chains, the
        bus's commands and events)."""
        from runlane.service.accept import accept_run

        result = await accept_run(
            self.store,
            self.catalog,
            request,
            available_executors=tuple(self.executors),
            pod_fallback=self.settings.pod_fallback,
        )
        if result.created and result.run.status.is_final:  # a slot or step recorded skipped
            self.metrics.run_finished(result.run, result.run.status.value)
        return result

    def _start_bus_loops(self) -> list[asyncio.Task[None]]:
        """With a broker bus (docs/bus.md): the outbox relay, the `job_runs` consumer and the
        external events' consumer. The claim loop does not need them: runs start from the
        database while the broker is down."""
        bus = self.bus
        if bus is None or bus.name != "rabbitmq":
            return [self._background("facts-off", self._facts_off)]
        from runlane.service.launcher.bus_loops import CommandConsumer, EventConsumer, OutboxRelay

        broker = cast("BrokerBus", bus)
        self.relay = OutboxRelay(self.store, broker, self.owner)
        self.commands = CommandConsumer(
            self.store, broker, self.catalog, self._accept, self._free_slots, self._wake.set
        )
        self.events = EventConsumer(self.store, broker, self.catalog, self._accept)
        return [
            self._background("relay", partial(self.relay.run, self._stopping)),
            self._background("commands", partial(self.commands.run, self._stopping)),
            self._background("events", partial(self.events.run, self._stopping)),
        ]

    def _background(
        self, name: str, loop: Callable[[], Coroutine[Any, Any, None]]
    ) -> asyncio.Task[None]:
        """One of the launcher's background loops, in a task of its own (`runlane-<name>`),
        kept running (`_kept`)."""
        return asyncio.create_task(self._kept(name, loop), name=f"runlane-{name}")

    async def _kept(self, name: str, loop: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `loop` until it returns or the launcher stops. Each loop handles the faults it
        expects (a database or broker that does not answer); anything else it raises (a bug)
        would end it silently, since the tasks are only awaited at shutdown, and a lost lease
        renewal or wake-up is a launcher that runs on wrong. So it is logged, with its
        traceback, as `launcher.loop_failed`, and the loop starts again after a pause that
        doubles from 1 s to 30 s while it keeps failing soon after each start."""
        delay = LOOP_RESTART_FIRST
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                await loop()
                return
            except Exception:
                if self._stopping.is_set():
                    return
                if time.monotonic() - started >= LOOP_HEALTHY_AFTER:
                    delay = LOOP_RESTART_FIRST
                log.exception("launcher.loop_failed", loop=name, restart_in=delay)
                self.metrics.loop_failed(name)
            await self._sleep_or_stop(delay)
            delay = min(delay * 2, LOOP_RESTART_MAX)

    async def _facts_off(self) -> None:
        """On the database bus nothing publishes facts: run state changes must not write them
        (a database that was on the RabbitMQ bus before), or the outbox would grow unread.
        Retried until it lands (switching the triggers waits for run_log's lock, and the
        database may be away), as the relay retries turning them on."""
        delay = 1.0
        while not self._stopping.is_set():
            try:
                await self.store.set_bus_facts(False)
                return
            except StoreError as exc:
                log.warning("launcher.bus_facts_unset", error=str(exc), retry_in=delay)
            await self._sleep_or_stop(delay)
            delay = min(delay * 2, 30.0)

    def _start_trigger_loops(self) -> list[asyncio.Task[None]]:
        """The scheduler and the chain advancer; both write runs through the one accept path."""
        from runlane.service.chains import ChainRunner
        from runlane.service.scheduler import Scheduler

        accept = self._accept

        chains = ChainRunner(
            self.store,
            self.catalog,
            accept,
            self.hook,
            self.trigger_interval,
            launcher_id=self.owner,
            catalog_digest=self._heartbeat.stamp().digest,
            catalog_path=self._heartbeat.catalog_path,
            stale_after=self.settings.launcher_stale_after,
        )
        self._finisher.chain_nudge = chains.nudge
        scheduler = Scheduler(
            self.store,
            self.catalog,
            accept,
            chains.start_scheduled,
            self.hook,
            self.trigger_interval,
            launcher_id=self.owner,
            catalog_digest=chains.catalog_digest,
            stale_after=self.settings.launcher_stale_after,
        )
        return [
            self._background("scheduler", partial(scheduler.run, self._stopping)),
            self._background("chains", partial(chains.run, self._stopping)),
        ]

    async def _shutdown(self) -> None:
        log.info("launcher.stopping", launcher=self.owner, running=len(self._active))
        # A pod (or any remote) execution goes on without us and is never deleted at shutdown:
        # stop watching it at once, unless its outcome is being saved. The next launcher
        # reattaches to it when its lease expires. Inline runs get the grace period below.
        for sup in list(self._active.values()):
            if sup.task is not None and sup.executing and sup.executor.name != "inline":
                sup.task.cancel()
        pending = [s.task for s in self._active.values() if s.task is not None]
        if pending:
            still = await self._wait_unless_hurried(pending, self.settings.shutdown_grace)
            for sup in list(self._active.values()):
                if sup.execution is not None and sup.executor.name == "inline":
                    sup.shutdown = True
                    await sup.cancel_execution(grace=1.0)
            if still:
                await asyncio.wait(still, timeout=self.settings.shutdown_grace + 5.0)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await close_targets(self._own_targets)
        if not self._finisher.database_down:
            # (A database that does not answer would hold the stop up for another bound; the
            # row then ages out: shown stale, pruned by the other launchers.)
            with contextlib.suppress(StoreError):
                await self.store.remove_launcher(self.owner)
        log.info("launcher.stopped", launcher=self.owner)

    async def _wait_unless_hurried(
        self, tasks: list[asyncio.Task[None]], grace: float
    ) -> set[asyncio.Task[None]]:
        """Wait up to `grace` seconds for `tasks`, less if `stop()` is asked again; the unfinished."""
        still = set(tasks)
        # One deadline for the whole wait (see `wait_until`): the tasks are not cancelled by it.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(loop_time() + grace):
                while still and not self._hurry.is_set():
                    hurry = asyncio.create_task(self._hurry.wait())
                    try:
                        done, _ = await asyncio.wait(
                            [*still, hurry], return_when=asyncio.FIRST_COMPLETED
                        )
                    finally:
                        hurry.cancel()
                    still -= done
        return still

    # ------------------------------------------------------------------ consumer

    async def _consume_loop(self) -> None:
        settings = self.settings
        executors = list(self.executors)
        finisher = self._finisher
        supervise = self._supervisor.supervise
        emit = self._supervisor.emit
        while not self._stopping.is_set():
            self._wake.clear()
            claimed_any = False
            try:
                now = time.monotonic()
                if now - self._last_expire >= settings.expire_interval:
                    self._last_expire = now
                    for run in await self.store.expire_queued():
                        log.info("run.expired", run_id=run.id, job=run.job)
                        self.metrics.run_finished(run, run.status.value)
                        emit(EXPIRED, run.id)
                if now - self._last_orphan_check >= settings.orphan_check_interval:
                    self._last_orphan_check = now
                    for run in await self.store.sweep_orphans(grace=settings.orphan_grace):
                        log.warning("run.orphaned", run_id=run.id, job=run.job)
                        self.metrics.run_finished(run, run.status.value)
                        emit(ORPHANED, run.id)
                if now - self._last_cancel_poll >= settings.claim_interval:
                    self._last_cancel_poll = now
                    await self._poll_cancels()
                free = self._free_slots()
                if (
                    free > 0
                    and now - self._last_recover >= settings.claim_interval
                    and now >= finisher.takeover_after
                ):
                    self._last_recover = now
                    recovered = await self.store.claim_abandoned(
                        self.owner, limit=free, lease_ttl=settings.lease_ttl, executors=executors
                    )
                    for claimed in recovered:
                        supervise(claimed)
                    free -= len(recovered)
                if 0 < free < self._claim_batch_min and self._backlog:
                    # Runs are waiting and slots free up one by one: gather a few before one
                    # claim takes them all (a claim is a transaction; one per run costs more
                    # than the few milliseconds this waits).
                    free = await self._gather_free_slots()
                if free > 0:
                    asked = time.perf_counter()
                    batch = await self.store.claim(
                        self.owner,
                        limit=free,
                        lease_ttl=settings.lease_ttl,
                        executors=executors,
                        executor_caps=self.executor_caps,
                    )
                    self.metrics.claim_took(time.perf_counter() - asked)
                    finisher.database_answered()
                    for c in batch:
                        supervise(c)
                    claimed_any = len(batch) == free
                    self._backlog = claimed_any
            except DatabaseUnavailable as exc:
                log.warning("launcher.database_unavailable", error=str(exc))
                finisher.database_failed()
                await self._sleep_or_stop(min(5.0, settings.claim_interval * 2))
                continue
            except StoreError as exc:
                log.error("launcher.claim_failed", error=str(exc), error_code=exc.code)
                await self._sleep_or_stop(settings.claim_interval)
                continue
            if claimed_any:
                continue  # the batch was full: there may be more due right now
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(settings.claim_interval):
                    await self._wake.wait()

    async def _gather_free_slots(self) -> int:
        """Wait up to CLAIM_COALESCE_SECONDS for `_claim_batch_min` free slots; return the
        number free."""
        batch_min, stopping = self._claim_batch_min, self._stopping
        await wait_until(
            self._wake,
            lambda: self._free_slots() >= batch_min or stopping.is_set(),
            loop_time() + CLAIM_COALESCE_SECONDS,
        )
        return self._free_slots()

    def _free_slots(self) -> int:
        """Concurrency counts executions, not outcomes waiting to be saved."""
        return self.settings.concurrency - sum(1 for s in self._active.values() if s.executing)

    async def _sleep_or_stop(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stopping.wait()

    async def _wakeup_pump(self) -> None:
        """Turn the bus's wake-ups (LISTEN/NOTIFY on PostgreSQL) into the consumer's event."""
        # Checks `_stopping` too: on 3.11 `asyncio.wait_for` can swallow a cancel that arrives
        # just as the wake-up fires (gh-86296), and shutdown must not depend on that race.
        while not self._stopping.is_set():
            try:
                if await self._wakeups.wait_for_wakeup(max(self.settings.claim_interval, 1.0)):
                    self._wake.set()
            except StoreError as exc:
                # The poll still finds new runs (claim_interval); only the prompt start is lost.
                log.warning("launcher.wakeups_failed", error=str(exc))
                await self._sleep_or_stop(1.0)

    async def _poll_cancels(self) -> None:
        """End the executions someone asked to cancel."""
        if not self._active:
            return
        for run_id in await self.store.cancel_requests(self.owner):
            sup = self._active.get(run_id)
            if sup is None:
                continue
            sup.cancel_requested = True  # never retried, whatever it ends with
            if sup.execution is not None and sup.cancel_grace is None:
                log.info("run.cancelling", run_id=run_id)
                await sup.cancel_execution(grace=sup.claimed.run.kill_grace_seconds)


def _event_loop_name() -> str:
    """`uvloop` or `asyncio`: the running loop (RUNLANE_EVENT_LOOP), for the start line."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.startswith("uvloop") else "asyncio"
