"""The PostgreSQL store's `Leases` role: claims (one statement when admission has nothing to
decide, two steps when it has), renewals, and the fenced writes of a run's outcome, batched.
The launcher's hot path: every statement here was profiled (bench/throughput.py)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from functools import partial

import msgspec
from psycopg.rows import dict_row

from runlane.adapters.postgres.connection import _READ, PostgresConnections, _is_uuid
from runlane.adapters.postgres.statements import Q
from runlane.adapters.sql import base
from runlane.adapters.sql.rows import RowReader, parse_running_counts
from runlane.core.accept_rules import check_finish
from runlane.core.records import FinishedRun, FinishRequest
from runlane.core.runs import Claimed, Lease, NewRun, Outcome, Run, RunStatus
from runlane.errors import LeaseLost, StoreError


class _BatchLeaseExpired(Exception):
    """Raised inside a batched save to roll it back when a lease expired before COMMIT."""


class PostgresLeases(PostgresConnections):
    """Claims and fenced writes of `PostgresStore` (a base class: no extra lookup per call)."""

    _outbox: bool  # set by PostgresStore: accepted and retry rows write an outbox row
    _claim_fast: bool  # set by PostgresStore (see there)

    def _insert_params(
        self, new: NewRun, status: RunStatus, end_reason: str | None
    ) -> dict[str, object]:
        """`insert_run`'s parameters for `new` (accept, and the retry row a finish writes);
        `StoreError` for an id that is not a UUID (the column would refuse it)."""
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
        # Built only for the RabbitMQ bus: on the database bus no outbox row is written, and the
        # payload (the params again) would be encoded, sent and cast to jsonb for nothing.
        params["outbox_payload"] = base.outbox_payload(new) if self._outbox else None
        return params

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

    async def set_external_ids(self, writes: Sequence[tuple[Lease, str]]) -> list[bool]:
        # A malformed lease is lost, as in _fence; the rest are written in id order, as renew.
        valid = sorted(
            (w for w in writes if _is_uuid(w[0].run_id) and _is_uuid(w[0].token)),
            key=lambda w: w[0].run_id.lower(),
        )
        if not valid:
            return [False] * len(writes)
        rows = await self._fetchall(
            Q["set_external_ids"],
            {
                "now": self._now(),
                "ids": [lease.run_id for lease, _ in valid],
                "tokens": [lease.token for lease, _ in valid],
                "gens": [lease.generation for lease, _ in valid],
                "external_ids": [external_id for _, external_id in valid],
            },
        )
        saved = {RowReader.text(r, "id") for r in rows}
        return [_is_uuid(lease.run_id) and lease.run_id.lower() in saved for lease, _ in writes]

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
        async with self._conn() as conn, conn.transaction():
            fin = conn.cursor(row_factory=dict_row)
            await fin.execute(Q["finish"], {**params, "ago": ago()})
            row = await fin.fetchone()
            if row is None:
                raise LeaseLost(f"lease on run {lease.run_id} is lost: outcome not saved")
            async with conn.pipeline():
                if row["cancel_requested_at"] is None:  # a run asked to cancel is not retried
                    ins = conn.cursor(row_factory=dict_row)
                    await ins.execute(Q["insert_run"], insert)
                chk = conn.cursor(row_factory=dict_row)
                # Checked last so a save that ran past its lease rolls back whole.
                await chk.execute(
                    Q["lease_still_valid"], {**self._fence(lease), "now": self._now()}
                )
                still = await chk.fetchone()
            if still is None:
                raise LeaseLost(f"lease on run {lease.run_id} is lost: outcome not saved")
        return _READ.run(row)

    async def finish_many(self, requests: Sequence[FinishRequest]) -> list[FinishedRun | None]:
        for req in requests:
            check_finish(req.lease.run_id, req.outcome.status)
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
                    retried = req.retry is not None and run.cancel_requested_at is None
                    out.append(FinishedRun(run.id, run.status, run.end_reason, retried=retried))
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
            # msgspec: ~0.2 us a run where json.dumps took ~1.8 (the same JSON, UTF-8 as is).
            return {"batch": _ENCODE(batch).decode(), "now": self._now()}

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
            # A run someone asked to cancel is never retried, whatever it ended with.
            saved_retries = [
                (r, new)
                for r, new in retries
                if r.lease.run_id in written and not written[r.lease.run_id]["cancel_requested"]
            ]
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


_ENCODE = msgspec.json.Encoder().encode


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
                retried=req.retry is not None and not row["cancel_requested"],
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
