"""The launcher: claims queued runs, supervises their executions under a lease, records outcomes.

One asyncio process runs these loops (the scheduler joins in the triggers issue):
- consumer: expire stale queued runs, claim due ones up to the free capacity, recover runs whose
  lease expired, start one supervisor task per claimed run;
- lease keeper: renews the leases of every supervised run; a lost lease kills the local process
  (an inline run's new owner cannot reach it);
- cancel watcher: ends executions someone asked to cancel;
- heartbeat: one `launcher_heartbeat` row, every `heartbeat_interval`.

Shutdown (SIGTERM/SIGINT): stop claiming, give running inline runs `shutdown_grace`, then end
them as `failure` / `launcher_shutdown` (retried if attempts remain). Pod and Slurm executions are
never ended by a shutdown: the next launcher reattaches to them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import structlog

from runlane import __version__
from runlane.catalog import Catalog, ResolvedJob
from runlane.core.runs import (
    Claimed,
    EndReason,
    Lease,
    NewRun,
    Outcome,
    Run,
    RunStatus,
    Trigger,
    joined_notes,
    retry_backoff_seconds,
    retry_dedupe_key,
    should_retry,
)
from runlane.errors import (
    DatabaseConflict,
    DatabaseUnavailable,
    InvalidTransition,
    LeaseLost,
    PermanentExecutorError,
    StoreError,
    TemporaryExecutorError,
    UnknownJob,
)
from runlane.ports import (
    Execution,
    ExecutionSpec,
    Executor,
    FinishedRun,
    FinishRequest,
    Heartbeat,
    Store,
)
from runlane.service.catalog_stamp import CatalogStamp, live_launchers, stamp_catalog
from runlane.service.config import Settings
from runlane.service.wiring import absolute_url

log = structlog.get_logger("runlane.launcher")

T = TypeVar("T")

FINISH_BATCH_MAX = 64
CLAIM_COALESCE_SECONDS = 0.01
# A run of a job this launcher does not know, when another live launcher does: due again this
# soon, for that one to take (each claim of it here gives it back again).
UNKNOWN_JOB_HANDOFF_SECONDS = 2.0
FINISH_COALESCE_SECONDS = 0.003
# A provider's own end time (a pod run's Job completion time, to the second, by the cluster's
# clock) is recorded as the run's end only when it is this much older than the launcher's
# sighting: then the run ended while no launcher watched (a restart, a takeover). Closer than
# that, the launcher's own sighting is the more precise of the two.
PROVIDER_END_TRUSTED_AFTER = 5.0


def _seconds_since_wall(iso: object) -> float:
    """Seconds since an ISO-8601 time with its zone, by this machine's clock; 0 when unknown."""
    try:
        then = datetime.fromisoformat(str(iso))
        if then.tzinfo is None:
            return 0.0
        return max(0.0, (datetime.now(UTC) - then).total_seconds())
    except (ValueError, OverflowError):
        return 0.0


def loop_time() -> float:
    """Monotonic time of the running event loop."""
    return asyncio.get_running_loop().time()


LauncherHook = Callable[[str, str], None]
"""Called as hook(event, run_id) at `claimed`, `started`, `finished`, `lease_lost`, `expired`,
`orphaned`. Tests wait on
these instead of sleeping; production passes nothing."""


@dataclass(frozen=True, slots=True)
class _JobPlan:
    """A resolved job and what every run of it shares, worked out once per launcher."""

    job: ResolvedJob
    env: Mapping[str, str]
    profile: Mapping[str, Any]

    @classmethod
    def of(cls, job: ResolvedJob) -> _JobPlan:
        profile = job.profile_spec.model_dump() if job.profile_spec is not None else {}
        return cls(job, MappingProxyType(job_env(job)), MappingProxyType(profile))


@dataclass(slots=True)
class Supervised:
    """A run this launcher holds a lease on."""

    claimed: Claimed
    lease: Lease
    executor: Executor
    execution: Execution | None = None
    lost: bool = False
    shutdown: bool = False
    cancel_sent: bool = False
    executing: bool = True  # False once the execution ended and only its outcome is pending
    task: asyncio.Task[None] | None = None
    claimed_at: float = field(default_factory=lambda: loop_time())
    ended_monotonic: float | None = None  # time.monotonic() when the execution ended


# RUNLANE_PARAMS: one encoder for every run (json.dumps with options builds a new one per call).
_params_json = json.JSONEncoder(separators=(",", ":"), sort_keys=True).encode


def job_env(job: ResolvedJob) -> dict[str, str]:
    """The environment a job gives every run of it: its profile's, then its own."""
    env: dict[str, str] = {}
    if job.profile_spec is not None:
        env.update(job.profile_spec.env or {})
    env.update(job.env)
    return env


def build_env(
    run: Run, database_url: str, job: ResolvedJob, *, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment a run's process sees on top of the launcher's (DESIGN.md "Inside a run").
    `base` is `job_env(job)`, when the caller keeps it per job.

    `RUNLANE_DATABASE_URL` (for the SDK's child rows) goes only to inline runs, which share the
    launcher's machine and environment anyway: in a pod or Slurm job spec it would expose the
    database password to whoever can read those objects; give such jobs the URL through a
    secret (profile `secrets`) instead."""
    params = run.params or {}
    env = dict(job_env(job) if base is None else base)
    env["RUN_ID"] = run.id
    env["RUN_TRIGGER"] = run.trigger
    env["RUN_PARENT_ID"] = run.parent_run_id or ""
    env["RUNLANE_JOB"] = run.job
    env["RUNLANE_ATTEMPT"] = str(run.attempt)
    env["RUNLANE_PARAMS"] = _params_json(params) if params else "{}"
    if run.executor == "inline":
        env["RUNLANE_DATABASE_URL"] = database_url
    for name, value in params.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif value is None:
            continue
        else:
            text = str(value)
        env[f"RUNLANE_PARAM_{name.upper()}"] = text
    return env


def retry_command(run: Run, now: datetime) -> NewRun:
    """The next attempt of `run`: a new row, launcher-owned, due after an exponential backoff."""
    attempt = run.attempt + 1
    return NewRun(
        id=str(uuid.uuid4()),
        job=run.job,
        trigger=Trigger.RETRY,
        dedupe_key=retry_dedupe_key(run.dedupe_key, attempt),
        executor=run.executor,
        overlap="allow" if run.overlap == "allow" else "queue",
        params=run.params or {},
        requested_by=run.requested_by,
        parent_run_id=run.parent_run_id,
        chain_root_id=run.chain_root_id,
        event_id=run.event_id,
        downstream=run.downstream,
        scheduled_for=run.scheduled_for,
        attempt=attempt,
        retry_of=run.id,
        max_attempts=run.max_attempts,
        deadline_seconds=run.deadline_seconds,
        kill_grace_seconds=run.kill_grace_seconds,
        not_before=now + timedelta(seconds=retry_backoff_seconds(run.attempt)),
        traceparent=run.traceparent,
        note=run.note,
    )


@dataclass
class Launcher:
    """The launcher process's loops around one store, one catalog and its executors."""

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

    def __post_init__(self) -> None:
        self.owner = self.settings.launcher_id
        self._active: dict[str, Supervised] = {}
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._hurry = asyncio.Event()  # a second stop: end the inline runs' grace period now
        # What runs get as RUNLANE_DATABASE_URL: a relative SQLite path made absolute, so the
        # SDK in a run that changes directory records child rows in this database, not another.
        self._run_database_url = absolute_url(self.settings.database_url)
        self._started_at = datetime.now().astimezone()
        # The catalog this launcher runs, as its heartbeat reports it (computed at the first
        # beat; the catalog never changes under a launcher, so it was taken at its start).
        self._catalog_stamp: CatalogStamp | None = None
        # The file the catalog came from, as the heartbeat reports it: absolute, symlinks and
        # `..` resolved, so the CLI can tell it is the file it reads itself (on the same host).
        self._catalog_path = str(Path(self.settings.catalog_path).resolve())
        # Where its inline runs write their logs, as the heartbeat reports it: absolute as the
        # inline executor makes it (symlinks kept), so a CLI started elsewhere finds the files.
        self._log_dir = str(Path(self.settings.log_dir).absolute())
        self._tasks: list[asyncio.Task[Any]] = []
        self._last_expire = 0.0
        self._last_recover = 0.0
        self._last_cancel_poll = 0.0
        self._last_orphan_check = 0.0
        self._chain_nudge: asyncio.Event | None = None
        self._backlog = False  # the last claim filled every free slot: more runs may be due
        self._claim_batch_min = max(1, self.settings.concurrency // 2)
        # After this launcher saw the database fail, it leaves other launchers' expired leases
        # alone for a lease TTL: they lost their database too, and need the time to reconnect
        # and revive their leases before anyone takes their live runs over (monotonic time).
        self._recover_after = 0.0
        self._journaled: dict[str, Path] = {}  # run id → its outcome journal, until recorded
        # Outcomes handed to the finisher and not yet saved (run id → request): when the
        # database fails, every one of them is journaled, not only the batch being written.
        self._unsaved: dict[str, FinishRequest] = {}
        # Set when a database call failed, cleared when a write lands: outcomes that end
        # meanwhile are journaled as soon as they are queued.
        self._database_down = False
        # Resolved jobs by name: the catalog caches them too, but behind a pydantic private
        # attribute whose every read is a Python-level __getattr__ (5% of the launcher's CPU
        # per run in bench/throughput.py --profile). The catalog never changes under a launcher.
        # With each, what every run of it shares: its environment and its profile as the
        # executors take them, worked out once (not a model_dump and two dict merges a run).
        self._jobs: dict[str, _JobPlan] = {}
        # Outcomes waiting for the finisher, and the future it waits on for the next one (an
        # asyncio.Queue with a timeout per wait cost a timer and a context manager per run).
        self._finish_pending: list[tuple[FinishRequest, asyncio.Future[FinishedRun | None]]] = []
        self._finish_wake: asyncio.Future[None] | None = None
        self._finish_window_over = False
        self._lease_writes = asyncio.Lock()  # see _renew

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

    async def run(self) -> None:
        """Run until `stop()`; then shut down gracefully and return."""
        log.info(
            "launcher.start",
            launcher=self.owner,
            executors=sorted(self.executors),
            concurrency=self.settings.concurrency,
        )
        self._tasks = [
            asyncio.create_task(self._wakeup_pump(), name="runlane-wakeup"),
            asyncio.create_task(self._finisher(), name="runlane-finisher"),
            asyncio.create_task(self._lease_keeper(), name="runlane-leases"),
            asyncio.create_task(self._heartbeat_loop(), name="runlane-heartbeat"),
        ]
        if self.triggers:
            self._tasks.extend(self._start_trigger_loops())
        try:
            # Beat first: a launcher that hands a run of a job it does not know to "a live
            # launcher that has it" must see this one before the runs below are due.
            with contextlib.suppress(StoreError):
                await self.beat()
            await self._retry_repairs_now()
            await self._consume_loop()
        finally:
            await self._shutdown()

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

    def _start_trigger_loops(self) -> list[asyncio.Task[None]]:
        """The scheduler and the chain advancer; both write runs through the one accept path."""
        from runlane.service.accept import RunRequest, accept_run
        from runlane.service.chains import ChainRunner
        from runlane.service.scheduler import Scheduler

        async def accept(request: RunRequest) -> Any:
            return await accept_run(
                self.store,
                self.catalog,
                request,
                available_executors=tuple(self.executors),
                pod_fallback=self.settings.pod_fallback,
            )

        chains = ChainRunner(
            self.store,
            self.catalog,
            accept,
            self.hook,
            self.trigger_interval,
            launcher_id=self.owner,
            catalog_digest=self._stamp().digest,
            catalog_path=self._catalog_path,
            stale_after=self.settings.launcher_stale_after,
        )
        self._chain_nudge = chains.nudge
        scheduler = Scheduler(
            self.store,
            self.catalog,
            accept,
            chains.start_scheduled,
            self.hook,
            self.trigger_interval,
        )
        return [
            asyncio.create_task(scheduler.run(self._stopping), name="runlane-scheduler"),
            asyncio.create_task(chains.run(self._stopping), name="runlane-chains"),
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
                    await self._cancel_execution(sup, grace=1.0)
            if still:
                await asyncio.wait(still, timeout=self.settings.shutdown_grace + 5.0)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if not self._database_down:
            # (A database that does not answer would hold the stop up for another bound; the
            # row then ages out: shown stale, pruned by the other launchers.)
            with contextlib.suppress(StoreError):
                await self.store.remove_launcher(self.owner)
        log.info("launcher.stopped", launcher=self.owner)

    async def _wait_unless_hurried(
        self, tasks: list[asyncio.Task[None]], grace: float
    ) -> set[asyncio.Task[None]]:
        """Wait up to `grace` seconds for `tasks`, less if `stop()` is asked again; the unfinished."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        still = set(tasks)
        while still and not self._hurry.is_set():
            left = deadline - loop.time()
            if left <= 0:
                break
            hurry = asyncio.create_task(self._hurry.wait())
            try:
                done, _ = await asyncio.wait(
                    [*still, hurry], timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                hurry.cancel()
            still -= done
        return still

    # ------------------------------------------------------------------ consumer

    async def _consume_loop(self) -> None:
        settings = self.settings
        executors = list(self.executors)
        while not self._stopping.is_set():
            self._wake.clear()
            claimed_any = False
            try:
                now = time.monotonic()
                if now - self._last_expire >= settings.expire_interval:
                    self._last_expire = now
                    for run in await self.store.expire_queued():
                        log.info("run.expired", run_id=run.id, job=run.job)
                        self._emit("expired", run.id)
                if now - self._last_orphan_check >= settings.orphan_check_interval:
                    self._last_orphan_check = now
                    for run in await self.store.sweep_orphans(grace=settings.orphan_grace):
                        log.warning("run.orphaned", run_id=run.id, job=run.job)
                        self._emit("orphaned", run.id)
                if now - self._last_cancel_poll >= settings.claim_interval:
                    self._last_cancel_poll = now
                    await self._poll_cancels()
                free = self._free_slots()
                if (
                    free > 0
                    and now - self._last_recover >= settings.claim_interval
                    and now >= self._recover_after
                ):
                    self._last_recover = now
                    recovered = await self.store.claim_abandoned(
                        self.owner, limit=free, lease_ttl=settings.lease_ttl, executors=executors
                    )
                    for claimed in recovered:
                        self._supervise(claimed)
                    free -= len(recovered)
                if 0 < free < self._claim_batch_min and self._backlog:
                    # Runs are waiting and slots free up one by one: gather a few before one
                    # claim takes them all (a claim is a transaction; one per run costs more
                    # than the few milliseconds this waits).
                    free = await self._gather_free_slots()
                if free > 0:
                    batch = await self.store.claim(
                        self.owner,
                        limit=free,
                        lease_ttl=settings.lease_ttl,
                        executors=executors,
                        executor_caps=self.executor_caps,
                    )
                    self._database_ok()
                    for c in batch:
                        self._supervise(c)
                    claimed_any = len(batch) == free
                    self._backlog = claimed_any
            except DatabaseUnavailable as exc:
                log.warning("launcher.database_unavailable", error=str(exc))
                self._database_failed()
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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CLAIM_COALESCE_SECONDS
        free = self._free_slots()
        while free < self._claim_batch_min and not self._stopping.is_set():
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._wake.wait()
            free = self._free_slots()
        return free

    def _free_slots(self) -> int:
        """Concurrency counts executions, not outcomes waiting to be saved."""
        return self.settings.concurrency - sum(1 for s in self._active.values() if s.executing)

    async def _sleep_or_stop(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stopping.wait()

    async def _wakeup_pump(self) -> None:
        """Turn the store's wake-ups (LISTEN/NOTIFY on PostgreSQL) into the consumer's event."""
        # Checks `_stopping` too: on 3.11 `asyncio.wait_for` can swallow a cancel that arrives
        # just as the wake-up fires (gh-86296), and shutdown must not depend on that race.
        while not self._stopping.is_set():
            try:
                if await self.store.wait_for_wakeup(max(self.settings.claim_interval, 1.0)):
                    self._wake.set()
            except StoreError as exc:
                # The poll still finds new runs (claim_interval); only the prompt start is lost.
                log.warning("launcher.wakeups_failed", error=str(exc))
                await self._sleep_or_stop(1.0)

    # ------------------------------------------------------------------ supervision

    def _supervise(self, claimed: Claimed) -> None:
        executor = self.executors[claimed.run.executor]
        sup = Supervised(claimed=claimed, lease=claimed.lease, executor=executor)
        self._active[claimed.run.id] = sup
        sup.task = asyncio.create_task(self._supervise_run(sup), name=f"run-{claimed.run.id}")
        self._emit("claimed", claimed.run.id)

    def _emit(self, event: str, run_id: str) -> None:
        if self.hook is not None:
            self.hook(event, run_id)

    async def _supervise_run(self, sup: Supervised) -> None:
        run = sup.claimed.run
        outcome: Outcome | None = None
        try:
            outcome = await self._execute(sup)
            if sup.ended_monotonic is None:  # (a journaled outcome brings its own)
                sup.ended_monotonic = time.monotonic()
            # The execution is over: its slot is free for the next run while the outcome is
            # saved (the lease is still held and renewed until then).
            sup.executing = False
            self._wake.set()
            if outcome is not None:
                await self._record(sup, outcome)
        except LeaseLost:
            sup.lost = True
        except Exception:  # a bug must not take the launcher down; the lease will expire
            log.exception("run.supervisor_crashed", run_id=run.id, job=run.job)
        finally:
            if sup.lost:
                # Once per run. Another launcher holds the run now (this one was paused, or cut
                # off from the database, for longer than the lease): what this one saw of the
                # run is not recorded, so it is said here.
                log.warning(
                    "run.lease_lost",
                    run_id=run.id,
                    job=run.job,
                    attempt=run.attempt,
                    seen=None if outcome is None else outcome.status.value,
                    exit_code=None if outcome is None else outcome.exit_code,
                    hint="another launcher took the run over after this one's lease expired; "
                    "what this launcher saw of the run is not recorded",
                )
                self._emit("lease_lost", run.id)
                if sup.execution is not None and sup.executor.name == "inline":
                    await self._cancel_execution(sup, grace=0.0)
            self._active.pop(run.id, None)
            self._wake.set()
            self._emit("finished", run.id)

    async def _execute(self, sup: Supervised) -> Outcome | None:
        """Start (or reattach to) the execution and wait for its outcome. None → nothing to
        record (released for a later retry)."""
        claimed = sup.claimed
        run = claimed.run
        try:
            plan = self._jobs.get(run.job) or self._jobs.setdefault(
                run.job, _JobPlan.of(self.catalog.resolve(run.job))
            )
        except UnknownJob:
            await self._keep_for_repair(
                sup, "unknown_job", f"job {run.job!r} is not in the catalog; kept for repair"
            )
            return None
        if run.params is None:
            await self._keep_for_repair(
                sup, "corrupt_params", "the stored params are not valid JSON; kept for repair"
            )
            return None
        if claimed.recovered and sup.executor.name == "inline":
            journaled = self._journaled_outcome(sup)
            if journaled is not None:
                return journaled
        spec = self._spec(run, plan, claimed.db_now)
        if spec.deadline_seconds <= 0:
            return Outcome(
                RunStatus.TIMEOUT,
                EndReason.DEADLINE,
                error_code="deadline",
                note="the deadline passed while no launcher supervised the run"
                if claimed.recovered
                else "deadline passed before the run could start",
            )
        if claimed.recovered:
            try:
                execution = await sup.executor.reattach(spec)
            except TemporaryExecutorError as exc:
                # The provider is unreachable right now: give the run back and look again later
                # (the execution, if any, keeps running and is reattached then).
                delay, code, note = exc.retry_after, exc.code, str(exc)
                await self._write(
                    lambda: self.store.release(
                        sup.lease, retry_after=delay, error_code=code, note=note
                    )
                )
                log.warning("run.reattach_deferred", run_id=run.id, error_code=code)
                return None
            except PermanentExecutorError as exc:
                # E.g. a pod run's Job is gone (deleted, or removed by its TTL, while no launcher
                # watched it). Never seen started: the old launcher died starting it (below).
                if run.external_id is not None or exc.code != "deleted_externally":
                    return Outcome(
                        RunStatus.FAILURE, EndReason.ORPHANED, error_code=exc.code, note=str(exc)
                    )
                execution = None
            if execution is None:
                return Outcome(
                    RunStatus.FAILURE,
                    EndReason.LAUNCHER_LOST,
                    error_code="launcher_lost",
                    # What is known: the lease expired without renewal. Its launcher died (and
                    # its guardian ended the process), or was paused or cut off from the
                    # database for longer than the lease; then the process may have run on.
                    note=f"the launcher supervising attempt {run.attempt} stopped renewing its "
                    "lease (it stopped, or was paused or cut off from the database for longer "
                    "than the lease); the attempt is not supervised any more",
                )
        else:
            try:
                execution = await sup.executor.start(spec)
            except TemporaryExecutorError as exc:
                delay, code, note = exc.retry_after, exc.code, str(exc)
                await self._write(
                    lambda: self.store.release(
                        sup.lease, retry_after=delay, error_code=code, note=note
                    )
                )
                log.warning("run.start_deferred", run_id=run.id, error_code=code)
                return None
            except PermanentExecutorError as exc:
                return Outcome(
                    RunStatus.FAILURE,
                    EndReason.START_FAILED,
                    error_code=exc.code,
                    note=str(exc),
                    retryable=False,
                )
        sup.execution = execution
        started_late = loop_time() - sup.claimed_at > spec.deadline_seconds
        if started_late and not claimed.recovered:
            # A slow provider call must never leave an expired run going: end it now.
            await self._cancel_execution(sup, grace=run.kill_grace_seconds)
            ended: Outcome | None = None
            async for event in sup.executor.events(execution):
                ended = event.outcome or ended
            return Outcome(
                RunStatus.TIMEOUT,
                EndReason.DEADLINE,
                error_code="deadline",
                # What the execution said of itself stays (its log file left incomplete).
                log_tail=ended.log_tail if ended else None,
                note=joined_notes(
                    "the deadline passed while the executor was starting the run",
                    ended.note if ended else None,
                ),
            )
        if sup.executor.name != "inline" and execution.external_id:
            # Where the run lives (namespace/Job name), for whoever looks while it runs; an inline
            # run's pid is saved with its outcome instead (a write per start would cost throughput).
            external_id = execution.external_id
            await self._write(lambda: self.store.set_external_id(sup.lease, external_id))
        self._emit("started", run.id)
        log.debug("run.started", run_id=run.id, job=run.job, external_id=execution.external_id)
        outcome: Outcome | None = None
        async for event in sup.executor.events(execution):
            if event.kind == "finished":
                outcome = event.outcome
                if event.ended_at is not None:
                    ago = _seconds_since_wall(event.ended_at.isoformat())
                    if ago > self.provider_end_trusted_after:
                        sup.ended_monotonic = time.monotonic() - ago
        if outcome is None:  # an executor bug; never leave the run without a status
            outcome = Outcome(RunStatus.FAILURE, EndReason.ORPHANED, error_code="no_outcome")
        if sup.shutdown:
            outcome = Outcome(
                RunStatus.FAILURE,
                EndReason.LAUNCHER_SHUTDOWN,
                exit_code=outcome.exit_code,
                error_code="launcher_shutdown",
                log_tail=outcome.log_tail,
                note=joined_notes("the launcher shut down before the run finished", outcome.note),
            )
        return outcome

    async def _keep_for_repair(self, sup: Supervised, error_code: str, note: str) -> None:
        """Corrupt stored state never crashes or blocks the launcher, and is never dropped: the
        run goes back to the queue with a diagnostic code and is looked at again later (its queue
        TTL still applies). `runlane doctor` lists such runs."""
        run = sup.claimed.run
        retry_after = self.repair_retry_seconds
        if error_code == "unknown_job" and await self._another_launcher_knows(run.job):
            # Another launcher, started since the catalog changed, has the job: give the run
            # back for it to take soon, not after the repair interval. Not an error here.
            retry_after = min(retry_after, UNKNOWN_JOB_HANDOFF_SECONDS)
            note += "; another live launcher has the job"
            log.info("run.handed_back", run_id=run.id, job=run.job, error_code=error_code)
        else:
            log.error("run.corrupt", run_id=run.id, job=run.job, error_code=error_code)
        await self._write(
            lambda: self.store.release(
                sup.lease, retry_after=retry_after, error_code=error_code, note=note
            )
        )

    async def _another_launcher_knows(self, job: str) -> bool:
        """True if a live launcher other than this one reports `job` in its catalog."""
        try:
            beats, now = await self.store.launchers(), await self.store.now()
        except StoreError:
            return False
        live = live_launchers(beats, now, self.settings.launcher_stale_after)
        return any(
            h.launcher_id != self.owner and h.catalog_jobs is not None and job in h.catalog_jobs
            for h in live
        )

    def _spec(self, run: Run, plan: _JobPlan, db_now: datetime) -> ExecutionSpec:
        job = plan.job
        remaining = job.deadline_seconds
        if run.deadline_at is not None:
            remaining = (run.deadline_at - db_now).total_seconds()
        return ExecutionSpec(
            run_id=run.id,
            job=run.job,
            attempt=run.attempt,
            trigger=run.trigger,
            command=list(job.command),
            params=run.params or {},
            env=build_env(run, self._run_database_url, job, base=plan.env),
            deadline_seconds=remaining,
            kill_grace_seconds=run.kill_grace_seconds,
            parent_run_id=run.parent_run_id,
            # Shared by every run of the job, read-only: executors build what they send from it.
            profile=plan.profile,
        )

    async def _record(self, sup: Supervised, outcome: Outcome) -> None:
        run = sup.claimed.run
        if run.cancel_requested_at is not None and outcome.end_reason == EndReason.LAUNCHER_LOST:
            # Someone asked to cancel while no launcher supervised the run (its launcher was
            # killed or stalled): the process is gone, and what they asked for is what happened.
            outcome = Outcome(
                RunStatus.CANCELLED,
                EndReason.CANCELLED,
                exit_code=outcome.exit_code,
                error_code="cancelled",
                log_tail=outcome.log_tail,
                note="cancel requested while no launcher supervised the run; its process ended "
                "with its launcher",
            )
        retry = None
        # A run somebody asked to cancel is never retried, whatever it ended with.
        if run.cancel_requested_at is None and should_retry(outcome, run.attempt, run.max_attempts):
            # Database time now, from the claim's database time and the loop's clock since: no
            # round trip, so an outcome is never held back from the finisher (and its journal)
            # by a database outage.
            db_now = sup.claimed.db_now + timedelta(seconds=max(0.0, loop_time() - sup.claimed_at))
            retry = retry_command(run, db_now)
            retry = replace(
                retry,
                not_before=db_now
                + timedelta(
                    seconds=retry_backoff_seconds(run.attempt, base=self.retry_base_seconds)
                ),
            )
        external_id = sup.execution.external_id if sup.execution is not None else None
        request = FinishRequest(
            sup.lease,
            outcome,
            retry=retry,
            external_id=external_id,
            ended_monotonic=sup.ended_monotonic,
        )
        final = await self._finish(request)
        if final is None:
            # The lease may only have expired (a database outage longer than the TTL) with nobody
            # taking the run over: revive it with the same token and generation, then write.
            if run.id in await self._write(lambda: self._renew([sup.lease])):
                final = await self._finish(request)
            if final is None:
                final = await self._saved_already(sup, outcome)
                if final is not None:
                    self._journal_done(run.id)
            if final is None:
                raise LeaseLost(f"lease on run {run.id} is lost: outcome not saved")
        if run.chain_root_id is not None and self._chain_nudge is not None:
            self._chain_nudge.set()  # the chain may start its next steps now
        log.info(
            "run.finished",
            run_id=run.id,
            job=run.job,
            status=final.status.value,
            end_reason=final.end_reason,
            attempt=run.attempt,
            retry=retry.id if retry else None,
        )

    async def _saved_already(self, sup: Supervised, outcome: Outcome) -> FinishedRun | None:
        """The run's row when it already holds this outcome under this launcher's lease: a save
        whose answer was lost (the connection dropped at COMMIT) and was written again found the
        row final. None when someone else ended or took the run."""
        try:
            row = await self._write(lambda: self.store.get_run(sup.lease.run_id))
        except StoreError:
            return None
        if (
            row.status.is_final
            and (row.lease_token, row.lease_generation) == (sup.lease.token, sup.lease.generation)
            and (row.status, row.end_reason) == (outcome.status, outcome.end_reason)
        ):
            return FinishedRun(row.id, row.status, row.end_reason)
        return None

    async def _finish(self, request: FinishRequest) -> FinishedRun | None:
        """Queue an outcome for the finisher; what was saved, or None when the lease is lost."""
        done: asyncio.Future[FinishedRun | None] = asyncio.get_running_loop().create_future()
        run_id = request.lease.run_id
        self._unsaved[run_id] = request
        if self._database_down:
            self._journal_outcomes([request])
        self._finish_pending.append((request, done))
        self._wake_finisher()
        try:
            return await done
        finally:
            self._unsaved.pop(run_id, None)

    async def _finisher(self) -> None:
        """Save outcomes in batches: whatever queued up while the previous batch was being
        written goes in the next transaction (one commit, one fsync for many runs)."""
        loop = asyncio.get_running_loop()
        pending = self._finish_pending
        while True:
            while not pending:
                await self._next_outcome()
            # Under load, give the batch a few milliseconds to fill: one commit for many runs.
            # An idle launcher has nothing else to wait for and writes at once.
            if len(pending) < FINISH_BATCH_MAX and len(self._active) > len(pending):
                self._finish_window_over = False
                window = loop.call_later(FINISH_COALESCE_SECONDS, self._end_finish_window)
                try:
                    while (
                        len(pending) < FINISH_BATCH_MAX
                        and len(self._active) > len(pending)
                        and not self._finish_window_over
                    ):
                        await self._next_outcome()
                finally:
                    window.cancel()
            batch = pending[:FINISH_BATCH_MAX]
            del pending[:FINISH_BATCH_MAX]
            results = await self._save_outcomes([request for request, _ in batch])
            for (_, done), result in zip(batch, results, strict=True):
                if done.done():
                    continue
                if isinstance(result, BaseException):
                    done.set_exception(result)
                else:
                    done.set_result(result)

    async def _next_outcome(self) -> None:
        """Wait until an outcome is queued or the finisher's window ends."""
        wake = self._finish_wake = asyncio.get_running_loop().create_future()
        try:
            await wake
        finally:
            self._finish_wake = None

    def _wake_finisher(self) -> None:
        wake = self._finish_wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def _end_finish_window(self) -> None:
        self._finish_window_over = True
        self._wake_finisher()

    async def _save_outcomes(
        self, requests: list[FinishRequest]
    ) -> list[FinishedRun | BaseException | None]:
        """finish_many, so that one outcome the database refuses cannot take the others with
        it: a refused batch is saved one by one, and a refused outcome is saved once more
        without its texts (the run did run; its status must not be lost with its log tail)."""
        try:
            saved: list[FinishedRun | BaseException | None] = list(
                # An outage journals every unsaved outcome (`_database_failed`).
                await self._write(partial(self._finish_many, requests))
            )
        except StoreError as exc:
            if len(requests) > 1:
                one_by_one: list[FinishedRun | BaseException | None] = []
                for request in requests:
                    one_by_one += await self._save_outcomes([request])
                return one_by_one
            request = requests[0]
            outcome = request.outcome
            texts = outcome.log_tail is not None or outcome.note is not None
            if isinstance(exc, LeaseLost | InvalidTransition) or not texts:
                return [exc]
            log.error(
                "run.outcome_text_refused",
                run_id=request.lease.run_id,
                error=str(exc),
                error_code=exc.code,
            )
            bare = replace(
                request,
                outcome=replace(
                    outcome,
                    log_tail=None,
                    note=f"the log tail and note could not be stored ({exc.code}); "
                    "see the run's log file",
                ),
            )
            try:
                return list(await self._write(partial(self._finish_many, [bare])))
            except StoreError as again:
                return [again]
        except Exception as exc:  # noqa: BLE001 - handed to each waiting supervisor
            return [exc] * len(requests)
        for request, result in zip(requests, saved, strict=True):
            if result is None:
                # Not recorded (the lease looked lost): the journal stays until it is, for the
                # revival below or for whoever takes the run over on this machine.
                continue
            self._journal_done(request.lease.run_id)
        return saved

    # ------------------------------------------------------------------ outcome journal

    def _journal_path(self, run_id: str, attempt: int) -> Path:
        return Path(self.settings.log_dir) / f"{run_id}.{attempt}.outcome.json"

    def _journal_done(self, run_id: str) -> None:
        """The run's outcome is recorded: a journal kept meanwhile has done its job."""
        path = self._journaled.pop(run_id, None)
        if path is not None:
            path.unlink(missing_ok=True)

    def _journal_unsaved(self) -> None:
        """Journal every outcome waiting to be saved: the batch being written and those queued
        behind it, which wait for as long as the outage lasts."""
        self._journal_outcomes(
            [r for r in self._unsaved.values() if r.lease.run_id not in self._journaled]
        )

    def _journal_outcomes(self, requests: Sequence[FinishRequest]) -> None:
        """The database is down while inline runs' outcomes wait to be saved: keep each next to
        its log, so that if this launcher stops before the database returns, the launcher that
        takes the run over (on this machine) records how it really ended instead of calling it
        lost and running it again."""
        for request in requests:
            sup = self._active.get(request.lease.run_id)
            if sup is None or sup.executor.name != "inline":
                continue
            run, o = sup.claimed.run, request.outcome
            path = self._journal_path(run.id, run.attempt)
            ago = 0.0 if sup.ended_monotonic is None else time.monotonic() - sup.ended_monotonic
            record = {
                "run_id": run.id,
                "attempt": run.attempt,
                "launcher": self.owner,
                "status": o.status.value,
                "end_reason": o.end_reason,
                "exit_code": o.exit_code,
                "error_code": o.error_code,
                "log_tail": o.log_tail,
                "note": o.note,
                "ended_at": (datetime.now(UTC) - timedelta(seconds=max(0.0, ago))).isoformat(),
            }
            tmp = path.with_suffix(".tmp")
            try:
                with tmp.open("w", encoding="utf-8") as fh:
                    json.dump(record, fh)
                    fh.flush()
                    os.fsync(fh.fileno())
                tmp.replace(path)
            except OSError as exc:
                log.error("run.journal_failed", run_id=run.id, error=str(exc))
                continue
            self._journaled[run.id] = path

    def _journaled_outcome(self, sup: Supervised) -> Outcome | None:
        """How an inline run ended, from the journal of the launcher that ran it, if any. Sets
        `sup.ended_monotonic` from the journal's end time, so the run keeps its real end."""
        run = sup.claimed.run
        path = self._journal_path(run.id, run.attempt)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            outcome = Outcome(
                RunStatus(record["status"]),
                str(record["end_reason"]),
                exit_code=record.get("exit_code"),
                error_code=record.get("error_code"),
                log_tail=record.get("log_tail"),
                note=f"recorded from the outcome journal of launcher {record.get('launcher')}, "
                f"which ran it (it ended at {record.get('ended_at')}) and could not save the "
                "outcome before its lease expired"
                + (f"; {record['note']}" if record.get("note") else ""),
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("run.journal_unreadable", run_id=run.id, path=str(path), error=str(exc))
            return None
        self._journaled[run.id] = path  # removed once this outcome is recorded
        sup.ended_monotonic = time.monotonic() - _seconds_since_wall(record.get("ended_at"))
        return outcome

    async def _write(self, op: Callable[[], Awaitable[T]]) -> T:
        """A store write that survives a database outage: retried with backoff until it lands,
        the lease is lost, or the launcher stops. A failure journals the unsaved outcomes."""
        delay = 0.2
        while True:
            try:
                result = await op()
            except DatabaseConflict as exc:
                # Aborted to break a conflict (a deadlock): nothing was written; run it again.
                # The database is up, so nothing is journaled and no hold-off starts.
                log.info("store.write_conflict_retry", error=str(exc), delay=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            except DatabaseUnavailable as exc:
                log.warning("store.write_retry", error=str(exc), delay=delay)
                self._database_failed()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            else:
                self._database_ok()
                return result

    async def _cancel_execution(self, sup: Supervised, *, grace: float) -> None:
        if sup.execution is None or sup.cancel_sent:
            return
        sup.cancel_sent = True
        with contextlib.suppress(Exception):
            await sup.executor.cancel(sup.execution, grace=grace)

    # ------------------------------------------------------------------ leases, cancels, heartbeat

    def _database_ok(self) -> None:
        """A write landed: the database is back (said once, after an outage)."""
        if self._database_down:
            self._database_down = False
            log.info("launcher.database_reachable", hint="the database answers again")

    def _database_failed(self) -> None:
        """Hold off taking over other launchers' runs for a lease TTL from now; journal the
        outcomes that wait to be saved, and those that end until a write lands."""
        self._database_down = True
        self._journal_unsaved()
        self._recover_after = time.monotonic() + self.settings.lease_ttl

    async def _lease_keeper(self) -> None:
        while True:
            renewed = await self.renew_leases()
            # After a failed renewal try again soon: the database may be back in a moment, and
            # the leases must be revived before other launchers' hold-off runs out.
            await asyncio.sleep(
                self.settings.lease_renew_interval
                if renewed
                else min(1.0, self.settings.lease_renew_interval)
            )

    # Renewals and outcome saves of this launcher's runs never run at the same time: both lock
    # several run rows, in whatever order the plan visits them, and two such statements racing
    # deadlock (PostgreSQL breaks it after deadlock_timeout by failing one). Held for one
    # statement at a time, never across a retry's wait. Other launchers' rows are disjoint.
    async def _renew(self, leases: list[Lease]) -> set[str]:
        async with self._lease_writes:
            return await self.store.renew(leases, self.settings.lease_ttl)

    async def _finish_many(self, requests: Sequence[FinishRequest]) -> list[FinishedRun | None]:
        async with self._lease_writes:
            return await self.store.finish_many(requests)

    async def renew_leases(self) -> bool:
        """Renew every held lease; kill the executions whose lease is gone. False when the
        database could not be reached."""
        held = [s.lease for s in self._active.values() if not s.lost]
        if not held:
            return True
        locked: set[str] = set()
        try:
            try:
                kept = await self._renew(held)
            except DatabaseConflict:
                if len(held) == 1:
                    raise
                # A row another session keeps locked (an operator's open transaction) fails the
                # whole renewal at the lock timeout: renewed one by one, the other leases are
                # kept; the locked one is tried again at the next renewal, not given up.
                kept, locked = await self._renew_each(held)
                log.warning("lease.renew_locked", runs=sorted(locked), leases=len(held))
        except StoreError as exc:
            log.warning("lease.renew_failed", error=str(exc), leases=len(held))
            if isinstance(exc, DatabaseUnavailable):
                self._database_failed()
            return False
        self._database_ok()
        for lease in held:
            if lease.run_id not in kept and lease.run_id not in locked:
                sup = self._active.get(lease.run_id)
                if sup is None or sup.lost or sup.lease != lease:
                    # (Gone, or released and claimed again while this renewal was in flight:
                    # the new lease is not the one that failed.)
                    continue
                if lease.run_id in self._unsaved:
                    # Its outcome is being saved: that write commits the run (so it is no
                    # longer `running` for the renewal to find), or finds the lease lost itself.
                    continue
                sup.lost = True  # logged once, when its supervision ends
                if sup.executor.name == "inline":
                    await self._cancel_execution(sup, grace=0.0)
        return True

    async def _renew_each(self, held: list[Lease]) -> tuple[set[str], set[str]]:
        """Renew `held` one lease at a time: the leases renewed, and those whose row was locked."""
        kept: set[str] = set()
        locked: set[str] = set()
        for lease in held:
            try:
                kept |= await self._renew([lease])
            except DatabaseConflict:
                locked.add(lease.run_id)
        return kept, locked

    async def _poll_cancels(self) -> None:
        if not self._active:
            return
        for run_id in await self.store.cancel_requests(self.owner):
            sup = self._active.get(run_id)
            if sup is not None and sup.execution is not None:
                log.info("run.cancelling", run_id=run_id)
                await self._cancel_execution(sup, grace=sup.claimed.run.kill_grace_seconds)

    async def _heartbeat_loop(self) -> None:
        while True:
            try:
                await self.beat()
            except StoreError as exc:
                log.warning("heartbeat.failed", error=str(exc))
            await asyncio.sleep(self.settings.heartbeat_interval)

    def _stamp(self) -> CatalogStamp:
        """The digest and job names of the catalog this launcher runs (worked out once)."""
        if self._catalog_stamp is None:
            self._catalog_stamp = stamp_catalog(self.catalog)
        return self._catalog_stamp

    async def beat(self) -> None:
        running: dict[str, int] = {}
        for sup in self._active.values():
            running[sup.executor.name] = running.get(sup.executor.name, 0) + 1
        stamp = self._stamp()
        await self.store.beat(
            Heartbeat(
                launcher_id=self.owner,
                host=socket.gethostname(),
                pid=os.getpid(),
                version=__version__,
                started_at=self._started_at,
                queue_depth=await self.store.count_queued(),
                running=running,
                catalog_digest=stamp.digest,
                catalog_loaded_at=self._started_at,
                catalog_jobs=stamp.jobs,
                catalog_path=self._catalog_path,
                heartbeat_interval=self.settings.heartbeat_interval,
                catalog_chains=stamp.chains,
                log_dir=self._log_dir,
            )
        )
        # A launcher that died without removing its row (SIGKILL, lost host) goes after a while.
        for gone in await self.store.prune_launchers(self.settings.launcher_prune_after):
            log.info("launcher.pruned", launcher=gone)
