"""Store contract, both dialects: what the metrics exporter reads at a scrape (the queue depth by
executor, the oldest unpublished outbox row) and the run's traceparent in its outbox message."""

from __future__ import annotations

import json
from datetime import timedelta

from runlane.testing.clock import FixedClock
from tests.conformance.conftest import StoreHarness
from tests.conformance.test_store_contract import T0, claim_all, new_run

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def test_queued_by_executor_counts_only_queued_rows(harness: StoreHarness) -> None:
    store = harness.store
    assert await store.queued_by_executor() == {}
    for _ in range(3):
        await store.accept(new_run("a"))
    await store.accept(new_run("b", executor="pod"))
    assert await store.queued_by_executor() == {"inline": 3, "pod": 1}
    claimed = await claim_all(store, executors=["inline"], limit=2)
    assert len(claimed) == 2
    assert await store.queued_by_executor() == {"inline": 1, "pod": 1}
    assert await store.count_queued() == 2


async def test_outbox_oldest_pending_is_the_first_unpublished_row(harness: StoreHarness) -> None:
    clock = FixedClock(T0)
    store = await harness.make_store(clock=clock, outbox=True)
    assert await store.outbox_oldest_pending() is None
    await store.accept(new_run("a", traceparent=TRACEPARENT))
    clock.advance(60)
    await store.accept(new_run("b"))
    assert await store.outbox_oldest_pending() == T0
    payloads = [
        json.loads(str(p)) if isinstance(p, str) else p
        for (p,) in harness.query("SELECT payload FROM outbox ORDER BY id", {})
    ]
    assert payloads[0]["traceparent"] == TRACEPARENT
    assert "traceparent" not in payloads[1]
    first = harness.query("SELECT min(id) FROM outbox", {})[0][0]
    harness.query("UPDATE outbox SET published_at = created_at WHERE id = :id", {"id": first})
    assert await store.outbox_oldest_pending() == T0 + timedelta(seconds=60)
    harness.query("UPDATE outbox SET published_at = created_at", {})
    assert await store.outbox_oldest_pending() is None
