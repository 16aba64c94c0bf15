"""The run log on PostgreSQL: claims with SKIP LOCKED, fenced writes, LISTEN/NOTIFY wake-ups."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import dict_row

from runlane.adapters.postgres.connection import PostgresConnections, where
from runlane.adapters.postgres.statements import CURRENT_SCHEMA_VERSION, MIGRATIONS, Q
from runlane.adapters.sql import base
from runlane.adapters.sql.base import SqlStoreBase
from runlane.adapters.sql.migrations import check_schema_version
from runlane.adapters.sql.rows import Row, RowReader, aware_utc, dump_json, parse_running_counts
from runlane.core.accept_rules import (
    ORPHANED_NOTE,
    cancel_refusal,
    cancelled_note,
    needs_overlap_check,
    overlap_decision,
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
    can_transition,
)
from runlane.errors import (
    InvalidTransition,
    LeaseLost,
    NotFound,
    StoreError,
)
from runlane.ports import (
    ChainRun,
    Clock,
    Event,
    FinishedRun,
    FinishRequest,
    NewChainRun,
    SystemClock,
)


class _BatchLeaseExpired(Exception):
    """Raised inside a batched save to roll it back when a lease expired before COMMIT."""


_Conn = AsyncConnection[Any]


def _decode_time(value: object) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return aware_utc(value)
    raise ValueError(f"not a timestamp: {value!r}")


_READ = RowReader(_decode_time)


# The form PostgreSQL prints (every id and lease token the store hands out): checked without
# building a uuid.UUID, ~0.3 us instead of ~2 us, twice for every outcome saved.
_CANONICAL_UUID = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
).fullmatch


def _is_uuid(value: str) -> bool:
    if _CANONICAL_UUID(value) is not None:
        return True
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


class PostgresStore(PostgresConnections, SqlStoreBase):
    """`runlane.ports.Store` on PostgreSQL (psycopg 3, async pool)."""

    dialect = "postgresql"
    _read = _READ

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

    def _now(self) -> datetime | None:
        return self._clock.now_or_none()

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

    def _is_id(self, value: str) -> bool:
        return _is_uuid(value)

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

    def _insert_params(
        self, new: NewRun, status: RunStatus, end_reason: str | None
    ) -> dict[str, object]:
        for label, value in (
            ("id", new.id),
            ("parent_run_id", new.parent_run_id),
            ("chain_root_id", new.chain_root_id),
            ("retry_of", new.retry_of),
        ):
            if value is not None and not _is_uuid(value):
                raise StoreError(f"run {label} {value!r} is not a UUID")
        params = base.run_params(new, status, end_reason)
        params["now"] = self._now()
        params["scheduled_for"] = new.scheduled_for
        params["not_before"] = new.not_before
        params["queue_ttl_seconds"] = new.queue_ttl_seconds
        params["outbox"] = self._outbox
        params["outbox_topic"] = base.OUTBOX_TOPIC_RUN_QUEUED
        params["outbox_payload"] = base.outbox_payload(new.id, new.job, new.executor, new.attempt)
        return params

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
        if self._claim_fast:
            claims = await self._claim_fast_path(owner, limit, lease_ttl, executors, executor_caps)
            if claims is not None:
                return claims
            # Admission has something to decide: claim in two steps until it has not.
            self._claim_fast = False
        # Scan a few more rows than asked: admission may pass over some (overlap, caps).
        scan = min(limit * 4, limit + 256)
        # BEGIN/COMMIT sent as statements (psycopg's transaction() costs ~0.3 ms of Python per
        # use in pipeline mode); an early return leaves the transaction to the pool's
        # connection context, which commits it.
        async with self._claim_conn() as conn, conn.pipeline():
            await conn.execute(b"BEGIN")
            await conn.execute(Q["claim_lock"])
            cand_cur = conn.cursor(row_factory=dict_row)
            await cand_cur.execute(
                Q["claim_candidates"],
                {
                    "now": now,
                    "executors": list(executors),
                    "capped": list(executor_caps),
                    "scan": scan,
                },
            )
            cand_rows = await cand_cur.fetchall()
            if not cand_rows:
                return []
            # The next claim may take the one-statement path again once the head of the queue
            # needs no admission decision.
            self._claim_fast = all(
                r["overlap"] == "allow" and r["executor"] not in executor_caps
                for r in cand_rows[:limit]
            )
            counts = parse_running_counts(cand_rows[0]["running"])
            chosen = base.admit(cand_rows, counts, executor_caps, limit)
            if not chosen:
                return []
            upd = conn.cursor(row_factory=dict_row)
            await upd.execute(
                Q["claim_update"],
                {"now": now, "owner": owner, "ttl": float(lease_ttl), "ids": chosen},
            )
            await conn.execute(b"COMMIT")
            rows = await upd.fetchall()  # a failed COMMIT raises here or as the pipeline ends
        return _claimed(rows, chosen, recovered=False)

    async def _claim_fast_path(
        self,
        owner: str,
        limit: int,
        lease_ttl: float,
        executors: Collection[str],
        executor_caps: Mapping[str, int],
    ) -> list[Claimed] | None:
        """The whole claim as one autocommit statement when the first `limit` due runs need no
        admission decision; None when they do (nothing was claimed). It holds the claim lock
        shared, not exclusive: the runs it takes (`overlap: allow`, uncapped executors) count
        in no admission decision and FOR UPDATE SKIP LOCKED keeps claimers off each other's
        rows, so fast claims run side by side; they only wait for a two-step claim, whose
        locked candidates they would otherwise skip. One claimer per store: the launcher's
        consumer (a second concurrent caller would wait for the one claim connection)."""
        async with self._claim_conn() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(
                Q["claim_fast"],
                {
                    "now": self._now(),
                    "executors": list(executors),
                    "capped": list(executor_caps),
                    "limit": limit,
                    "owner": owner,
                    "ttl": float(lease_ttl),
                },
            )
            rows = await cur.fetchall()
        if not rows or rows[0]["fast"] is None:
            return []  # nothing is due
        if not rows[0]["fast"]:
            return None
        return _claimed(
            [r for r in rows if r["id"] is not None], None, recovered=False, in_claim_order=True
        )

    async def claim_abandoned(
        self, owner: str, *, limit: int, lease_ttl: float, executors: Collection[str]
    ) -> list[Claimed]:
        if limit <= 0 or not executors:
            return []
        rows = await self._fetchall(
            Q["claim_abandoned"],
            {
                "now": self._now(),
                "owner": owner,
                "ttl": float(lease_ttl),
                "limit": limit,
                "executors": list(executors),
            },
        )
        return _claimed(rows, None, recovered=True)

    async def renew(self, leases: Sequence[Lease], lease_ttl: float) -> set[str]:
        # In id order, as finish_many writes its batch: two statements that lock the same rows
        # in one order cannot deadlock (PostgreSQL breaks a deadlock after deadlock_timeout).
        valid = sorted(
            (ls for ls in leases if _is_uuid(ls.run_id) and _is_uuid(ls.token)),
            key=lambda ls: ls.run_id.lower(),
        )
        if not valid:
            return set()
        rows = await self._fetchall(
            Q["renew"],
            {
                "now": self._now(),
                "ttl": float(lease_ttl),
                "ids": [ls.run_id for ls in valid],
                "tokens": [ls.token for ls in valid],
                "gens": [ls.generation for ls in valid],
            },
        )
        return {RowReader.text(r, "id") for r in rows}

    # --- fenced writes --------------------------------------------------------------------------

    def _fence(self, lease: Lease) -> dict[str, object]:
        if not (_is_uuid(lease.run_id) and _is_uuid(lease.token)):
            raise LeaseLost(f"lease on run {lease.run_id} is lost (malformed lease)")
        return {
            "now": self._now(),
            "id": lease.run_id,
            "token": lease.token,
            "gen": lease.generation,
        }

    async def set_external_id(self, lease: Lease, external_id: str) -> None:
        row = await self._fetchone(
            Q["set_external_id"], {**self._fence(lease), "external_id": external_id}
        )
        if row is None:
            raise LeaseLost(f"lease on run {lease.run_id} is lost: external id not saved")

    async def finish(
        self,
        lease: Lease,
        outcome: Outcome,
        *,
        retry: NewRun | None = None,
        external_id: str | None = None,
        ended_monotonic: float | None = None,
    ) -> Run:
        if not outcome.status.is_final or not can_transition(RunStatus.RUNNING, outcome.status):
            raise InvalidTransition(f"run {lease.run_id} cannot finish as {outcome.status.value}")
        params = {
            **self._fence(lease),
            **base.outcome_params(outcome),
            "external_id": external_id,
        }
        ago = partial(base.seconds_since, ended_monotonic)  # at the statement, not before
        if retry is None:
            # One statement: the fence in its WHERE is the whole check.
            async with self._conn() as conn:
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(Q["finish"], {**params, "ago": ago()})
                row = await cur.fetchone()
            if row is None:
                raise LeaseLost(f"lease on run {lease.run_id} is lost: outcome not saved")
            return _READ.run(row)
        insert = self._insert_params(retry, retry.status, retry.end_reason)
        async with self._conn() as conn, conn.pipeline(), conn.transaction():
            fin = conn.cursor(row_factory=dict_row)
            await fin.execute(Q["finish"], {**params, "ago": ago()})
            ins = conn.cursor(row_factory=dict_row)
            await ins.execute(Q["insert_run"], insert)
            chk = conn.cursor(row_factory=dict_row)
            # Checked last so a save that ran past its lease rolls back whole.
            await chk.execute(Q["lease_still_valid"], {**self._fence(lease), "now": self._now()})
            row = await fin.fetchone()
            still = await chk.fetchone()
            if row is None or still is None:
                raise LeaseLost(f"lease on run {lease.run_id} is lost: outcome not saved")
        return _READ.run(row)

    async def finish_many(self, requests: Sequence[FinishRequest]) -> list[FinishedRun | None]:
        for req in requests:
            status = req.outcome.status
            if not status.is_final or not can_transition(RunStatus.RUNNING, status):
                raise InvalidTransition(f"run {req.lease.run_id} cannot finish as {status.value}")
        if not requests:
            return []
        try:
            return await self._finish_batch(requests)
        except _BatchLeaseExpired:
            # A lease expired between the UPDATE and COMMIT (rare): save one by one instead.
            out: list[FinishedRun | None] = []
            for req in requests:
                try:
                    run = await self.finish(
                        req.lease,
                        req.outcome,
                        retry=req.retry,
                        external_id=req.external_id,
                        ended_monotonic=req.ended_monotonic,
                    )
                except LeaseLost:
                    out.append(None)
                else:
                    out.append(FinishedRun(run.id, run.status, run.end_reason))
            return out

    async def _finish_batch(self, requests: Sequence[FinishRequest]) -> list[FinishedRun | None]:
        batch: list[dict[str, object]] = []
        ended: list[float | None] = []  # each run's ended_monotonic, in batch order
        # In id order, as renew takes its leases: the rows are locked in one order (see renew).
        for req in sorted(requests, key=lambda r: r.lease.run_id.lower()):
            if not (_is_uuid(req.lease.run_id) and _is_uuid(req.lease.token)):
                raise LeaseLost(f"lease on run {req.lease.run_id} is malformed")
            o = req.outcome
            batch.append(
                {
                    "id": req.lease.run_id,
                    "token": req.lease.token,
                    "gen": req.lease.generation,
                    "status": o.status.value,
                    "end_reason": o.end_reason,
                    "exit_code": o.exit_code,
                    "error_code": o.error_code,
                    "log_tail": o.log_tail,
                    "note": o.note,
                    "external_id": req.external_id,
                }
            )
            ended.append(req.ended_monotonic)

        def params() -> dict[str, object]:
            """Made once a connection is in hand: how long ago each run ended is counted up to
            the statement, not to before a wait for a connection (after an outage, seconds)."""
            for item, at in zip(batch, ended, strict=True):
                item["ago"] = base.seconds_since(at)
            # The outcome's texts (log tail, note, error code) are storable by construction
            # (core.runs.storable_text); end reasons and external ids come from runlane itself.
            return {"batch": json.dumps(batch, ensure_ascii=False), "now": self._now()}

        retries = [(r, r.retry) for r in requests if r.retry is not None]
        if not retries:
            # One statement, its own transaction: the fence in its WHERE is the whole check, and
            # BEGIN/COMMIT would cost two more round trips.
            async with self._conn() as conn:
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(Q["finish_many"], params())
                written = {row["id"]: row for row in await cur.fetchall()}
            return _finished(requests, written)
        async with self._conn() as conn, conn.transaction():
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(Q["finish_many"], params())
            written = {row["id"]: row for row in await cur.fetchall()}
            saved_retries = [(r, new) for r, new in retries if r.lease.run_id in written]
            if saved_retries:
                async with conn.pipeline():
                    for _, new in saved_retries:
                        await conn.execute(
                            Q["insert_run"], self._insert_params(new, new.status, new.end_reason)
                        )
                    checks = []
                    for req, _ in saved_retries:
                        chk = conn.cursor(row_factory=dict_row)
                        await chk.execute(
                            Q["lease_still_valid"], {**self._fence(req.lease), "now": self._now()}
                        )
                        checks.append(chk)
                for chk in checks:
                    # Checked last so a save that ran past its lease rolls back whole.
                    if await chk.fetchone() is None:
                        raise _BatchLeaseExpired
        return _finished(requests, written)

    async def release(
        self, lease: Lease, *, retry_after: float, error_code: str, note: str | None = None
    ) -> None:
        row = await self._fetchone(
            Q["release"],
            {
                **self._fence(lease),
                "retry_after": float(retry_after),
                "error_code": error_code,
                "note": note,
            },
        )
        if row is None:
            raise LeaseLost(f"lease on run {lease.run_id} is lost: not released")

    # --- unleased changes -----------------------------------------------------------------------

    async def finish_unleased(self, run_id: str, expected: RunStatus, outcome: Outcome) -> Run:
        if not _is_uuid(run_id):
            raise NotFound(f"no run {run_id}")
        if not outcome.status.is_final or not can_transition(expected, outcome.status):
            raise InvalidTransition(
                f"run {run_id}: {expected.value} → {outcome.status.value} is not allowed"
            )
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
        if current.status == expected and current.lease_token is not None:
            raise InvalidTransition(
                f"run {run_id} is leased by {current.lease_owner}: finish it through its lease"
            )
        raise InvalidTransition(f"run {run_id} is {current.status.value}, not {expected.value}")

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
        except psycopg.Error as exc:  # read-only transaction, standby, no INSERT privilege
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
        self, event_id: str, key: str, data: Mapping[str, Any]
    ) -> tuple[Event, bool]:
        row = await self._fetchone(
            Q["insert_event"],
            {
                "now": self._now(),
                "id": event_id,
                "key": key,
                "data": dump_json(dict(data)),
            },
        )
        if row is not None:
            return _READ.event(row), True
        found = await self._fetchone(Q["get_event"], {"id": event_id})
        if found is None:
            raise StoreError(f"event {event_id!r} could not be written")
        return _READ.event(found), False


def _finished(
    requests: Sequence[FinishRequest], written: Mapping[str, Mapping[str, object]]
) -> list[FinishedRun | None]:
    out: list[FinishedRun | None] = []
    for req in requests:
        row = written.get(req.lease.run_id)
        out.append(
            None
            if row is None
            else FinishedRun(
                req.lease.run_id,
                RunStatus(RowReader.text(row, "status")),
                RowReader.opt_text(row, "end_reason"),
            )
        )
    return out


def _claimed(
    rows: Sequence[Mapping[str, object]],
    order: Sequence[str] | None,
    *,
    recovered: bool,
    in_claim_order: bool = False,
) -> list[Claimed]:
    claims: list[Claimed] = []
    for row in rows:
        run = _READ.run(row)
        if run.lease_owner is None or run.lease_token is None:
            raise StoreError(f"claimed run {run.id} has no lease")
        lease = Lease(run.id, run.lease_owner, run.lease_token, run.lease_generation)
        claims.append(Claimed(run, lease, _READ.time(row, "db_now"), recovered=recovered))
    if in_claim_order:
        pass  # the statement sorted them
    elif order is not None:
        rank = {run_id: i for i, run_id in enumerate(order)}
        claims.sort(key=lambda c: rank.get(c.run.id, len(rank)))
    else:
        claims.sort(key=lambda c: (c.run.lease_expires_at is None, c.run.id))
    return claims
