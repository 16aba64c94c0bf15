"""The run log's port, cut into roles sized to their callers; `Store` is all of them.

Contract shared by every role, for every adapter (the conformance suite in
`tests/conformance/` runs each statement below against SQLite and PostgreSQL):

- **One row per run.** `RunLog.accept` is the only way a run row is created; a retry is a new
  row (attempt + 1), never a transition back. Statuses move only along
  `core.runs.ALLOWED_TRANSITIONS`.
- **Leases fence every write about a running run.** A claim gives the run an owner, a fresh
  token, generation + 1 and an expiry of database now + `lease_ttl`. `Leases.set_external_id(s)`,
  `finish`, `finish_many` and `release` apply only while the row is `running` with the lease's
  token and generation and an unexpired lease (checked again at commit on PostgreSQL with
  `clock_timestamp()`). Zero rows → `LeaseLost`, and nothing in that transaction is kept (the
  retry row included). A run taken over (`claim_abandoned`) gets generation + 1, so its old
  owner's writes fail from then on.
- **Idempotency by key.** Runs by `dedupe_key`, chain runs by `dedupe_key`, events by id: a
  second write returns what is stored and says it was not created.
- **Time is database time** unless the store's `Clock` pins it (`now_or_none()` not None), so
  launchers on hosts with skewed clocks agree; durations are added in the database.
- **Errors.** `NotFound` for an unknown id; `InvalidTransition` for a change its status does
  not allow; `DatabaseUnavailable` (retry later) and `DatabaseConflict` (retry now) for a
  database that failed; `StoreError` for the rest.

Who uses which role (the narrowest the caller needs):
- the launcher's parts: its supervisor `Leases`, `Launchers`, `RunLog` (`SupervisorStore`); its
  finisher `RunLog`; its lease writes `Leases`; its heartbeat `Launchers`, `RunLog`
  (`HeartbeatStore`); its claim loop `Leases`, `Sweeps`, `Wakeups` (the `Launcher` holds the
  whole `Store` and hands each part and trigger loop its roles);
- the scheduler: `Schedules`, `Overrides`, `RunLog` (`SchedulerStore`);
- the chain runner: `ChainRuns`, `RunLog`, `Overrides`, `Launchers` (`ChainStore`); a chain
  run's cancel: `ChainRuns`, `RunLog` (`ChainLog`); `explain`: `ExplainStore`;
- event emission: `Events`, `Overrides` (`EventStore`);
- the accept path: `RunLog`; faces (CLI, later API/UI/MCP): reads of every role plus
  `Overrides`, `RunLog.request_cancel` and `Schema`; the faces that authenticate: `Tokens`,
  `Audit`, `Idempotency`; the web UI `WebSessions`.

Internal and unstable: implemented only inside runlane (see `runlane.ports`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from runlane.core.records import (
    AuditEntry,
    ChainRun,
    Event,
    EventFact,
    EventLink,
    FinishedRun,
    FinishRequest,
    Heartbeat,
    IdempotencyRecord,
    NewChainRun,
    Override,
    RunFilter,
    TokenRecord,
    WebSession,
)
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
from runlane.ports.bus import OutboxMessage
from runlane.ports.incidents import Incidents

# --- the schema and the connection ------------------------------------------------------------


class Schema(Protocol):
    """Opening the store and keeping its schema current (the CLI's `db` commands, `doctor`,
    every process at start-up)."""

    dialect: str  # "sqlite" | "postgresql"

    async def open(self) -> None:
        """Connect (idempotent). Raise `DatabaseUnavailable` with the reason when the database
        cannot be reached now, `StoreError` when it does not exist and may not be created."""
        ...

    async def close(self) -> None:
        """Release every connection and background task (idempotent); the store may be opened
        again."""
        ...

    async def schema_version(self) -> int:
        """The applied schema version (0 for an empty database)."""
        ...

    async def upgrade(self) -> list[int]:
        """Apply pending migrations, each in its own transaction; return the versions applied.
        Safe to run concurrently: each migration is applied once (under a lock). Not bounded by
        the store's timeout: a migration takes as long as it takes."""
        ...

    async def ensure_current(self) -> None:
        """Raise `SchemaOutOfDate` (saying what to run) unless the schema is exactly the one
        this runlane needs: older → `runlane db upgrade`; newer → upgrade runlane."""
        ...

    async def check_writable(self) -> None:
        """Raise `StoreError` when the database can be read but not written (a read-only file,
        a read-only transaction or standby, no INSERT privilege); `DatabaseUnavailable` when it
        cannot be reached now. Writes nothing: the probe is rolled back."""
        ...


# --- runs ---------------------------------------------------------------------------------------


class RunLog(Protocol):
    """The run log itself: creating runs, reading them, and the changes that need no lease."""

    async def now(self) -> datetime:
        """Database time (or the pinned clock's): the time every decision about rows uses."""
        ...

    async def accept(self, new: NewRun, *, overlap_action: OverlapAction = "none") -> AcceptResult:
        """Write `new` as a row (status `new.status`, normally `queued`) in one transaction,
        with an outbox row when the store was built with `outbox=True` and the row is queued,
        and wake the claimers (`Wakeups`) when it is queued.

        - Idempotent by `new.dedupe_key` (unique): a second accept returns the existing row
          with `created=False`, even when that row is the active one.
        - Overlap, decided by `core.accept_rules.overlap_decision` against the job's active
          (queued or running) run: `"refuse"` raises `OverlapRefused` naming it; `"skip"` writes
          the row `skipped` (`end_reason` `overlap`); `"none"` (or a row already `skipped`)
          writes it as given. The check and the insert are atomic with respect to other accepts
          of the same job.
        - `queue_expires_at` = now + `queue_ttl_seconds`; `deadline_at` = now +
          `deadline_seconds` (reset at the first claim)."""
        ...

    async def get_run(self, run_id: str) -> Run:
        """The row; `NotFound` for an unknown (or malformed) id."""
        ...

    async def run_statuses(self, run_ids: Sequence[str]) -> dict[str, RunStatus]:
        """The status of each run of `run_ids` that exists, in one statement, keyed by the id as
        given; unknown and malformed ids are left out."""
        ...

    async def run_ids_by_prefix(self, prefix: str, *, limit: int) -> list[str]:
        """Up to `limit` ids of runs whose id starts with `prefix` (lowercase), in id order,
        from the whole run log through its primary key (no row is read); none when `prefix`
        cannot begin a canonical UUID."""
        ...

    async def run_by_dedupe_key(self, dedupe_key: str) -> Run | None:
        """The row holding `dedupe_key`, or None."""
        ...

    async def list_runs(self, flt: RunFilter) -> list[Run]:
        """Rows matching every set field of `flt`, newest first (by `queued_at`, then id), at
        most `flt.limit`; a malformed id in the filter matches nothing."""
        ...

    async def list_run_items(self, flt: RunFilter, *, basic: bool = False) -> list[dict[str, Any]]:
        """The rows `list_runs(flt)` returns, each as the plain dict a face shows (one pass
        from the row, no `Run` in between): `views.run_dict`'s keys in its order and its
        values, except that times are aware UTC datetimes rather than their ISO text (a JSON
        encoder such as msgspec writes them as `iso` does). What a list page serves.
        `basic`: the same dicts without `core.runs.BASIC_LEFT_OUT` (nor `params_raw`), and
        those columns are not read at all."""

    async def latest_runs(self, jobs: Sequence[str]) -> dict[str, Run]:
        """The newest run (by `queued_at`, then id) of each of `jobs` that has one, in one
        statement (the web UI's jobs page: one read for every job, never one per job)."""
        ...

    async def count_queued(self) -> int:
        """How many rows are `queued` (due or not): the queue depth a heartbeat reports."""
        ...

    async def queued_by_executor(self) -> dict[str, int]:
        """How many rows are `queued`, by executor (the exporter's queue depth): O(queued),
        through the partial index of the queued runs, never a scan of the whole log."""
        ...

    async def outbox_oldest_pending(self) -> datetime | None:
        """When the oldest outbox row not yet published was written; None when none waits
        (or the store feeds no bus). One probe of the outbox's partial index."""
        ...

    async def running_by_launcher(self) -> dict[str, dict[str, int]]:
        """The runs running now, counted by the launcher holding each (its id; "" for rows
        nobody leases, such as the SDK's child rows) and executor: live from the run log, where
        a heartbeat's counts are as old as the beat."""
        ...

    async def request_cancel(self, run_id: str, *, by: str | None = None) -> Run:
        """Cancel a run, whoever holds it (the rule: `core.accept_rules.cancel_action`):
        queued → `cancelled` at once (note `core.accept_rules.cancelled_note(by)`); running →
        `cancel_requested_at` set (idempotent: a second request keeps the first time) for its
        launcher to act on (`Leases.cancel_requests`); final → `InvalidTransition`. Unknown id
        → `NotFound`."""
        ...

    async def finish_unleased(self, run_id: str, expected: RunStatus, outcome: Outcome) -> Run:
        """End a run nobody holds a lease on (a queued chain step past the chain's deadline,
        an SDK child row), conditional on its status still being `expected`: raise
        `InvalidTransition` when it is not (or is running under a lease: finish that through
        the lease), or when `expected` → `outcome.status` is not allowed; `NotFound` for an
        unknown id. Callers: the chain runner and the SDK."""
        ...


class Leases(Protocol):
    """What a launcher does with the runs it holds: claim, keep, save, give back. Every write
    here is fenced (see the module docstring); only the launcher calls it."""

    async def claim(
        self,
        owner: str,
        *,
        limit: int,
        lease_ttl: float,
        executors: Collection[str],
        executor_caps: Mapping[str, int],
    ) -> list[Claimed]:
        """Take up to `limit` due `queued` runs of `executors` and lease them to `owner`.

        Due: `not_before` (else `queued_at`) ≤ now and not past `queue_expires_at`. Taken in
        queue order (`coalesce(not_before, queued_at)`, `queued_at`, id) and admitted by
        `core.admission.select_admissible` against what is running now (overlap `forbid`/
        `queue` jobs one at a time, `executor_caps` per executor). A claimed run is `running`
        with owner, fresh token, generation + 1, lease expiry = now + `lease_ttl`; a first
        claim sets `started_at` and `deadline_at` (now + `deadline_seconds`). Concurrent
        claimers never get the same run. `Claimed.db_now` is the claim's database time.
        `limit` ≤ 0 or no executors: nothing, without a query. Hot path: one statement when
        the head of the queue needs no admission decision."""
        ...

    async def claim_abandoned(
        self, owner: str, *, limit: int, lease_ttl: float, executors: Collection[str]
    ) -> list[Claimed]:
        """Take over up to `limit` leased `running` runs of `executors` whose lease expired
        (their launcher died or stalled), the longest expired first: new owner and token,
        generation + 1, expiry = now + `lease_ttl`, `started_at` and `deadline_at` kept;
        `Claimed.recovered` is True. The old owner's fenced writes fail from then on. A running
        row without a lease (an SDK child) is never taken: `Sweeps.sweep_orphans` ends it."""
        ...

    async def renew(self, leases: Sequence[Lease], lease_ttl: float) -> set[str]:
        """Extend each lease to now + `lease_ttl`, in one transaction; return the run ids still
        held (the others are lost: taken over, finished, or malformed). A lease that expired
        but was not taken over (same token and generation) is revived, so a launcher cut off
        from the database longer than the TTL keeps its runs if nobody took them."""
        ...

    async def set_external_id(self, lease: Lease, external_id: str) -> None:
        """Fenced: record the execution's name at its executor (pid, Job name), so a launcher
        that takes the run over can `reattach`. `LeaseLost` when the lease is gone."""
        ...

    async def set_external_ids(self, writes: Sequence[tuple[Lease, str]]) -> list[bool]:
        """`set_external_id` for several runs in one statement (one commit), each write fenced
        on its own lease: True where it was saved, False where the lease is lost (that run's
        row is left as it was, the others are saved). Results in `writes`' order; committed
        when it returns. Hot path: the launcher saves pod runs' Job names through it."""
        ...

    async def finish(
        self,
        lease: Lease,
        outcome: Outcome,
        *,
        retry: NewRun | None = None,
        external_id: str | None = None,
        ended_monotonic: float | None = None,
    ) -> Run:
        """Fenced: write the final status, and insert `retry` in the same transaction;
        `InvalidTransition` unless `outcome.status` is final and reachable from running.
        Note rule: `core.accept_rules.finish_note`. `ended_monotonic` as in `FinishRequest`.
        Used by tests and by `finish_many`'s one-by-one fallback: the launcher saves through
        `finish_many`."""
        ...

    async def finish_many(self, requests: Sequence[FinishRequest]) -> list[FinishedRun | None]:
        """`finish` for several runs in one transaction (one commit): each request is fenced on
        its own lease; a request whose lease is lost gets None and writes nothing (its retry row
        included) while the others are saved. A saved one gets a `FinishedRun` (id, final
        status, end reason), not the whole row. Results are in request order. Rows are
        written in id order (as `renew` locks them), so the two never deadlock. Hot path."""
        ...

    async def release(
        self, lease: Lease, *, retry_after: float, error_code: str, note: str | None = None
    ) -> None:
        """Fenced: back to `queued` after a temporary executor error, due again after
        `retry_after` seconds, lease cleared, `error_code` and `note` kept for people to see
        (and `Sweeps.retry_repairs_now` to find). Wakes the claimers."""
        ...

    async def cancel_requests(self, owner: str) -> list[str]:
        """Ids of `running` runs leased by `owner` that someone asked to cancel
        (`RunLog.request_cancel`)."""
        ...


class Sweeps(Protocol):
    """The launcher's periodic repairs of rows nobody is acting on. Each is one conditional
    statement, safe to run from several launchers at once (a row is changed by one)."""

    async def expire_queued(self, *, limit: int = 500) -> list[Run]:
        """Up to `limit` `queued` runs past `queue_expires_at` → `skipped` (`expired`); return
        them in queue order (`queued_at`, id)."""
        ...

    async def sweep_orphans(self, *, grace: float, limit: int = 500) -> list[Run]:
        """Running runs past `deadline_at` + `grace` seconds with nobody supervising them (no
        lease, or an expired one) → `timeout` (`orphaned`). A supervised run is never touched."""
        ...

    async def retry_repairs_now(self, error_code: str, jobs: Collection[str]) -> list[str]:
        """Make the queued runs kept for repair with `error_code` (see `Leases.release`) whose
        job is in `jobs` due now, and return their ids, sorted: a launcher that starts with a
        catalog that has their job takes them at once instead of at their next repair look."""
        ...


# --- launchers, overrides, schedules ------------------------------------------------------------


class Launchers(Protocol):
    """Launcher liveness rows (`launcher_heartbeat`): written by launchers, read by every face."""

    async def beat(self, hb: Heartbeat) -> None:
        """Upsert the launcher's row, `beat_at` = now. Idempotent."""
        ...

    async def launchers(self) -> list[Heartbeat]:
        """Every heartbeat row, live or not (readers judge liveness with
        `service.catalog_stamp.live_launchers`), ordered by launcher id."""
        ...

    async def remove_launcher(self, launcher_id: str) -> None:
        """Delete the row (a launcher stopping cleanly); an unknown id is ignored."""
        ...

    async def prune_launchers(self, older_than: float) -> list[str]:
        """Delete the heartbeat rows of launchers silent for more than `older_than` seconds, or
        ten of their own heartbeat intervals when that is longer (by the store's clock): a
        launcher that beats every two hours is live for six. Return their ids, sorted. Live
        launchers call it as they beat."""
        ...


class Overrides(Protocol):
    """Pauses and snoozes of jobs (`job_overrides`): set by people, read by every trigger."""

    async def set_override(
        self, job: str, *, paused_until: datetime | None, reason: str | None, by: str | None
    ) -> Override:
        """Upsert the job's override (`paused_until` None = until resumed), `created_at` =
        now; return the stored row."""
        ...

    async def clear_override(self, job: str) -> bool:
        """Delete the job's override; False when it had none."""
        ...

    async def overrides(self) -> dict[str, Override]:
        """Every override by job, expired snoozes included (`service.scheduler.pause_of`
        decides whether one pauses now)."""
        ...


class Schedules(Protocol):
    """The scheduler's planning state: the last slot planned per schedule key."""

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


# --- chain runs and events ----------------------------------------------------------------------


class ChainRuns(Protocol):
    """Chain runs (`chain_runs`); their steps are run-log rows with `chain_root_id` = the id."""

    async def create_chain_run(self, new: NewChainRun) -> tuple[ChainRun, bool]:
        """Insert a chain run, idempotent by `dedupe_key`: `(existing, False)` when it exists.
        `started_at` = now; `deadline_at` = now + `max_duration_seconds` (None: no deadline);
        one recorded `skipped` (a missed or paused slot) is finished at once."""
        ...

    async def get_chain_run(self, chain_run_id: str) -> ChainRun:
        """The chain run; `NotFound` for an unknown (or malformed) id."""
        ...

    async def chain_run_ids_by_prefix(self, prefix: str, *, limit: int) -> list[str]:
        """`run_ids_by_prefix` for chain runs."""
        ...

    async def active_chain_runs(
        self, *, after: ChainRun | None = None, limit: int = 500
    ) -> list[ChainRun]:
        """Chain runs still `running`, oldest first (by start, then id); with `after`, those
        that come after it in that order (the next page)."""
        ...

    async def list_chain_runs(self, *, chain: str | None = None, limit: int = 50) -> list[ChainRun]:
        """Chain runs (of `chain`, when given), newest first, at most `limit`."""
        ...

    async def mark_chain_overrun(self, chain_run_id: str) -> ChainRun:
        """Set `overrun_at` = now once (later calls keep the first time); `NotFound` for an
        unknown id."""
        ...

    async def finish_chain_run(
        self, chain_run_id: str, status: str, end_reason: str | None = None
    ) -> ChainRun | None:
        """`running` → `status`, `finished_at` = now; None when it had already finished
        (another launcher did it) or is unknown: exactly one caller wins."""
        ...


class Events(Protocol):
    """Recording events and the runs they start (what `service.events.emit_event` writes)."""

    async def record_event(
        self, event_id: str, key: str, data: Mapping[str, Any], *, fact: EventFact | None = None
    ) -> tuple[Event, bool]:
        """Insert an event at now, idempotent by id: `(stored, False)` when it exists (whatever
        its key and data: the caller compares). With `fact`, a new event also writes its outbox
        row (`event:<key>`, a CloudEvent: id = the event id, type = its key, time = when it was
        recorded, data = its data) in the same transaction, while `bus_config.facts` is set (as
        a run state change does); a repeated id writes none."""
        ...

    async def link_event_runs(self, links: Sequence[EventLink]) -> None:
        """Record which runs an event started or joined, in one transaction (idempotent: a
        link already stored is kept as it is)."""
        ...


class EventHistory(Protocol):
    """Reads of recorded events. Used only by tests today (the API's event views will read
    them); kept apart so `Events` stays what emission needs."""

    async def get_event(self, event_id: str) -> Event:
        """The event; `NotFound` for an unknown id."""
        ...

    async def list_events(self, *, key: str | None = None, limit: int = 50) -> list[Event]:
        """Events (with `key`, when given), newest first (then by id), at most `limit`."""
        ...

    async def event_links(self, event_id: str) -> list[EventLink]:
        """The runs an event started or joined, by job, then run id."""
        ...

    async def events_of_run(self, run_id: str) -> list[EventLink]:
        """The events that started or joined a run, by event id."""
        ...


class Outbox(Protocol):
    """The outbox relay's rows (docs/bus.md#relay): leased in bounded batches (several relays at
    once never take the same row while its lease lives), marked published only after the
    broker confirmed them, pruned once published for `keep_seconds`."""

    async def outbox_lease(
        self, owner: str, *, limit: int, lease_seconds: float
    ) -> list[OutboxMessage]:
        """Up to `limit` unpublished rows, oldest first, that no live lease holds and that are
        the oldest unpublished row of their key; leased to `owner` for `lease_seconds`."""
        ...

    async def outbox_mark_sent(self, ids: Sequence[str]) -> None:
        """Rows the transport confirmed: published (idempotent)."""
        ...

    async def outbox_release(self, owner: str, ids: Sequence[str]) -> None:
        """Rows `owner` leased and did not publish: free them for the next attempt now."""
        ...

    async def outbox_prune(self, *, keep_seconds: float, limit: int = 5000) -> int:
        """Delete up to `limit` rows published more than `keep_seconds` ago; how many."""
        ...

    async def outbox_pending(self) -> int:
        """How many rows wait to be published."""
        ...

    async def outbox_add_fact(self, topic: str, payload: str, *, key: str | None) -> None:
        """An outbox row of a fact (a run's state change, an emitted event) for the relay."""
        ...

    async def set_bus_facts(self, enabled: bool) -> None:
        """Whether every run state change writes a fact (`event:run.<job>.<status>`, a
        CloudEvent) to the outbox in its own transaction (a trigger on the run log). On
        PostgreSQL the triggers are enabled only while facts are on, switched in the same
        transaction (which waits for run_log's writers when they change)."""
        ...


class Wakeups(Protocol):
    """The store side of the database bus (`runlane.ports.bus.Bus`, `adapters.sql.bus`)."""

    async def wait_for_wakeup(self, max_wait: float) -> bool:
        """Wait until a run may be claimable (a new queued run, a release, a freed slot) or
        `max_wait` seconds pass; True when woken. PostgreSQL uses LISTEN/NOTIFY (a NOTIFY sent
        in the writing transaction; the first wait starts the listener, which wakes once each
        time LISTEN takes effect); SQLite wakes on this store's own writes and otherwise times
        out (the caller's poll finds the rest). Woken waiters may find nothing: the row is the
        authority, a wake-up only a hint."""
        ...


class Tokens(Protocol):
    """API tokens (`api_tokens`): created, listed and revoked by admins, read by every request
    of a face that authenticates (`service.operations.tokens`)."""

    async def create_token(self, record: TokenRecord) -> TokenRecord:
        """Insert the token with `created_at` = now (the record's own is ignored); return the
        stored row. `TokenExists` when a token of that name exists, revoked or not: a name
        names one token for good, so the audit log's actors stay unambiguous."""
        ...

    async def token_by_hash(self, secret_hash: str) -> TokenRecord | None:
        """The live token whose secret hashes to `secret_hash` (an indexed read); None when
        none does, or it is revoked, or it expired (by the store's clock)."""
        ...

    async def tokens(self) -> list[TokenRecord]:
        """Every token, revoked and expired ones included, by name."""
        ...

    async def revoke_token(self, name: str) -> TokenRecord | None:
        """Set `revoked_at` = now (kept when already revoked); the stored row, None for an
        unknown name."""
        ...

    async def touch_token(self, name: str, *, every: float = 60.0) -> None:
        """Set `last_used_at` = now unless it was set less than `every` seconds ago: callers
        touch on use, and a busy token is written at most once a minute."""
        ...


class WebSessions(Protocol):
    """The web UI's sessions (`web_sessions`) and one-time login codes (`web_login_codes`),
    each keyed by the SHA-256 of a secret the store never sees (`service.operations.sessions`).
    A session is live only while its token is: the lookup joins `api_tokens`, so revoking or
    expiring a token ends its sessions at the next request."""

    async def create_web_session(
        self, session_id: str, token_name: str, *, lifetime: float
    ) -> WebSession | None:
        """Insert a session of `token_name` from now, ending `lifetime` seconds from now (its
        absolute end); the session as `web_session` reads it, None when the token is not live."""
        ...

    async def web_session(self, session_id: str, *, idle: float) -> WebSession | None:
        """The session, with its token, when it is live: before its absolute end, seen less
        than `idle` seconds ago, and its token neither revoked nor expired; None otherwise."""
        ...

    async def touch_web_session(self, session_id: str, *, every: float = 60.0) -> None:
        """Set `last_seen_at` = now unless it was set less than `every` seconds ago."""
        ...

    async def delete_web_session(self, session_id: str) -> bool:
        """Delete the session (logout); False when there was none."""
        ...

    async def prune_web_sessions(self, *, idle: float) -> int:
        """Delete sessions past their end or idle for `idle` seconds, and login codes past
        theirs; how many rows went."""
        ...

    async def create_login_code(self, code_id: str, token_name: str, *, ttl: float) -> None:
        """Insert a one-time login code for `token_name`, valid for `ttl` seconds from now."""
        ...

    async def redeem_login_code(self, code_id: str) -> str | None:
        """Use the code: the name of its token the first time, before it expires; None after
        (atomic: of concurrent callers at most one gets the name)."""
        ...

    async def count_tokens(self) -> int:
        """How many tokens the database has ever had (revoked and expired ones included)."""
        ...


class Audit(Protocol):
    """The audit log (`audit_log`): every write through a face that authenticates."""

    async def record_audit(self, entry: AuditEntry) -> AuditEntry:
        """Append `entry` with `at` = now and a fresh id (greater than every id before it);
        return the stored row."""
        ...

    async def audit(self, *, limit: int = 50, before: int | None = None) -> list[AuditEntry]:
        """Entries newest first (by id), at most `limit`, only ids below `before` when given
        (the next page starts before the last id of this one)."""
        ...


class Idempotency(Protocol):
    """Idempotency keys (`idempotency_keys`), one row per (owner, key): the store side of
    `service.operations.idempotency.idempotent`."""

    async def reserve_key(
        self,
        owner: str,
        key: str,
        fingerprint: str,
        *,
        reservation: str,
        ttl: float,
        abandoned: float,
    ) -> IdempotencyRecord | None:
        """Reserve (owner, key) for a request with `fingerprint`, in flight from now: None when
        this call reserved it, else the row that holds it (in flight when its `status` is
        None). A row older than `ttl` seconds, or still in flight after `abandoned` seconds
        (its process died before completing or releasing it), is replaced as if absent: a stale
        key is never replayed. Atomic: of concurrent callers exactly one gets None.
        `reservation`: the request's own random name for its reservation, which completing or
        releasing it must give."""
        ...

    async def complete_key(
        self, owner: str, key: str, status: int, body: str, *, reservation: str
    ) -> bool:
        """Store the response (`status`, `body` as JSON text) of the reserved request, while
        the key is still in flight under `reservation`; False (nothing written) when it is not:
        a request slower than `abandoned` whose key another request took over."""
        ...

    async def release_key(self, owner: str, key: str, *, reservation: str) -> bool:
        """Delete the reservation of a request that failed and saved nothing (a completed key
        is kept), so the same key may be tried again; only while the key is in flight under
        `reservation` (never another request's that took it over). Whether it was deleted."""
        ...

    async def prune_keys(self, older_than: float) -> int:
        """Delete keys created more than `older_than` seconds ago; how many."""
        ...


# --- the whole store and the combined roles services take -------------------------------------


class SchedulerStore(Schedules, Overrides, RunLog, Launchers, Protocol):
    """What `service.scheduler.Scheduler` needs."""


class ChainLog(ChainRuns, RunLog, Protocol):
    """Chain runs and their steps: what `service.chains.cancel_chain_run` needs."""


class ChainStore(ChainLog, Overrides, Launchers, Protocol):
    """What `service.chains.ChainRunner` needs (`Launchers`: its "no launcher runs it" note)."""


class EventStore(Events, Overrides, Protocol):
    """What `service.events.emit_event` needs (its runs are accepted through its caller's
    accept function)."""


class ExplainStore(Schedules, Overrides, ChainRuns, RunLog, Protocol):
    """What `service.scheduler.explain` and `explain_chain` read."""


class SupervisorStore(Leases, Launchers, RunLog, Protocol):
    """What the launcher's `Supervisor` calls: fenced writes of one run, and the launchers'
    heartbeats (is another launcher running this job?)."""


class HeartbeatStore(Launchers, RunLog, Protocol):
    """What the launcher's `HeartbeatWriter` calls: its heartbeat row and the queue depth."""


class Store(
    Schema,
    RunLog,
    Leases,
    Sweeps,
    Launchers,
    Overrides,
    Schedules,
    ChainRuns,
    Events,
    EventHistory,
    Wakeups,
    Outbox,
    Tokens,
    Audit,
    Idempotency,
    WebSessions,
    Incidents,
    Protocol,
):
    """The run log and everything stored next to it: every role above. Adapters implement it
    whole (`adapters.sqlite.SqliteStore`, `adapters.postgres.PostgresStore`); services take the
    narrowest role they call."""


__all__ = [
    "Audit",
    "ChainLog",
    "ChainRuns",
    "ChainStore",
    "EventHistory",
    "EventStore",
    "Events",
    "ExplainStore",
    "HeartbeatStore",
    "Idempotency",
    "Launchers",
    "Leases",
    "Outbox",
    "Overrides",
    "RunLog",
    "SchedulerStore",
    "Schedules",
    "Schema",
    "Store",
    "SupervisorStore",
    "Sweeps",
    "Tokens",
    "Wakeups",
    "WebSessions",
]
