"""The run: its statuses, the allowed transitions, and the value objects the ports exchange.

State machine (docs/architecture.md draws it):

    queued ──claim──► running ──► success | failure | timeout | cancelled
      │                  │
      │                  └─release (temporary executor error)──► queued
      └──► skipped (expired, overlap, paused, missed) | cancelled

A retry is a new row (attempt + 1, retry_of = previous id), never a transition back.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal


class RunStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILURE = "failure"
    TIMEOUT = "timeout"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self not in (RunStatus.QUEUED, RunStatus.RUNNING)


ACTIVE_STATUSES: tuple[RunStatus, ...] = (RunStatus.QUEUED, RunStatus.RUNNING)
FINAL_STATUSES: tuple[RunStatus, ...] = tuple(s for s in RunStatus if s.is_final)

ALLOWED_TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.QUEUED: frozenset(
        {RunStatus.RUNNING, RunStatus.SKIPPED, RunStatus.CANCELLED, RunStatus.FAILURE}
    ),
    RunStatus.RUNNING: frozenset(
        {
            RunStatus.QUEUED,  # released after a temporary executor error
            RunStatus.SUCCESS,
            RunStatus.FAILURE,
            RunStatus.TIMEOUT,
            RunStatus.CANCELLED,
        }
    ),
}


def can_transition(src: RunStatus, dst: RunStatus) -> bool:
    return dst in ALLOWED_TRANSITIONS.get(src, frozenset())


class Trigger(enum.StrEnum):
    SCHEDULE = "schedule"
    CHAIN = "chain"
    EVENT = "event"
    MANUAL = "manual"
    CLI = "cli"
    MCP = "mcp"
    RETRY = "retry"
    SCOPE = "scope"  # a child row written by the SDK's nested run_scope()


class EndReason(enum.StrEnum):
    """Stable words for why a run ended the way it did."""

    EXIT = "exit"  # the process exited (exit_code says how)
    DEADLINE = "deadline"
    EXPIRED = "expired"
    OVERLAP = "overlap"
    PAUSED = "paused"
    MISSED = "missed"
    CANCELLED = "cancelled"
    LAUNCHER_SHUTDOWN = "launcher_shutdown"
    LAUNCHER_LOST = "launcher_lost"
    ORPHANED = "orphaned"
    START_FAILED = "start_failed"
    START_TIMEOUT = "start_timeout"
    UPSTREAM_FAILED = "upstream_failed"
    CHAIN_TIMEOUT = "chain_timeout"


OverlapPolicy = Literal["forbid", "queue", "allow"]
OverlapAction = Literal["none", "refuse", "skip"]


@dataclass(frozen=True, slots=True)
class NewRun:
    """A run command ready to be written as a queued row (the accept path builds it)."""

    id: str
    job: str
    trigger: Trigger
    dedupe_key: str
    executor: str
    overlap: OverlapPolicy
    params: dict[str, Any] = field(default_factory=dict)
    requested_by: str | None = None
    parent_run_id: str | None = None
    chain_root_id: str | None = None
    event_id: str | None = None
    downstream: list[str] | None = None
    scheduled_for: datetime | None = None
    attempt: int = 1
    retry_of: str | None = None
    max_attempts: int = 1
    deadline_seconds: float = 3600.0
    kill_grace_seconds: float = 30.0
    not_before: datetime | None = None  # earliest claim time (retries with backoff)
    queue_ttl_seconds: float | None = None  # queued longer than this → skipped (expired)
    traceparent: str | None = None
    status: RunStatus = RunStatus.QUEUED  # SKIPPED for a run recorded but never started
    end_reason: str | None = None
    note: str | None = None


# What the basic view of a run list (`view=basic`) leaves out of each run: the fields whose size
# has no small bound (a finished run's saved log tail is up to 64 KiB; params and the note are
# what a request or a launcher wrote). A list shows the rest; one run's page shows everything.
BASIC_LEFT_OUT = ("params", "note", "log_tail")


@dataclass(frozen=True, slots=True)
class Run:
    """One row of the run log."""

    id: str
    job: str
    status: RunStatus
    trigger: str
    dedupe_key: str
    attempt: int
    executor: str
    overlap: str
    params: dict[str, Any] | None  # None when the stored JSON is corrupt (see params_raw)
    params_raw: str
    queued_at: datetime
    requested_by: str | None = None
    parent_run_id: str | None = None
    chain_root_id: str | None = None
    event_id: str | None = None
    downstream: list[str] | None = None
    scheduled_for: datetime | None = None
    retry_of: str | None = None
    max_attempts: int = 1
    deadline_seconds: float = 3600.0
    kill_grace_seconds: float = 30.0
    external_id: str | None = None
    not_before: datetime | None = None
    queue_expires_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    deadline_at: datetime | None = None
    exit_code: int | None = None
    end_reason: str | None = None
    error_code: str | None = None
    note: str | None = None
    log_tail: str | None = None
    traceparent: str | None = None
    cancel_requested_at: datetime | None = None
    lease_owner: str | None = None
    lease_token: str | None = None
    lease_generation: int = 0
    lease_expires_at: datetime | None = None

    @property
    def is_final(self) -> bool:
        return self.status.is_final


@dataclass(frozen=True, slots=True)
class Lease:
    """Proof that a launcher holds a run: every later write about the run is fenced on it."""

    run_id: str
    owner: str
    token: str
    generation: int


@dataclass(frozen=True, slots=True)
class Claimed:
    """A run a launcher just claimed, with its lease and the database time of the claim."""

    run: Run
    lease: Lease
    db_now: datetime
    recovered: bool = False  # True when taken over from an expired lease


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an execution ended, as the launcher will record it."""

    status: RunStatus
    end_reason: str
    exit_code: int | None = None
    error_code: str | None = None
    log_tail: str | None = None
    note: str | None = None
    retryable: bool = True  # False for permanent refusals (command not found, corrupt state)

    def __post_init__(self) -> None:
        # A job's output is arbitrary: make every text storable as it is built, so no database
        # (PostgreSQL refuses NUL in text) can refuse the outcome of a run that already ran.
        for name in ("log_tail", "note", "error_code"):
            value = getattr(self, name)
            if value is not None:
                clean = storable_text(value)
                if clean is not value:
                    object.__setattr__(self, name, clean)

    def columns(self) -> dict[str, object]:
        """The outcome's fields by their run-log column names (`finish*` statements, the
        launcher's outcome journal)."""
        return {
            "status": self.status.value,
            "end_reason": self.end_reason,
            "exit_code": self.exit_code,
            "error_code": self.error_code,
            "log_tail": self.log_tail,
            "note": self.note,
        }


def joined_notes(*notes: str | None) -> str | None:
    """The notes that say something, in order, as one (`first; second`); None when none does.
    What ends a run (a deadline, a shutdown) must not erase what else was said of it: the CLI
    finds "the log file … is incomplete" in the note to show the saved tail instead."""
    return "; ".join(note for note in notes if note) or None


def storable_text(text: str) -> str:
    """`text` as every store can keep it: NUL characters and lone surrogates (which UTF-8
    cannot encode) become U+FFFD. Returns `text` itself when it is already fine."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


@dataclass(frozen=True, slots=True)
class AcceptResult:
    """What the accept path did with a run command."""

    run: Run
    created: bool  # False: the dedupe key already had a row, which is returned


def first_dedupe_key(key: str, attempt: int) -> str:
    """The first attempt's dedupe key, from the key of attempt `attempt`: only the `#<attempt>`
    runlane added to a retry's key comes off. A first key may hold a `#` of its own (an event
    key or id, a bus command's key): splitting at the first `#` would give the retries of
    `job@key@build#1` and `job@key@build#7` one key, and the second retry would be lost."""
    suffix = f"#{attempt}"
    return key[: -len(suffix)] if attempt > 1 and key.endswith(suffix) else key


def retry_dedupe_key(first_key: str, attempt: int) -> str:
    """Dedupe key of attempt `attempt` (≥ 2) of a run whose first attempt had `first_key`."""
    return f"{first_key}#{attempt}"


_RETRY_FORM = re.compile(r"(#[0-9]+|~)\Z")


def first_attempt_key(key: str) -> str:
    """The key a first attempt is written under, for a dedupe key given from outside (a bus
    command's, an event id in one): the key itself, unless it ends in `#<digits>` (a retry's
    form, `retry_dedupe_key`) or in `~`; then with a `~` after it. Such a key would otherwise
    take a retry's row (the retry then lost) or be answered with it: `build#2` of one event and
    the second attempt of `build`'s. The mapping is one to one (a key given twice is the same
    run), and no key it writes ends in `#<digits>`."""
    return f"{key}~" if _RETRY_FORM.search(key) else key


def schedule_dedupe_key(job: str, slot_utc: datetime) -> str:
    return f"{job}@{slot_utc.strftime('%Y-%m-%dT%H:%M:%SZ')}"


def chain_dedupe_key(job: str, chain_root_id: str) -> str:
    return f"{job}@{chain_root_id}"


def event_dedupe_key(job: str, key: str, window_start_utc: datetime) -> str:
    # A window that starts within a second (`debounce: 500ms`) keeps its fraction: cut to the
    # second, the two windows of one second would share a key and the second start nothing.
    # Windows of whole seconds keep the key they always had.
    stamp = window_start_utc.strftime("%Y-%m-%dT%H:%M:%S")
    if window_start_utc.microsecond:
        stamp += f".{window_start_utc.microsecond:06d}"
    return f"{job}@{key}@{stamp}Z"


def should_retry(outcome: Outcome, attempt: int, max_attempts: int) -> bool:
    """Launcher-owned retries: failures and timeouts retry while attempts remain.

    Cancelled and skipped runs never retry; neither does a permanent executor refusal.
    """
    if attempt >= max_attempts:
        return False
    if outcome.status not in (RunStatus.FAILURE, RunStatus.TIMEOUT):
        return False
    return outcome.retryable


def retry_backoff_seconds(attempt: int, base: float = 5.0, cap: float = 300.0) -> float:
    """Delay before attempt `attempt + 1`: exponential from `base`, capped."""
    return float(min(cap, base * (2.0 ** max(0, attempt - 1))))
