"""The supervisor: one task per claimed run, from starting (or reattaching to) its execution to
the outcome handed to the finisher."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, MutableMapping

import structlog

from runlane.catalog import Catalog
from runlane.core.runs import Claimed, EndReason, Outcome, Run, RunStatus, joined_notes
from runlane.core.trace import trace_id_of
from runlane.errors import (
    LeaseLost,
    PermanentExecutorError,
    StoreError,
    TemporaryExecutorError,
    UnknownJob,
)
from runlane.ports import Executor, SupervisorStore
from runlane.service.catalog_stamp import live_launchers
from runlane.service.launcher.finisher import Finisher
from runlane.service.launcher.journal import OutcomeJournal, seconds_since_wall
from runlane.service.launcher.leases import ExternalIdWrites
from runlane.service.launcher.signals import CLAIMED, FINISHED, LEASE_LOST, STARTED, LauncherHook
from runlane.service.launcher.spec import JobPlan, execution_spec
from runlane.service.launcher.supervised import Supervised, Tunables, loop_time
from runlane.service.metrics import LauncherMetrics

log = structlog.get_logger("runlane.launcher")

# A run of a job this launcher does not know, when another live launcher does: due again this
# soon, for that one to take (each claim of it here gives it back again).
UNKNOWN_JOB_HANDOFF_SECONDS = 2.0


def lost_outcome(run: Run) -> Outcome:
    """How a run taken over from a launcher that stopped renewing its lease ends, when nothing
    of its execution is left to follow."""
    return Outcome(
        RunStatus.FAILURE,
        EndReason.LAUNCHER_LOST,
        error_code="launcher_lost",
        # What is known: the lease expired without renewal. Its launcher died (and its guardian
        # ended the process), or was paused or cut off from the database for longer than the
        # lease; then the process may have run on.
        note=f"the launcher supervising attempt {run.attempt} stopped renewing its lease (it "
        "stopped, or was paused or cut off from the database for longer than the lease); the "
        "attempt is not supervised any more",
    )


class Supervisor:
    """Supervises each claimed run in a task of its own (`supervise`): the execution's outcome goes
    to the finisher; corrupt stored state and a provider that cannot be reached give the run
    back to the queue."""

    def __init__(
        self,
        store: SupervisorStore,
        catalog: Catalog,
        executors: Mapping[str, Executor],
        finisher: Finisher,
        external_ids: ExternalIdWrites,
        journal: OutcomeJournal,
        active: MutableMapping[str, Supervised],
        wake: asyncio.Event,
        hook: LauncherHook | None,
        tunables: Tunables,
        *,
        owner: str,
        run_database_url: str,
        launcher_stale_after: float,
        metrics: LauncherMetrics,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._executors = executors
        self._journal = journal
        self._active = active
        self._wake = wake  # the consumer's: a slot is free
        self._hook = hook
        self._owner = owner
        self._run_database_url = run_database_url
        self._tunables = tunables
        self._launcher_stale_after = launcher_stale_after
        self._metrics = metrics
        self._record = finisher.record
        self._save_external_id = external_ids.save
        self._write_until_landed = finisher.write_until_landed
        # Resolved jobs by name, with what every run of each shares (its environment and
        # profile as the executors take them): the catalog never changes under a launcher, and
        # its own cache is slow to read.
        self._jobs: dict[str, JobPlan] = {}

    def emit(self, signal: str, run_id: str) -> None:
        """Tell the hook, if any (`LauncherSignal`)."""
        if self._hook is not None:
            self._hook(signal, run_id)

    def supervise(self, claimed: Claimed) -> None:
        """Supervise a run this launcher just claimed (or took over), in a task of its own."""
        sup = Supervised(
            claimed=claimed, lease=claimed.lease, executor=self._executors[claimed.run.executor]
        )
        self._active[claimed.run.id] = sup
        if not claimed.recovered:
            self._metrics.run_claimed(claimed.run, claimed.db_now)
        sup.task = asyncio.create_task(self._supervise(sup), name=f"run-{claimed.run.id}")
        self.emit(CLAIMED, claimed.run.id)

    async def _supervise(self, sup: Supervised) -> None:
        """The run's whole supervision: its outcome recorded (or the run given back), then its
        slot and lease let go."""
        run = sup.claimed.run
        if run.traceparent is not None:
            # This task's own context: every line it logs about the run names its trace.
            structlog.contextvars.bind_contextvars(trace_id=trace_id_of(run.traceparent))
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
                final = await self._record(sup, outcome)
                ran = None
                if sup.started_monotonic is not None and sup.ended_monotonic is not None:
                    ran = sup.ended_monotonic - sup.started_monotonic
                self._metrics.run_finished(run, final.status.value, ran)
        except LeaseLost:
            sup.lost = True
        except Exception:  # a bug must not take the launcher down; the lease will expire
            log.exception("run.supervisor_crashed", run_id=run.id, job=run.job)
        finally:
            # Unless this launcher took the run over from itself (its lease expired while it
            # still supervised the run: a stalled loop) and a newer supervision now follows the
            # same execution: then the execution, its tracking and the slot are that one's.
            current = self._active.get(run.id) is sup
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
                self.emit(LEASE_LOST, run.id)
                self._metrics.lease_lost(run)
                if current and sup.execution is not None and sup.executor.name == "inline":
                    await sup.cancel_execution(grace=0.0)
            if self._active.get(run.id) is sup and sup.execution is not None:
                # Whatever the executor still holds for it goes: its events ended (nothing is
                # left), or were never read or were cut short (a lease lost while its Job name
                # was being saved, a crash, a shutdown), which would keep a watch subscription
                # or a poll for the launcher's life.
                try:
                    sup.executor.stop_following(sup.execution)
                except Exception:
                    log.exception("run.stop_following_failed", run_id=run.id, job=run.job)
            if self._active.get(run.id) is sup:  # (looked at again: the cancel may await)
                del self._active[run.id]
            self._wake.set()
            self.emit(FINISHED, run.id)

    async def _execute(self, sup: Supervised) -> Outcome | None:
        """Start (or reattach to) the execution and wait for its outcome. None → nothing to
        record (released for a later retry)."""
        claimed = sup.claimed
        run = claimed.run
        recovered = claimed.recovered
        try:
            plan = self._jobs.get(run.job) or self._jobs.setdefault(
                run.job, JobPlan.of(self._catalog.resolve(run.job))
            )
        except UnknownJob:
            if recovered and sup.executor.name == "inline":
                # Taken over from a launcher that stopped: its process ended with it, and it
                # ran. Given back to the queue, it would start again as the same attempt (its
                # start forgotten); it is lost as any other run of a launcher that stopped.
                return self._journaled(sup) or lost_outcome(run)
            await self._keep_for_repair(
                sup, "unknown_job", f"job {run.job!r} is not in the catalog; kept for repair"
            )
            return None
        if run.params is None:
            await self._keep_for_repair(
                sup, "corrupt_params", "the stored params are not valid JSON; kept for repair"
            )
            return None
        if recovered and sup.executor.name == "inline":
            journaled = self._journaled(sup)
            if journaled is not None:
                return journaled
        spec = execution_spec(run, plan, claimed.db_now, self._run_database_url)
        if spec.deadline_seconds <= 0:
            return Outcome(
                RunStatus.TIMEOUT,
                EndReason.DEADLINE,
                error_code="deadline",
                note="the deadline passed while no launcher supervised the run"
                if recovered
                else "deadline passed before the run could start",
            )
        try:
            execution = await (
                sup.executor.reattach(spec) if recovered else sup.executor.start(spec)
            )
        except TemporaryExecutorError as exc:
            # The provider is unreachable right now: give the run back and look again later
            # (an execution that was started keeps running and is reattached then).
            delay, code, note = exc.retry_after, exc.code, str(exc)
            self._metrics.executor_error(sup.executor.name, code)
            await self._write_until_landed(
                lambda: self._store.release(
                    sup.lease, retry_after=delay, error_code=code, note=note
                )
            )
            log.warning(
                "run.reattach_deferred" if recovered else "run.start_deferred",
                run_id=run.id,
                error_code=code,
            )
            return None
        except PermanentExecutorError as exc:
            self._metrics.executor_error(sup.executor.name, exc.code)
            if not recovered:
                return Outcome(
                    RunStatus.FAILURE,
                    EndReason.START_FAILED,
                    error_code=exc.code,
                    note=str(exc),
                    retryable=False,
                )
            # E.g. a pod run's Job is gone (deleted, or removed by its TTL, while no launcher
            # watched it). Never seen started: the old launcher died starting it (below).
            if run.external_id is not None or exc.code != "deleted_externally":
                return Outcome(
                    RunStatus.FAILURE, EndReason.ORPHANED, error_code=exc.code, note=str(exc)
                )
            execution = None
        if execution is None:  # (only a reattach finds nothing)
            return lost_outcome(run)
        sup.execution = execution
        started_late = loop_time() - sup.claimed_at > spec.deadline_seconds
        if started_late and not recovered:
            # A slow provider call must never leave an expired run going: end it now.
            await sup.cancel_execution(grace=run.kill_grace_seconds)
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
            # Committed before the run is reported started: a launcher that takes it over
            # tells a Job deleted while it ran (orphaned) from one never created (lost).
            await self._save_external_id(sup.lease, execution.external_id)
        if not recovered:  # (a reattached run's duration is not known here)
            sup.started_monotonic = time.monotonic()
            self._metrics.run_started(run)
        self.emit(STARTED, run.id)
        log.debug("run.started", run_id=run.id, job=run.job, external_id=execution.external_id)
        outcome: Outcome | None = None
        async for event in sup.executor.events(execution):
            if event.kind == "finished":
                outcome = event.outcome
                if event.ended_at is not None:
                    ago = seconds_since_wall(event.ended_at.isoformat())
                    if ago > self._tunables.provider_end_trusted_after:
                        sup.ended_monotonic = time.monotonic() - ago
        if outcome is None:  # an executor bug; never leave the run without a status
            outcome = Outcome(RunStatus.FAILURE, EndReason.ORPHANED, error_code="no_outcome")
        if sup.shutdown and outcome.status is RunStatus.CANCELLED and not sup.cancel_requested:
            # Ended by the shutdown. A run that ended otherwise meanwhile (by itself, at its
            # deadline, or cancelled by someone) keeps the outcome it had.
            outcome = Outcome(
                RunStatus.FAILURE,
                EndReason.LAUNCHER_SHUTDOWN,
                exit_code=outcome.exit_code,
                error_code="launcher_shutdown",
                log_tail=outcome.log_tail,
                note=joined_notes("the launcher shut down before the run finished", outcome.note),
            )
        return outcome

    def _journaled(self, sup: Supervised) -> Outcome | None:
        """The outcome this launcher journaled for the run before it restarted, if any."""
        journaled = self._journal.read(sup.claimed.run)
        if journaled is None:
            return None
        outcome, sup.ended_monotonic = journaled
        return outcome

    async def _keep_for_repair(self, sup: Supervised, error_code: str, note: str) -> None:
        """Corrupt stored state never crashes or blocks the launcher, and is never dropped: the
        run goes back to the queue with a diagnostic code and is looked at again later (its queue
        TTL still applies). `runlane doctor` lists such runs."""
        run = sup.claimed.run
        retry_after = self._tunables.repair_retry_seconds
        if error_code == "unknown_job" and await self._another_launcher_knows(run.job):
            # Another launcher, started since the catalog changed, has the job: give the run
            # back for it to take soon, not after the repair interval. Not an error here.
            retry_after = min(retry_after, UNKNOWN_JOB_HANDOFF_SECONDS)
            note += "; another live launcher has the job"
            log.info("run.handed_back", run_id=run.id, job=run.job, error_code=error_code)
        else:
            log.error("run.corrupt", run_id=run.id, job=run.job, error_code=error_code)
        await self._write_until_landed(
            lambda: self._store.release(
                sup.lease, retry_after=retry_after, error_code=error_code, note=note
            )
        )

    async def _another_launcher_knows(self, job: str) -> bool:
        """True if a live launcher other than this one reports `job` in its catalog."""
        try:
            beats, now = await self._store.launchers(), await self._store.now()
        except StoreError:
            return False
        live = live_launchers(beats, now, self._launcher_stale_after)
        return any(
            h.launcher_id != self._owner and h.catalog_jobs is not None and job in h.catalog_jobs
            for h in live
        )
