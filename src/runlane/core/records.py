"""The value objects stored next to runs (heartbeats, overrides, chain runs, events, API tokens,
the audit log, idempotency keys) and the parameter records of the run-log port: plain data,
shared by core decisions, ports and adapters.

They live in `core` (not `ports`) because they are the domain's nouns, like `core.runs.Run`:
pure decisions such as chain planning and pause rules read them, and `core` may import nothing
above itself. `runlane.ports` re-exports every name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from runlane.core.access import Role
from runlane.core.runs import Lease, NewRun, Outcome, RunStatus


@dataclass(frozen=True, slots=True)
class Override:
    """A pause or snooze on a job (row of `job_overrides`). `paused_until` None = until resumed."""

    job: str
    paused_until: datetime | None
    reason: str | None
    created_by: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One launcher's liveness row (`launcher_heartbeat`) and the catalog it runs, so a CLI can
    tell that the catalog file changed after a launcher loaded it. Optional fields are None
    when not reported (a row written by an older runlane; readers use their own setting)."""

    launcher_id: str
    host: str
    pid: int
    version: str
    started_at: datetime
    beat_at: datetime | None = None
    queue_depth: int = 0
    running: Mapping[str, int] = field(default_factory=dict)
    # "sha256:<hex>" of the catalog's canonical JSON (see `service.catalog_stamp`).
    catalog_digest: str | None = None
    catalog_loaded_at: datetime | None = None  # when the launcher took that catalog
    catalog_jobs: tuple[str, ...] | None = None  # its job names, sorted
    catalog_path: str | None = None  # the absolute path it read, on its host
    catalog_chains: tuple[str, ...] | None = None  # the chains it advances, sorted
    heartbeat_interval: float | None = None  # seconds between beats: live for three of them
    # The absolute directory (on `host`) its inline runs write their log files to, so a CLI
    # started in another directory finds them.
    log_dir: str | None = None
    # The broker's job_runs and job_runs.dlq ready messages as this launcher last read them
    # (the RabbitMQ bus); None on the database bus and while the broker does not answer.
    bus_queue_depth: int | None = None
    bus_dlq_depth: int | None = None


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which runs `RunLog.list_runs` returns: newest first by (queued_at, id), at most `limit`.

    Every field left None is no condition. `since` (inclusive) and `until` (exclusive) bound
    `queued_at`; `before` is a keyset position, (queued_at, id) of the last row of the previous
    page: only rows strictly older come back, so a walk stays stable while runs are inserted.
    """

    job: str | None = None
    status: RunStatus | None = None
    parent_run_id: str | None = None
    chain_root_id: str | None = None
    limit: int = 50
    trigger: str | None = None
    requested_by: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    before: tuple[datetime, str] | None = None
    # The retry of this run (`retry_of`): how a follow finds the next attempt however busy the
    # job is, rather than by looking through its newest runs.
    retry_of: str | None = None


@dataclass(frozen=True, slots=True)
class NewChainRun:
    """A chain run to record (row of `chain_runs`): by its schedule, a person or the API.
    `dedupe_key` is `chain@slot` for a scheduled run, a fresh UUID otherwise."""

    id: str
    chain: str
    dedupe_key: str
    trigger: str
    requested_by: str | None = None
    scheduled_for: datetime | None = None
    max_duration_seconds: float | None = None
    status: str = "running"  # "skipped" records a missed or paused slot without steps
    end_reason: str | None = None


@dataclass(frozen=True, slots=True)
class ChainRun:
    """One run of a chain: its steps are run-log rows with `chain_root_id` = `id`."""

    id: str
    chain: str
    dedupe_key: str
    trigger: str
    status: str  # running | success | failure | skipped
    started_at: datetime
    requested_by: str | None = None
    scheduled_for: datetime | None = None
    end_reason: str | None = None
    deadline_at: datetime | None = None
    finished_at: datetime | None = None
    overrun_at: datetime | None = None  # set once the chain ran past `max_duration`

    @property
    def overrun(self) -> bool:
        return self.overrun_at is not None


@dataclass(frozen=True, slots=True)
class Event:
    """A recorded event (row of `events`); `data` is None when the stored JSON is corrupt."""

    id: str
    key: str
    data: dict[str, Any] | None
    occurred_at: datetime


@dataclass(frozen=True, slots=True)
class EventFact:
    """How a new event is published as a fact on the bus (docs/bus.md#facts): a CloudEvent whose
    `source` is this, and the trace it joins. Only runlane's own events get one: an event taken
    from the bus (another service's) is never published again."""

    source: str
    traceparent: str | None = None


@dataclass(frozen=True, slots=True)
class EventLink:
    """An event and a run it started (`started`) or joined inside a debounce window."""

    event_id: str
    run_id: str
    job: str
    started: bool


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """What `Leases.finish_many` reports of a saved outcome: what the launcher logs. The whole
    row is a `get_run` away; decoding it for every finished run cost more than the rest of the
    save."""

    run_id: str
    status: RunStatus
    end_reason: str | None
    # The retry asked for was written with it (not when someone had asked to cancel the run).
    retried: bool = False


@dataclass(frozen=True, slots=True)
class FinishRequest:
    """One outcome to record under its lease (see `Leases.finish_many`)."""

    lease: Lease
    outcome: Outcome
    retry: NewRun | None = None
    external_id: str | None = None
    # `time.monotonic()` when the run ended, in this process. The store records `finished_at` as
    # its time at the save minus the time since (never before `started_at`), so an outcome whose
    # save waited (a database outage, a retried conflict) keeps the run's real end. None: now.
    ended_monotonic: float | None = None


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """An API token (row of `api_tokens`). Only the SHA-256 of the secret is kept: a leaked
    database gives no usable token. `prefix` is the secret's first characters (`rl_AbCd`), shown
    in lists so a person can match a leaked secret to its token. `created_at` is set by the
    store when the row is written; `jobs` are fnmatch globs that limit the token's writes."""

    name: str
    role: Role
    secret_hash: str
    prefix: str
    jobs: tuple[str, ...] = ()
    created_by: str | None = None
    created_at: datetime | None = None
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class WebSession:
    """A web UI session (row of `web_sessions`) and the live token it belongs to. `id` is the
    SHA-256 (hex) of the cookie's secret; `expires_at` is its absolute end, `last_seen_at`
    (written at most once a minute) what its idle limit counts from."""

    id: str
    token: TokenRecord
    created_at: datetime
    expires_at: datetime
    last_seen_at: datetime


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One write through a face that authenticates (row of `audit_log`): who (`actor`, the
    token or proxy user), what (`action`, such as `run_job`), on what (`target`), the outcome
    (`ok` or an error code), from where (`remote`, the client's address). `id` and `at` are set
    by the store; ids grow with time, so they order and page the log."""

    action: str
    outcome: str
    actor: str | None = None
    target: str | None = None
    remote: str | None = None
    detail: str | None = None
    id: int | None = None
    at: datetime | None = None


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    """An `Idempotency-Key` seen from one owner (row of `idempotency_keys`): the fingerprint of
    the request that first used it and, once that request succeeded, its status and body.
    `status` None = the first request is still in flight."""

    owner: str
    key: str
    fingerprint: str
    created_at: datetime
    status: int | None = None
    body: str | None = None  # the stored response body, as JSON text
