"""The ports: small protocols between the launcher and the outside world.

Internal and unstable: adapters in this package implement them; the conformance suites under
`tests/` state the contract in executable form (every Store adapter passes the same tests).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from runlane.core.runs import (
    AcceptResult,
    Claimed,
    Lease,
    NewRun,
    Outcome,
    OverlapAction,
    Run,
    RunStatus,
)


class Clock(Protocol):
    """Where time comes from. In production the database is the clock: `now_or_none()` returns
    None and SQL uses `coalesce(:now, now())`. Tests pin time by returning a value."""

    def now(self) -> datetime: ...

    def now_or_none(self) -> datetime | None: ...


class SystemClock:
    """The host clock; `now_or_none()` defers to the database's clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def now_or_none(self) -> datetime | None:
        return None


class FixedClock:
    """A clock a test moves by hand."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at

    def now_or_none(self) -> datetime | None:
        return self.at

    def advance(self, seconds: float) -> None:
        from datetime import timedelta

        self.at = self.at + timedelta(seconds=seconds)


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
    """One launcher's liveness row (`launcher_heartbeat`), with the catalog it runs.

    `catalog_digest` ("sha256:<hex>" of the catalog's canonical JSON, see
    `service.catalog_stamp`), `catalog_loaded_at` (when the launcher took that catalog) and
    `catalog_jobs` (its job names, sorted) let a person's CLI see that the catalog file changed
    after a launcher loaded it; `catalog_path` (the absolute path it read, on its host) and
    `catalog_chains` (its chain names, sorted) say which file that was and which chains it
    advances. None = not reported (a row written by an older runlane)."""

    launcher_id: str
    host: str
    pid: int
    version: str
    started_at: datetime
    beat_at: datetime | None = None
    queue_depth: int = 0
    running: Mapping[str, int] = field(default_factory=dict)
    catalog_digest: str | None = None
    catalog_loaded_at: datetime | None = None
    catalog_jobs: tuple[str, ...] | None = None
    catalog_path: str | None = None
    catalog_chains: tuple[str, ...] | None = None
    # Seconds between this launcher's beats: it is live for three of them (None: an older
    # runlane; readers use their own setting).
    heartbeat_interval: float | None = None
    # The absolute directory (on `host`) its inline runs write their log files to, so a CLI
    # started in another directory finds them (None: an older runlane).
    log_dir: str | None = None


@dataclass(frozen=True, slots=True)
class RunFilter:
    job: str | None = None
    status: RunStatus | None = None
    parent_run_id: str | None = None
    chain_root_id: str | None = None
    limit: int = 50


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
class EventLink:
    """An event and a run it started (`started`) or joined inside a debounce window."""

    event_id: str
    run_id: str
    job: str
    started: bool


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """What `Store.finish_many` reports of a saved outcome: what the launcher logs. The whole
    row is a `get_run` away; decoding it for every finished run cost more than the rest of the
    save."""

    run_id: str
    status: RunStatus
    end_reason: str | None


@dataclass(frozen=True, slots=True)
class FinishRequest:
    """One outcome to record under its lease (see `Store.finish_many`)."""

    lease: Lease
    outcome: Outcome
    retry: NewRun | None = None
    external_id: str | None = None
    # `time.monotonic()` when the run ended, in this process. The store records `finished_at` as
    # its time at the save minus the time since (never before `started_at`), so an outcome whose
    # save waited (a database outage, a retried conflict) keeps the run's real end. None: now.
    ended_monotonic: float | None = None


class Store(Protocol):
    """The run log and everything stored next to it.

    Contract, for every adapter:
    - **Accept** (`accept`) is the only way a run row is created. It writes the row (and an outbox
      row when the adapter has a bus that needs one) in one transaction. The `dedupe_key` is
      unique: a second accept with the same key returns the existing row with `created=False`.
      With `overlap_action="refuse"` an active (queued/running) run of the same job raises
      `OverlapRefused`; with `"skip"` the new row is written as `skipped` (`end_reason`
      `overlap`). The check and the insert are atomic with respect to other accepts.
    - **Claim** (`claim`) takes due `queued` runs (`not_before` ≤ now, not expired) in queue order,
      admits them with `core.admission.select_admissible` against what is already running, and
      moves them to `running` with a lease: owner, fresh token, generation + 1, expiry = database
      now + `lease_ttl`. First claims set `started_at` and `deadline_at` from database time.
      Concurrent claimers never get the same run.
    - **Fencing**: `set_external_id`, `finish`, `release` apply only while the row is `running`
      with the lease's token and generation and an unexpired lease (checked again at commit on
      PostgreSQL with `clock_timestamp()`). Zero rows → `LeaseLost`, and nothing in that
      transaction is kept (the retry row `finish` inserts included).
    - `claim_abandoned` takes `running` rows whose lease expired (another launcher died or
      stalled) with a new lease (generation + 1): their old owner's writes fail from then on.
    - Times are database time unless the store's `Clock` pins them.
    """

    dialect: str

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def schema_version(self) -> int:
        """The applied schema version (0 for an empty database)."""
        ...

    async def upgrade(self) -> list[int]:
        """Apply pending migrations; return the versions applied."""
        ...

    async def ensure_current(self) -> None:
        """Raise `SchemaOutOfDate` (with what to run) unless the schema is current."""
        ...

    async def now(self) -> datetime:
        """Database time."""
        ...

    async def accept(
        self, new: NewRun, *, overlap_action: OverlapAction = "none"
    ) -> AcceptResult: ...

    async def claim(
        self,
        owner: str,
        *,
        limit: int,
        lease_ttl: float,
        executors: Collection[str],
        executor_caps: Mapping[str, int],
    ) -> list[Claimed]: ...

    async def claim_abandoned(
        self, owner: str, *, limit: int, lease_ttl: float, executors: Collection[str]
    ) -> list[Claimed]: ...

    async def renew(self, leases: Sequence[Lease], lease_ttl: float) -> set[str]:
        """Extend the given leases; return the run ids still held (others are lost)."""
        ...

    async def set_external_id(self, lease: Lease, external_id: str) -> None: ...

    async def finish(
        self,
        lease: Lease,
        outcome: Outcome,
        *,
        retry: NewRun | None = None,
        external_id: str | None = None,
        ended_monotonic: float | None = None,
    ) -> Run:
        """Fenced: write the final status; insert the retry row in the same transaction.
        `ended_monotonic` as in `FinishRequest`."""
        ...

    async def finish_many(self, requests: Sequence[FinishRequest]) -> list[FinishedRun | None]:
        """`finish` for several runs in one transaction (one commit): each request is fenced on
        its own lease; a request whose lease is lost gets None and writes nothing (its retry row
        included) while the others are saved. A saved one gets a `FinishedRun` (id, final
        status, end reason), not the whole row."""
        ...

    async def release(
        self, lease: Lease, *, retry_after: float, error_code: str, note: str | None = None
    ) -> None:
        """Fenced: back to `queued` after a temporary executor error, due again after
        `retry_after` seconds, lease cleared, `error_code` kept for people to see."""
        ...

    async def retry_repairs_now(self, error_code: str, jobs: Collection[str]) -> list[str]:
        """Make the queued runs kept for repair with `error_code` (see `release`) whose job is
        in `jobs` due now, and return their ids: a launcher that starts with a catalog that has
        their job takes them at once instead of at their next repair look."""
        ...

    async def finish_unleased(self, run_id: str, expected: RunStatus, outcome: Outcome) -> Run:
        """End a run nobody holds a lease on (a queued run, an SDK child row), conditional on
        `expected`: raise `InvalidTransition` when the row is no longer in that status."""
        ...

    async def expire_queued(self, *, limit: int = 500) -> list[Run]:
        """Queued runs past `queue_expires_at` → `skipped` (`expired`)."""
        ...

    async def sweep_orphans(self, *, grace: float, limit: int = 500) -> list[Run]:
        """Running runs past `deadline_at` + `grace` seconds with nobody supervising them (no
        lease, or an expired one) → `timeout` (`orphaned`). A supervised run is never touched."""
        ...

    async def request_cancel(self, run_id: str, *, by: str | None = None) -> Run:
        """Queued → `cancelled` at once; running → `cancel_requested_at` set for its launcher;
        final → `InvalidTransition`. Unknown id → `NotFound`."""
        ...

    async def cancel_requests(self, owner: str) -> list[str]:
        """Ids of running runs leased by `owner` that someone asked to cancel."""
        ...

    async def get_run(self, run_id: str) -> Run: ...

    async def list_runs(self, flt: RunFilter) -> list[Run]: ...

    async def count_queued(self) -> int: ...

    async def running_by_launcher(self) -> dict[str, dict[str, int]]:
        """The runs running now, counted by the launcher holding each (its id; "" for rows
        nobody leases, such as the SDK's child rows) and executor: live from the run log, where
        a heartbeat's counts are as old as the beat."""
        ...

    async def set_override(
        self, job: str, *, paused_until: datetime | None, reason: str | None, by: str | None
    ) -> Override: ...

    async def clear_override(self, job: str) -> bool: ...

    async def overrides(self) -> dict[str, Override]: ...

    async def beat(self, hb: Heartbeat) -> None: ...

    async def launchers(self) -> list[Heartbeat]: ...

    async def remove_launcher(self, launcher_id: str) -> None: ...

    async def prune_launchers(self, older_than: float) -> list[str]:
        """Delete the heartbeat rows of launchers silent for more than `older_than` seconds, or
        ten of their own heartbeat intervals when that is longer (by the store's clock): a
        launcher that beats every two hours is live for six. Return their ids, sorted. Live
        launchers call it as they beat."""
        ...

    async def check_writable(self) -> None:
        """Raise `StoreError` when the database can be read but not written (a read-only file,
        a read-only transaction or standby, no INSERT privilege); `DatabaseUnavailable` when it
        cannot be reached now. Writes nothing: the probe is rolled back."""
        ...

    # --- triggers (schedules, chains, events) ----------------------------------------------------

    async def run_by_dedupe_key(self, dedupe_key: str) -> Run | None: ...

    async def schedule_states(self) -> dict[str, datetime]:
        """The last planned slot of every schedule the scheduler has seen, by schedule key."""
        ...

    async def advance_schedules(self, slots: Mapping[str, datetime]) -> None:
        """Record the last planned slot of each schedule, in one transaction. Monotonic: a slot
        older than the stored one leaves it unchanged (racing launchers only move it forward)."""
        ...

    async def forget_schedules(self, keys: Collection[str]) -> None:
        """Delete the planning state of these schedules (unknown keys are ignored): a schedule
        that comes back later is then seen for the first time, and owes nothing from before."""
        ...

    async def create_chain_run(self, new: NewChainRun) -> tuple[ChainRun, bool]:
        """Insert a chain run, idempotent by `dedupe_key`: `(existing, False)` when it exists.
        `deadline_at` = database now + `max_duration_seconds`."""
        ...

    async def get_chain_run(self, chain_run_id: str) -> ChainRun:
        """Raise `NotFound` for an unknown id."""
        ...

    async def active_chain_runs(
        self, *, after: ChainRun | None = None, limit: int = 500
    ) -> list[ChainRun]:
        """Chain runs still `running`, oldest first (by start, then id); with `after`, those
        that come after it in that order (the next page)."""
        ...

    async def list_chain_runs(self, *, chain: str | None = None, limit: int = 50) -> list[ChainRun]:
        """Newest first."""
        ...

    async def mark_chain_overrun(self, chain_run_id: str) -> ChainRun:
        """Set `overrun_at` once (later calls keep the first time)."""
        ...

    async def finish_chain_run(
        self, chain_run_id: str, status: str, end_reason: str | None = None
    ) -> ChainRun | None:
        """`running` → `status`; None when it had already finished (another launcher did it)."""
        ...

    async def record_event(
        self, event_id: str, key: str, data: Mapping[str, Any]
    ) -> tuple[Event, bool]:
        """Insert an event at database now, idempotent by id: `(stored, False)` when it exists."""
        ...

    async def get_event(self, event_id: str) -> Event:
        """Raise `NotFound` for an unknown id."""
        ...

    async def list_events(self, *, key: str | None = None, limit: int = 50) -> list[Event]: ...

    async def link_event_runs(self, links: Sequence[EventLink]) -> None:
        """Record which runs an event started or joined (idempotent)."""
        ...

    async def event_links(self, event_id: str) -> list[EventLink]: ...

    async def events_of_run(self, run_id: str) -> list[EventLink]: ...

    async def wait_for_wakeup(self, max_wait: float) -> bool:
        """Wait until a run may be claimable (a new run, a freed slot) or `max_wait` seconds pass.
        PostgreSQL uses LISTEN/NOTIFY; SQLite wakes in-process and otherwise times out."""
        ...


@dataclass(frozen=True, slots=True)
class ExecutionSpec:
    """What an executor needs to run one attempt of one run."""

    run_id: str
    job: str
    attempt: int
    trigger: str
    command: list[str]
    params: dict[str, Any]
    env: dict[str, str]  # RUN_ID, RUN_TRIGGER, RUN_PARENT_ID, RUNLANE_PARAMS, RUNLANE_PARAM_*
    deadline_seconds: float  # remaining time before the run must end as `timeout`
    kill_grace_seconds: float
    parent_run_id: str | None = None
    profile: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Execution:
    """A started (or adopted) execution. `external_id` names it at the executor (pid, Job name,
    Slurm job id); `handle` is the executor's own."""

    run_id: str
    attempt: int
    external_id: str
    handle: Any = None


@dataclass(frozen=True, slots=True)
class ExecutionEvent:
    kind: Literal["pending", "running", "finished"]
    outcome: Outcome | None = None  # set when kind == "finished"
    # When the execution ended by the provider's clock, if it says (a pod run: its Job's
    # completion time). The launcher records it when the run ended well before it saw it (the
    # Job finished while no launcher watched); None: when the launcher sees the event.
    ended_at: datetime | None = None


class Executor(Protocol):
    """Where a run executes. Contract:

    - `start` is idempotent for (run_id, attempt): an execution with the run's deterministic
      name that belongs to the same run and attempt is adopted, never started twice. Errors are
      `TemporaryExecutorError` (retry later) or `PermanentExecutorError` (give up with a reason).
    - `reattach` finds the execution of a run taken over from another launcher, or returns None
      when there is none to find (an inline process dies with its launcher).
    - `events` yields state changes and ends after exactly one `finished` event carrying the
      outcome. A dropped connection is never a final state.
    - `cancel` ends the execution (TERM, then KILL after `grace`); the `finished` event follows.
    - `logs` returns the tail of the execution's output.
    """

    name: str

    async def start(self, spec: ExecutionSpec) -> Execution: ...

    async def reattach(self, spec: ExecutionSpec) -> Execution | None: ...

    def events(self, execution: Execution) -> AsyncIterator[ExecutionEvent]: ...

    async def cancel(self, execution: Execution, *, grace: float) -> None: ...

    async def logs(self, execution: Execution, *, tail_bytes: int = 65536) -> str: ...
