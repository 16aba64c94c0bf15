"""The database Bus (`runlane.adapters.sql.bus.DatabaseBus`) over each store: the wake-ups a
launcher waits on through the Bus port, and the publish/receive of a bus that is the run log."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from runlane.adapters.sql.bus import DatabaseBus
from runlane.ports import Bus, OutboxMessage
from tests.conformance.conftest import StoreHarness
from tests.conformance.test_store_contract import new_run, settled


async def test_the_database_bus_wakes_a_waiter_on_accept(harness: StoreHarness) -> None:
    store = await settled(await harness.make_store(), harness.dialect)
    bus: Bus = DatabaseBus(store)
    assert not await bus.wait_for_wakeup(0.05)
    waiter = asyncio.create_task(bus.wait_for_wakeup(10.0))
    await asyncio.sleep(0)  # the waiter waits before the run is accepted
    assert not waiter.done()
    await store.accept(new_run())
    assert await waiter


async def test_the_database_bus_wakes_a_waiter_on_another_stores_accept(
    harness: StoreHarness,
) -> None:
    """A run accepted through another store (another process: the CLI, another `runlane
    serve`) wakes a launcher's wait, not only its next claim poll. PostgreSQL's wake-up is a
    NOTIFY in the writing statement; SQLite's is a change of `PRAGMA data_version`, which only
    another connection's commit makes, seen within `WATCH_SECONDS`."""
    launcher = await settled(await harness.make_store(), harness.dialect)
    writer = await harness.make_store()
    assert not await DatabaseBus(launcher).wait_for_wakeup(0.1)  # nothing written meanwhile
    waiter = asyncio.create_task(DatabaseBus(launcher).wait_for_wakeup(10.0))
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    accepted = loop.time()
    await writer.accept(new_run())
    assert await waiter
    assert loop.time() - accepted < 2.0  # well before the wait's own 10 s
    # A commit made while nobody waits wakes the next wait at once.
    await writer.accept(new_run())
    assert await launcher.wait_for_wakeup(0.5)
    assert not await launcher.wait_for_wakeup(0.1)


async def test_the_database_bus_confirms_every_publish_and_delivers_nothing(
    harness: StoreHarness,
) -> None:
    store = await settled(await harness.make_store(), harness.dialect)
    bus = DatabaseBus(store)
    messages = [
        OutboxMessage(str(n), "job_runs", "{}", datetime(2031, 1, 1, tzinfo=UTC)) for n in range(3)
    ]
    assert await bus.publish(messages, within=1.0) == ["0", "1", "2"]
    assert await bus.receive("job_runs", limit=10, max_wait=0.05) == []
    await bus.ack([])
    await bus.reject([], requeue=False)
    await bus.close()
