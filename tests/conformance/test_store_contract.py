"""The Store contract (runlane.ports.Store), run against every adapter: SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from runlane.core.runs import (
    Claimed,
    Lease,
    NewRun,
    Outcome,
    OverlapPolicy,
    RunStatus,
    Trigger,
)
from runlane.errors import (
    InvalidArgument,
    InvalidTransition,
    LeaseLost,
    NotFound,
    OverlapRefused,
    StoreError,
)
from runlane.ports import FinishRequest, Heartbeat, RunFilter, Store
from runlane.testing.clock import FixedClock
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from conftest import StoreHarness

T0 = datetime(2031, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
SUCCESS = Outcome(RunStatus.SUCCESS, "exit", exit_code=0)
FAILURE = Outcome(RunStatus.FAILURE, "exit", exit_code=1, error_code="exit_code", log_tail="boom")
FAILURE_WITH_NOTE = Outcome(RunStatus.FAILURE, "exit", exit_code=1, note="the outcome's own")


def new_run(
    job: str = "nightly",
    *,
    executor: str = "inline",
    overlap: OverlapPolicy = "allow",
    dedupe_key: str | None = None,
    **kw: Any,
) -> NewRun:
    run_id = kw.pop("id", None) or str(uuid.uuid4())
    return NewRun(
        id=run_id,
        job=job,
        trigger=kw.pop("trigger", Trigger.MANUAL),
        dedupe_key=dedupe_key or str(uuid.uuid4()),
        executor=executor,
        overlap=overlap,
        **kw,
    )


async def claim_all(store: Store, owner: str = "L1", **kw: Any) -> list[Claimed]:
    return await store.claim(
        owner,
        limit=kw.pop("limit", 100),
        lease_ttl=kw.pop("lease_ttl", 30.0),
        executors=kw.pop("executors", ("inline", "pod")),
        executor_caps=kw.pop("executor_caps", {}),
    )


async def pinned(h: StoreHarness, at: datetime = T0) -> tuple[Store, FixedClock]:
    clock = FixedClock(at)
    return await h.make_store(clock=clock), clock


# --- schema ---------------------------------------------------------------------------------


async def test_schema_is_current_and_upgrade_is_idempotent(harness: StoreHarness) -> None:
    store = harness.store
    await store.ensure_current()
    version = await store.schema_version()
    assert version >= 1
    assert await store.upgrade() == []
    assert await store.schema_version() == version


# --- accept ---------------------------------------------------------------------------------


async def test_accept_writes_a_queued_row_with_every_field(harness: StoreHarness) -> None:
    parent = str(uuid.uuid4())
    slot = datetime(2031, 1, 1, tzinfo=UTC)
    new = new_run(
        params={"week": 3, "names": ["a", "b"]},
        requested_by="alice",
        parent_run_id=parent,
        chain_root_id=parent,
        event_id="evt-1",
        downstream=["b", "c"],
        scheduled_for=slot,
        max_attempts=3,
        deadline_seconds=120.5,
        kill_grace_seconds=5.0,
        traceparent="00-abc-def-01",
        note="hello",
    )
    result = await harness.store.accept(new)
    assert result.created
    run = result.run
    assert run.id == new.id
    assert run.status == RunStatus.QUEUED
    assert run.params == {"week": 3, "names": ["a", "b"]}
    assert run.requested_by == "alice"
    assert run.parent_run_id == parent
    assert run.chain_root_id == parent
    assert run.event_id == "evt-1"
    assert run.downstream == ["b", "c"]
    assert run.scheduled_for == slot
    assert run.attempt == 1
    assert run.max_attempts == 3
    assert run.deadline_seconds == 120.5
    assert run.kill_grace_seconds == 5.0
    assert run.traceparent == "00-abc-def-01"
    assert run.note == "hello"
    assert run.lease_generation == 0
    assert run.lease_token is None
    assert run.started_at is None
    assert run.finished_at is None
    assert run.queued_at.tzinfo is not None
    assert await harness.store.get_run(new.id) == run


async def test_accept_with_a_known_dedupe_key_returns_the_existing_row(
    harness: StoreHarness,
) -> None:
    first = await harness.store.accept(new_run(dedupe_key="nightly@2031-01-01T00:00:00Z"))
    again = await harness.store.accept(
        new_run(dedupe_key="nightly@2031-01-01T00:00:00Z", params={"other": 1}),
        overlap_action="refuse",
    )
    assert not again.created
    assert again.run == first.run
    assert await harness.store.count_queued() == 1


async def test_overlap_refuse_names_the_active_run(harness: StoreHarness) -> None:
    store = harness.store
    active = (await store.accept(new_run(overlap="forbid"))).run
    with pytest.raises(OverlapRefused) as refused:
        await store.accept(new_run(overlap="forbid"), overlap_action="refuse")
    assert refused.value.active_run_id == active.id
    assert "nightly" in str(refused.value)
    assert active.id in str(refused.value)
    # Another job is not affected; once the run ends the job may run again.
    assert (await store.accept(new_run("other"), overlap_action="refuse")).created
    await store.finish_unleased(active.id, RunStatus.QUEUED, FAILURE)
    assert (await store.accept(new_run(overlap="forbid"), overlap_action="refuse")).created


async def test_overlap_refuse_sees_running_runs(harness: StoreHarness) -> None:
    store = harness.store
    await store.accept(new_run(overlap="forbid"))
    [claimed] = await claim_all(store)
    with pytest.raises(OverlapRefused) as refused:
        await store.accept(new_run(overlap="forbid"), overlap_action="refuse")
    assert refused.value.active_run_id == claimed.run.id


async def test_overlap_skip_records_a_skipped_row(harness: StoreHarness) -> None:
    store = harness.store
    await store.accept(new_run(overlap="forbid"))
    result = await store.accept(new_run(overlap="forbid"), overlap_action="skip")
    assert result.created
    assert result.run.status == RunStatus.SKIPPED
    assert result.run.end_reason == "overlap"
    assert result.run.finished_at is not None
    # Without an active run, skip inserts a normal queued row.
    assert (await store.accept(new_run("solo"), overlap_action="skip")).run.status == (
        RunStatus.QUEUED
    )


async def test_running_and_skipped_inserts(harness: StoreHarness) -> None:
    store = harness.store
    child = (
        await store.accept(new_run("child", status=RunStatus.RUNNING, trigger=Trigger.SCOPE))
    ).run
    assert child.status == RunStatus.RUNNING
    assert child.started_at is not None
    assert child.lease_token is None
    skipped = (
        await store.accept(new_run("missed", status=RunStatus.SKIPPED, end_reason="missed"))
    ).run
    assert skipped.status == RunStatus.SKIPPED
    assert skipped.end_reason == "missed"
    assert skipped.finished_at is not None
    # Neither is ever claimable, nor recoverable as abandoned.
    assert await claim_all(store) == []
    assert await store.claim_abandoned("L1", limit=10, lease_ttl=30, executors=["inline"]) == []
    assert await store.count_queued() == 0


async def test_outbox_rows_only_when_enabled(harness: StoreHarness) -> None:
    await harness.store.accept(new_run())
    assert harness.query("SELECT count(*) FROM outbox", {}) == [(0,)]
    with_outbox = await harness.make_store(outbox=True)
    run = (await with_outbox.accept(new_run())).run
    rows = harness.query("SELECT topic, payload FROM outbox", {})
    assert len(rows) == 1
    assert rows[0][0] == "job_runs"
    assert run.id in str(rows[0][1])


# --- queue expiry ---------------------------------------------------------------------------


async def test_queue_ttl_expires_queued_runs(harness: StoreHarness) -> None:
    store, clock = await pinned(harness)
    run = (await store.accept(new_run(queue_ttl_seconds=60))).run
    keep = (await store.accept(new_run("keep"))).run
    assert run.queue_expires_at == T0 + timedelta(seconds=60)
    assert keep.queue_expires_at is None
    assert await store.expire_queued() == []
    clock.advance(60)
    # Expired runs are never claimed, even before expire_queued has run.
    claimed = await claim_all(store)
    assert [c.run.id for c in claimed] == [keep.id]
    [expired] = await store.expire_queued()
    assert expired.id == run.id
    assert expired.status == RunStatus.SKIPPED
    assert expired.end_reason == "expired"
    assert expired.finished_at == T0 + timedelta(seconds=60)
    assert await store.expire_queued() == []


# --- claim ----------------------------------------------------------------------------------


async def test_claim_takes_due_runs_in_queue_order(harness: StoreHarness) -> None:
    store, clock = await pinned(harness)
    first = (await store.accept(new_run("a"))).run
    clock.advance(1)
    later = (await store.accept(new_run("b", not_before=T0 + timedelta(seconds=10)))).run
    clock.advance(1)
    second = (await store.accept(new_run("c"))).run
    clock.advance(1)
    third = (await store.accept(new_run("d"))).run
    claimed = await claim_all(store, limit=2)
    assert [c.run.id for c in claimed] == [first.id, second.id]
    claimed = await claim_all(store)
    assert [c.run.id for c in claimed] == [third.id]
    clock.advance(7)  # T0 + 10: the not_before run is due now
    claimed = await claim_all(store)
    assert [c.run.id for c in claimed] == [later.id]


async def test_claim_sets_the_lease_from_database_time(harness: StoreHarness) -> None:
    store, _clock = await pinned(harness)
    await store.accept(new_run(deadline_seconds=90))
    [claimed] = await store.claim(
        "L1", limit=5, lease_ttl=45, executors=["inline"], executor_caps={}
    )
    run = claimed.run
    assert claimed.db_now == T0
    assert not claimed.recovered
    assert run.status == RunStatus.RUNNING
    assert run.lease_owner == "L1"
    assert run.lease_generation == 1
    assert run.lease_expires_at == T0 + timedelta(seconds=45)
    assert run.started_at == T0
    assert run.deadline_at == T0 + timedelta(seconds=90)
    assert claimed.lease.run_id == run.id
    assert claimed.lease.token == run.lease_token
    assert claimed.lease.generation == 1
    assert uuid.UUID(claimed.lease.token).version == 4


async def test_claim_filters_by_executor(harness: StoreHarness) -> None:
    store = harness.store
    pod = (await store.accept(new_run(executor="pod"))).run
    await store.accept(new_run(executor="slurm"))
    claimed = await store.claim("L1", limit=10, lease_ttl=30, executors=["pod"], executor_caps={})
    assert [c.run.id for c in claimed] == [pod.id]
    assert (
        await store.claim("L1", limit=0, lease_ttl=30, executors=["slurm"], executor_caps={}) == []
    )


async def test_admission_overlap_queue_waits_for_the_running_run(harness: StoreHarness) -> None:
    store = harness.store
    first = (await store.accept(new_run(overlap="queue"))).run
    second = (await store.accept(new_run(overlap="queue"))).run
    side = (await store.accept(new_run("side", overlap="allow"))).run
    claimed = await claim_all(store)
    assert [c.run.id for c in claimed] == [first.id, side.id]
    assert await claim_all(store) == []
    await store.finish(claimed[0].lease, SUCCESS)
    assert [c.run.id for c in await claim_all(store)] == [second.id]


async def test_admission_stays_exact_as_the_queue_mixes_policies(harness: StoreHarness) -> None:
    # PostgreSQL claims `allow` runs on uncapped executors in one statement and falls back to
    # the admission function for anything else; either way the decisions are the same.
    store = harness.store
    allow = (await store.accept(new_run(overlap="allow"))).run
    first = await claim_all(store, limit=1)
    assert [c.run.id for c in first] == [allow.id]
    queued = (await store.accept(new_run(overlap="queue"))).run
    assert await claim_all(store) == []  # the job's `allow` run still counts as running
    later = [(await store.accept(new_run("side", overlap="allow"))).run for _ in range(2)]
    assert [c.run.id for c in await claim_all(store, limit=1)] == [later[0].id]
    await store.finish(first[0].lease, SUCCESS)
    assert [c.run.id for c in await claim_all(store)] == [queued.id, later[1].id]
    more = [(await store.accept(new_run("side", overlap="allow"))).run for _ in range(3)]
    assert [c.run.id for c in await claim_all(store, limit=2)] == [m.id for m in more[:2]]
    pod = (await store.accept(new_run("p", executor="pod"))).run
    assert [c.run.id for c in await claim_all(store, executor_caps={"pod": 0})] == [more[2].id]
    assert [c.run.id for c in await claim_all(store, executor_caps={"pod": 1})] == [pod.id]


async def test_admission_allow_runs_side_by_side(harness: StoreHarness) -> None:
    store = harness.store
    for _ in range(3):
        await store.accept(new_run(overlap="allow"))
    assert len(await claim_all(store)) == 3


async def test_admission_executor_caps_count_every_running_run(harness: StoreHarness) -> None:
    store = harness.store
    other = await harness.make_store()
    for i in range(4):
        await store.accept(new_run(f"job{i}", executor="pod"))
    caps = {"pod": 2}
    first = await claim_all(store, executor_caps=caps)
    assert len(first) == 2
    # Another launcher sees the same cap: the rows are the count, not a local counter.
    assert await claim_all(other, owner="L2", executor_caps=caps) == []
    await store.finish(first[0].lease, FAILURE)
    assert len(await claim_all(other, owner="L2", executor_caps=caps)) == 1


async def test_claim_respects_the_limit(harness: StoreHarness) -> None:
    store = harness.store
    for _ in range(5):
        await store.accept(new_run())
    assert len(await claim_all(store, limit=3)) == 3
    assert len(await claim_all(store, limit=3)) == 2


async def test_concurrent_claimers_never_share_a_run(harness: StoreHarness) -> None:
    ids = set()
    for _ in range(200):
        ids.add((await harness.store.accept(new_run())).run.id)
    claimers = [harness.store] + [await harness.make_store() for _ in range(3)]

    async def drain(store: Store, owner: str) -> list[str]:
        got: list[str] = []
        while True:
            batch = await store.claim(
                owner, limit=7, lease_ttl=30, executors=["inline"], executor_caps={}
            )
            if not batch:
                return got
            got.extend(c.run.id for c in batch)

    results = await asyncio.gather(
        *(drain(s, f"L{i}") for i, s in enumerate(claimers)),
        drain(harness.store, "L-extra"),
    )
    claimed = [run_id for batch in results for run_id in batch]
    assert len(claimed) == len(set(claimed)), "a run was claimed twice"
    assert set(claimed) == ids


# --- leases and fencing ---------------------------------------------------------------------


async def _one_claimed(store: Store, **kw: Any) -> Claimed:
    await store.accept(new_run(**kw))
    [claimed] = await claim_all(store)
    return claimed


async def test_fenced_writes_with_a_wrong_token_or_generation_fail(
    harness: StoreHarness,
) -> None:
    store = harness.store
    claimed = await _one_claimed(store, max_attempts=2)
    lease = claimed.lease
    bad_token = type(lease)(lease.run_id, lease.owner, str(uuid.uuid4()), lease.generation)
    old_gen = type(lease)(lease.run_id, lease.owner, lease.token, lease.generation - 1)
    retry = new_run(attempt=2, retry_of=lease.run_id, trigger=Trigger.RETRY)
    for stale in (bad_token, old_gen):
        with pytest.raises(LeaseLost) as lost:
            await store.finish(stale, FAILURE, retry=retry)
        assert lease.run_id in str(lost.value)
        with pytest.raises(LeaseLost):
            await store.set_external_id(stale, "pid-1")
        with pytest.raises(LeaseLost):
            await store.release(stale, retry_after=5, error_code="x")
    run = await store.get_run(lease.run_id)
    assert run.status == RunStatus.RUNNING
    assert run.external_id is None
    assert run.finished_at is None
    with pytest.raises(NotFound):
        await store.get_run(retry.id)
    # The real lease still works.
    await store.set_external_id(lease, "pid-1")
    assert (await store.get_run(lease.run_id)).external_id == "pid-1"


async def test_an_expired_lease_cannot_write_and_the_retry_is_not_kept(
    harness: StoreHarness,
) -> None:
    store, clock = await pinned(harness)
    claimed = await _one_claimed(store, max_attempts=2)
    clock.advance(30)  # lease_ttl in claim_all: expired exactly now
    retry = new_run(attempt=2, retry_of=claimed.run.id, trigger=Trigger.RETRY)
    with pytest.raises(LeaseLost):
        await store.finish(claimed.lease, FAILURE, retry=retry)
    with pytest.raises(LeaseLost):
        await store.set_external_id(claimed.lease, "pid")
    assert (await store.get_run(claimed.run.id)).status == RunStatus.RUNNING
    with pytest.raises(NotFound):
        await store.get_run(retry.id)
    # Nobody took the run over, so its owner may revive the lease and then record the outcome.
    assert await store.renew([claimed.lease], 30) == {claimed.run.id}
    done = await store.finish(claimed.lease, FAILURE, retry=retry)
    assert done.status == RunStatus.FAILURE
    assert (await store.get_run(retry.id)).attempt == 2


async def test_claim_abandoned_takes_over_and_fences_the_old_owner(harness: StoreHarness) -> None:
    store, clock = await pinned(harness)
    other = await harness.make_store(clock=clock)
    old = await _one_claimed(store)
    assert await other.claim_abandoned("L2", limit=10, lease_ttl=30, executors=["inline"]) == []
    clock.advance(31)
    [taken] = await other.claim_abandoned("L2", limit=10, lease_ttl=30, executors=["inline"])
    assert taken.recovered
    assert taken.run.id == old.run.id
    assert taken.lease.generation == old.lease.generation + 1
    assert taken.lease.token != old.lease.token
    assert taken.run.lease_owner == "L2"
    assert taken.run.lease_expires_at == clock.at + timedelta(seconds=30)
    assert taken.run.started_at == old.run.started_at  # the same execution, taken over
    with pytest.raises(LeaseLost):
        await store.finish(old.lease, SUCCESS)
    with pytest.raises(LeaseLost):
        await store.set_external_id(old.lease, "stale")
    done = await other.finish(taken.lease, SUCCESS)
    assert done.status == RunStatus.SUCCESS
    assert done.lease_owner == "L2"
    assert done.lease_generation == 2  # kept for audit


async def test_set_external_ids_saves_each_write_on_its_own_lease(harness: StoreHarness) -> None:
    store = harness.store
    for _ in range(4):
        await store.accept(new_run(executor="pod"))
    a, b, c, d = (x.lease for x in await claim_all(store))
    bad_token = type(b)(b.run_id, b.owner, str(uuid.uuid4()), b.generation)
    old_gen = type(c)(c.run_id, c.owner, c.token, c.generation - 1)
    malformed = type(d)("not-a-run-id", d.owner, "not-a-token", d.generation)
    assert await store.set_external_ids([]) == []
    saved = await store.set_external_ids(
        [(d, "ns/job-d"), (bad_token, "ns/b"), (malformed, "ns/x"), (a, "ns/job-a"), (old_gen, "c")]
    )
    assert saved == [True, False, False, True, False]  # in the order asked, not the id order
    rows = {lease.run_id: await store.get_run(lease.run_id) for lease in (a, b, c, d)}
    assert {k: r.external_id for k, r in rows.items()} == {
        a.run_id: "ns/job-a",
        b.run_id: None,
        c.run_id: None,
        d.run_id: "ns/job-d",
    }
    assert all(r.status == RunStatus.RUNNING for r in rows.values())
    # The real leases of the refused ones still write.
    assert await store.set_external_ids([(b, "ns/job-b"), (c, "ns/job-c")]) == [True, True]
    assert (await store.get_run(c.run_id)).external_id == "ns/job-c"


async def test_set_external_ids_never_writes_an_expired_or_taken_over_lease(
    harness: StoreHarness,
) -> None:
    store, clock = await pinned(harness)
    other = await harness.make_store(clock=clock)
    for _ in range(2):
        await store.accept(new_run(executor="pod"))
    first, second = (x.lease for x in await claim_all(store))
    clock.advance(31)  # past lease_ttl in claim_all: both expired
    assert await store.set_external_ids([(first, "ns/1"), (second, "ns/2")]) == [False, False]
    [taken] = await other.claim_abandoned("L2", limit=1, lease_ttl=30, executors=["pod"])
    kept = second if taken.run.id == first.run_id else first
    assert await store.renew([kept], 30) == {kept.run_id}  # nobody took this one: revived
    stale = first if kept is second else second
    assert await store.set_external_ids([(stale, "ns/old"), (kept, "ns/kept")]) == [False, True]
    assert await other.set_external_ids([(taken.lease, "ns/new")]) == [True]
    assert (await store.get_run(taken.run.id)).external_id == "ns/new"
    assert (await store.get_run(kept.run_id)).external_id == "ns/kept"


async def test_claim_abandoned_respects_executors_and_limit(harness: StoreHarness) -> None:
    store, clock = await pinned(harness)
    for _ in range(3):
        await store.accept(new_run(executor="pod"))
    assert len(await claim_all(store)) == 3
    clock.advance(60)
    assert await store.claim_abandoned("L2", limit=5, lease_ttl=30, executors=["inline"]) == []
    assert len(await store.claim_abandoned("L2", limit=2, lease_ttl=30, executors=["pod"])) == 2
    assert len(await store.claim_abandoned("L2", limit=5, lease_ttl=30, executors=["pod"])) == 1


async def test_renew_reports_held_and_lost_leases(harness: StoreHarness) -> None:
    store, clock = await pinned(harness)
    a = await _one_claimed(store)
    b = await _one_claimed(store)
    clock.advance(20)
    assert await store.renew([a.lease, b.lease], 30) == {a.run.id, b.run.id}
    assert (await store.get_run(a.run.id)).lease_expires_at == clock.at + timedelta(seconds=30)
    clock.advance(31)
    [taken] = await store.claim_abandoned("L2", limit=1, lease_ttl=30, executors=["inline"])
    survivor = a if taken.run.id == b.run.id else b
    # The survivor's lease also expired, but nobody took it over: its owner may revive it
    # (same token and generation). The lease that was taken over stays lost.
    assert await store.renew([a.lease, b.lease, taken.lease], 30) == {taken.run.id, survivor.run.id}
    assert (await store.get_run(survivor.run.id)).lease_expires_at == clock.at + timedelta(
        seconds=30
    )
    assert await store.renew([], 30) == set()
    assert survivor.run.id != taken.run.id


async def test_release_requeues_after_retry_after(harness: StoreHarness) -> None:
    store, clock = await pinned(harness)
    claimed = await _one_claimed(store)
    await store.release(claimed.lease, retry_after=20, error_code="api_unavailable", note="503")
    run = await store.get_run(claimed.run.id)
    assert run.status == RunStatus.QUEUED
    assert run.lease_token is None
    assert run.lease_owner is None
    assert run.lease_expires_at is None
    assert run.lease_generation == 1
    assert run.started_at is None
    assert run.deadline_at is None
    assert run.error_code == "api_unavailable"
    assert run.note == "503"
    assert run.not_before == T0 + timedelta(seconds=20)
    assert await claim_all(store) == []
    clock.advance(20)
    [again] = await claim_all(store)
    assert again.lease.generation == 2
    # A temporary executor error is not time spent running: the deadline starts at the new claim.
    assert again.run.deadline_at == clock.at + (claimed.run.deadline_at - T0)
    with pytest.raises(LeaseLost):
        await store.release(claimed.lease, retry_after=1, error_code="x")


async def test_retry_repairs_now_makes_only_the_matching_kept_runs_due(
    harness: StoreHarness,
) -> None:
    store, _ = await pinned(harness)
    kept = await _one_claimed(store, job="fresh")
    await store.release(kept.lease, retry_after=300, error_code="unknown_job", note="kept")
    other_job = await _one_claimed(store, job="gone")
    await store.release(other_job.lease, retry_after=300, error_code="unknown_job")
    other_code = await _one_claimed(store, job="fresh")
    await store.release(other_code.lease, retry_after=300, error_code="api_unavailable")
    assert await claim_all(store) == []
    assert await store.retry_repairs_now("unknown_job", ["nightly"]) == []
    assert await store.retry_repairs_now("unknown_job", ["fresh", "nightly"]) == [kept.run.id]
    run = await store.get_run(kept.run.id)
    assert (run.status, run.not_before, run.error_code) == (RunStatus.QUEUED, T0, "unknown_job")
    [again] = await claim_all(store)
    assert again.run.id == kept.run.id
    # Due already: nothing more to do (the run just claimed is no longer queued).
    assert await store.retry_repairs_now("unknown_job", ["fresh"]) == []
    assert (await store.get_run(other_job.run.id)).not_before == T0 + timedelta(seconds=300)
    assert (await store.get_run(other_code.run.id)).not_before == T0 + timedelta(seconds=300)


async def test_finish_writes_the_outcome_and_inserts_the_retry(harness: StoreHarness) -> None:
    store, clock = await pinned(harness)
    claimed = await _one_claimed(store, max_attempts=3, dedupe_key="nightly@slot")
    clock.advance(5)
    retry = new_run(
        attempt=2,
        retry_of=claimed.run.id,
        trigger=Trigger.RETRY,
        dedupe_key="nightly@slot#2",
        not_before=clock.at + timedelta(seconds=10),
        max_attempts=3,
    )
    done = await store.finish(claimed.lease, FAILURE, retry=retry, external_id="pid-9")
    assert done.status == RunStatus.FAILURE
    assert done.end_reason == "exit"
    assert done.exit_code == 1
    assert done.error_code == "exit_code"
    assert done.log_tail == "boom"
    assert done.external_id == "pid-9"
    assert done.finished_at == clock.at
    assert done.lease_token == claimed.lease.token  # lease fields kept for audit
    queued = await store.get_run(retry.id)
    assert queued.status == RunStatus.QUEUED
    assert queued.attempt == 2
    assert queued.retry_of == claimed.run.id
    assert await claim_all(store) == []
    clock.advance(10)
    assert [c.run.id for c in await claim_all(store)] == [retry.id]
    with pytest.raises(LeaseLost):
        await store.finish(claimed.lease, SUCCESS)


async def test_finish_rejects_a_non_final_outcome(harness: StoreHarness) -> None:
    claimed = await _one_claimed(harness.store)
    with pytest.raises(InvalidTransition):
        await harness.store.finish(claimed.lease, Outcome(RunStatus.QUEUED, "exit"))


# --- unleased changes -----------------------------------------------------------------------


async def test_finish_unleased_is_conditional(harness: StoreHarness) -> None:
    store = harness.store
    queued = (await store.accept(new_run())).run
    done = await store.finish_unleased(queued.id, RunStatus.QUEUED, FAILURE)
    assert done.status == RunStatus.FAILURE
    assert done.finished_at is not None
    with pytest.raises(InvalidTransition):
        await store.finish_unleased(queued.id, RunStatus.QUEUED, FAILURE)
    child = (await store.accept(new_run("child", status=RunStatus.RUNNING))).run
    assert (await store.finish_unleased(child.id, RunStatus.RUNNING, SUCCESS)).status == (
        RunStatus.SUCCESS
    )
    leased = await _one_claimed(store)
    with pytest.raises(InvalidTransition):
        await store.finish_unleased(leased.run.id, RunStatus.RUNNING, SUCCESS)
    assert (await store.get_run(leased.run.id)).status == RunStatus.RUNNING
    with pytest.raises(NotFound):
        await store.finish_unleased(str(uuid.uuid4()), RunStatus.QUEUED, FAILURE)


async def test_request_cancel_for_each_status(harness: StoreHarness) -> None:
    store, clock = await pinned(harness)
    queued = (await store.accept(new_run())).run
    cancelled = await store.request_cancel(queued.id, by="alice")
    assert cancelled.status == RunStatus.CANCELLED
    assert cancelled.end_reason == "cancelled"
    assert cancelled.finished_at == T0
    assert cancelled.note == "cancelled by alice"

    running = await _one_claimed(store)
    asked = await store.request_cancel(running.run.id, by="bob")
    assert asked.status == RunStatus.RUNNING
    assert asked.cancel_requested_at == T0
    clock.advance(5)
    again = await store.request_cancel(running.run.id, by="bob")
    assert again.cancel_requested_at == T0  # idempotent
    assert await store.cancel_requests("L1") == [running.run.id]
    assert await store.cancel_requests("L2") == []

    await store.finish(running.lease, Outcome(RunStatus.CANCELLED, "cancelled"))
    assert await store.cancel_requests("L1") == []
    finished = await _one_claimed(store)
    await store.finish(finished.lease, SUCCESS)
    with pytest.raises(InvalidTransition) as ended:
        await store.request_cancel(finished.run.id)
    assert "already ended as success" in str(ended.value)
    with pytest.raises(NotFound):
        await store.request_cancel(str(uuid.uuid4()))


# --- reads ----------------------------------------------------------------------------------


async def test_get_run_unknown_is_not_found(harness: StoreHarness) -> None:
    with pytest.raises(NotFound):
        await harness.store.get_run(str(uuid.uuid4()))
    with pytest.raises(NotFound):
        await harness.store.get_run("not-a-uuid")


async def test_run_statuses_reads_many_runs_at_once_keyed_as_given(harness: StoreHarness) -> None:
    """The bus's consumer decides a batch of commands with one read: each known run's status
    under the id the command gave; unknown and malformed ids are absent, never an error."""
    store = harness.store
    first = (await store.accept(new_run("a"))).run
    second = (await store.accept(new_run("b"))).run
    [claimed] = await claim_all(store, limit=1)  # the older of the two
    assert claimed.run.id == first.id
    unknown = str(uuid.uuid4())
    asked = [first.id, second.id, unknown, "not-a-uuid", ""]
    if harness.dialect == "postgres":  # other spellings PostgreSQL's uuid takes
        asked.append("{" + second.id.upper() + "}")
    statuses = await store.run_statuses(asked)
    expected = {first.id: RunStatus.RUNNING, second.id: RunStatus.QUEUED}
    if harness.dialect == "postgres":
        expected["{" + second.id.upper() + "}"] = RunStatus.QUEUED
    assert statuses == expected
    assert await store.run_statuses([]) == {}
    assert await store.run_statuses([unknown, "x"]) == {}


async def test_list_runs_filters_newest_first(harness: StoreHarness) -> None:
    store, clock = await pinned(harness)
    root = str(uuid.uuid4())
    a = (await store.accept(new_run("a", chain_root_id=root))).run
    clock.advance(1)
    b = (await store.accept(new_run("b", parent_run_id=a.id, chain_root_id=root))).run
    clock.advance(1)
    c = (await store.accept(new_run("a"))).run
    all_runs = await store.list_runs(RunFilter())
    assert [r.id for r in all_runs] == [c.id, b.id, a.id]
    assert [r.id for r in await store.list_runs(RunFilter(job="a"))] == [c.id, a.id]
    assert [r.id for r in await store.list_runs(RunFilter(parent_run_id=a.id))] == [b.id]
    assert [r.id for r in await store.list_runs(RunFilter(chain_root_id=root))] == [b.id, a.id]
    assert [r.id for r in await store.list_runs(RunFilter(limit=1))] == [c.id]
    await store.finish_unleased(c.id, RunStatus.QUEUED, FAILURE)
    failed = await store.list_runs(RunFilter(status=RunStatus.FAILURE))
    assert [r.id for r in failed] == [c.id]
    assert await store.count_queued() == 2


async def test_text_no_utf8_can_carry_is_an_invalid_argument_with_nothing_written(
    harness: StoreHarness,
) -> None:
    """A lone surrogate (how Python carries bytes that were not UTF-8, or JSON's `\\udcff`) has
    no UTF-8 form: each store refuses it as `invalid_argument`, never a foreign error (SQLite's
    driver raised UnicodeEncodeError, which no caller of a store expects)."""
    store = harness.store
    with pytest.raises(InvalidArgument, match="cannot be stored"):
        await store.accept(new_run(requested_by="x\udcffy"))
    with pytest.raises(InvalidArgument, match="cannot be stored"):
        await store.accept(new_run(dedupe_key="k\ud800"))
    with pytest.raises(InvalidArgument, match="cannot be stored"):
        await store.set_override("nightly", paused_until=None, reason="\udcff", by="ops")
    assert await store.list_runs(RunFilter()) == []
    assert await store.overrides() == {}


async def test_corrupt_params_are_kept_and_never_crash_reads(harness: StoreHarness) -> None:
    store = harness.store
    run = (await store.accept(new_run(params={"week": 1}))).run
    # PostgreSQL's jsonb cannot hold broken JSON, but it can hold a value that is not an object.
    broken = "{not json" if harness.dialect == "sqlite" else "[1, 2]"
    cast = "" if harness.dialect == "sqlite" else "::jsonb"
    harness.query(
        f"UPDATE run_log SET params = :p{cast} WHERE id = :id", {"p": broken, "id": run.id}
    )
    got = await store.get_run(run.id)
    assert got.params is None
    assert got.params_raw == broken
    [listed] = await store.list_runs(RunFilter())
    assert listed.params is None
    [claimed] = await claim_all(store)
    assert claimed.run.params is None
    done = await store.finish(
        claimed.lease, Outcome(RunStatus.FAILURE, "start_failed", error_code="corrupt_params")
    )
    assert done.error_code == "corrupt_params"


# --- overrides and heartbeats ---------------------------------------------------------------


async def test_overrides_upsert_list_and_clear(harness: StoreHarness) -> None:
    store, clock = await pinned(harness)
    until = T0 + timedelta(hours=2)
    made = await store.set_override("nightly", paused_until=until, reason="maintenance", by="ops")
    assert made.paused_until == until
    assert made.created_at == T0
    clock.advance(1)
    replaced = await store.set_override("nightly", paused_until=None, reason="hold", by="bob")
    await store.set_override("other", paused_until=None, reason=None, by=None)
    overrides = await store.overrides()
    assert set(overrides) == {"nightly", "other"}
    assert overrides["nightly"] == replaced
    assert replaced.paused_until is None
    assert replaced.created_by == "bob"
    assert replaced.created_at == clock.at
    assert await store.clear_override("nightly")
    assert not await store.clear_override("nightly")
    assert set(await store.overrides()) == {"other"}


async def test_heartbeats(harness: StoreHarness) -> None:
    store, clock = await pinned(harness)
    hb = Heartbeat("L1", "host-a", 123, "0.1.0", T0, queue_depth=4, running={"inline": 2})
    await store.beat(hb)
    await store.beat(Heartbeat("L2", "host-b", 7, "0.1.0", T0))
    clock.advance(10)
    await store.beat(Heartbeat("L1", "host-a", 123, "0.1.0", T0, queue_depth=1, running={}))
    l1, l2 = await store.launchers()
    assert (l1.launcher_id, l1.host, l1.pid, l1.version) == ("L1", "host-a", 123, "0.1.0")
    assert l1.beat_at == clock.at
    assert l1.queue_depth == 1
    assert l1.running == {}
    assert l2.beat_at == T0
    await store.remove_launcher("L2")
    assert [x.launcher_id for x in await store.launchers()] == ["L1"]


# --- time and wake-ups ----------------------------------------------------------------------


async def test_a_pinned_clock_is_the_only_source_of_time(harness: StoreHarness) -> None:
    store, clock = await pinned(harness)
    assert await store.now() == T0
    run = (await store.accept(new_run())).run
    assert run.queued_at == T0
    clock.advance(2.5)
    [claimed] = await claim_all(store, lease_ttl=10)
    assert claimed.db_now == T0 + timedelta(seconds=2.5)
    assert claimed.run.started_at == claimed.db_now
    done = await store.finish(claimed.lease, SUCCESS)
    assert done.finished_at == claimed.db_now


async def test_unpinned_time_is_current(harness: StoreHarness) -> None:
    before = datetime.now(UTC) - timedelta(seconds=5)
    now = await harness.store.now()
    run = (await harness.store.accept(new_run())).run
    after = datetime.now(UTC) + timedelta(seconds=5)
    assert before <= now <= after
    assert before <= run.queued_at <= after


async def settled(store: Store, dialect: str) -> Store:
    """`store` once the wake-up its first wait gives on PostgreSQL (when LISTEN takes effect,
    for runs committed before it) has been taken."""
    if dialect == "postgresql":
        assert await store.wait_for_wakeup(10.0)
    while await store.wait_for_wakeup(0.1):
        pass
    return store


async def test_wait_for_wakeup_after_accept_and_timeout(harness: StoreHarness) -> None:
    store = await settled(await harness.make_store(), harness.dialect)
    assert not await store.wait_for_wakeup(0.05)
    await store.accept(new_run())
    assert await store.wait_for_wakeup(5.0)


@pytest.mark.postgres
@pytest.mark.parametrize("harness", ["postgresql"], indirect=True)
async def test_only_a_store_that_waits_for_wakeups_listens(harness: StoreHarness) -> None:
    """A store that accepts and reads (the CLI, the API, the SDK in every job) holds no LISTEN
    backend: PostgreSQL would wake it at every NOTIFY in the database. A launcher's store
    listens from its first wait, and that wait wakes at once, for a run committed before
    LISTEN took effect (its NOTIFY reached nobody)."""

    def listening() -> object:
        return harness.query(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query = 'LISTEN runlane_wakeup'",
            {},
        )[0][0]

    writer = await harness.make_store()
    await writer.accept(new_run())
    assert await writer.list_runs(RunFilter(limit=5))
    assert listening() == 0
    launcher = await harness.make_store()
    await writer.accept(new_run())  # before the launcher listens
    assert await launcher.wait_for_wakeup(10.0)
    assert listening() == 1
    while await launcher.wait_for_wakeup(0.1):  # that wake-up was LISTEN's; nothing else
        pass
    assert not await launcher.wait_for_wakeup(0.05)
    await writer.accept(new_run())
    assert await launcher.wait_for_wakeup(10.0)
    await launcher.close()
    # The closed connection's backend exits after the close returns, in its own time.
    await eventually(lambda: listening() == 0, "no backend listening", within=5)


@pytest.mark.postgres
@pytest.mark.parametrize("harness", ["postgresql"], indirect=True)
async def test_a_refused_listen_is_retried_and_close_still_closes_everything(
    harness: StoreHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LISTEN refused with an error other than a dropped connection (a hot standby after a
    failover refuses it): the listener retries after its backoff instead of dying, and close()
    closes the pools whatever the listener ended with."""
    from runlane.adapters.postgres import store as pg

    def backends() -> object:
        return harness.query(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()",
            {},
        )[0][0]

    before = backends()
    launcher = await harness.make_store()
    await claim_all(launcher)  # opens the claim connection too
    monkeypatch.setitem(pg.Q, "listen_wakeup", "SELECT 1/0")
    assert not await launcher.wait_for_wakeup(0.3)
    monkeypatch.setitem(pg.Q, "listen_wakeup", "LISTEN runlane_wakeup")
    assert await launcher.wait_for_wakeup(10.0)  # listening again: the wake-up of LISTEN
    await launcher.close()
    await eventually(lambda: backends() == before, f"{before} backends again", within=5)


@pytest.mark.postgres
@pytest.mark.parametrize("harness", ["postgresql"], indirect=True)
async def test_closing_while_the_listener_connects_leaks_no_connection(
    harness: StoreHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A launcher stopped just after its first wait: its listener is still setting up its
    connection when close() cancels it. That connection is closed, not left to the collector."""
    from runlane.adapters.postgres import PostgresStore

    launcher = await harness.make_store()
    made: list[Any] = []
    in_set_up = asyncio.Event()

    async def stuck_set_up(conn: Any) -> None:
        made.append(conn)
        in_set_up.set()
        await asyncio.Event().wait()  # never returns: only a cancel ends it

    monkeypatch.setattr(PostgresStore, "_configure", staticmethod(stuck_set_up))
    waiting = asyncio.create_task(launcher.wait_for_wakeup(30.0))
    await asyncio.wait_for(in_set_up.wait(), 10.0)
    await launcher.close()
    waiting.cancel()
    assert len(made) == 1
    assert made[0].closed


@pytest.mark.postgres
@pytest.mark.parametrize("harness", ["postgresql"], indirect=True)
async def test_a_wait_during_close_starts_no_listener_that_outlives_it(
    harness: StoreHarness,
) -> None:
    """close() awaits the listener it cancels; a wait_for_wakeup() meanwhile (another task of
    the process) used to start a new listener that nothing stopped, LISTENing forever."""
    launcher = await harness.make_store()
    assert await launcher.wait_for_wakeup(10.0)  # listening
    failures: list[Exception] = []

    async def keep_waiting() -> None:
        while True:
            try:
                await launcher.wait_for_wakeup(0)
            except StoreError as exc:  # closed: said so
                failures.append(exc)
                return
            await asyncio.sleep(0)

    waiter = asyncio.create_task(keep_waiting())
    await asyncio.sleep(0)  # the waiter is in its loop
    await launcher.close()
    async with asyncio.timeout(5):
        await waiter
    assert failures
    assert "not open" in str(failures[0])
    leftovers = [t for t in asyncio.all_tasks() if t.get_name() == "runlane-postgres-listen"]
    assert leftovers == []


@pytest.mark.postgres
@pytest.mark.parametrize("harness", ["postgresql"], indirect=True)
async def test_a_listener_that_failed_is_said_once_then_listening_resumes(
    harness: StoreHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected error (a bug) ends the listener task: the next wait says so, as a
    StoreError, instead of starting a new one in silence with the error never retrieved."""
    from runlane.adapters.postgres import PostgresStore

    launcher = await harness.make_store()
    real = PostgresStore._connect_direct

    async def broken(self: Any) -> Any:
        raise RuntimeError("a bug in the listener")

    monkeypatch.setattr(PostgresStore, "_connect_direct", broken)
    assert not await launcher.wait_for_wakeup(0.2)  # the listener started, and died
    monkeypatch.setattr(PostgresStore, "_connect_direct", real)
    with pytest.raises(StoreError, match="a bug in the listener"):
        await launcher.wait_for_wakeup(0.2)
    assert await launcher.wait_for_wakeup(10.0)  # listening again: LISTEN's wake-up
    await launcher.close()


@pytest.mark.postgres
@pytest.mark.parametrize("harness", ["postgresql"], indirect=True)
async def test_wakeup_crosses_store_instances_on_postgresql(harness: StoreHarness) -> None:
    # SQLite wakes in-process only; runs written by other processes are found by polling.
    listener = await settled(await harness.make_store(), harness.dialect)
    writer = await harness.make_store()
    assert not await listener.wait_for_wakeup(0.05)
    waiting = asyncio.create_task(listener.wait_for_wakeup(10.0))
    await writer.accept(new_run())
    assert await waiting
    # A release (temporary executor error) wakes other launchers too.
    [claimed] = await claim_all(writer)
    await writer.release(claimed.lease, retry_after=0, error_code="x")
    assert await listener.wait_for_wakeup(10.0)


async def test_sweep_orphans_ends_only_unsupervised_runs_past_deadline_and_grace(
    harness: StoreHarness,
) -> None:
    store, clock = await pinned(harness)
    supervised = await _one_claimed(store, deadline_seconds=60)
    abandoned = await _one_claimed(store, deadline_seconds=60)
    child = (await store.accept(new_run(status=RunStatus.RUNNING, deadline_seconds=60))).run
    assert child.deadline_at == T0 + timedelta(seconds=60)
    assert await store.sweep_orphans(grace=600) == []
    clock.advance(60 + 600 + 1)
    # One launcher keeps renewing its lease: that run is supervised and never touched.
    assert await store.renew([supervised.lease], 30) == {supervised.run.id}
    swept = await store.sweep_orphans(grace=600)
    assert {r.id for r in swept} == {abandoned.run.id, child.id}
    for run in swept:
        assert (run.status, run.end_reason) == (RunStatus.TIMEOUT, "orphaned")
    assert (await store.get_run(supervised.run.id)).status == RunStatus.RUNNING
    assert await store.sweep_orphans(grace=600) == []


@pytest.mark.parametrize("batched", [False, True], ids=["finish", "finish_many"])
async def test_a_note_from_a_released_temporary_error_ends_with_it(
    harness: StoreHarness, batched: bool
) -> None:
    store, clock = await pinned(harness)
    claimed = await _one_claimed(store, note="no cluster: ran inline")
    await store.release(claimed.lease, retry_after=1, error_code="api_unavailable", note="503")
    clock.advance(1)
    [again] = await claim_all(store)
    if batched:
        await store.finish_many([FinishRequest(again.lease, SUCCESS)])
    else:
        await store.finish(again.lease, SUCCESS)
    run = await store.get_run(again.run.id)
    assert run.status is RunStatus.SUCCESS
    assert run.error_code is None
    assert run.note is None  # "503" was about the released attempt, not this outcome
    # Without a release, the accept note stays; an outcome's own note replaces it.
    kept = await _one_claimed(store, note="no cluster: ran inline")
    await store.finish_many([FinishRequest(kept.lease, SUCCESS)])
    assert (await store.get_run(kept.run.id)).note == "no cluster: ran inline"
    told = await _one_claimed(store, note="no cluster: ran inline")
    await store.finish(told.lease, FAILURE_WITH_NOTE)
    assert (await store.get_run(told.run.id)).note == "the outcome's own"


@pytest.mark.parametrize("batched", [False, True], ids=["finish", "finish_many"])
async def test_finished_at_is_when_the_run_ended_not_when_it_was_saved(
    harness: StoreHarness, batched: bool
) -> None:
    store, clock = await pinned(harness)
    a = await _one_claimed(store)
    b = await _one_claimed(store)
    c = await _one_claimed(store)
    clock.advance(20)  # a and b ran ~20 s; their saves waited (an outage), as long as c ran
    now = time.monotonic()
    requests = [
        FinishRequest(a.lease, SUCCESS, ended_monotonic=now - 12.5),  # ended 12.5 s ago
        FinishRequest(b.lease, SUCCESS, ended_monotonic=now - 3600),  # "before it started"
        FinishRequest(c.lease, SUCCESS),  # unknown: the save's time
    ]
    if batched:
        await store.finish_many(requests)
    else:
        for r in requests:
            await store.finish(r.lease, r.outcome, ended_monotonic=r.ended_monotonic)
    ra, rb, rc = [await store.get_run(x.run.id) for x in (a, b, c)]
    assert ra.started_at == rb.started_at == rc.started_at == T0
    assert ra.finished_at is not None
    # 7.5 s after the start (the store's clock is pinned; the monotonic clock ran a little)
    assert abs((ra.finished_at - T0).total_seconds() - 7.5) < 1.0
    assert rb.finished_at == T0  # never before the run started
    assert rc.finished_at == T0 + timedelta(seconds=20)


async def test_running_by_launcher_counts_running_runs_by_owner_and_executor(
    harness: StoreHarness,
) -> None:
    store = harness.store
    assert await store.running_by_launcher() == {}
    for executor in ("inline", "inline", "pod", "inline"):
        await store.accept(new_run(executor=executor))
    await store.accept(new_run(executor="scope", status=RunStatus.RUNNING))  # an SDK child row
    a = await claim_all(store, "L1", limit=2, executors=("inline",))
    b = await claim_all(store, "L2", limit=5)
    await store.finish(b[0].lease, SUCCESS)  # finished: not counted
    assert len(a) == 2
    assert sorted(c.run.executor for c in b) == ["inline", "pod"]
    assert await store.running_by_launcher() == {
        "L1": {"inline": 2},
        "L2": {b[1].run.executor: 1},
        "": {"scope": 1},
    }


async def test_finish_many_saves_each_under_its_own_lease(harness: StoreHarness) -> None:
    store, clock = await pinned(harness)
    a = await _one_claimed(store, max_attempts=2)
    b = await _one_claimed(store)
    c = await _one_claimed(store)
    stale = Lease(c.run.id, c.lease.owner, str(uuid.uuid4()), c.lease.generation)
    retry = new_run(attempt=2, retry_of=a.run.id, trigger=Trigger.RETRY)
    lost_retry = new_run(attempt=2, retry_of=c.run.id, trigger=Trigger.RETRY)
    results = await store.finish_many(
        [
            FinishRequest(a.lease, FAILURE, retry=retry, external_id="101"),
            FinishRequest(b.lease, SUCCESS),
            FinishRequest(stale, FAILURE, retry=lost_retry),
        ]
    )
    assert [r.status if r else None for r in results] == [
        RunStatus.FAILURE,
        RunStatus.SUCCESS,
        None,
    ]
    assert [r.run_id if r else None for r in results] == [a.run.id, b.run.id, None]
    assert [r.retried if r else None for r in results] == [True, False, None]
    assert [r.end_reason if r else None for r in results] == [
        FAILURE.end_reason,
        SUCCESS.end_reason,
        None,
    ]
    assert (await store.get_run(a.run.id)).external_id == "101"
    assert (await store.get_run(retry.id)).retry_of == a.run.id
    with pytest.raises(NotFound):
        await store.get_run(lost_retry.id)  # a lost lease writes nothing, its retry included
    assert (await store.get_run(c.run.id)).status == RunStatus.RUNNING
    assert await store.finish_many([]) == []
    clock.advance(31)  # c's lease expired: even its own token cannot write now
    assert await store.finish_many([FinishRequest(c.lease, SUCCESS)]) == [None]


async def test_a_run_asked_to_cancel_is_not_retried_whatever_it_ended_with(
    harness: StoreHarness,
) -> None:
    """A cancel request that came while the run was ending by itself (after its launcher last
    looked for requests) still stops its retry: the save writes the outcome, not the retry."""
    store = harness.store
    one = await _one_claimed(store, max_attempts=2)
    many = await _one_claimed(store, max_attempts=2)
    for claimed in (one, many):
        await store.request_cancel(claimed.run.id, by="alice")
    retry_one = new_run(attempt=2, retry_of=one.run.id, trigger=Trigger.RETRY)
    retry_many = new_run(attempt=2, retry_of=many.run.id, trigger=Trigger.RETRY)
    done = await store.finish(one.lease, FAILURE, retry=retry_one)
    [saved] = await store.finish_many([FinishRequest(many.lease, FAILURE, retry=retry_many)])
    assert (done.status, saved.status if saved else None) == (RunStatus.FAILURE, RunStatus.FAILURE)
    assert saved is not None
    assert not saved.retried  # the launcher's `run.finished` line names no retry
    for retry in (retry_one, retry_many):
        with pytest.raises(NotFound):
            await store.get_run(retry.id)
