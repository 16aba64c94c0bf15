"""The run log on SQLite: the embedded default (one file, WAL, one writer at a time). The
statements of every role; the connection, transactions and wake-ups are `connection.py`."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from runlane.adapters.sql import base
from runlane.adapters.sql.incidents import SqlIncidents
from runlane.adapters.sql.migrations import Migration, check_schema_version
from runlane.adapters.sql.rows import RowReader, dump_json
from runlane.adapters.sqlite.connection import (
    _READ,
    DictRow,
    SqliteConnection,
    _all,
    _one,
    _opt_time,
    _write,
    format_time,
    split_statements,
    unwritable,
)
from runlane.adapters.sqlite.statements import CURRENT_SCHEMA_VERSION, MIGRATIONS, Q
from runlane.core.accept_rules import (
    ORPHANED_NOTE,
    cancel_refusal,
    cancelled_note,
    check_finish,
    check_unleased_finish,
    needs_overlap_check,
    overlap_decision,
    unleased_finish_refusal,
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
from runlane.errors import (
    DatabaseUnavailable,
    InvalidTransition,
    LeaseLost,
    NotFound,
    StoreError,
)
from runlane.ports import (
    ChainRun,
    Clock,
    Event,
    EventFact,
    FinishedRun,
    FinishRequest,
    NewChainRun,
)


def _ended_at(now: datetime, ended_monotonic: float | None) -> str:
    """When a run ended, as `finished_at` (see `FinishRequest.ended_monotonic`)."""
    ago = base.seconds_since(ended_monotonic)
    return format_time(now - timedelta(seconds=ago) if ago else now)


class SqliteStore(SqlIncidents, SqliteConnection):
    """`runlane.ports.Store` on a SQLite file (stdlib `sqlite3`, one worker thread)."""

    dialect = "sqlite"

    def __init__(
        self, path: str, *, clock: Clock | None = None, outbox: bool = False, create: bool = True
    ) -> None:
        super().__init__(path, clock=clock, create=create)
        self._outbox = outbox

    # --- schema ---------------------------------------------------------------------------------

    @staticmethod
    def _schema_version(conn: sqlite3.Connection) -> int:
        present = _one(conn.execute(Q["migrations_table_exists"]))
        if present is None or not RowReader.integer(present, "present"):
            return 0
        row = _one(conn.execute(Q["schema_version"]))
        return 0 if row is None else RowReader.integer(row, "version")

    async def schema_version(self) -> int:
        return await self._call(self._schema_version)

    async def upgrade(self) -> list[int]:
        now = format_time(self._now())

        def work(conn: sqlite3.Connection) -> list[int]:
            conn.execute(Q["bootstrap_migrations"])
            applied: list[int] = []
            for migration in MIGRATIONS:

                def apply(w: sqlite3.Connection, m: Migration = migration) -> bool:
                    # Checked under the write lock: concurrent upgrades apply each file once.
                    if self._schema_version(w) >= m.version:
                        return False
                    for statement in split_statements(m.sql):
                        w.execute(statement)
                    w.execute(Q["record_migration"], {"version": m.version, "now": now})
                    return True

                if _write(conn, apply):
                    applied.append(migration.version)
            return applied

        return await self._call(work)

    async def ensure_current(self) -> None:
        check_schema_version(await self.schema_version(), CURRENT_SCHEMA_VERSION)

    async def now(self) -> datetime:
        return self._now()

    # --- accept ---------------------------------------------------------------------------------

    def _insert_params(
        self, new: NewRun, status: RunStatus, end_reason: str | None, now: datetime
    ) -> dict[str, object]:
        expires = (
            None
            if new.queue_ttl_seconds is None
            else format_time(now + timedelta(seconds=new.queue_ttl_seconds))
        )
        params = base.run_params(new, status, end_reason)
        params["now"] = format_time(now)
        params["scheduled_for"] = _opt_time(new.scheduled_for)
        params["not_before"] = _opt_time(new.not_before)
        params["queue_expires_at"] = expires
        params["deadline_at"] = format_time(now + timedelta(seconds=new.deadline_seconds))
        return params

    def _insert(
        self,
        conn: sqlite3.Connection,
        new: NewRun,
        status: RunStatus,
        end_reason: str | None,
        now: datetime,
    ) -> DictRow | None:
        row = _one(conn.execute(Q["insert_run"], self._insert_params(new, status, end_reason, now)))
        if row is not None and self._outbox and status == RunStatus.QUEUED:
            conn.execute(
                Q["insert_outbox"],
                {
                    "topic": base.OUTBOX_TOPIC_RUN_QUEUED,
                    "payload": base.outbox_payload(new),
                    "now": format_time(now),
                    "key": new.id,
                },
            )
        return row

    async def accept(self, new: NewRun, *, overlap_action: OverlapAction = "none") -> AcceptResult:
        now = self._now()

        def work(conn: sqlite3.Connection) -> AcceptResult:
            existing = _one(conn.execute(Q["run_by_dedupe_key"], {"dedupe_key": new.dedupe_key}))
            if existing is not None:
                return AcceptResult(_READ.run(existing), created=False)
            status: RunStatus = new.status
            end_reason = new.end_reason
            if needs_overlap_check(overlap_action, status):
                active = _one(conn.execute(Q["active_run_of_job"], {"job": new.job}))
                if active is not None:
                    status, end_reason = overlap_decision(
                        overlap_action, new.job, status, end_reason, RowReader.text(active, "id")
                    )
            row = self._insert(conn, new, status, end_reason, now)
            if row is None:  # unreachable under the write lock; kept for safety
                raise StoreError(f"run with dedupe key {new.dedupe_key!r} could not be written")
            return AcceptResult(_READ.run(row), created=True)

        result = await self._call(lambda conn: _write(conn, work))
        if result.created and result.run.status == RunStatus.QUEUED:
            self._wakeup.set()
        return result

    # --- claims ---------------------------------------------------------------------------------

    async def claim(
        self,
        owner: str,
        *,
        limit: int,
        lease_ttl: float,
        executors: Collection[str],
        executor_caps: Mapping[str, int],
    ) -> list[Claimed]:
        if limit <= 0 or not executors:
            return []
        now = self._now()
        params = {
            "now": format_time(now),
            "executors": dump_json(sorted(executors)),
            "scan": min(limit * 4, limit + 256),
        }
        expires_at = format_time(now + timedelta(seconds=lease_ttl))

        def work(conn: sqlite3.Connection) -> list[Claimed]:
            cand_rows = _all(conn.execute(Q["claim_candidates"], params))
            if not cand_rows:
                return []
            # `allow` jobs ignore running counts, so only the others are counted.
            jobs = sorted(
                {
                    RowReader.text(r, "job")
                    for r in cand_rows
                    if RowReader.text(r, "overlap") != "allow"
                }
            )
            # Nothing to count when every candidate is `allow` and no executor is capped.
            count_rows = (
                _all(
                    conn.execute(
                        Q["running_counts"],
                        {
                            "jobs": dump_json(jobs),
                            "capped": dump_json(sorted(executor_caps)),
                        },
                    )
                )
                if jobs or executor_caps
                else []
            )
            chosen = base.admit(cand_rows, count_rows, executor_caps, limit)
            deadline_by_id = {
                RowReader.text(r, "id"): RowReader.number(r, "deadline_seconds", 3600.0)
                for r in cand_rows
            }
            claims: list[Claimed] = []
            for run_id in chosen:
                row = _one(
                    conn.execute(
                        Q["claim_one"],
                        {
                            "id": run_id,
                            "owner": owner,
                            "token": str(uuid.uuid4()),
                            "expires_at": expires_at,
                            "now": params["now"],
                            "deadline_at": format_time(
                                now + timedelta(seconds=deadline_by_id[run_id])
                            ),
                        },
                    )
                )
                if row is not None:
                    claims.append(_claimed(row, now, recovered=False))
            return claims

        return await self._call(lambda conn: _write(conn, work))

    async def claim_abandoned(
        self, owner: str, *, limit: int, lease_ttl: float, executors: Collection[str]
    ) -> list[Claimed]:
        if limit <= 0 or not executors:
            return []
        now = self._now()
        now_text = format_time(now)
        expires_at = format_time(now + timedelta(seconds=lease_ttl))

        def work(conn: sqlite3.Connection) -> list[Claimed]:
            ids = _all(
                conn.execute(
                    Q["abandoned_candidates"],
                    {
                        "now": now_text,
                        "executors": dump_json(sorted(executors)),
                        "limit": limit,
                    },
                )
            )
            claims: list[Claimed] = []
            for cand in ids:
                row = _one(
                    conn.execute(
                        Q["reclaim_one"],
                        {
                            "id": RowReader.text(cand, "id"),
                            "owner": owner,
                            "token": str(uuid.uuid4()),
                            "expires_at": expires_at,
                            "now": now_text,
                        },
                    )
                )
                if row is not None:
                    claims.append(_claimed(row, now, recovered=True))
            return claims

        return await self._call(lambda conn: _write(conn, work))

    async def renew(self, leases: Sequence[Lease], lease_ttl: float) -> set[str]:
        if not leases:
            return set()
        now = self._now()
        now_text = format_time(now)
        expires_at = format_time(now + timedelta(seconds=lease_ttl))

        def work(conn: sqlite3.Connection) -> set[str]:
            held: set[str] = set()
            for lease in leases:
                row = _one(
                    conn.execute(
                        Q["renew_one"],
                        {
                            "id": lease.run_id,
                            "token": lease.token,
                            "gen": lease.generation,
                            "now": now_text,
                            "expires_at": expires_at,
                        },
                    )
                )
                if row is not None:
                    held.add(lease.run_id)
            return held

        return await self._call(lambda conn: _write(conn, work))

    # --- fenced writes --------------------------------------------------------------------------

    def _fence(self, lease: Lease, now: datetime) -> dict[str, object]:
        return {
            "now": format_time(now),
            "id": lease.run_id,
            "token": lease.token,
            "gen": lease.generation,
        }

    async def set_external_id(self, lease: Lease, external_id: str) -> None:
        params = {**self._fence(lease, self._now()), "external_id": external_id}

        def work(conn: sqlite3.Connection) -> None:
            if _one(conn.execute(Q["set_external_id"], params)) is None:
                raise LeaseLost(f"lease on run {lease.run_id} is lost: external id not saved")

        await self._call(lambda conn: _write(conn, work))

    async def set_external_ids(self, writes: Sequence[tuple[Lease, str]]) -> list[bool]:
        if not writes:
            return []
        now = self._now()

        def work(conn: sqlite3.Connection) -> list[bool]:
            return [
                _one(
                    conn.execute(
                        Q["set_external_id"],
                        {**self._fence(lease, now), "external_id": external_id},
                    )
                )
                is not None
                for lease, external_id in writes
            ]

        return await self._call(lambda conn: _write(conn, work))

    async def finish(
        self,
        lease: Lease,
        outcome: Outcome,
        *,
        retry: NewRun | None = None,
        external_id: str | None = None,
        ended_monotonic: float | None = None,
    ) -> Run:
        check_finish(lease.run_id, outcome.status)
        now = self._now()
        params = {
            **self._fence(lease, now),
            **base.outcome_params(outcome),
            "external_id": external_id,
            "finished_at": _ended_at(now, ended_monotonic),
        }

        def work(conn: sqlite3.Connection) -> Run:
            row = _one(conn.execute(Q["finish"], params))
            if row is None:
                raise LeaseLost(f"lease on run {lease.run_id} is lost: outcome not saved")
            run = _READ.run(row)
            if retry is not None and run.cancel_requested_at is None:
                self._insert(conn, retry, retry.status, retry.end_reason, now)
            return run

        run = await self._call(lambda conn: _write(conn, work))
        self._wakeup.set()  # a slot was freed (and a retry may be queued)
        return run

    async def finish_many(self, requests: Sequence[FinishRequest]) -> list[FinishedRun | None]:
        for req in requests:
            check_finish(req.lease.run_id, req.outcome.status)
        if not requests:
            return []
        now = self._now()

        def work(conn: sqlite3.Connection) -> list[FinishedRun | None]:
            out: list[FinishedRun | None] = []
            for req in requests:
                params = {
                    **self._fence(req.lease, now),
                    **base.outcome_params(req.outcome),
                    "external_id": req.external_id,
                    "finished_at": _ended_at(now, req.ended_monotonic),
                }
                # Only the status and end reason: the whole row costs ~35 conversions a run.
                found = conn.execute(Q["finish_brief"], params).fetchone()
                if found is None:
                    out.append(None)
                    continue
                retried = False
                if req.retry is not None and found[2] is None:  # (cancel requested: none)
                    self._insert(conn, req.retry, req.retry.status, req.retry.end_reason, now)
                    retried = True
                out.append(
                    FinishedRun(req.lease.run_id, RunStatus(found[0]), found[1], retried=retried)
                )
            return out

        runs = await self._call(lambda conn: _write(conn, work))
        self._wakeup.set()
        return runs

    async def release(
        self, lease: Lease, *, retry_after: float, error_code: str, note: str | None = None
    ) -> None:
        now = self._now()
        params = {
            **self._fence(lease, now),
            "not_before": format_time(now + timedelta(seconds=retry_after)),
            "error_code": error_code,
            "note": note,
        }

        def work(conn: sqlite3.Connection) -> None:
            if _one(conn.execute(Q["release"], params)) is None:
                raise LeaseLost(f"lease on run {lease.run_id} is lost: not released")

        await self._call(lambda conn: _write(conn, work))
        self._wakeup.set()

    # --- unleased changes -----------------------------------------------------------------------

    async def finish_unleased(self, run_id: str, expected: RunStatus, outcome: Outcome) -> Run:
        try:
            check_unleased_finish(run_id, expected, outcome.status)
        except InvalidTransition:
            await self.get_run(run_id)  # NotFound first, for an unknown run
            raise
        params = {
            "now": format_time(self._now()),
            "id": run_id,
            "expected": expected.value,
            **base.outcome_params(outcome),
        }

        def work(conn: sqlite3.Connection) -> Run:
            row = _one(conn.execute(Q["finish_unleased"], params))
            if row is not None:
                return _READ.run(row)
            current = _one(conn.execute(Q["get_run"], {"id": run_id}))
            if current is None:
                raise NotFound(f"no run {run_id}")
            run = _READ.run(current)
            raise unleased_finish_refusal(
                run_id, expected, run.status, run.lease_owner, leased=run.lease_token is not None
            )

        return await self._call(lambda conn: _write(conn, work))

    async def retry_repairs_now(self, error_code: str, jobs: Collection[str]) -> list[str]:
        params = {
            "now": format_time(self._now()),
            "error_code": error_code,
            "jobs": dump_json(sorted(jobs)),
        }

        def work(conn: sqlite3.Connection) -> list[str]:
            return [str(r[0]) for r in conn.execute(Q["retry_repairs_now"], params).fetchall()]

        ids = sorted(await self._call(lambda conn: _write(conn, work)))
        if ids:
            self._wakeup.set()
        return ids

    async def sweep_orphans(self, *, grace: float, limit: int = 500) -> list[Run]:
        now = self._now()
        params = {
            "now": format_time(now),
            "cutoff": format_time(now - timedelta(seconds=grace)),
            "limit": limit,
            "note": ORPHANED_NOTE,
        }

        def work(conn: sqlite3.Connection) -> list[Run]:
            return [_READ.run(r) for r in _all(conn.execute(Q["sweep_orphans"], params))]

        return await self._call(lambda conn: _write(conn, work))

    async def request_cancel(self, run_id: str, *, by: str | None = None) -> Run:
        params = {
            "now": format_time(self._now()),
            "id": run_id,
            "note": cancelled_note(by),
        }

        def work(conn: sqlite3.Connection) -> Run:
            row = _one(conn.execute(Q["cancel_queued"], params))
            if row is None:
                row = _one(conn.execute(Q["cancel_running"], params))
            if row is not None:
                return _READ.run(row)
            current = _one(conn.execute(Q["get_run"], {"id": run_id}))
            raise cancel_refusal(
                run_id, None if current is None else RowReader.text(current, "status")
            )

        return await self._call(lambda conn: _write(conn, work))

    # --- overrides and heartbeats ---------------------------------------------------------------

    async def prune_launchers(self, older_than: float) -> list[str]:
        now = self._now()
        params = {
            "cutoff": format_time(now - timedelta(seconds=older_than)),
            "now": format_time(now),
        }
        rows = await self._call(
            lambda c: _write(c, lambda w: _all(w.execute(Q["prune_launchers"], params)))
        )
        return sorted(RowReader.text(r, "launcher_id") for r in rows)

    async def check_writable(self) -> None:
        params = {"launcher_id": f"write-probe:{uuid.uuid4()}", "now": format_time(self._now())}

        def probe(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(Q["write_probe"], params)
            finally:
                conn.execute("ROLLBACK")

        try:
            await self._call(probe)
        except DatabaseUnavailable as exc:
            # A running launcher retries a full disk or a read-only file; at start it is a
            # refusal. A database that is busy is not a write failure.
            if exc.__cause__ is None or not unwritable(exc.__cause__):
                raise
            raise StoreError(
                f"database not writable: SQLite database at {self.path}: {exc.__cause__}"
            ) from None
        except StoreError as exc:
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            raise StoreError(
                f"database not writable: SQLite database at {self.path}: {cause}"
            ) from None

    # --- triggers: schedule state, chain runs, events ---------------------------------------------

    async def forget_schedules(self, keys: Collection[str]) -> None:
        if not keys:
            return
        params = [{"schedule_key": key} for key in sorted(keys)]

        def work(conn: sqlite3.Connection) -> None:
            conn.executemany(Q["forget_schedule"], params)

        await self._call(lambda conn: _write(conn, work))

    async def create_chain_run(self, new: NewChainRun) -> tuple[ChainRun, bool]:
        now = self._now()
        params = {
            "now": format_time(now),
            "id": new.id,
            "chain": new.chain,
            "dedupe_key": new.dedupe_key,
            "trigger": new.trigger,
            "requested_by": new.requested_by,
            "scheduled_for": _opt_time(new.scheduled_for),
            "status": new.status,
            "end_reason": new.end_reason,
            "deadline_at": None
            if new.max_duration_seconds is None
            else format_time(now + timedelta(seconds=new.max_duration_seconds)),
        }

        def work(conn: sqlite3.Connection) -> tuple[ChainRun, bool]:
            row = _one(conn.execute(Q["insert_chain_run"], params))
            if row is not None:
                return _READ.chain_run(row), True
            found = _one(conn.execute(Q["chain_run_by_dedupe_key"], {"dedupe_key": new.dedupe_key}))
            if found is None:
                raise StoreError(f"chain run {new.dedupe_key!r} could not be written")
            return _READ.chain_run(found), False

        return await self._call(lambda conn: _write(conn, work))

    async def record_event(
        self, event_id: str, key: str, data: Mapping[str, Any], *, fact: EventFact | None = None
    ) -> tuple[Event, bool]:
        params = {
            "now": format_time(self._now()),
            "id": event_id,
            "key": key,
            "data": dump_json(dict(data)),
        }

        def work(conn: sqlite3.Connection) -> tuple[Event, bool]:
            row = _one(conn.execute(Q["insert_event"], params))
            if row is not None:
                if fact is not None:
                    conn.execute(
                        Q["insert_event_fact"],
                        {
                            "id": event_id,
                            "fact_source": fact.source,
                            "fact_traceparent": fact.traceparent,
                        },
                    )
                return _READ.event(row), True
            found = _one(conn.execute(Q["get_event"], {"id": event_id}))
            if found is None:
                raise StoreError(f"event {event_id!r} could not be written")
            return _READ.event(found), False

        return await self._call(lambda conn: _write(conn, work))


def _claimed(row: Mapping[str, object], now: datetime, *, recovered: bool) -> Claimed:
    run = _READ.run(row)
    if run.lease_owner is None or run.lease_token is None:
        raise StoreError(f"claimed run {run.id} has no lease")
    lease = Lease(run.id, run.lease_owner, run.lease_token, run.lease_generation)
    return Claimed(run, lease, now, recovered=recovered)
