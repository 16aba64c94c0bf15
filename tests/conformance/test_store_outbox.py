"""Store contract, both dialects: the outbox relay's rows (ports.store.Outbox) — the run command
an accept writes, leases that keep two relays off each other's rows, per-run order, confirmed
rows marked sent, released rows retried, published rows pruned."""

from __future__ import annotations

import json
from datetime import datetime

from runlane.core.runs import Trigger
from runlane.ports import EventFact
from tests.conformance.conftest import StoreHarness
from tests.conformance.test_store_contract import new_run


async def test_an_accept_writes_the_run_command_the_relay_leases(harness: StoreHarness) -> None:
    store = await harness.make_store(outbox=True)
    run = new_run("nightly", params={"week": 3}, trigger=Trigger.CLI, requested_by="ana")
    await store.accept(run)
    leased = await store.outbox_lease("relay-a", limit=10, lease_seconds=30)
    assert [m.topic for m in leased] == ["job_runs"]
    assert leased[0].key == run.id
    command = json.loads(leased[0].payload)
    assert command["run_id"] == run.id
    assert command["job"] == "nightly"
    assert command["params"] == {"week": 3}
    assert command["trigger"] == "cli"
    assert command["requested_by"] == "ana"
    assert command["dedupe_key"] == run.dedupe_key
    assert command["attempt"] == 1
    assert set(command) >= {
        "parent_run_id", "chain_root_id", "event_id", "downstream", "scheduled_for",
    }  # fmt: skip


async def test_an_accept_on_the_database_bus_writes_no_run_command(harness: StoreHarness) -> None:
    """Without the outbox (the database bus) the run row is all an accept writes: no command
    row, whatever the params' size (none is built for it either)."""
    store = await harness.make_store()
    run = new_run("nightly", params={"blob": "x" * 200_000}, trigger=Trigger.CLI)
    result = await store.accept(run)
    assert result.created
    assert result.run.params == {"blob": "x" * 200_000}
    assert await store.outbox_pending() == 0
    assert await store.outbox_lease("relay-a", limit=10, lease_seconds=30) == []
    assert harness.query("SELECT count(*) FROM outbox", {})[0][0] == 0


async def test_two_relays_never_lease_the_same_row(harness: StoreHarness) -> None:
    store = await harness.make_store(outbox=True)
    for _ in range(5):
        await store.accept(new_run())
    first = await store.outbox_lease("relay-a", limit=3, lease_seconds=30)
    second = await store.outbox_lease("relay-b", limit=10, lease_seconds=30)
    assert len(first) == 3
    assert len(second) == 2
    assert not {m.message_id for m in first} & {m.message_id for m in second}
    assert await store.outbox_lease("relay-c", limit=10, lease_seconds=30) == []
    assert await store.outbox_pending() == 5


async def test_sent_rows_are_not_leased_again_and_released_ones_are(harness: StoreHarness) -> None:
    store = await harness.make_store(outbox=True)
    for _ in range(3):
        await store.accept(new_run())
    leased = await store.outbox_lease("relay-a", limit=10, lease_seconds=30)
    await store.outbox_mark_sent([leased[0].message_id])
    await store.outbox_release("relay-a", [m.message_id for m in leased[1:]])
    again = await store.outbox_lease("relay-b", limit=10, lease_seconds=30)
    assert [m.message_id for m in again] == [m.message_id for m in leased[1:]]
    assert await store.outbox_pending() == 2
    assert await store.outbox_oldest_pending() is not None


async def test_an_expired_lease_is_taken_over(harness: StoreHarness) -> None:
    store = await harness.make_store(outbox=True)
    await store.accept(new_run())
    dead = await store.outbox_lease("relay-dead", limit=10, lease_seconds=0.001)
    assert len(dead) == 1
    harness.query("UPDATE outbox SET leased_until = created_at", {})  # long past, whatever now is
    taken = await store.outbox_lease("relay-b", limit=10, lease_seconds=30)
    assert [m.message_id for m in taken] == [dead[0].message_id]


async def test_one_keys_rows_go_out_in_order(harness: StoreHarness) -> None:
    store = await harness.make_store(outbox=True)
    await store.outbox_add_fact("event:run.a.running", '{"n": 1}', key="run-1")
    await store.outbox_add_fact("event:run.a.success", '{"n": 2}', key="run-1")
    await store.outbox_add_fact("event:run.b.running", '{"n": 3}', key="run-2")
    first = await store.outbox_lease("relay-a", limit=10, lease_seconds=30)
    # run-1's second row waits behind its first, which is leased and unpublished.
    assert [json.loads(m.payload)["n"] for m in first] == [1, 3]
    assert await store.outbox_lease("relay-b", limit=10, lease_seconds=30) == []
    await store.outbox_mark_sent([m.message_id for m in first])
    after = await store.outbox_lease("relay-b", limit=10, lease_seconds=30)
    assert [json.loads(m.payload)["n"] for m in after] == [2]


async def test_published_rows_are_pruned_after_the_keep_window(harness: StoreHarness) -> None:
    store = await harness.make_store(outbox=True)
    for _ in range(4):
        await store.accept(new_run())
    leased = await store.outbox_lease("relay-a", limit=10, lease_seconds=30)
    await store.outbox_mark_sent([m.message_id for m in leased[:3]])
    assert await store.outbox_prune(keep_seconds=3600) == 0  # sent just now: kept
    assert await store.outbox_prune(keep_seconds=0.0, limit=2) == 2
    assert await store.outbox_prune(keep_seconds=0.0) == 1
    assert harness.query("SELECT count(*) FROM outbox", {})[0][0] == 1  # the unpublished one


async def test_a_new_event_with_a_fact_writes_it_while_facts_are_on(
    harness: StoreHarness,
) -> None:
    store = await harness.make_store(outbox=True)
    fact = EventFact("runlane://events", "00-" + "a" * 32 + "-" + "b" * 16 + "-01")
    await store.record_event("ev-off", "rumor.signal_created", {"n": 0}, fact=fact)
    assert await store.outbox_pending() == 0  # facts off (the database bus): none written
    await store.set_bus_facts(True)
    event, created = await store.record_event(
        "ev-1", "rumor.signal_created", {"player": 7, "tags": ["a"]}, fact=fact
    )
    assert created
    await store.record_event("ev-1", "rumor.signal_created", {"player": 7}, fact=fact)  # repeat
    await store.record_event("ext#1", "rumor.signal_created", {"n": 2})  # taken from the bus
    await store.record_event("ev-2", "other.key", {}, fact=EventFact("runlane://events"))
    leased = await store.outbox_lease("relay-a", limit=10, lease_seconds=30)
    assert [m.topic for m in leased] == ["event:rumor.signal_created", "event:other.key"]
    first = json.loads(leased[0].payload)
    assert first["data"] == {"player": 7, "tags": ["a"]}
    attrs = first["cloudevent"]
    assert attrs["id"] == "ev-1"
    assert attrs["source"] == "runlane://events"
    assert attrs["type"] == "rumor.signal_created"
    assert attrs["specversion"] == "1.0"
    assert attrs["traceparent"] == fact.traceparent
    assert datetime.fromisoformat(attrs["time"]) == event.occurred_at
    assert "traceparent" not in json.loads(leased[1].payload)["cloudevent"]  # none: no header
    assert leased[0].key != leased[1].key
