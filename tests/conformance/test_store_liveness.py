"""Store contract, both dialects: pruning dead launchers' heartbeat rows, and the write probe."""

from __future__ import annotations

from datetime import UTC, datetime

from runlane.ports import FixedClock, Heartbeat
from tests.conformance.conftest import StoreHarness

T0 = datetime(2031, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)


async def test_prune_launchers_deletes_only_rows_silent_longer_than_the_bound(
    harness: StoreHarness,
) -> None:
    clock = FixedClock(T0)
    store = await harness.make_store(clock=clock)
    await store.beat(Heartbeat("dead", "host-a", 1, "0.1.0", T0, running={"inline": 1}))
    await store.beat(Heartbeat("also-dead", "host-b", 2, "0.1.0", T0))
    clock.advance(3000)
    await store.beat(Heartbeat("alive", "host-c", 3, "0.1.0", T0))
    clock.advance(700)  # dead rows: 3700 s silent; alive: 700 s

    assert await store.prune_launchers(3600) == ["also-dead", "dead"]
    assert [h.launcher_id for h in await store.launchers()] == ["alive"]
    assert await store.prune_launchers(3600) == []
    assert await store.prune_launchers(600) == ["alive"]
    assert await store.launchers() == []


async def test_check_writable_passes_and_writes_nothing(harness: StoreHarness) -> None:
    store = harness.store
    await store.check_writable()
    await store.check_writable()
    assert await store.launchers() == []
