"""Pages of the run list (`operations.list_runs_page` over `Store.list_runs`), on SQLite and
PostgreSQL: every filter and their combinations, a keyset walk that returns each row exactly
once (ties in queued_at included), stability while runs are inserted between pages, and the
refusal of every cursor this list did not write."""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from runlane.core.runs import NewRun, Outcome, Run, RunStatus, Trigger
from runlane.errors import InvalidArgument
from runlane.ports import Store
from runlane.service.config import Settings
from runlane.service.operations import RunPage, list_runs_page
from runlane.service.operations.runs import encode_cursor
from runlane.service.runtime import Runtime
from runlane.testing.clock import FixedClock

if TYPE_CHECKING:
    from conftest import StoreHarness

T0 = datetime(2031, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
FAILURE = Outcome(RunStatus.FAILURE, "exit", exit_code=1, error_code="exit_code")


def new_run(job: str, **kw: Any) -> NewRun:
    return NewRun(
        id=str(uuid.uuid4()),
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
            and case.get("chain_root_id", run.chain_root_id) == run.chain_root_id
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
