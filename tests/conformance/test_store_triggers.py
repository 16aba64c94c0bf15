"""The Store contract for triggers (schedule state, chain runs, events) on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from runlane.core.runs import NewRun, RunStatus, Trigger
from runlane.errors import NotFound
from runlane.ports import EventLink, NewChainRun
from runlane.testing.clock import FixedClock

if TYPE_CHECKING:
    from conftest import StoreHarness

T0 = datetime(2031, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
TRIGGER_TABLES = ("schedule_state", "chain_runs", "events", "event_runs")


@pytest.fixture
async def h(harness: StoreHarness) -> StoreHarness:
    for table in TRIGGER_TABLES:  # the shared fixture truncates only the run-log tables
        harness.query(f"DELETE FROM {table}", {})
    return harness


async def test_schedule_state_only_moves_forward(h: StoreHarness) -> None:
    store = h.store
    assert await store.schedule_states() == {}
    await store.advance_schedules({"job:a|0 * * * *|UTC": T0, "job:b|* * * * *|UTC": T0})
    await store.advance_schedules({"job:a|0 * * * *|UTC": T0 - timedelta(hours=1)})
    await store.advance_schedules({"job:b|* * * * *|UTC": T0 + timedelta(minutes=1)})
    states = await store.schedule_states()
    assert states["job:a|0 * * * *|UTC"] == T0
    assert states["job:b|* * * * *|UTC"] == T0 + timedelta(minutes=1)


async def test_forgotten_schedules_start_over(h: StoreHarness) -> None:
    store = h.store
    a, b = "job:a|0 * * * *|UTC", "job:b|* * * * *|UTC"
    await store.advance_schedules({a: T0, b: T0})
    await store.forget_schedules([a, "job:unknown|* * * * *|UTC"])
    await store.forget_schedules([])
    assert await store.schedule_states() == {b: T0}
    await store.advance_schedules({a: T0 - timedelta(hours=1)})  # no longer held back by T0
    assert (await store.schedule_states())[a] == T0 - timedelta(hours=1)


async def test_racing_schedule_advances_keep_the_latest(h: StoreHarness) -> None:
    other = await h.make_store()
    key = "job:a|* * * * *|UTC"
    slots = [T0 + timedelta(minutes=i) for i in range(10)]
    await asyncio.gather(
        *(s.advance_schedules({key: slot}) for slot in slots for s in (h.store, other))
    )
    assert (await h.store.schedule_states())[key] == slots[-1]


async def test_chain_runs_are_idempotent_by_dedupe_key(h: StoreHarness) -> None:
    store = await h.make_store(clock=FixedClock(T0))
    first = NewChainRun(
        id=str(uuid.uuid4()),
        chain="weekly",
        dedupe_key="weekly@2031-03-04T05:00:00Z",
        trigger="schedule",
        scheduled_for=T0.replace(minute=0, second=0, microsecond=0),
        max_duration_seconds=3600.0,
    )
    run, created = await store.create_chain_run(first)
    assert created
    assert run.status == "running"
    assert run.started_at == T0
    assert run.deadline_at == T0 + timedelta(hours=1)
    again, created_again = await store.create_chain_run(
        NewChainRun(id=str(uuid.uuid4()), chain="weekly", dedupe_key=first.dedupe_key, trigger="x")
    )
    assert not created_again
    assert again.id == first.id
    assert [c.id for c in await store.active_chain_runs()] == [first.id]
    assert (await store.get_chain_run(first.id)).chain == "weekly"
    with pytest.raises(NotFound):
        await store.get_chain_run(str(uuid.uuid4()))


async def test_active_chain_runs_page_in_start_order_with_ties(h: StoreHarness) -> None:
    """Pages by (started_at, id): runs that started at the same instant (one pinned clock, a
    burst of events) are neither repeated nor skipped across pages."""
    clock = FixedClock(T0)
    store = await h.make_store(clock=clock)
    ids = []
    for i in range(7):
        if i == 4:
            clock.advance(1)
        cid = str(uuid.uuid4())
        await store.create_chain_run(NewChainRun(id=cid, chain="c", dedupe_key=cid, trigger="x"))
        ids.append(cid)
    done = ids[5]
    await store.finish_chain_run(done, "success")
    expected = sorted(ids[:4]) + sorted(i for i in ids[4:] if i != done)
    pages, after = [], None
    while True:
        page = await store.active_chain_runs(after=after, limit=2)
        pages.append([c.id for c in page])
        if len(page) < 2:
            break
        after = page[-1]
    assert [cid for page in pages for cid in page] == expected
    assert [len(page) for page in pages] == [2, 2, 2, 0]
    assert [c.id for c in await store.active_chain_runs()] == expected


async def test_chain_run_overrun_and_finish(h: StoreHarness) -> None:
    clock = FixedClock(T0)
    store = await h.make_store(clock=clock)
    cid = str(uuid.uuid4())
    await store.create_chain_run(NewChainRun(id=cid, chain="c", dedupe_key=cid, trigger="cli"))
    marked = await store.mark_chain_overrun(cid)
    assert marked.overrun_at == T0
    clock.advance(60)
    assert (await store.mark_chain_overrun(cid)).overrun_at == T0  # the first time is kept
    done = await store.finish_chain_run(cid, "failure", "chain_timeout")
    assert done is not None
    assert done.status == "failure"
    assert done.finished_at == T0 + timedelta(seconds=60)
    assert await store.finish_chain_run(cid, "success") is None  # already finished
    assert await store.active_chain_runs() == []
    listed = await store.list_chain_runs(chain="c")
    assert [c.id for c in listed] == [cid]
    assert listed[0].overrun


async def test_skipped_chain_run_is_recorded_finished(h: StoreHarness) -> None:
    cid = str(uuid.uuid4())
    run, _ = await h.store.create_chain_run(
        NewChainRun(
            id=cid,
            chain="c",
            dedupe_key="c@x",
            trigger="schedule",
            status="skipped",
            end_reason="missed",
        )
    )
    assert run.status == "skipped"
    assert run.finished_at is not None
    assert await h.store.active_chain_runs() == []


async def test_events_are_idempotent_and_link_runs(h: StoreHarness) -> None:
    store = await h.make_store(clock=FixedClock(T0))
    event, created = await store.record_event("ev-1", "rumor.signal_created", {"player": 7})
    assert created
    assert event.occurred_at == T0
    assert event.data == {"player": 7}
    again, created_again = await store.record_event("ev-1", "other.key", {})
    assert not created_again
    assert again.key == "rumor.signal_created"
    run = (
        await store.accept(
            NewRun(
                id=str(uuid.uuid4()),
                job="j",
                trigger=Trigger.EVENT,
                dedupe_key="j@k@x",
                executor="inline",
                overlap="allow",
                event_id="ev-1",
            )
        )
    ).run
    links = [EventLink("ev-1", run.id, "j", True)]
    await store.link_event_runs(links)
    await store.link_event_runs(links)  # idempotent
    assert await store.event_links("ev-1") == links
    assert await store.events_of_run(run.id) == links
    assert [e.id for e in await store.list_events(key="rumor.signal_created")] == ["ev-1"]
    with pytest.raises(NotFound):
        await store.get_event("nope")


async def test_run_by_dedupe_key(h: StoreHarness) -> None:
    assert await h.store.run_by_dedupe_key("missing") is None
    new = NewRun(
        id=str(uuid.uuid4()),
        job="j",
        trigger=Trigger.SCHEDULE,
        dedupe_key="j@2031-03-04T05:00:00Z",
        executor="inline",
        overlap="allow",
        status=RunStatus.SKIPPED,
        end_reason="missed",
    )
    await h.store.accept(new)
    found = await h.store.run_by_dedupe_key(new.dedupe_key)
    assert found is not None
    assert found.status == RunStatus.SKIPPED
    assert found.end_reason == "missed"
