"""The run log on PostgreSQL: accept, schema, sweeps and the trigger tables; claims and fenced
writes are `leases.py`, connections, bounds and LISTEN/NOTIFY wake-ups `connection.py`."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from runlane.adapters.postgres.connection import (
    _CANONICAL_UUID,
    _READ,
    READ_ONLY_SQLSTATE,
    _Conn,
    _is_uuid,
    where,
)
from runlane.adapters.postgres.leases import PostgresLeases
from runlane.adapters.postgres.statements import CURRENT_SCHEMA_VERSION, MIGRATIONS, Q
from runlane.adapters.sql import base
from runlane.adapters.sql.base import SqlStoreBase
from runlane.adapters.sql.incidents import SqlIncidents
from runlane.adapters.sql.migrations import check_schema_version
from runlane.adapters.sql.rows import Row, RowReader, dump_json
from runlane.core.accept_rules import (
    ORPHANED_NOTE,
    cancel_refusal,
    cancelled_note,
    check_unleased_finish,
    needs_overlap_check,
    overlap_decision,
    unleased_finish_refusal,
)
from runlane.core.runs import (
    AcceptResult,
    NewRun,
    Outcome,
    OverlapAction,
    Run,
    RunStatus,
)
from runlane.errors import (
    DatabaseUnavailable,
    NotFound,
    StoreError,
)
from runlane.ports import (
    ChainRun,
    Clock,
    Event,
    EventFact,
    NewChainRun,
    SystemClock,
)


class PostgresStore(PostgresLeases, SqlIncidents, SqlStoreBase):
    """`runlane.ports.Store` on PostgreSQL (psycopg 3, async pool)."""

    dialect = "postgresql"
    _read = _READ
    _statements = Q

    def __init__(
        self,
        url: str,
        *,
        clock: Clock | None = None,
        outbox: bool = False,
        pool_max: int = 8,
        application_name: str = "runlane",
        timeout: float | None = None,
    ) -> None:
        """`timeout`: the bound on each call, in seconds (the launcher's RUNLANE_DB_TIMEOUT; see
        `connection.LOCK_TIMEOUT_SHARE`). None (the CLI, the API, the SDK, `runlane db
        upgrade`): no bound but the pool's wait for a connection, and the server's own
        settings."""
        super().__init__(url, pool_max=pool_max, application_name=application_name, timeout=timeout)
        self._clock: Clock = clock or SystemClock()
        self._outbox = outbox
        # Try the one-statement claim (claim_fast) first; False after it found runs that need an
        # admission decision, until a two-step claim sees the head of the queue free of them.
        self._claim_fast = True

    # --- the primitives of SqlStoreBase (every call autocommits: one statement each) --------------

    async def _read_one(self, name: str, params: Mapping[str, object]) -> Row | None:
        return await self._fetchone(Q[name], params)

    async def _read_all(self, name: str, params: Mapping[str, object]) -> list[Row]:
        return list[Row](await self._fetchall(Q[name], params))

    _write_one = _read_one
    _write_all = _read_all

    async def _write_many(self, name: str, params: Sequence[Mapping[str, object]]) -> None:
        async with self._conn() as conn, conn.transaction():
            await conn.cursor().executemany(Q[name], params)

    async def _execute(self, name: str, params: Mapping[str, object]) -> None:
        async with self._conn() as conn:
            await conn.execute(Q[name], params)

    def _param_time(self, value: datetime | None) -> object:
        return value

    def _param_now(self) -> object:
        return self._now()

    def _param_since(self, seconds: float) -> object:
        return None  # the statements subtract `seconds` from the database's own now

    def _is_id(self, value: str) -> bool:
        return _is_uuid(value)

    def _id_key(self, value: str) -> str:
        # A uuid's text as PostgreSQL writes it (the ids runlane hands out already are).
        return value if _CANONICAL_UUID(value) is not None else str(uuid.UUID(value))

    # --- schema ---------------------------------------------------------------------------------

    async def schema_version(self) -> int:
        async with self._conn() as conn:
            return await self._schema_version(conn)

    @staticmethod
    async def _schema_version(conn: _Conn) -> int:
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(Q["migrations_table_exists"])
        row = await cur.fetchone()
        if row is None or not row["present"]:
            return 0
        await cur.execute(Q["schema_version"])
        row = await cur.fetchone()
        return 0 if row is None else RowReader.integer(row, "version")

    async def upgrade(self) -> list[int]:
        applied: list[int] = []
        # Not bounded, on either side: a migration may rewrite a large table, or wait for the
        # locks of launchers still running, for as long as it takes.
        async with self._conn(bounded=False) as conn:
            async with conn.transaction():
                await self._unbound_migration(conn)
                # Under the migrations' lock too: two `CREATE TABLE IF NOT EXISTS` at once on a
                # new database race in PostgreSQL's catalog (the second fails with a unique
                # violation on pg_type), so the second upgrade waits for the first's table.
                await conn.execute(Q["migrate_lock"])
                await conn.execute(Q["bootstrap_migrations"])
            for migration in MIGRATIONS:
                async with conn.transaction():
                    await self._unbound_migration(conn)
                    # Concurrent upgrades (two launchers starting) apply each migration once.
                    await conn.execute(Q["migrate_lock"])
                    if await self._schema_version(conn) >= migration.version:
                        continue
                    await conn.execute(migration.sql)
                    await conn.execute(
                        Q["record_migration"], {"version": migration.version, "now": self._now()}
                    )
                applied.append(migration.version)
        return applied

    async def _unbound_migration(self, conn: _Conn) -> None:
        """Lift the session's bounds for the transaction (only a bounded store sets them)."""
        if self._session is not None:
            await conn.execute(Q["migration_unbounded"])

    async def ensure_current(self) -> None:
        check_schema_version(await self.schema_version(), CURRENT_SCHEMA_VERSION)

    async def now(self) -> datetime:
        row = await self._fetchone(Q["db_now"], {"now": self._now()})
        assert row is not None
        return _READ.time(row, "now")

    # --- accept ---------------------------------------------------------------------------------

    async def accept(self, new: NewRun, *, overlap_action: OverlapAction = "none") -> AcceptResult:
        if not needs_overlap_check(overlap_action, new.status):
            # The common case is one statement (row + wake-up + outbox): one round trip.
            params = self._insert_params(new, new.status, new.end_reason)
            row = await self._fetchone(Q["insert_run"], params)
            if row is not None:
                return AcceptResult(_READ.run(row), created=True)
            return await self._existing(new)
        status: RunStatus = new.status
        end_reason = new.end_reason
        async with self._conn() as conn, conn.pipeline(), conn.transaction():
            await conn.execute(Q["job_lock"], {"job": new.job})
            existing_cur = conn.cursor(row_factory=dict_row)
            await existing_cur.execute(Q["run_by_dedupe_key"], {"dedupe_key": new.dedupe_key})
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(Q["active_run_of_job"], {"job": new.job})
            existing = await existing_cur.fetchone()
            if existing is not None:
                # A repeated command is answered with its row, even when that row is the active one.
                return AcceptResult(_READ.run(existing), created=False)
            active = await cur.fetchone()
            if active is not None:
                status, end_reason = overlap_decision(
                    overlap_action, new.job, status, end_reason, RowReader.text(active, "id")
                )
            await cur.execute(Q["insert_run"], self._insert_params(new, status, end_reason))
            row = await cur.fetchone()
        if row is not None:
            return AcceptResult(_READ.run(row), created=True)
        return await self._existing(new)

    async def _existing(self, new: NewRun) -> AcceptResult:
        """The row that already holds `new.dedupe_key` (ON CONFLICT DO NOTHING returned none)."""
        row = await self._fetchone(Q["run_by_dedupe_key"], {"dedupe_key": new.dedupe_key})
        if row is None:
            raise StoreError(f"run with dedupe key {new.dedupe_key!r} vanished during accept")
        return AcceptResult(_READ.run(row), created=False)

    # --- the bus's facts ------------------------------------------------------------------------

    async def set_bus_facts(self, enabled: bool) -> None:
        """The flag, written with this role's own rights, then run_log's facts triggers matched
        to it (migration 0013) in the same transaction: the flag's row lock orders concurrent
        callers, so once each commits the triggers are as the flag says."""
        async with self._conn() as conn:
            await conn.execute(Q["set_bus_facts"], {"facts": enabled})
            await conn.execute(Q["sync_facts_triggers"])

    # --- unleased changes -----------------------------------------------------------------------

    async def finish_unleased(self, run_id: str, expected: RunStatus, outcome: Outcome) -> Run:
        if not _is_uuid(run_id):
            raise NotFound(f"no run {run_id}")
        check_unleased_finish(run_id, expected, outcome.status)
        row = await self._fetchone(
            Q["finish_unleased"],
            {
                "now": self._now(),
                "id": run_id,
                "expected": expected.value,
                **base.outcome_params(outcome),
            },
        )
        if row is not None:
            return _READ.run(row)
        current = await self.get_run(run_id)
        raise unleased_finish_refusal(
            run_id,
            expected,
            current.status,
            current.lease_owner,
            leased=current.lease_token is not None,
        )

    async def retry_repairs_now(self, error_code: str, jobs: Collection[str]) -> list[str]:
        rows = await self._fetchall(
            Q["retry_repairs_now"],
            {"now": self._now(), "error_code": error_code, "jobs": sorted(jobs)},
        )
        return sorted(str(r["id"]) for r in rows)

    async def sweep_orphans(self, *, grace: float, limit: int = 500) -> list[Run]:
        rows = await self._fetchall(
            Q["sweep_orphans"],
            {"now": self._now(), "grace": grace, "limit": limit, "note": ORPHANED_NOTE},
        )
        return [_READ.run(r) for r in rows]

    async def request_cancel(self, run_id: str, *, by: str | None = None) -> Run:
        if not _is_uuid(run_id):
            raise NotFound(f"no run {run_id}")
        params = {"now": self._now(), "id": run_id, "note": cancelled_note(by)}
        row = await self._fetchone(Q["cancel_queued"], params)
        if row is None:
            row = await self._fetchone(Q["cancel_running"], params)
        if row is not None:
            return _READ.run(row)
        current = await self.get_run(run_id)  # NotFound for an unknown run
        raise cancel_refusal(run_id, current.status.value)

    # --- reads ----------------------------------------------------------------------------------

    # --- overrides and heartbeats ---------------------------------------------------------------

    async def prune_launchers(self, older_than: float) -> list[str]:
        rows = await self._fetchall(
            Q["prune_launchers"], {"now": self._now(), "older_than": float(older_than)}
        )
        return sorted(str(r["launcher_id"]) for r in rows)

    async def check_writable(self) -> None:
        try:
            async with self._conn() as conn, conn.transaction():
                await conn.execute(Q["write_probe"], {"launcher_id": f"write-probe:{uuid.uuid4()}"})
                raise psycopg.Rollback()
        except (psycopg.Error, DatabaseUnavailable) as exc:
            # A read-only transaction, a standby (DatabaseUnavailable, for a running launcher
            # to retry: at start it is a refusal), no INSERT privilege.
            if isinstance(exc, DatabaseUnavailable):
                cause = exc.__cause__
                if not isinstance(cause, psycopg.Error) or cause.sqlstate != READ_ONLY_SQLSTATE:
                    raise  # the database is away: not a write failure
                exc = cause
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StoreError(
                f"database not writable: PostgreSQL at {where(self._url)}: {reason}"
            ) from None

    # --- triggers: schedule state, chain runs, events ---------------------------------------------

    async def forget_schedules(self, keys: Collection[str]) -> None:
        if not keys:
            return
        async with self._conn() as conn:
            await conn.execute(Q["forget_schedules"], {"schedule_keys": sorted(keys)})

    async def create_chain_run(self, new: NewChainRun) -> tuple[ChainRun, bool]:
        if not _is_uuid(new.id):
            raise StoreError(f"chain run id {new.id!r} is not a UUID")
        row = await self._fetchone(
            Q["insert_chain_run"],
            {
                "now": self._now(),
                "id": new.id,
                "chain": new.chain,
                "dedupe_key": new.dedupe_key,
                "trigger": new.trigger,
                "requested_by": new.requested_by,
                "scheduled_for": new.scheduled_for,
                "status": new.status,
                "end_reason": new.end_reason,
                "max_duration": new.max_duration_seconds,
            },
        )
        if row is not None:
            return _READ.chain_run(row), True
        found = await self._fetchone(Q["chain_run_by_dedupe_key"], {"dedupe_key": new.dedupe_key})
        if found is None:
            raise StoreError(f"chain run {new.dedupe_key!r} could not be written")
        return _READ.chain_run(found), False

    async def record_event(
        self, event_id: str, key: str, data: Mapping[str, Any], *, fact: EventFact | None = None
    ) -> tuple[Event, bool]:
        row = await self._fetchone(
            Q["insert_event"],
            {
                "now": self._now(),
                "id": event_id,
                "key": key,
                "data": dump_json(dict(data)),
                "fact_source": None if fact is None else fact.source,
                "fact_traceparent": None if fact is None else fact.traceparent,
            },
        )
        if row is not None:
            return _READ.event(row), True
        found = await self._fetchone(Q["get_event"], {"id": event_id})
        if found is None:
            raise StoreError(f"event {event_id!r} could not be written")
        return _READ.event(found), False
