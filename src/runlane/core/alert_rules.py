"""The alert rules as pure functions of what the run log says and the open incidents: which
incidents open (or count one more occurrence) and which resolve, and what a notification target
should be sent next. No I/O and no clock reads: `now` is an argument (docs/alerts.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from runlane.core.incidents import Incident, NewIncident, Notice, SentState
from runlane.core.records import ChainRun, Heartbeat
from runlane.core.runs import Run, RunStatus

RUN_FAILED = "run_failed"
LAUNCHER_STALE = "launcher_stale"
CHAIN_OVERDUE = "chain_overdue"
DLQ_DEPTH = "dlq_depth"
RULES = (RUN_FAILED, LAUNCHER_STALE, CHAIN_OVERDUE, DLQ_DEPTH)
NOTIFY_LEVELS = ("info", "warning", "critical")  # a job's `alert: none` opens nothing
# A launcher is stale after `heartbeat_stale`, or three of its own intervals when longer.
STALE_INTERVALS = 3
BACKOFF_BASE = 2.0
BACKOFF_CAP = 300.0


@dataclass(frozen=True, slots=True)
class Resolve:
    """An open incident to resolve, and what resolved it."""

    incident: Incident
    resolution: str


@dataclass(frozen=True, slots=True)
class Plan:
    """What one rule's evaluation writes: occurrences to record, incidents to resolve."""

    record: tuple[NewIncident, ...] = ()
    resolve: tuple[Resolve, ...] = ()


def failure_kind(run: Run) -> str | None:
    """`failure`, `timeout` or `skipped` when `run` is one the run_failed rule alerts on; None
    for a success, a cancel, a run still going, and a slot skipped because its job was paused."""
    if run.status in (RunStatus.FAILURE, RunStatus.TIMEOUT):
        return run.status.value
    if run.status is RunStatus.SKIPPED and run.end_reason != "paused":
        return "skipped"
    return None


_VERB = {"failure": "failed", "timeout": "timed out", "skipped": "was skipped"}


def describe_run(run: Run, kind: str) -> str:
    """One line about a run that alerted (never its log: output may hold anything)."""
    parts = [f"run {run.id} (attempt {run.attempt}, {run.trigger}) {_VERB[kind]}"]
    if run.end_reason:
        parts.append(f"end reason {run.end_reason}")
    if run.exit_code is not None:
        parts.append(f"exit code {run.exit_code}")
    if run.error_code:
        parts.append(f"error {run.error_code}")
    text = ", ".join(parts)
    if run.note:
        text = f"{text}: {run.note[:300]}"
    return text


def plan_run_failed(
    runs: Sequence[Run], levels: Mapping[str, str], open_by_job: Mapping[str, Incident]
) -> Plan:
    """The run_failed rule over `runs` (finished since the cursor, in finish order).

    Per job: a success later than its open incident's last occurrence resolves it; the failures
    after the job's last success in `runs` are occurrences, counted only when later than the
    open incident's `last_seen` (so a window read twice counts nothing twice), and open an
    incident when none is open. Jobs whose level (`levels`) is not a notify level open none.
    """
    by_job: dict[str, list[Run]] = {}
    for run in runs:
        by_job.setdefault(run.job, []).append(run)
    record: list[NewIncident] = []
    resolve: list[Resolve] = []
    for job, rows in by_job.items():
        last_ok: Run | None = None
        after: list[tuple[Run, str]] = []
        for run in rows:
            if run.finished_at is None:
                continue
            if run.status is RunStatus.SUCCESS:
                last_ok, after = run, []
            elif (kind := failure_kind(run)) is not None:
                after.append((run, kind))
        incident = open_by_job.get(job)
        if (
            incident is not None
            and last_ok is not None
            and last_ok.finished_at is not None
            and last_ok.finished_at > incident.last_seen
        ):
            resolve.append(Resolve(incident, f"{job} succeeded (run {last_ok.id})"))
            incident = None
        level = levels.get(job)
        if level not in NOTIFY_LEVELS:
            continue
        new = [
            (r, k)
            for r, k in after
            if incident is None
            or (r.finished_at is not None and r.finished_at > incident.last_seen)
        ]
        if not new:
            continue
        latest, kind = new[-1]
        assert latest.finished_at is not None
        record.append(
            NewIncident(
                rule=RUN_FAILED,
                fingerprint=f"{RUN_FAILED}:{job}",
                subject=job,
                level=str(level),
                title=f"{job} {_VERB[kind]}",
                seen_at=latest.finished_at,
                detail=describe_run(latest, kind),
                run_id=latest.id,
                count=len(new),
            )
        )
    return Plan(tuple(record), tuple(resolve))


def stale_after(heartbeat: Heartbeat, heartbeat_stale: float) -> float:
    """Seconds without a beat after which `heartbeat`'s launcher is stale."""
    own = (heartbeat.heartbeat_interval or 0.0) * STALE_INTERVALS
    return max(heartbeat_stale, own)


def plan_launcher_stale(
    heartbeats: Sequence[Heartbeat],
    now: datetime,
    heartbeat_stale: float,
    open_by_launcher: Mapping[str, Incident],
    *,
    self_id: str,
) -> Plan:
    """The launcher_stale rule: another launcher whose last beat is older than its stale age
    opens an incident (one per launcher; its last beat is the occurrence, so looking again
    counts nothing); it resolves when the launcher beats again or its row is gone (stopped
    cleanly, or pruned as long dead)."""
    record: list[NewIncident] = []
    resolve: list[Resolve] = []
    seen: set[str] = set()
    for hb in heartbeats:
        seen.add(hb.launcher_id)
        beat = hb.beat_at or hb.started_at
        age = (now - beat).total_seconds()
        limit = stale_after(hb, heartbeat_stale)
        incident = open_by_launcher.get(hb.launcher_id)
        if age <= limit or hb.launcher_id == self_id:
            if incident is not None:
                resolve.append(Resolve(incident, f"launcher {hb.launcher_id} beats again"))
            continue
        record.append(
            NewIncident(
                rule=LAUNCHER_STALE,
                fingerprint=f"{LAUNCHER_STALE}:{hb.launcher_id}",
                subject=hb.launcher_id,
                level="critical",
                title=f"launcher {hb.launcher_id} is silent",
                seen_at=beat,
                detail=(
                    f"no heartbeat from launcher {hb.launcher_id} on {hb.host} (pid {hb.pid}) "
                    f"for {int(age)}s (stale after {int(limit)}s)"
                ),
            )
        )
    for launcher_id, incident in open_by_launcher.items():
        if launcher_id not in seen:
            resolve.append(Resolve(incident, f"launcher {launcher_id} is gone (stopped or pruned)"))
    return Plan(tuple(record), tuple(resolve))


def plan_chain_overdue(
    active: Sequence[ChainRun], now: datetime, open_by_chain_run: Mapping[str, Incident]
) -> tuple[Plan, list[str]]:
    """The chain_overdue rule: a running chain run past its deadline (`max_duration`) opens an
    incident. Returns the plan and the ids of open incidents' chain runs no longer active (the
    caller resolves those that ended)."""
    record: list[NewIncident] = []
    running = {c.id for c in active}
    for chain_run in active:
        if chain_run.deadline_at is None or chain_run.deadline_at > now:
            continue
        late = int((now - chain_run.deadline_at).total_seconds())
        record.append(
            _chain_overdue(
                chain_run,
                f"chain {chain_run.chain} is past its max_duration",
                chain_run.deadline_at,
                f"chain run {chain_run.id} is still running {late}s past its deadline",
            )
        )
    gone = [cid for cid in open_by_chain_run if cid not in running]
    return Plan(tuple(record)), gone


def plan_chain_overran(ended: Sequence[ChainRun]) -> Plan:
    """The chain_overdue rule for chain runs that ran past their deadline and ended before an
    evaluation saw them running late (at the deadline a chain with no step running skips the
    rest and ends within a second): each opens its incident, which the next evaluation
    resolves as ended. `ended`: such chain runs with no incident yet (the store's read)."""
    record: list[NewIncident] = []
    for chain_run in ended:
        if chain_run.overrun_at is None or chain_run.status == "running":
            continue
        record.append(
            _chain_overdue(
                chain_run,
                f"chain {chain_run.chain} ran past its max_duration",
                chain_run.deadline_at or chain_run.overrun_at,
                f"chain run {chain_run.id} ran past its deadline: the steps not started by then "
                f"were skipped; it ended {chain_run.status}",
            )
        )
    return Plan(tuple(record))


def _chain_overdue(chain_run: ChainRun, title: str, seen_at: datetime, detail: str) -> NewIncident:
    """The chain_overdue incident of one chain run (one per chain run: its fingerprint)."""
    return NewIncident(
        rule=CHAIN_OVERDUE,
        fingerprint=f"{CHAIN_OVERDUE}:{chain_run.id}",
        subject=chain_run.chain,
        level="warning",
        title=title,
        seen_at=seen_at,
        detail=detail,
    )


def plan_dlq_depth(depth: int | None, now: datetime, incident: Incident | None) -> Plan:
    """The dlq_depth rule: a dead-letter queue holding messages opens an incident; an empty one
    resolves it. `depth` None (no broker: the database bus) decides nothing."""
    if depth is None:
        return Plan()
    if depth <= 0:
        if incident is None:
            return Plan()
        return Plan(resolve=(Resolve(incident, "the dead-letter queue is empty"),))
    if incident is not None:
        return Plan()
    new = NewIncident(
        rule=DLQ_DEPTH,
        fingerprint=f"{DLQ_DEPTH}:job_runs.dlq",
        subject="job_runs.dlq",
        level="critical",
        title="run commands are in the dead-letter queue",
        seen_at=now,
        detail=f"job_runs.dlq holds {depth} message(s)",
    )
    return Plan(record=(new,))


@dataclass(frozen=True, slots=True)
class Send:
    """The next message a target owes an incident: `state`, claimed expecting `expect` (and,
    for a repeat, last sent no later than `sent_before`)."""

    state: SentState
    expect: SentState
    sent_before: datetime | None = None

    @property
    def is_repeat(self) -> bool:
        return self.sent_before is not None


def next_send(
    incident: Incident, notice: Notice | None, now: datetime, *, repeat: float | None
) -> Send | None:
    """What `incident` still owes a target whose notice is `notice` (None: nothing sent yet):
    firing once when it opens, resolved once when it resolves (after the firing, which an
    incident that opened and resolved between two looks still gets first), the firing again
    every `repeat` seconds while open. None when nothing is owed or due now."""
    sent = notice.sent_state if notice is not None else "none"
    if notice is not None:
        if notice.gave_up_at is not None:
            return None
        if notice.next_attempt_at is not None and notice.next_attempt_at > now:
            return None
        if notice.claim_until is not None and notice.claim_until > now:
            return None
    if sent == "none":
        return Send("firing", "none")
    if incident.state == "resolved":
        return Send("resolved", "firing") if sent == "firing" else None
    if sent == "firing" and repeat is not None and notice is not None:
        due = now - timedelta(seconds=repeat)
        if notice.sent_at is not None and notice.sent_at <= due:
            return Send("firing", "firing", sent_before=due)
    return None


def send_backoff(attempts: int, retry_after: float | None, jitter: float) -> float:
    """Seconds before the next try of a failed send: the server's Retry-After when it gave one
    (at least a second), else exponential from BACKOFF_BASE, capped at BACKOFF_CAP, with
    `jitter` (0..1) taking up to half of it off so that launchers do not retry in step."""
    if retry_after is not None:
        return max(1.0, retry_after)
    full = min(BACKOFF_CAP, BACKOFF_BASE * (2.0 ** max(0, attempts)))
    return full * (1.0 - 0.5 * min(1.0, max(0.0, jitter)))


__all__ = [
    "CHAIN_OVERDUE",
    "DLQ_DEPTH",
    "LAUNCHER_STALE",
    "NOTIFY_LEVELS",
    "RULES",
    "RUN_FAILED",
    "Plan",
    "Resolve",
    "Send",
    "describe_run",
    "failure_kind",
    "next_send",
    "plan_chain_overdue",
    "plan_chain_overran",
    "plan_dlq_depth",
    "plan_launcher_stale",
    "plan_run_failed",
    "send_backoff",
    "stale_after",
]
