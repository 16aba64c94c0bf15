"""A claim reads the runs it takes, not the whole backlog (both dialects, their real planners).

The PostgreSQL claim once joined its candidate scan with the `now` CTE: the planner then read
every due run and sorted them before the LIMIT, so each claim cost O(backlog) (with 2,000 runs
queued a claim read ~1,100 rows to take 15; the claim was the largest share of the database's
CPU per run). With statistics that underestimate the backlog it did the same through a bitmap
scan. These tests read the plans the databases actually run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from runlane.adapters.postgres.store import PostgresStore
from runlane.adapters.postgres.store import Q as PG_QUERIES
from runlane.adapters.sqlite.store import Q as SQLITE_QUERIES
from runlane.errors import DatabaseUnavailable
from runlane.ports import FinishRequest
from tests.conformance.conftest import StoreHarness
from tests.conformance.test_store_contract import SUCCESS, claim_all, new_run
from tests.support.waiting import eventually

BACKLOG = 1000  # runs waiting
HISTORY = 1000  # finished runs before them, as in any run log that has been used
LIMIT = 8
CLAIM_ARGS: dict[str, Any] = {
    "limit": LIMIT,
    "lease_ttl": 30.0,
    "executors": ("inline",),
    "executor_caps": {},
}
# claim_fast's parameters as the store passes them for such a claim.
CLAIM_FAST_PARAMS: dict[str, Any] = {
    "now": None,
    "executors": ["inline"],
    "capped": [],
    "limit": LIMIT,
    "owner": "L1",
    "ttl": 30.0,
}


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


async def test_a_claim_reads_only_the_runs_it_takes(harness: StoreHarness) -> None:
    store = harness.store
    for _ in range(HISTORY + BACKLOG):
        await store.accept(new_run())
    for _ in range(HISTORY // 100):
        taken = await claim_all(store, limit=100)
        await store.finish_many([FinishRequest(c.lease, SUCCESS) for c in taken])
    if harness.dialect == "sqlite":
        # Without statistics first: the launcher never runs ANALYZE, and that is where SQLite
        # once read the whole backlog through run_log_status_queued_idx and sorted it.
        for analyzed in (False, True):
            if analyzed:
                harness.query("ANALYZE", {})
            plan = harness.query(
                "EXPLAIN QUERY PLAN " + SQLITE_QUERIES["claim_candidates"],
                {"now": "9999-01-01T00:00:00+00:00", "executors": '["inline"]', "scan": LIMIT},
            )
            details = [str(row[-1]) for row in plan]
            assert any("run_log_claim_idx" in d for d in details), (analyzed, details)
            # No sort of the backlog.
            assert not any("TEMP B-TREE" in d for d in details), (analyzed, details)
        assert len(await store.claim("L1", **CLAIM_ARGS)) == LIMIT
        return
    # No ANALYZE: the statistics are whatever autovacuum left (here: those of an empty table),
    # the case where the planner once chose to read and sort the whole backlog. The plan is read
    # on a connection set up as the store sets up its claim connection (`claim_session`).
    params = CLAIM_FAST_PARAMS
    with psycopg.connect(harness.location) as conn:
        conn.execute(PG_QUERIES["claim_session"])
        rows = conn.execute(
            ("EXPLAIN (ANALYZE, FORMAT JSON) " + PG_QUERIES["claim_fast"]).encode(), params
        ).fetchall()
        conn.commit()
    raw = rows[0][0]
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    # The candidate scan (the UPDATE's own lookups of the taken rows are planned by table size:
    # a seq scan of this small test table, primary-key lookups on a real one).
    cand = next(n for n in _nodes(plan) if n.get("Subplan Name") == "CTE cand")
    scans = [n for n in _nodes(cand) if n.get("Relation Name") == "run_log"]
    assert scans, cand
    read = {f"{n['Node Type']} {n.get('Index Name', '')}": n["Actual Rows"] for n in scans}
    assert all(n["Actual Rows"] <= LIMIT for n in scans), read
    assert not any(n["Node Type"] == "Bitmap Heap Scan" for n in scans), read
    # And the claim itself did what it should.
    claimed = harness.query("SELECT count(*) FROM run_log WHERE status = 'running'", {})
    assert (
        harness.query("SELECT count(*) FROM run_log WHERE status = 'success'", {})[0][0] == HISTORY
    )
    assert claimed[0][0] == LIMIT


async def test_finishing_and_renewing_find_runs_by_primary_key(harness: StoreHarness) -> None:
    """run_log_running_lease_idx keeps an entry for every run finished since the last VACUUM
    (the old row version's), and for one within the lease TTL its expiry is still ahead. A batch
    finish that scanned it for `status = 'running' AND lease_expires_at > now` (the planner's
    choice while few runs are running) read O(runs per second x TTL) entries per batch under
    sustained load, and the lease renewal read all of them; both must cost O(batch)."""
    if harness.dialect == "sqlite":
        return
    store = harness.store
    for _ in range(HISTORY + LIMIT):
        await store.accept(new_run())
    for _ in range(HISTORY // 100):  # finished just now: their leases have not expired
        taken = await claim_all(store, limit=100)
        await store.finish_many([FinishRequest(c.lease, SUCCESS) for c in taken])
    running = await claim_all(store, limit=LIMIT)
    batch = [
        {
            "id": c.run.id,
            "token": c.lease.token,
            "gen": c.lease.generation,
            "status": "success",
            "end_reason": "exit",
            "exit_code": 0,
        }
        for c in running
    ]
    statements = {
        "finish_many": {"batch": json.dumps(batch), "now": None},
        "renew": {
            "now": None,
            "ttl": 30.0,
            "ids": [c.run.id for c in running],
            "tokens": [c.lease.token for c in running],
            "gens": [c.lease.generation for c in running],
        },
    }
    with psycopg.connect(harness.location) as conn:
        for name, params in statements.items():
            plan = _explained(conn, name, params)
            assert plan["Actual Rows"] == LIMIT, (name, plan)  # it did update every run
            nodes = list(_nodes(plan))
            indexes = {n["Index Name"] for n in nodes if "Index Name" in n}
            assert indexes == {"run_log_pkey"}, (name, indexes)  # directly or through a bitmap
            read = [
                (
                    n["Node Type"],
                    n["Actual Rows"] * n["Actual Loops"]
                    + n.get("Rows Removed by Filter", 0)
                    + n.get("Rows Removed by Index Recheck", 0),
                )
                for n in nodes
                if n.get("Relation Name") == "run_log" and n["Node Type"] != "ModifyTable"
            ]
            assert read, (name, plan)
            assert sum(rows for _, rows in read) <= LIMIT, (name, read)
            # What it costs: index and table pages of the lookups (an index entry of a finished
            # run is a page read whatever the row counts say), a few per run at most.
            pages = sum(
                n.get("Shared Hit Blocks", 0) + n.get("Shared Read Blocks", 0)
                for n in _nodes(plan)
                if n.get("Relation Name") == "run_log" and n["Node Type"] != "ModifyTable"
            )
            assert pages <= 6 * LIMIT, (name, pages)


async def _backlog_after_analyze(harness: StoreHarness) -> list[str]:
    """HISTORY finished runs, ANALYZE (autovacuum then off for run_log, so nothing analyzes it
    behind the test's back: the statistics say every run is finished), then BACKLOG queued runs;
    returns the queued runs' ids in claim order."""
    store = harness.store
    for _ in range(HISTORY):
        await store.accept(new_run())
    for _ in range(HISTORY // 100):
        taken = await claim_all(store, limit=100)
        await store.finish_many([FinishRequest(c.lease, SUCCESS) for c in taken])
    with psycopg.connect(harness.location, autocommit=True) as conn:
        conn.execute("ALTER TABLE run_log SET (autovacuum_enabled = false)")
        conn.execute("ANALYZE run_log")
    for _ in range(BACKLOG):
        await store.accept(new_run())
    in_claim_order = (
        "SELECT id::text FROM run_log WHERE status = 'queued' "
        "ORDER BY coalesce(not_before, queued_at), queued_at, id"
    )
    return [str(row[0]) for row in harness.query(in_claim_order, {})]


def _reads(plan: dict[str, Any]) -> tuple[set[str], int]:
    """The indexes a plan read run_log through, and the rows it read there (index rows a scan
    returned, and those its filters removed)."""
    nodes = [n for n in _nodes(plan) if n["Node Type"] != "ModifyTable"]
    indexes = {n["Index Name"] for n in nodes if "Index Name" in n}
    read = sum(
        n["Actual Rows"] * n["Actual Loops"]
        + n.get("Rows Removed by Filter", 0)
        + n.get("Rows Removed by Index Recheck", 0)
        for n in nodes
        if n.get("Relation Name") == "run_log"
    )
    return indexes, read


def _explained(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> dict[str, Any]:
    """The statement `name`'s plan as it ran (rolled back), with its buffers. Sequential scans
    are off: the planner may pick one for a table this small (fine: it is small), which would
    hide the index it takes on a real one."""
    conn.execute("SET LOCAL enable_seqscan = off")
    rows = conn.execute(
        ("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + PG_QUERIES[name]).encode(), params
    ).fetchall()
    conn.rollback()
    raw = rows[0][0]
    plan: dict[str, Any] = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    return plan


def _explained_update(
    conn: psycopg.Connection[Any], name: str, params: dict[str, Any]
) -> dict[str, Any]:
    """The ModifyTable node of the statement `name`'s plan as it ran (`_explained`)."""
    return next(
        n for n in _nodes(_explained(conn, name, params)) if n["Node Type"] == "ModifyTable"
    )


async def test_a_claims_update_finds_the_taken_runs_by_primary_key_with_stale_statistics(
    harness: StoreHarness,
) -> None:
    """The statistics are taken while nothing is queued (autovacuum's ANALYZE on a quiet day),
    then a backlog builds up (an outage, a fan-out). The planner then thinks `status = 'queued'`
    matches one row, and claim_fast's update, joined with its candidates and testing `status =
    'queued'`, read every queued run through run_log_status_queued_idx and compared each with
    every candidate: O(backlog x batch) per claim (0.42 s for a batch of 64 with 50,000 queued
    over 200,000 finished). The update and the two-step claim's must read the taken runs alone,
    by primary key."""
    if harness.dialect == "sqlite":
        return
    store = harness.store
    queued = await _backlog_after_analyze(harness)
    statements: dict[str, dict[str, Any]] = {
        "claim_fast": CLAIM_FAST_PARAMS,
        "claim_update": {"now": None, "owner": "L1", "ttl": 30.0, "ids": queued[:LIMIT]},
    }
    with psycopg.connect(harness.location) as conn:
        conn.execute(PG_QUERIES["claim_session"])
        conn.commit()
        for name, params in statements.items():
            update = _explained_update(conn, name, params)
            assert update["Actual Rows"] == LIMIT, (name, update)  # it took a whole batch
            indexes, read = _reads(update)
            assert indexes == {"run_log_pkey"}, (name, indexes)
            assert read <= LIMIT, (name, read)
            compared = sum(n.get("Rows Removed by Join Filter", 0) for n in _nodes(update))
            assert compared == 0, (name, compared)  # no candidate matched against the backlog
    # And the claim takes a batch as it should, in claim order.
    claimed = await store.claim("L1", **CLAIM_ARGS)
    assert [c.run.id for c in claimed] == queued[:LIMIT]


async def test_one_runs_writes_find_it_by_primary_key_with_stale_statistics(
    harness: StoreHarness,
) -> None:
    """With the same statistics, a write to one run by its id that also tested a plain `status
    = ...` was planned through run_log_status_queued_idx, which reads every run of that status
    to find the one (its id is the index's third column): with 10,000 running and 10,000
    queued over 200,000 finished, a finish took 4.2 ms in the database instead of 0.5, a cancel
    of a queued run 2.1 instead of 0.12. Each must look the run up by primary key."""
    if harness.dialect == "sqlite":
        return
    store = harness.store
    queued = await _backlog_after_analyze(harness)
    running = await store.claim("L1", **{**CLAIM_ARGS, "limit": BACKLOG // 2})
    lease = running[0].lease
    fence = {"now": None, "id": lease.run_id, "token": lease.token, "gen": lease.generation}
    ended = {"end_reason": "exit", "exit_code": 0, "error_code": None, "log_tail": None}
    statements: dict[str, dict[str, Any]] = {
        "set_external_id": {**fence, "external_id": "ns/job"},
        "finish": {
            **fence,
            **ended,
            "status": "success",
            "note": None,
            "ago": 0.0,
            "external_id": None,
        },
        "release": {**fence, "retry_after": 1.0, "error_code": None, "note": None},
        "cancel_running": {"now": None, "id": lease.run_id},
        "cancel_queued": {"now": None, "id": queued[-1], "note": None},
        "finish_unleased": {
            **ended,
            "now": None,
            "id": queued[-1],
            "expected": "queued",
            "status": "cancelled",
            "note": None,
            "ago": 0.0,
            "external_id": None,
        },
    }
    with psycopg.connect(harness.location) as conn:
        for name, params in statements.items():
            update = _explained_update(conn, name, params)
            assert update["Actual Rows"] == 1, (name, update)  # it did write the run
            indexes, read = _reads(update)
            assert indexes == {"run_log_pkey"}, (name, indexes)
            assert read <= 1, (name, read)


async def test_sqlite_counts_and_polls_read_only_queued_or_running_runs(
    harness: StoreHarness,
) -> None:
    """What the launcher runs over and over (admission's running counts at each claim, the
    cancel poll each claim interval, the queue depth at each heartbeat) reads the partial index
    of the runs it is about. Left to its planner, SQLite read the whole of run_log for each of
    them (the claim's counts through run_log_job_status_idx, the OR in it defeating the (job,
    status) lookup): a launcher's claims got slower with every run ever logged."""
    if harness.dialect != "sqlite":
        return  # PostgreSQL: its claim's counts are in claim_candidates, read only when needed
    store = harness.store
    for i in range(HISTORY // 10):
        await store.accept(new_run(job=f"job{i % 7}"))
    taken = await claim_all(store, limit=HISTORY // 20)
    await store.finish_many([FinishRequest(c.lease, SUCCESS) for c in taken[: HISTORY // 40]])
    expected = {
        "running_counts": ("run_log_running_lease_idx", {"jobs": '["job1"]', "capped": "[]"}),
        "cancel_requests": ("run_log_running_lease_idx", {"owner": "L1"}),
        "count_queued": ("run_log_claim_idx", {}),
        "running_by_launcher": ("run_log_running_lease_idx", {}),
    }
    for name, (index, params) in expected.items():
        plan = harness.query("EXPLAIN QUERY PLAN " + SQLITE_QUERIES[name], params)
        details = [str(row[-1]) for row in plan if "run_log" in str(row[-1])]
        assert details == [f"SCAN run_log USING INDEX {index}"], (name, details)
    # Those that select runs in an order: through the partial index of the runs they are about,
    # searched by the range they read, not every queued (or failed) run sorted. The UPDATEs'
    # own lookups of what they selected go by primary key.
    now = "9999-01-01T00:00:00+00:00"
    ordered = {
        "abandoned_candidates": (
            "run_log_running_lease_idx",
            {"now": now, "executors": '["inline"]', "limit": LIMIT},
        ),
        "expire_queued": ("run_log_queue_expiry_idx", {"now": now, "limit": LIMIT}),
        "sweep_orphans": (
            "run_log_running_lease_idx",
            {"now": now, "cutoff": now, "note": "", "limit": LIMIT},
        ),
        "failed_since": (
            "run_log_alerting_idx",
            {"after_at": "", "after_id": "", "limit": LIMIT},
        ),
    }
    for name, (index, params) in ordered.items():
        plan = harness.query("EXPLAIN QUERY PLAN " + SQLITE_QUERIES[name], params)
        details = [
            str(row[-1])
            for row in plan
            if "run_log" in str(row[-1]) and "sqlite_autoindex_run_log_1 (id=?)" not in str(row[-1])
        ]
        assert len(details) == 1, (name, details)
        assert f"USING INDEX {index}" in details[0], (name, details)
        assert "status_queued" not in " ".join(str(row[-1]) for row in plan), (name, plan)
    # And they still answer right.
    assert await store.count_queued() == HISTORY // 10 - HISTORY // 20
    assert await store.cancel_requests("L1") == []
    blocked = await store.accept(new_run(job="job1", overlap="forbid"))
    assert blocked.run.status.value == "queued"
    claimed = await claim_all(store, limit=HISTORY)  # job1 has runs running: forbid waits
    assert blocked.run.id not in {c.run.id for c in claimed}


@pytest.mark.parametrize(
    ("overlap", "statement"),
    [("allow", "claim_fast"), ("forbid", "claim_candidates"), ("forbid", "claim_update")],
)
async def test_after_a_failed_claim_the_next_one_works(
    harness: StoreHarness, monkeypatch: Any, overlap: str, statement: str
) -> None:
    """A failed claim statement must not leave the claim connection unusable (inside a failed
    transaction, every later statement on it would fail), nor any connection of the pool. An
    `overlap: forbid` run takes the two-statement claim inside BEGIN ... COMMIT."""
    if harness.dialect == "sqlite":
        return  # the SQLite claim is one BEGIN IMMEDIATE transaction of its own
    store = harness.store
    await store.accept(new_run(overlap=overlap))  # type: ignore[arg-type]
    monkeypatch.setitem(PG_QUERIES, statement, "SELECT no_such_column FROM run_log")
    with pytest.raises(Exception, match="no_such_column"):  # whatever the store raises
        await claim_all(store)
    monkeypatch.undo()
    for _ in range(4):  # pool_max=4: the other connections are fine too
        assert await store.count_queued() == 1
    # The claim connection itself is usable again (not left inside the failed transaction).
    assert [c.run.status for c in await claim_all(store)] == ["running"]
    assert await store.count_queued() == 0


async def test_a_fast_claim_waits_for_a_two_step_claim_instead_of_skipping_its_rows(
    harness: StoreHarness,
) -> None:
    """A two-step claim (admission decides) holds up to four times its limit of candidates
    locked until it commits, though it takes only those it admits. A fast claim that skipped
    them would come back empty while runs are due, and its launcher would wait a claim
    interval; it waits for the two-step claim instead, then takes what that one left."""
    if harness.dialect == "sqlite":
        return  # SQLite claims are serialised by BEGIN IMMEDIATE
    store = harness.store
    ids = [(await store.accept(new_run())).run.id for _ in range(3)]
    other = await psycopg.AsyncConnection.connect(harness.location)
    try:
        # Another launcher's two-step claim, between its candidate scan and its COMMIT.
        await other.execute(PG_QUERIES["claim_lock"])
        await other.execute("SELECT id FROM run_log WHERE status = 'queued' FOR UPDATE")
        claim = asyncio.create_task(claim_all(store))

        async def claim_waits() -> bool:
            assert not claim.done(), await claim  # returned without waiting
            return bool(
                harness.query(
                    "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted", {}
                )
            )

        await eventually(claim_waits, "the claim waiting on the advisory lock", poll=0.01)
        assert not claim.done()
        await other.commit()  # it admitted none of them
        claimed = await asyncio.wait_for(claim, 10.0)
    finally:
        await other.close()
    assert sorted(c.run.id for c in claimed) == sorted(ids)


async def test_the_claim_connection_is_set_up_again_after_it_is_cut(harness: StoreHarness) -> None:
    """Bitmap scans are off on the claim connection (see the plan test above), also on the new
    connection that replaces one the server cut."""
    if harness.dialect == "sqlite":
        return
    store = harness.store
    assert isinstance(store, PostgresStore)

    async def setting_and_pid() -> tuple[str, int]:
        async with store._claim_conn() as conn:
            cur = await conn.execute(
                "SELECT current_setting('enable_bitmapscan'), pg_backend_pid()"
            )
            row = await cur.fetchone()
        assert row is not None
        return str(row[0]), int(row[1])

    setting, pid = await setting_and_pid()
    assert setting == "off"
    harness.query("SELECT pg_terminate_backend(:pid)", {"pid": pid})
    await store.accept(new_run())
    with pytest.raises(DatabaseUnavailable):  # the claim that finds its connection cut
        await claim_all(store)
    assert [c.run.status for c in await claim_all(store)] == ["running"]
    setting, new_pid = await setting_and_pid()
    assert (setting, new_pid != pid) == ("off", True)
