"""The launcher's alert loop: evaluates the rules (docs/alerts.md) at least every `interval`
seconds (and soon after a run fails), records incidents, and delivers their notifications to
every target — claimed in the database, so several launchers and restarts send each once.

Three tasks of their own, so no send, however slow, holds up an evaluation or the launcher's
other loops: evaluation, delivery (one send at a time per target, targets side by side), and the
dead man's switch. Every send is bounded (`SEND_TIMEOUT`) and a failed one is retried with
backoff (Retry-After honoured), its state kept on the incident's notice row; a 429 pauses the
target for every launcher (`alert_targets.paused_until`). The broker's dead-letter depth is
waited for at most `DLQ_TIMEOUT` per evaluation, so a broker outage holds up no other rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import structlog

from runlane.catalog import Catalog
from runlane.core.alert_rules import (
    CHAIN_OVERDUE,
    DLQ_DEPTH,
    LAUNCHER_STALE,
    RUN_FAILED,
    Plan,
    Resolve,
    Send,
    next_send,
    plan_chain_overdue,
    plan_chain_overran,
    plan_dlq_depth,
    plan_launcher_stale,
    plan_run_failed,
    send_backoff,
)
from runlane.core.incidents import Incident, Notice, TargetHealth
from runlane.core.runs import Run
from runlane.errors import StoreError
from runlane.ports import Store
from runlane.ports.notifier import (
    Notification,
    NotificationLevel,
    NotifyPermanentError,
    NotifyTemporaryError,
)
from runlane.service.alerts.stats import ALERT_STATS, AlertStats
from runlane.service.alerts.targets import Target, resolve_url
from runlane.service.wiring import HttpPinger, build_pinger

log = structlog.get_logger("runlane.alerts")

DEFAULT_INTERVAL = 30.0
SEND_TIMEOUT = 10.0  # one notification's bound
CLAIM_LEASE = SEND_TIMEOUT + 20.0  # a claim outlives its send; a crashed sender's expires
DEADMAN_INTERVAL = 60.0
DEADMAN_TIMEOUT = 10.0
# A finish committed after a later one was read (several launchers) is still seen: each read
# starts this far before the cursor, and occurrences already counted are not counted again.
LATE_COMMIT_GRACE = 60.0
FIRST_LOOKBACK = 3600.0  # a rule's first evaluation reads the last hour, not all history
PAGE = 1000
MAX_PAGES = 20  # per evaluation; the rest is read at the next one
RESOLVED_WITHIN = 3600.0  # a resolved incident's notices are delivered for this long
# ... and, to a target that keeps failing, for this long after the start of its outage (back to
# its last success), so that an incident that opened and resolved during a long outage of the
# target is still sent, firing then resolved, once it answers again.
OWED_FOR = 86400.0
NUDGE_MIN_GAP = 1.0  # evaluations started by failures are at least this far apart
PRUNE_AFTER = 30 * 86400.0  # resolved incidents are kept 30 days
# An evaluation waits this long for the broker's dead-letter depth; a read still under way then
# (a broker that accepts and does not answer) decides nothing, and the next evaluation waits on
# it again rather than start another.
DLQ_TIMEOUT = 3.0
CHAIN_PAGE = 500

DlqDepth = Callable[[], Awaitable[int | None]]


@dataclass
class EvaluationReport:
    """What one evaluation did (tests and the bench read it)."""

    opened: list[Incident] = field(default_factory=list)
    counted: int = 0
    resolved: list[Incident] = field(default_factory=list)
    runs_read: int = 0


class AlertEngine:
    """The rules, the incidents and the notifications of one launcher."""

    def __init__(
        self,
        store: Store,
        catalog: Catalog,
        targets: Sequence[Target],
        *,
        owner: str,
        interval: float = DEFAULT_INTERVAL,
        stats: AlertStats | None = None,
        dlq_depth: DlqDepth | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        self.catalog = catalog
        self.targets = list(targets)
        self.owner = owner
        self.interval = interval
        self.stats = ALERT_STATS if stats is None else stats
        self.stats.register_targets(t.name for t in self.targets)
        self.dlq_depth = dlq_depth  # the RabbitMQ bus feeds it; None on the database bus
        settings = catalog.alerts
        self.heartbeat_stale = settings.heartbeat_stale
        self.repeat = settings.repeat
        self.ui_url = resolve_url(settings.ui_url)
        self.deadman_url = resolve_url(settings.deadman_url)
        self._levels = {name: catalog.resolve(name).alert for name in catalog.job_names()}
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not a secret
        self._nudge = asyncio.Event()  # a run failed: evaluate soon
        self._deliver_now = asyncio.Event()  # something may be owed: deliver now
        self._dlq_read: asyncio.Future[int | None] | None = None  # a depth read under way
        self._last_prune = 0.0
        # Where an evaluation that hit MAX_PAGES stopped reading failures: (finished_at, id).
        self._resume: tuple[datetime, str] | None = None
        # `time.monotonic()` when the earliest failure this launcher saved since the last read
        # ended: an outcome saved late (a takeover, a database outage, the outcome journal)
        # keeps the run's real end as `finished_at`, which may be before the cursor less the
        # grace; the next read reaches back to it.
        self._late_end: float | None = None

    # ------------------------------------------------------------------ loops

    def nudge(self, ended_monotonic: float | None = None) -> None:
        """A run ended badly: evaluate within `NUDGE_MIN_GAP` instead of at the next interval.
        `ended_monotonic`: when it ended (`time.monotonic()`), so that a failure saved long
        after its end (its `finished_at` before the cursor) is still read."""
        if ended_monotonic is not None and (
            self._late_end is None or ended_monotonic < self._late_end
        ):
            self._late_end = ended_monotonic
        self._nudge.set()

    async def run(self, stopping: asyncio.Event) -> None:
        """Evaluate, deliver and ping until `stopping` is set."""
        tasks = [
            asyncio.create_task(self._evaluate_loop(stopping), name="runlane-alerts-evaluate"),
            asyncio.create_task(self._deliver_loop(stopping), name="runlane-alerts-deliver"),
        ]
        if self.deadman_url is not None:
            tasks.append(
                asyncio.create_task(self._deadman_loop(stopping), name="runlane-alerts-deadman")
            )
        try:
            await stopping.wait()
        finally:
            pending: list[asyncio.Future[Any]] = [*tasks]
            if self._dlq_read is not None:
                pending.append(self._dlq_read)
                self._dlq_read = None
            for task in pending:
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _evaluate_loop(self, stopping: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while not stopping.is_set():
            started = loop.time()
            self._nudge.clear()
            try:
                report = await self.evaluate()
                if report.opened or report.resolved or report.counted:
                    self._deliver_now.set()
            except StoreError as exc:
                self.stats.evaluation_errors += 1
                log.warning("alerts.evaluate_failed", error=str(exc), error_code=exc.code)
            except Exception:  # a rule's bug must not end alerting for good
                self.stats.evaluation_errors += 1
                log.exception("alerts.evaluate_crashed")
            self.stats.last_evaluation_seconds = loop.time() - started
            next_at = started + self.interval
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, next_at - loop.time())):
                    await self._nudge.wait()
            # Woken by a failure: gather the burst for a moment, one evaluation reads it all.
            gap = started + NUDGE_MIN_GAP - loop.time()
            if gap > 0:
                await asyncio.sleep(gap)

    async def _deliver_loop(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            self._deliver_now.clear()
            wait = self.interval
            try:
                wait = min(wait, await self.deliver())
            except StoreError as exc:
                log.warning("alerts.deliver_failed", error=str(exc), error_code=exc.code)
            except Exception:
                log.exception("alerts.deliver_crashed")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.05, wait)):
                    await self._deliver_now.wait()

    async def _deadman_loop(self, stopping: asyncio.Event) -> None:
        url = self.deadman_url
        assert url is not None
        pinger = build_pinger("deadman")
        try:
            while not stopping.is_set():
                await self.ping_deadman(pinger, url)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(DEADMAN_INTERVAL):
                        await stopping.wait()
        finally:
            await pinger.aclose()

    async def ping_deadman(self, pinger: HttpPinger, url: str) -> bool:
        """One GET of the dead man's switch URL, bounded; a failure is logged and counted."""
        try:
            await pinger.request("GET", url, within=DEADMAN_TIMEOUT)
        except (NotifyTemporaryError, NotifyPermanentError) as exc:
            self.stats.deadman_failures += 1
            log.warning("alerts.deadman_failed", error=str(exc))
            return False
        self.stats.deadman_pings += 1
        return True

    # ------------------------------------------------------------------ evaluation

    async def evaluate(self) -> EvaluationReport:
        """Evaluate every rule once and record what changed."""
        report = EvaluationReport()
        store = self.store
        now = await store.now()
        open_incidents = await store.open_incidents()
        by_rule: dict[str, dict[str, Incident]] = {}
        for incident in open_incidents:
            by_rule.setdefault(incident.rule, {})[incident.key] = incident
        await self._run_failed(now, by_rule.get(RUN_FAILED, {}), report)
        heartbeats = await store.launchers()
        plan = plan_launcher_stale(
            heartbeats,
            now,
            self.heartbeat_stale,
            by_rule.get(LAUNCHER_STALE, {}),
            self_id=self.owner,
        )
        await self._apply(plan, report)
        await self._chain_overdue(now, by_rule.get(CHAIN_OVERDUE, {}), report)
        if self.dlq_depth is not None:
            depth = await self._read_dlq_depth(self.dlq_depth)
            dlq = next(iter(by_rule.get(DLQ_DEPTH, {}).values()), None)
            await self._apply(plan_dlq_depth(depth, now, dlq), report)
        self.stats.set_open(await store.open_incident_counts())
        self.stats.evaluations += 1
        if time.monotonic() - self._last_prune > 3600.0:
            self._last_prune = time.monotonic()
            await store.prune_incidents(PRUNE_AFTER)
        return report

    async def _read_dlq_depth(self, read: DlqDepth) -> int | None:
        """The dead-letter depth, waited for at most `DLQ_TIMEOUT`: None (the rule keeps its
        state) when the broker is down or slow to answer. A read still under way is not
        cancelled (it may be connecting; the bus bounds that itself) but waited on again by
        the next evaluation, so there is never more than one."""
        pending = self._dlq_read
        if pending is None:
            pending = self._dlq_read = asyncio.ensure_future(read())
        done, _ = await asyncio.wait({pending}, timeout=DLQ_TIMEOUT)
        if not done:
            log.warning("alerts.dlq_depth_slow", waited=DLQ_TIMEOUT)
            return None
        self._dlq_read = None
        return pending.result()  # (the hook's own error: the evaluation loop logs it)

    async def _run_failed(
        self, now: datetime, open_by_job: dict[str, Incident], report: EvaluationReport
    ) -> None:
        """Read the failures finished since the cursor (less the late-commit grace), and the
        last success in that window of each job with a failure read or an incident open: what
        `plan_run_failed` needs of the log, at a cost that follows the failures, not the runs.

        An evaluation reads at most `MAX_PAGES` pages; past that the next one (in this process)
        goes on from the last row read instead of from the cursor less the grace, so a storm of
        failures is read through to its end rather than its first pages again and again.

        A failure this launcher saved long after it ended (`nudge` was told when it ended) is
        read too: the read then starts that far back, less the grace."""
        late, self._late_end = self._late_end, None
        try:
            await self._read_failed(now, open_by_job, report, late)
        except BaseException:
            if late is not None and (self._late_end is None or late < self._late_end):
                self._late_end = late  # read it at the next evaluation
            raise

    async def _read_failed(
        self,
        now: datetime,
        open_by_job: dict[str, Incident],
        report: EvaluationReport,
        late: float | None,
    ) -> None:
        store = self.store
        cursor = await store.alert_cursor(RUN_FAILED)
        after_at = (cursor or now - timedelta(seconds=FIRST_LOOKBACK)) - timedelta(
            seconds=LATE_COMMIT_GRACE
        )
        after_id = ""
        resume, self._resume = self._resume, None
        if resume is not None and resume[0] > after_at:
            after_at, after_id = resume
        if late is not None:
            # A failure this launcher saved after it ended: its `finished_at` is about this far
            # back (the store's time at the save less the time since the end).
            floor = now - timedelta(seconds=time.monotonic() - late + LATE_COMMIT_GRACE)
            if floor < after_at:
                after_at, after_id = floor, ""
        window_start = after_at
        position = now
        failed: list[Run] = []
        for _ in range(MAX_PAGES):
            runs = await store.failed_since(after_at, after_id, limit=PAGE)
            failed.extend(runs)
            if runs:
                last = runs[-1]
                assert last.finished_at is not None
                after_at, after_id = last.finished_at, last.id
            if len(runs) < PAGE:
                break
        else:
            position = after_at  # more to read: the next evaluation goes on from here
            self._resume = (after_at, after_id)
        # Every page first, then one plan: a job's success after its failures resolves what they
        # would otherwise open. Only the job's last success in the window matters to the plan
        # (each success clears the failures before it), so it is the only one read.
        successes: list[Run] = []
        for job in sorted({r.job for r in failed} | open_by_job.keys()):
            ok = await store.last_success(job, window_start, position)
            if ok is not None:
                successes.append(ok)
        read = sorted([*failed, *successes], key=_finish_order)
        report.runs_read += len(read)
        if read:
            await self._apply(plan_run_failed(read, self._levels, open_by_job), report)
        await store.advance_alert_cursor(RUN_FAILED, min(position, now))

    async def _chain_overdue(
        self, now: datetime, open_by_chain_run: dict[str, Incident], report: EvaluationReport
    ) -> None:
        store = self.store
        active = []
        page = await store.active_chain_runs(limit=500)
        while page:
            active.extend(page)
            if len(page) < 500:
                break
            page = await store.active_chain_runs(after=page[-1], limit=500)
        plan, gone = plan_chain_overdue(active, now, open_by_chain_run)
        # ... and those that ran past their deadline and ended before an evaluation saw them
        # running late (no step running at the deadline: the chain ends within a second). Each
        # opens its incident once (the read leaves out those that have one); the next
        # evaluation resolves it as ended.
        cursor = await store.alert_cursor(CHAIN_OVERDUE)
        after = (cursor or now - timedelta(seconds=FIRST_LOOKBACK)) - timedelta(
            seconds=LATE_COMMIT_GRACE
        )
        ended = await store.overrun_chain_runs_ended(after, limit=CHAIN_PAGE)
        position = now
        if len(ended) >= CHAIN_PAGE and ended[-1].finished_at is not None:
            position = min(now, ended[-1].finished_at)  # the rest at the next evaluation
        record = (*plan.record, *plan_chain_overran(ended).record)
        resolves: list[Resolve] = []
        for chain_run_id in gone:
            try:
                chain_run = await store.get_chain_run(chain_run_id)
            except StoreError:  # NotFound included: pruned, or never there
                chain_run = None
            status = "gone" if chain_run is None else chain_run.status
            resolves.append(
                Resolve(
                    open_by_chain_run[chain_run_id], f"chain run {chain_run_id} ended ({status})"
                )
            )
        await self._apply(Plan(record, tuple(resolves)), report)
        await store.advance_alert_cursor(CHAIN_OVERDUE, position)

    async def _apply(self, plan: Plan, report: EvaluationReport) -> list[Incident]:
        opened: list[Incident] = []
        for resolve in plan.resolve:
            done = await self.store.resolve_incident(resolve.incident.id, resolve.resolution)
            if done is not None:
                report.resolved.append(done)
                log.info("alerts.resolved", incident=done.id, fingerprint=done.fingerprint)
        for new in plan.record:
            incident, created = await self.store.record_incident(new)
            if created:
                opened.append(incident)
                report.opened.append(incident)
                log.warning("alerts.opened", incident=incident.id, fingerprint=incident.fingerprint)
            else:
                report.counted += new.count
        return opened

    # ------------------------------------------------------------------ delivery

    async def deliver(self) -> float:
        """Send what every target owes; return the seconds until a retry is due (or the
        interval). Targets are served side by side, one send at a time each."""
        if not self.targets:
            return self.interval
        now = await self.store.now()
        # What resolved within RESOLVED_WITHIN is delivered to every target; a failing target is
        # owed, besides, what resolved since its outage began (its last success).
        recent = now - timedelta(seconds=RESOLVED_WITHIN)
        healths = {h.target: h for h in await self.store.alert_targets()}
        since = self._owed_since(now, healths)
        oldest = min([recent, *since.values()])
        incidents = await self.store.incidents_to_notify((now - oldest).total_seconds())
        if not incidents:
            return self.interval
        waits = await asyncio.gather(
            *(
                self._deliver_to(
                    target,
                    incidents,
                    now,
                    min(recent, since.get(target.name, now)),
                    paused=_paused_for(healths.get(target.name), now),
                )
                for target in self.targets
            )
        )
        return min(waits, default=self.interval)

    def _owed_since(self, now: datetime, healths: dict[str, TargetHealth]) -> dict[str, datetime]:
        """By failing target: from when a resolved incident is still owed to it (an hour
        before its last success, at most `OWED_FOR` back)."""
        names = {t.name for t in self.targets}
        floor = now - timedelta(seconds=OWED_FOR)
        out: dict[str, datetime] = {}
        for health in healths.values():
            if health.target not in names or health.failures <= 0:
                continue
            last_ok = health.last_ok_at or floor
            out[health.target] = max(floor, last_ok - timedelta(seconds=RESOLVED_WITHIN))
        return out

    async def _deliver_to(
        self,
        target: Target,
        incidents: list[Incident],
        now: datetime,
        since: datetime,
        *,
        paused: float = 0.0,
    ) -> float:
        """Send `target` what it owes, in order; resolved incidents only when they resolved
        after `since`. Nothing while it is `paused` (seconds left of a 429's Retry-After, told
        to any launcher)."""
        wait = self.interval
        if paused > 0:
            return paused
        for incident in incidents:
            if not target.takes(incident.level):
                continue
            if incident.resolved_at is not None and incident.resolved_at < since:
                continue  # (read for another target that was failing)
            current = incident
            # Up to two sends per incident in one pass: an incident that opened and resolved
            # between two looks owes its firing, then its resolve.
            for _ in range(2):
                notice = current.notices.get(target.name)
                send = next_send(current, notice, now, repeat=self.repeat)
                if send is None:
                    if notice is not None and notice.next_attempt_at is not None:
                        due = (notice.next_attempt_at - now).total_seconds()
                        wait = min(wait, max(0.05, due))
                    break
                outcome = await self._send(target, current, send)
                if outcome is None:
                    break  # another launcher holds it
                if outcome > 0:  # failed: the target backs off
                    return min(wait, outcome)
                now = await self.store.now()
                current = _after_send(current, target.name, send)
        return wait

    async def _send(self, target: Target, incident: Incident, send: Send) -> float | None:
        """Claim and send one message: None when not claimed, 0 when sent, else the seconds
        before the target is tried again."""
        store = self.store
        claimed = await store.claim_notice(
            incident.id,
            target.name,
            owner=self.owner,
            expect=send.expect,
            lease=CLAIM_LEASE,
            sent_before=send.sent_before,
        )
        if not claimed:
            return None
        notification = self.notification(incident, send)
        notice = incident.notices.get(target.name)
        attempts = notice.attempts if notice is not None else 0
        try:
            await target.notifier.send(notification, within=SEND_TIMEOUT)
        except NotifyTemporaryError as exc:
            retry_in = send_backoff(attempts, exc.retry_after, self._rng.random())
            if exc.retry_after is not None:  # 429: every launcher leaves the target alone
                await store.pause_target(target.name, retry_in)
            await self._failed(target, incident, str(exc), retry_in=retry_in)
            return retry_in
        except NotifyPermanentError as exc:
            await self._failed(target, incident, str(exc), give_up=True)
            log.error(
                "alerts.target_refused", target=target.name, incident=incident.id, error=str(exc)
            )
            return self.interval
        except Exception as exc:  # a notifier outside the contract: temporary, and said
            retry_in = send_backoff(attempts, None, self._rng.random())
            await self._failed(
                target, incident, f"{target.name}: {type(exc).__name__}", retry_in=retry_in
            )
            log.exception("alerts.notifier_crashed", target=target.name)
            return retry_in
        await store.finish_notice(incident.id, target.name, owner=self.owner, sent=send.state)
        await store.record_target_result(target.name, error=None)
        self.stats.count_sent(target.name)
        log.info(
            "alerts.sent",
            target=target.name,
            incident=incident.id,
            state=send.state,
            repeat=send.is_repeat,
        )
        return 0.0

    async def _failed(
        self,
        target: Target,
        incident: Incident,
        error: str,
        *,
        retry_in: float | None = None,
        give_up: bool = False,
    ) -> None:
        self.stats.count_failed(target.name, error)
        log.warning("alerts.send_failed", target=target.name, incident=incident.id, error=error)
        await self.store.finish_notice(
            incident.id,
            target.name,
            owner=self.owner,
            sent=None,
            error=error,
            retry_in=retry_in,
            give_up=give_up,
        )
        await self.store.record_target_result(target.name, error=error)

    def notification(self, incident: Incident, send: Send) -> Notification:
        """The message `send` delivers about `incident`."""
        link = self.ui_url.rstrip("/") if self.ui_url else None
        if link and incident.run_id:
            link = f"{link}/runs/{incident.run_id}"
        resolved = send.state == "resolved"
        if resolved:
            text = incident.resolution or "resolved"
        else:
            text = incident.detail or incident.title
            if send.is_repeat:
                text = f"still open since {incident.first_seen.isoformat()}: {text}"
        return Notification(
            fingerprint=incident.fingerprint,
            state="resolved" if resolved else "firing",
            level=_level(incident.level),
            title=incident.title,
            text=text,
            link=link,
            count=incident.count,
            rule=incident.rule,
            subject=incident.subject,
            incident_id=incident.id,
            run_id=incident.run_id,
            first_seen=incident.first_seen,
            resolved_at=incident.resolved_at,
        )


def _paused_for(health: TargetHealth | None, now: datetime) -> float:
    return 0.0 if health is None else health.paused_for(now)


def _level(level: str) -> NotificationLevel:
    if level == "info":
        return "info"
    return "critical" if level == "critical" else "warning"


def _after_send(incident: Incident, target: str, send: Send) -> Incident:
    """`incident` as it is once `target` was sent `send` (no read back)."""
    notices = dict(incident.notices)
    notices[target] = Notice(incident.id, target, sent_state=send.state)
    return replace(incident, notices=notices)


__all__ = ["DEFAULT_INTERVAL", "SEND_TIMEOUT", "AlertEngine", "EvaluationReport"]


def _finish_order(run: Run) -> tuple[datetime, str]:
    assert run.finished_at is not None  # (both reads return finished runs only)
    return run.finished_at, run.id
