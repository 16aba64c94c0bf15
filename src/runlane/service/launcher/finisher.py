"""The finisher: records runs' outcomes, saved in batches, and keeps them safe through a
database outage (retried writes, the outcome journal)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from functools import partial
from typing import TypeVar

import structlog

from runlane.core.runs import (
    EndReason,
    NewRun,
    Outcome,
    Run,
    RunStatus,
    Trigger,
    first_dedupe_key,
    retry_backoff_seconds,
    retry_dedupe_key,
    should_retry,
)
from runlane.errors import (
    DatabaseConflict,
    DatabaseUnavailable,
    InvalidTransition,
    LeaseLost,
    StoreError,
)
from runlane.ports import FinishedRun, FinishRequest, RunLog
from runlane.service.launcher.journal import OutcomeJournal
from runlane.service.launcher.leases import LeaseWrites
from runlane.service.launcher.supervised import Supervised, Tunables, loop_time

log = structlog.get_logger("runlane.launcher")

T = TypeVar("T")

FINISH_BATCH_MAX = 64
FINISH_COALESCE_SECONDS = 0.003


def retry_command(run: Run, now: datetime) -> NewRun:
    """The next attempt of `run`: a new row, launcher-owned, due after an exponential backoff."""
    attempt = run.attempt + 1
    return NewRun(
        id=str(uuid.uuid4()),
        job=run.job,
        trigger=Trigger.RETRY,
        dedupe_key=retry_dedupe_key(first_dedupe_key(run.dedupe_key, run.attempt), attempt),
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


class Finisher:
    """Records outcomes: `record` builds the save (a retry, a cancel that came true), queues it
    and waits; `run` saves whatever queued up while the previous batch was being written in one
    transaction (one commit, one fsync for many runs).

    It is also where the launcher learns the database is down (`database_failed`) or back
    (`database_answered`): while it is down, every outcome waiting to be saved is journaled, and
    other launchers' expired leases are left alone until `takeover_after` (monotonic time): they
    lost their database too, and need a lease TTL to reconnect and revive their leases."""

    def __init__(
        self,
        store: RunLog,
        lease_writes: LeaseWrites,
        journal: OutcomeJournal,
        active: Mapping[str, Supervised],
        tunables: Tunables,
        *,
        lease_ttl: float,
    ) -> None:
        self._store = store
        self._lease_writes = lease_writes
        self._journal = journal
        self._journal_done = journal.done
        self._active = active
        self._lease_ttl = lease_ttl
        self._tunables = tunables
        self.chain_nudge: asyncio.Event | None = None  # set when a chain's step ends
        # Called when a run fails, with when it ended (`time.monotonic()`).
        self.alert_nudge: Callable[[float | None], None] | None = None
        self.database_down = False  # from a failed database call until a write lands
        self.takeover_after = 0.0
        # Outcomes handed over and not yet saved (run id → request): when the database fails,
        # every one of them is journaled, not only the batch being written.
        self.unsaved: dict[str, FinishRequest] = {}
        # Outcomes waiting for `run`, and the future it waits on for the next one (cheaper per
        # run than an asyncio.Queue waited on with a timeout).
        self._pending: list[tuple[FinishRequest, asyncio.Future[FinishedRun | None]]] = []
        self._wake: asyncio.Future[None] | None = None
        self._window_over = False

    # ------------------------------------------------------------------ the database's health

    def database_answered(self) -> None:
        """A write landed: the database is back (said once, after an outage)."""
        if self.database_down:
            self.database_down = False
            log.info("launcher.database_reachable", hint="the database answers again")

    def database_failed(self) -> None:
        """Hold off taking over other launchers' runs for a lease TTL from now; journal the
        outcomes that wait to be saved, and those that end until a write lands."""
        self.database_down = True
        self._journal_outcomes(
            [r for r in self.unsaved.values() if r.lease.run_id not in self._journal]
        )
        self.takeover_after = time.monotonic() + self._lease_ttl

    async def write_until_landed(self, op: Callable[[], Awaitable[T]]) -> T:
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
                self.database_failed()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            else:
                self.database_answered()
                return result

    # ------------------------------------------------------------------ recording an outcome

    async def record(self, sup: Supervised, outcome: Outcome) -> FinishedRun:
        """Save how the run ended (and its next attempt, if it is retried), and return what was
        saved; raises LeaseLost when another launcher holds the run now."""
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
        # A run somebody asked to cancel is never retried, whatever it ended with (a request
        # that came after this launcher last looked is caught by the store's save).
        cancel_requested = run.cancel_requested_at is not None or sup.cancel_requested
        if not cancel_requested and should_retry(outcome, run.attempt, run.max_attempts):
            # Database time now, from the claim's database time and the loop's clock since: no
            # round trip, so an outcome is never held back from the finisher (and its journal)
            # by a database outage.
            db_now = sup.claimed.db_now + timedelta(seconds=max(0.0, loop_time() - sup.claimed_at))
            retry = retry_command(run, db_now)
            retry = replace(
                retry,
                not_before=db_now
                + timedelta(
                    seconds=retry_backoff_seconds(
                        run.attempt, base=self._tunables.retry_base_seconds
                    )
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
            if run.id in await self.write_until_landed(
                lambda: self._lease_writes.renew([sup.lease])
            ):
                final = await self._finish(request)
            if final is None:
                final = await self._saved_already(sup, outcome, retry_asked=retry is not None)
                if final is not None:
                    self._journal_done(run.id)
            if final is None:
                raise LeaseLost(f"lease on run {run.id} is lost: outcome not saved")
        if run.chain_root_id is not None and self.chain_nudge is not None:
            self.chain_nudge.set()  # the chain may start its next steps now
        if self.alert_nudge is not None and final.status in (RunStatus.FAILURE, RunStatus.TIMEOUT):
            # The run_failed rule looks now, not at its next interval, and back to the run's
            # end, which may be long before the save (a takeover, an outage, the journal).
            self.alert_nudge(sup.ended_monotonic)
        log.info(
            "run.finished",
            run_id=run.id,
            job=run.job,
            status=final.status.value,
            end_reason=final.end_reason,
            attempt=run.attempt,
            retry=retry.id if retry is not None and final.retried else None,
        )
        return final

    async def _saved_already(
        self, sup: Supervised, outcome: Outcome, *, retry_asked: bool
    ) -> FinishedRun | None:
        """The run's row when it already holds this outcome under this launcher's lease: a save
        whose answer was lost (the connection dropped at COMMIT) and was written again found the
        row final. None when someone else ended or took the run."""
        try:
            row = await self.write_until_landed(lambda: self._store.get_run(sup.lease.run_id))
        except StoreError:
            return None
        if (
            row.status.is_final
            and (row.lease_token, row.lease_generation) == (sup.lease.token, sup.lease.generation)
            and (row.status, row.end_reason) == (outcome.status, outcome.end_reason)
        ):
            retried = retry_asked and row.cancel_requested_at is None
            return FinishedRun(row.id, row.status, row.end_reason, retried=retried)
        return None

    async def _finish(self, request: FinishRequest) -> FinishedRun | None:
        """Queue an outcome for `run`; what was saved, or None when the lease is lost."""
        done: asyncio.Future[FinishedRun | None] = asyncio.get_running_loop().create_future()
        run_id = request.lease.run_id
        self.unsaved[run_id] = request
        if self.database_down:
            self._journal_outcomes([request])
        self._pending.append((request, done))
        self._wake_up()
        try:
            return await done
        finally:
            self.unsaved.pop(run_id, None)

    # ------------------------------------------------------------------ batched saves

    async def run(self) -> None:
        """Save queued outcomes in batches, until cancelled."""
        loop = asyncio.get_running_loop()
        pending = self._pending
        while True:
            while not pending:
                await self._next_outcome()
            # Under load, give the batch a few milliseconds to fill: one commit for many runs.
            # An idle launcher has nothing else to wait for and writes at once.
            if len(pending) < FINISH_BATCH_MAX and len(self._active) > len(pending):
                self._window_over = False
                window = loop.call_later(FINISH_COALESCE_SECONDS, self._end_window)
                try:
                    while (
                        len(pending) < FINISH_BATCH_MAX
                        and len(self._active) > len(pending)
                        and not self._window_over
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
        """Wait until an outcome is queued or the batch's window ends."""
        wake = self._wake = asyncio.get_running_loop().create_future()
        try:
            await wake
        finally:
            self._wake = None

    def _wake_up(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def _end_window(self) -> None:
        self._window_over = True
        self._wake_up()

    async def _save_outcomes(
        self, requests: list[FinishRequest]
    ) -> list[FinishedRun | BaseException | None]:
        """finish_many, so that one outcome the database refuses cannot take the others with
        it: a refused batch is saved one by one, and a refused outcome is saved once more
        without its texts (the run did run; its status must not be lost with its log tail)."""
        finish_many = self._lease_writes.finish_many
        try:
            saved: list[FinishedRun | BaseException | None] = list(
                # An outage journals every unsaved outcome (`database_failed`).
                await self.write_until_landed(partial(finish_many, requests))
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
                return list(await self.write_until_landed(partial(finish_many, [bare])))
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

    def _journal_outcomes(self, requests: Sequence[FinishRequest]) -> None:
        """The database is down while inline runs' outcomes wait to be saved: keep each next to
        its log, so that if this launcher stops before the database returns, the launcher that
        takes the run over (on this machine) records how it really ended instead of calling it
        lost and running it again."""
        for request in requests:
            sup = self._active.get(request.lease.run_id)
            if sup is None or sup.executor.name != "inline":
                continue
            self._journal.keep(sup.claimed.run, request.outcome, sup.ended_monotonic)
