"""Pages of the run list (`operations.list_runs_page` over `Store.list_runs`, and the API's
`Store.list_run_items`), on SQLite and
PostgreSQL: every filter and their combinations, a keyset walk that returns each row exactly
once (ties in queued_at included), stability while runs are inserted between pages, and the
refusal of every cursor this list did not write."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import sqlite3
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import pytest

from runlane.adapters.sql.base import (
    RUN_LIST_BASIC_COLUMNS,
    RUN_LIST_BASIC_SELECT,
    run_list_statement,
)
from runlane.adapters.sqlite import SqliteStore
from runlane.adapters.sqlite.statements import Q as SQLITE_Q
from runlane.core.runs import BASIC_LEFT_OUT, NewRun, Outcome, Run, RunStatus, Trigger
from runlane.errors import InvalidArgument
from runlane.ports import RunFilter, Store
from runlane.service.config import Settings
from runlane.service.operations import RunPage, list_runs_page
from runlane.service.operations.runs import encode_cursor
from runlane.service.runtime import Runtime
from runlane.service.views import iso, run_dict
from runlane.testing.clock import FixedClock
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from conftest import StoreHarness

T0 = datetime(2031, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
FAILURE = Outcome(RunStatus.FAILURE, "exit", exit_code=1, error_code="exit_code")


def new_run(job: str, **kw: Any) -> NewRun:
    return NewRun(
        id=kw.pop("id", str(uuid.uuid4())),
        job=job,
        trigger=kw.pop("trigger", Trigger.MANUAL),
        dedupe_key=str(uuid.uuid4()),
        executor="inline",
        overlap="allow",
        **kw,
    )


async def pinned(h: StoreHarness) -> tuple[Runtime, Store, FixedClock]:
    clock = FixedClock(T0)
    store = await h.make_store(clock=clock)
    return Runtime(settings=Settings(), store=store, catalog=None), store, clock


def newest_first(runs: list[Run]) -> list[str]:
    return [r.id for r in sorted(runs, key=lambda r: (r.queued_at, r.id), reverse=True)]


async def walk(rt: Runtime, limit: int, **filters: Any) -> list[RunPage]:
    pages = [await list_runs_page(rt, limit=limit, **filters)]
    while pages[-1].next_cursor is not None:
        pages.append(await list_runs_page(rt, limit=limit, cursor=pages[-1].next_cursor, **filters))
        assert len(pages) < 100, "the walk does not end"
    return pages


async def test_each_filter_and_their_combinations(harness: StoreHarness) -> None:
    rt, store, clock = await pinned(harness)
    root = str(uuid.uuid4())
    made: list[Run] = []
    shapes = [
        ("a", Trigger.MANUAL, "ana", None),
        ("a", Trigger.SCHEDULE, None, None),
        ("b", Trigger.MANUAL, "bo", root),
        ("b", Trigger.CHAIN, None, root),
        ("a", Trigger.CLI, "ana", None),
        ("c", Trigger.EVENT, None, None),
        ("b", Trigger.MANUAL, "ana", None),
        ("a", Trigger.MANUAL, "bo", root),
    ]
    for job, trigger, by, chain in shapes:
        run = (
            await store.accept(new_run(job, trigger=trigger, requested_by=by, chain_root_id=chain))
        ).run
        made.append(run)
        clock.advance(60)
    for run in made[1::3]:  # three of them end failed
        await store.finish_unleased(run.id, RunStatus.QUEUED, FAILURE)
    made = [await store.get_run(r.id) for r in made]

    cases: list[dict[str, Any]] = [
        {},
        {"job": "a"},
        {"job": "nope"},
        {"status": "failure"},
        {"status": RunStatus.QUEUED},
        {"trigger": "manual"},
        {"trigger": Trigger.SCHEDULE},
        {"requested_by": "ana"},
        {"chain_root_id": root},
        {"chain_root_id": root.upper()},  # the same rows on both dialects
        {"chain_root_id": "not-a-uuid"},
        {"since": T0 + timedelta(minutes=2)},
        {"until": (T0 + timedelta(minutes=3)).isoformat()},
        {"since": "2031-03-04T05:08:07.123456Z", "until": T0 + timedelta(minutes=6)},
        {"job": "a", "trigger": "manual"},
        {"job": "b", "status": "queued", "requested_by": "ana"},
        {"job": "a", "requested_by": "bo", "chain_root_id": root},
        {"status": "queued", "trigger": "manual", "since": T0 + timedelta(minutes=1)},
    ]

    def matches(run: Run, case: dict[str, Any]) -> bool:
        since = case.get("since")
        until = case.get("until")
        since_at = datetime.fromisoformat(since) if isinstance(since, str) else since
        until_at = datetime.fromisoformat(until) if isinstance(until, str) else until
        return (
            case.get("job", run.job) == run.job
            and str(case.get("status", run.status)) == str(run.status)
            and str(case.get("trigger", run.trigger)) == str(run.trigger)
            and case.get("requested_by", run.requested_by) == run.requested_by
            and str(case.get("chain_root_id", run.chain_root_id)).lower()
            == str(run.chain_root_id).lower()
            and (since_at is None or run.queued_at >= since_at)
            and (until_at is None or run.queued_at < until_at)
        )

    for case in cases:
        page = await list_runs_page(rt, **case)
        assert [r.id for r in page.items] == newest_first([r for r in made if matches(r, case)]), (
            case
        )
        assert page.next_cursor is None, case
    # Every combination walked two rows at a time gives the same rows as one page.
    for case in cases:
        pages = await walk(rt, 2, **case)
        walked = [r.id for p in pages for r in p.items]
        assert walked == [r.id for r in (await list_runs_page(rt, **case)).items], case
        assert all(len(p.items) == 2 for p in pages[:-1]), case


async def test_a_walk_returns_every_row_exactly_once_ties_included(harness: StoreHarness) -> None:
    rt, store, clock = await pinned(harness)
    made: list[Run] = []
    for i in range(23):
        made.append((await store.accept(new_run(f"j{i % 3}"))).run)
        if i % 4 == 3:  # runs of four share one queued_at: the id breaks the tie
            clock.advance(1)
    pages = await walk(rt, 5)
    assert [len(p.items) for p in pages] == [5, 5, 5, 5, 3]
    assert [r.id for p in pages for r in p.items] == newest_first(made)
    # A count that the limit divides ends without an empty page (one row more is read).
    exact = await walk(rt, 5, job="j0")  # 8 runs of j0
    assert [len(p.items) for p in exact] == [5, 3]
    four = await walk(rt, 4, since=T0 + timedelta(seconds=1))
    assert [len(p.items) for p in four] == [4, 4, 4, 4, 3]
    assert [r.id for p in four for r in p.items] == newest_first(made[4:])
    assert (await list_runs_page(rt, limit=23)).next_cursor is None
    assert (await list_runs_page(rt, limit=22)).next_cursor is not None


async def test_pages_stay_stable_while_runs_are_inserted(harness: StoreHarness) -> None:
    rt, store, clock = await pinned(harness)
    before = []
    for i in range(12):
        before.append((await store.accept(new_run("a" if i % 2 else "b"))).run)
        clock.advance(1)
    writer = await harness.make_store(clock=clock)  # another connection, as another client
    existing = list(before)
    for flt in ({}, {"job": "a"}):
        expected = newest_first([r for r in existing if flt.get("job", r.job) == r.job])
        seen: list[str] = []
        page = await list_runs_page(rt, limit=3, **flt)
        inserted: list[Run] = []
        while True:
            seen.extend(r.id for r in page.items)
            for job in ("a", "b"):  # newer runs land between every two pages
                inserted.append((await writer.accept(new_run(job))).run)
            clock.advance(1)
            if page.next_cursor is None:
                break
            page = await list_runs_page(rt, limit=3, cursor=page.next_cursor, **flt)
        assert seen == expected
        assert not set(seen) & {r.id for r in inserted}
        existing.extend(inserted)
    # The newest page now starts with what was inserted: the cursor, not the list, moved.
    first = await list_runs_page(rt, limit=1)
    assert first.items[0].id == newest_first(existing)[0]
    assert first.items[0].id in {r.id for r in existing[-2:]}


def _b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


async def test_bad_cursors_limits_and_filters_are_invalid_arguments(
    harness: StoreHarness,
) -> None:
    rt, store, clock = await pinned(harness)
    for _ in range(3):
        await store.accept(new_run("a"))
        clock.advance(1)
    good = (await list_runs_page(rt, limit=1)).next_cursor
    assert good is not None
    decoded = base64.urlsafe_b64decode(good + "=" * (-len(good) % 4)).decode()
    version, at, run_id = decoded.split("|")
    assert version == "v1"
    bad = [
        "",
        "garbage!",
        "x" * 500,
        good[:-3],
        good[:10] + ("A" if good[10] != "A" else "B") + good[11:],
        _b64(f"v2|{at}|{run_id}"),
        _b64(f"v1|{at}|{run_id.upper()}"),
        _b64(f"v1|{at}|not-a-uuid"),
        _b64(f"v1|{at}"),
        _b64(f"v1|{at}|{run_id}|more"),
        _b64(f"v1|2031-03-04T05:06:07|{run_id}"),  # a time without its offset
        _b64(f"v1|0001-01-01T00:00:00+05:00|{run_id}"),
        _b64(f"v1|yesterday|{run_id}"),
        _b64(b"\xff\xfe|\x00"),
        good + "%",
    ]
    for cursor in bad:
        with pytest.raises(InvalidArgument, match="cursor"):
            await list_runs_page(rt, cursor=cursor)
    for limit in (0, -1, 501, 10**30):
        with pytest.raises(InvalidArgument, match="limit"):
            await list_runs_page(rt, limit=limit)
    with pytest.raises(InvalidArgument, match="trigger"):
        await list_runs_page(rt, trigger="cron")
    with pytest.raises(InvalidArgument, match="status"):
        await list_runs_page(rt, status="done")
    with pytest.raises(InvalidArgument, match="since"):
        await list_runs_page(rt, since="last tuesday")
    with pytest.raises(InvalidArgument, match="until"):
        await list_runs_page(rt, until="9999-12-31T23:59:59Z")


async def test_relative_times_use_the_database_clock(harness: StoreHarness) -> None:
    rt, store, clock = await pinned(harness)
    old = (await store.accept(new_run("a"))).run
    clock.advance(7200)
    fresh = (await store.accept(new_run("a"))).run
    assert [r.id for r in (await list_runs_page(rt, since="now-1h")).items] == [fresh.id]
    assert [r.id for r in (await list_runs_page(rt, until="now-1h")).items] == [old.id]
    # The cursor is the last row's position: any page's cursor resumes after that row.
    assert encode_cursor(fresh) == (await list_runs_page(rt, limit=1)).next_cursor


async def test_a_walk_is_stable_while_another_client_keeps_inserting(
    harness: StoreHarness,
) -> None:
    """On the real clock, with a writer inserting as fast as it can during the whole walk: no
    row twice, none skipped, and nothing inserted after the walk began shows up in it."""
    store = harness.store
    rt = Runtime(settings=Settings(), store=store, catalog=None)
    for i in range(15):
        await store.accept(new_run(f"j{i % 2}"))
    present = newest_first(list(await store.list_runs(RunFilter(limit=1000))))
    writer = await harness.make_store()
    stop = asyncio.Event()
    written: list[str] = []

    async def keep_inserting() -> None:
        while not stop.is_set():
            written.append((await writer.accept(new_run("j0"))).run.id)
            await asyncio.sleep(0)

    task = asyncio.create_task(keep_inserting())
    try:
        await eventually(lambda: len(written) >= 2, "the writer to be going")
        committed_before = list(written)  # surely there when the first page is read
        page = await list_runs_page(rt, limit=2)
        # Surely after it: every accept that began once the first page was back (the one in
        # flight meanwhile may land on either side).
        after = len(written) + 1
        seen = [r.id for r in page.items]
        while page.next_cursor is not None:
            page = await list_runs_page(rt, limit=2, cursor=page.next_cursor)
            seen.extend(r.id for r in page.items)
        await eventually(lambda: len(written) > after + 1, "runs inserted during the walk")
    finally:
        stop.set()
        await task
    assert len(seen) == len(set(seen))
    assert seen[-len(present) :] == present
    assert set(committed_before) <= set(seen)
    assert not set(seen) & set(written[after:])
    rows = {r.id: r for r in await store.list_runs(RunFilter(limit=10_000))}
    assert seen == newest_first([rows[i] for i in seen])


async def test_each_filter_reads_its_own_index_on_sqlite(tmp_path: Path) -> None:
    """The composed statements, as SQLite plans them: one index range per filter, the keyset
    position inside it (PostgreSQL's plans are in docs/performance.md, at 1,000,000 rows:
    on a table of a few rows its planner rightly prefers other plans)."""
    path = tmp_path / "plans.db"
    store = SqliteStore(str(path))
    await store.open()
    await store.upgrade()
    await store.close()
    params = {"job": "a", "status": "queued", "requested_by": "ana", "limit": 51}
    params |= {"before_at": "2031-01-01T00:00:00.000000Z", "before_id": str(uuid.uuid4())}
    expected = {
        (): "SCAN run_log USING INDEX run_log_queued_at_idx",
        ("before",): "SEARCH run_log USING INDEX run_log_queued_at_idx",
        ("job",): "SEARCH run_log USING INDEX run_log_job_queued_idx (job=?)",
        ("job", "before"): "SEARCH run_log USING INDEX run_log_job_queued_idx (job=? AND",
        ("status", "before"): "SEARCH run_log USING INDEX run_log_status_queued_idx (status=? AND",
        ("requested_by", "before"): (
            "SEARCH run_log USING INDEX run_log_requested_by_queued_idx (requested_by=? AND"
        ),
    }
    conn = sqlite3.connect(path)
    try:
        for (filters, plan), basic in itertools.product(expected.items(), (False, True)):
            sql = SQLITE_Q[run_list_statement(SQLITE_Q, filters, basic=basic)]
            steps = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
            assert len(steps) == 1, (filters, steps)  # no sort step: the index gives the order
            assert steps[0].startswith(plan), (filters, basic, steps)
    finally:
        conn.close()


async def test_the_retry_of_a_run_is_found_however_busy_its_job_is(harness: StoreHarness) -> None:
    # A follow goes on to the retry through `next_attempt`; it read only the job's 200 newest
    # runs, so on a busy job a follow ended at the failed attempt.
    from dataclasses import replace

    from runlane.service.operations.runs import next_attempt

    rt, store, clock = await pinned(harness)
    first = (await store.accept(new_run("busy", max_attempts=2))).run
    clock.advance(1)
    retry = (
        await store.accept(
            new_run("busy", attempt=2, retry_of=first.id, max_attempts=2, trigger=Trigger.RETRY)
        )
    ).run
    for _ in range(205):
        clock.advance(1)
        await store.accept(new_run("busy"))
    assert [r.id for r in await store.list_runs(RunFilter(retry_of=first.id))] == [retry.id]
    assert await store.list_runs(RunFilter(retry_of=retry.id)) == []
    assert await store.list_runs(RunFilter(retry_of="not-an-id")) == []
    failed = replace(first, status=RunStatus.FAILURE)
    found = await next_attempt(rt, failed)
    assert found is not None
    assert found.id == retry.id


async def test_list_run_items_are_run_dict_of_list_runs(harness: StoreHarness) -> None:
    """`Store.list_run_items` (the API's page, one pass from the row) holds what
    `views.run_dict` makes of `list_runs`' rows: the same keys in the same order and the same
    values, times as UTC datetimes whose msgspec text is `iso`'s; for rows with every column
    set, a claimed (leased) row, a finished one and params that do not parse."""
    _, store, clock = await pinned(harness)
    full = new_run(
        "full",
        params={"week": 3, "tags": ["a", "é"], "nested": {"x": None, "y": 1.5}},
        requested_by="ana",
        parent_run_id=str(uuid.uuid4()),
        chain_root_id=str(uuid.uuid4()),
        event_id="evt-1",
        downstream=["b", "c"],
        scheduled_for=T0 - timedelta(minutes=1),
        max_attempts=3,
        deadline_seconds=90.5,
        kill_grace_seconds=2.0,
        not_before=T0 - timedelta(seconds=5),
        queue_ttl_seconds=600,
        traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01",
        note="a note",
    )
    made = [(await store.accept(full)).run]
    clock.advance(1)
    for i in range(3):
        made.append((await store.accept(new_run(f"plain{i}"))).run)
        clock.advance(1)
    claimed = await store.claim(
        "launcher-1", limit=1, lease_ttl=30, executors=["inline"], executor_caps={}
    )
    assert claimed, "nothing claimed"
    await store.finish_unleased(made[2].id, RunStatus.QUEUED, FAILURE)
    broken = "{not json" if harness.dialect == "sqlite" else "[1, 2]"
    cast = "" if harness.dialect == "sqlite" else "::jsonb"
    harness.query(
        f"UPDATE run_log SET params = :p{cast} WHERE id = :id", {"p": broken, "id": made[3].id}
    )
    for flt in (RunFilter(), RunFilter(job="full"), RunFilter(limit=2)):
        runs = await store.list_runs(flt)
        items = await store.list_run_items(flt)
        assert [r.id for r in runs] == [i["id"] for i in items]
        for run, item in zip(runs, items, strict=True):
            shown = run_dict(run)
            assert list(item) == list(shown), run.job
            as_text = {k: iso(v) if isinstance(v, datetime) else v for k, v in item.items()}
            assert as_text == shown, run.job
            assert json.loads(msgspec.json.encode(item)) == shown, run.job
            assert all(v.tzinfo is UTC for v in item.values() if isinstance(v, datetime))
    # The basic view: the same dicts, in the same order, without the unbounded fields.
    await store.finish_unleased(
        made[1].id, RunStatus.QUEUED, replace(FAILURE, log_tail="x" * 70_000)
    )
    for flt in (RunFilter(), RunFilter(job="plain0"), RunFilter(limit=2)):
        items = await store.list_run_items(flt)
        basic = await store.list_run_items(flt, basic=True)
        left_out = (*BASIC_LEFT_OUT, "params_raw")
        assert basic == [{k: v for k, v in i.items() if k not in left_out} for i in items]
        assert [list(b) for b in basic] == [[k for k in i if k not in left_out] for i in items]
    every = await store.list_run_items(RunFilter())
    assert {"a note", None} <= {i["note"] for i in every}  # what the basic view leaves out is there
    assert "x" * 70_000 in {i["log_tail"] for i in every}
    assert {"params_raw"} & {k for i in every for k in i}
    leased = [i for i in await store.list_run_items(RunFilter()) if i["lease_owner"]]
    assert [i["id"] for i in leased] == [claimed[0].run.id]
    assert "lease_token" not in leased[0]
    [corrupt] = [i for i in await store.list_run_items(RunFilter()) if i["id"] == made[3].id]
    assert corrupt["params"] is None
    assert corrupt["params_raw"] == broken


async def test_the_basic_view_reads_every_column_but_the_unbounded_ones(
    harness: StoreHarness,
) -> None:
    """`RUN_LIST_BASIC_SELECT` names every column of run_log as the migrations leave it, but
    params, note, log_tail and the lease token: a column added later is either listed there or
    left out on purpose (here), never forgotten; and the three are never read."""
    await pinned(harness)
    if harness.dialect == "sqlite":
        rows = harness.query("SELECT name FROM pragma_table_info('run_log')", {})
    else:
        rows = harness.query(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = 'run_log'",
            {},
        )
    columns = {str(r[0]) for r in rows}
    assert len(columns) > 30, columns
    assert set(RUN_LIST_BASIC_COLUMNS) == columns - {*BASIC_LEFT_OUT, "lease_token"}
    assert len(RUN_LIST_BASIC_COLUMNS) == len(set(RUN_LIST_BASIC_COLUMNS))
    assert not {*BASIC_LEFT_OUT, "lease_token", "*"} & set(
        RUN_LIST_BASIC_SELECT.replace(",", " ").split()
    )


async def test_a_short_id_is_a_range_of_the_primary_key_on_sqlite(tmp_path: Path) -> None:
    """`run_ids_by_prefix` and `chain_run_ids_by_prefix` (a short id's lookup) read their
    table's primary key from the first id the prefix allows to the last, in order, and no row."""
    path = tmp_path / "plans.db"
    store = SqliteStore(str(path))
    await store.open()
    await store.upgrade()
    await store.close()
    params = {"lo": "abcdef00-0000-0000-0000-000000000000", "limit": 11}
    params["hi"] = "abcdefff-ffff-ffff-ffff-ffffffffffff"
    conn = sqlite3.connect(path)
    try:
        for name, table in (
            ("run_ids_by_prefix", "run_log"),
            ("chain_run_ids_by_prefix", "chain_runs"),
        ):
            steps = [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {SQLITE_Q[name]}", params)]
            assert steps == [
                f"SEARCH {table} USING COVERING INDEX sqlite_autoindex_{table}_1 (id>? AND id<?)"
            ], steps
    finally:
        conn.close()


async def test_short_ids_are_found_in_id_order_from_the_whole_table(harness: StoreHarness) -> None:
    _, store, _ = await pinned(harness)
    ids = sorted(f"{p}-0000-4000-8000-000000000000" for p in ("abcdef01", "abcdef02", "abcdee99"))
    for run_id in ids:
        await store.accept(new_run("a", id=run_id))
    assert await store.run_ids_by_prefix("abcdef", limit=10) == ids[1:]
    assert await store.run_ids_by_prefix("abcde", limit=2) == ids[:2]
    assert await store.run_ids_by_prefix("abcdef02-0000-4000-8000-000000000000", limit=5) == [
        ids[2]
    ]
    for impossible in ("abcdeg", "abcdef012", "ABCDEF", ""):
        assert await store.run_ids_by_prefix(impossible, limit=10) == (
            ids if impossible == "" else []
        )
    assert await store.run_ids_by_prefix("abcdef", limit=0) == []


async def test_bounds_before_the_year_1000_compare_as_times(harness: StoreHarness) -> None:
    """SQLite keeps times as fixed-width text, compared as text: a year below 1000 must be
    written with four digits too, or `999-…` sorts after `2031-…` and a since of the year 999
    finds nothing (until: everything), where PostgreSQL finds every run (nothing)."""
    _, store, _ = await pinned(harness)
    run = (await store.accept(new_run("nightly"))).run
    early = datetime(999, 12, 31, 23, 59, 59, tzinfo=UTC)
    assert [r.id for r in await store.list_runs(RunFilter(since=early))] == [run.id]
    assert await store.list_runs(RunFilter(until=early)) == []
    assert [
        r.id for r in await store.list_runs(RunFilter(before=(early.replace(year=9), "")))
    ] == []
