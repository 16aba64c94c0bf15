"""The Store contract for alerts (migration 0009): incidents, their notices, the rules' cursors
and the targets' health, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from runlane.core.incidents import NewIncident
from runlane.core.runs import NewRun, Outcome, RunStatus, Trigger
from runlane.ports import Store
from runlane.testing.clock import FixedClock

if TYPE_CHECKING:
    from conftest import StoreHarness

T0 = datetime(2031, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
FAILURE = Outcome(RunStatus.FAILURE, "exit", exit_code=1)
SUCCESS = Outcome(RunStatus.SUCCESS, "exit", exit_code=0)


def occurrence(at: datetime, *, job: str = "nightly", count: int = 1) -> NewIncident:
    return NewIncident(
        rule="run_failed",
        fingerprint=f"run_failed:{job}",
        subject=job,
        level="critical",
        title=f"{job} failed",
        seen_at=at,
        count=count,
        run_id=str(uuid.uuid4()),
    )


async def clocked(h: StoreHarness) -> tuple[Store, FixedClock]:
    clock = FixedClock(T0)
    return await h.make_store(clock=clock), clock


async def finished_run(store: Store, job: str, outcome: Outcome = FAILURE) -> str:
    run_id = str(uuid.uuid4())
    new = NewRun(
        id=run_id,
        job=job,
        trigger=Trigger.MANUAL,
        dedupe_key=run_id,
        executor="inline",
        overlap="allow",
    )
    await store.accept(new)
    (claimed,) = await store.claim(
        "L1", limit=1, lease_ttl=30, executors=["inline"], executor_caps={}
    )
    await store.finish(claimed.lease, outcome)
    return run_id


async def test_an_occurrence_opens_one_incident_and_later_ones_count(h: StoreHarness) -> None:
    store, _ = await clocked(h)
    first, opened = await store.record_incident(occurrence(T0))
    assert opened
    assert first.state == "open"
    assert first.count == 1
    again, opened = await store.record_incident(occurrence(T0 + timedelta(seconds=5), count=3))
    assert not opened
    assert again.id == first.id
    assert again.count == 4
    assert again.last_seen == T0 + timedelta(seconds=5)
    assert again.first_seen == T0
    # The same occurrence seen again (a second launcher, an overlapping read) counts nothing.
    same, opened = await store.record_incident(occurrence(T0 + timedelta(seconds=5), count=3))
    assert not opened
    assert same.count == 4
    assert [i.id for i in await store.open_incidents()] == [first.id]
    assert await store.open_incident_counts() == {"run_failed": 1}


async def test_concurrent_launchers_open_one_incident(h: StoreHarness) -> None:
    stores = [h.store, await h.make_store(), await h.make_store()]
    results = await asyncio.gather(*(s.record_incident(occurrence(T0)) for s in stores))
    assert sum(opened for _, opened in results) == 1
    assert len({incident.id for incident, _ in results}) == 1
    assert len(await h.store.open_incidents()) == 1


async def test_a_resolved_incident_is_resolved_once_and_a_new_one_opens_after(
    h: StoreHarness,
) -> None:
    store, clock = await clocked(h)
    incident, _ = await store.record_incident(occurrence(T0))
    clock.advance(60)
    resolved = await store.resolve_incident(incident.id, "nightly succeeded")
    assert resolved is not None
    assert resolved.state == "resolved"
    assert resolved.resolved_at == T0 + timedelta(seconds=60)
    assert await store.resolve_incident(incident.id, "again") is None
    reopened, opened = await store.record_incident(occurrence(clock.at))
    assert opened
    assert reopened.id != incident.id
    listed = await store.list_incidents(limit=10)
    assert [i.id for i in listed] == [reopened.id, incident.id]
    assert [i.id for i in await store.list_incidents(open_only=True)] == [reopened.id]


async def test_one_claimer_sends_and_only_its_owner_finishes(h: StoreHarness) -> None:
    store, clock = await clocked(h)
    other = await h.make_store(clock=clock)
    incident, _ = await store.record_incident(occurrence(T0))
    claims = await asyncio.gather(
        store.claim_notice(incident.id, "ntfy", owner="A", expect="none", lease=30),
        other.claim_notice(incident.id, "ntfy", owner="B", expect="none", lease=30),
    )
    assert sorted(claims) == [False, True]
    winner = "A" if claims[0] else "B"
    loser = "B" if winner == "A" else "A"
    assert not await store.finish_notice(incident.id, "ntfy", owner=loser, sent="firing")
    assert await store.finish_notice(incident.id, "ntfy", owner=winner, sent="firing")
    (pending,) = await store.incidents_to_notify(3600)
    notice = pending.notices["ntfy"]
    assert notice.sent_state == "firing"
    assert notice.sent_at == T0
    assert notice.claim_owner is None
    assert pending.last_notified_at == T0
    # Sent firing: a claim expecting none fails; one expecting firing (the resolve) holds.
    assert not await store.claim_notice(incident.id, "ntfy", owner="A", expect="none", lease=30)
    assert await store.claim_notice(incident.id, "ntfy", owner="A", expect="firing", lease=30)


async def test_an_expired_claim_is_taken_over(h: StoreHarness) -> None:
    store, clock = await clocked(h)
    incident, _ = await store.record_incident(occurrence(T0))
    assert await store.claim_notice(incident.id, "hook", owner="A", expect="none", lease=30)
    assert not await store.claim_notice(incident.id, "hook", owner="B", expect="none", lease=30)
    clock.advance(31)  # A died between its send and its mark
    assert await store.claim_notice(incident.id, "hook", owner="B", expect="none", lease=30)
    assert not await store.finish_notice(incident.id, "hook", owner="A", sent="firing")


async def test_a_failed_send_waits_for_its_retry_and_a_permanent_one_stops(
    h: StoreHarness,
) -> None:
    store, clock = await clocked(h)
    incident, _ = await store.record_incident(occurrence(T0))
    assert await store.claim_notice(incident.id, "ntfy", owner="A", expect="none", lease=30)
    assert await store.finish_notice(
        incident.id, "ntfy", owner="A", sent=None, error="HTTP 429", retry_in=10
    )
    assert not await store.claim_notice(incident.id, "ntfy", owner="A", expect="none", lease=30)
    (pending,) = await store.incidents_to_notify(3600)
    notice = pending.notices["ntfy"]
    assert notice.attempts == 1
    assert notice.last_error == "HTTP 429"
    assert notice.next_attempt_at == T0 + timedelta(seconds=10)
    clock.advance(10)
    assert await store.claim_notice(incident.id, "ntfy", owner="A", expect="none", lease=30)
    assert await store.finish_notice(
        incident.id, "ntfy", owner="A", sent=None, error="HTTP 401", give_up=True
    )
    clock.advance(3600)
    assert not await store.claim_notice(incident.id, "ntfy", owner="A", expect="none", lease=30)


async def test_a_repeat_is_claimed_only_after_its_interval(h: StoreHarness) -> None:
    store, clock = await clocked(h)
    incident, _ = await store.record_incident(occurrence(T0))
    assert await store.claim_notice(incident.id, "t", owner="A", expect="none", lease=30)
    assert await store.finish_notice(incident.id, "t", owner="A", sent="firing")
    clock.advance(100)
    early = clock.at - timedelta(seconds=3600)
    assert not await store.claim_notice(
        incident.id, "t", owner="A", expect="firing", lease=30, sent_before=early
    )
    late = clock.at - timedelta(seconds=60)
    assert await store.claim_notice(
        incident.id, "t", owner="A", expect="firing", lease=30, sent_before=late
    )


async def test_resolved_incidents_leave_the_delivery_set_and_are_pruned(
    h: StoreHarness,
) -> None:
    store, clock = await clocked(h)
    incident, _ = await store.record_incident(occurrence(T0))
    await store.claim_notice(incident.id, "t", owner="A", expect="none", lease=30)
    await store.resolve_incident(incident.id, "fixed")
    assert [i.id for i in await store.incidents_to_notify(3600)] == [incident.id]
    clock.advance(7200)
    assert await store.incidents_to_notify(3600) == []
    assert await store.prune_incidents(3600) == 1
    assert await store.list_incidents() == []


async def test_the_cursor_only_moves_forward(h: StoreHarness) -> None:
    store = h.store
    assert await store.alert_cursor("run_failed") is None
    await store.advance_alert_cursor("run_failed", T0)
    await store.advance_alert_cursor("run_failed", T0 - timedelta(seconds=1))
    assert await store.alert_cursor("run_failed") == T0
    await store.advance_alert_cursor("run_failed", T0 + timedelta(seconds=1))
    assert await store.alert_cursor("run_failed") == T0 + timedelta(seconds=1)


async def test_failed_runs_are_read_in_pages_after_a_position(h: StoreHarness) -> None:
    store, clock = await clocked(h)
    ids = []
    for _ in range(3):
        ids.append(await finished_run(store, "nightly"))
        clock.advance(1)
    first = await store.failed_since(T0 - timedelta(seconds=1), "", limit=2)
    assert [r.id for r in first] == ids[:2]
    last = first[-1]
    assert last.finished_at is not None
    rest = await store.failed_since(last.finished_at, last.id, limit=10)
    assert [r.id for r in rest] == ids[2:]
    assert all(r.status is RunStatus.FAILURE for r in first + rest)


async def test_the_failure_read_skips_successes_and_cancels(h: StoreHarness) -> None:
    store, clock = await clocked(h)
    expected = []
    for outcome in (
        FAILURE,
        SUCCESS,
        Outcome(RunStatus.TIMEOUT, "deadline", error_code="deadline"),
        Outcome(RunStatus.CANCELLED, "cancelled"),
        SUCCESS,
        FAILURE,
    ):
        run_id = await finished_run(store, "nightly", outcome)
        if outcome.status in (RunStatus.FAILURE, RunStatus.TIMEOUT):
            expected.append(run_id)
        clock.advance(1)
    read = await store.failed_since(T0 - timedelta(seconds=1), "", limit=100)
    assert [r.id for r in read] == expected
    assert [r.status for r in read] == [RunStatus.FAILURE, RunStatus.TIMEOUT, RunStatus.FAILURE]


async def test_a_jobs_last_success_in_a_window(h: StoreHarness) -> None:
    store, clock = await clocked(h)
    first = await finished_run(store, "nightly", SUCCESS)  # at T0
    clock.advance(1)
    await finished_run(store, "nightly", FAILURE)  # T0 + 1
    clock.advance(1)
    second = await finished_run(store, "nightly", SUCCESS)  # T0 + 2
    clock.advance(1)
    await finished_run(store, "other", SUCCESS)  # T0 + 3: another job's
    before = T0 - timedelta(seconds=1)

    async def last(after: datetime, until: datetime, job: str = "nightly") -> str | None:
        run = await store.last_success(job, after, until)
        return None if run is None else run.id

    assert await last(before, T0 + timedelta(seconds=10)) == second
    assert await last(before, T0 + timedelta(seconds=1)) == first  # `until` bounds it
    assert await last(T0, T0 + timedelta(seconds=1)) is None  # `after` is exclusive
    assert await last(T0 + timedelta(seconds=2), T0 + timedelta(seconds=10)) is None
    assert await last(before, T0 + timedelta(seconds=10), job="absent") is None
    found = await store.last_success("nightly", before, T0 + timedelta(seconds=10))
    assert found is not None
    assert (found.status, found.finished_at) == (RunStatus.SUCCESS, T0 + timedelta(seconds=2))


async def test_a_target_records_failures_until_a_success(h: StoreHarness) -> None:
    store, clock = await clocked(h)
    await store.record_target_result("ntfy", error="HTTP 500")
    await store.record_target_result("ntfy", error="timed out")
    (health,) = await store.alert_targets()
    assert health.failures == 2
    assert health.last_error == "timed out"
    assert health.failing
    clock.advance(5)
    await store.record_target_result("ntfy", error=None)
    (health,) = await store.alert_targets()
    assert health.failures == 0
    assert health.last_ok_at == T0 + timedelta(seconds=5)
    assert health.last_error_at == T0


@pytest.fixture
def h(harness: StoreHarness) -> StoreHarness:
    """The harness (each test starts on an empty database: a fresh SQLite file, a truncated
    PostgreSQL)."""
    return harness
