"""External events on `job_events`: an event another service publishes with a key the catalog
listens to starts a run exactly like `runlane emit` (deduplicated by source and id); an invalid
one reaches the events' dead-letter queue with the reason."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable
from typing import Any

import aio_pika
import pytest

from runlane.adapters.rabbitmq import REASON_HEADER, RabbitBus
from runlane.catalog import Catalog
from runlane.core.runs import RunStatus
from runlane.errors import DatabaseUnavailable
from runlane.ports import RunFilter, Store
from runlane.service.accept import accept_run
from runlane.service.launcher.bus_loops import EventConsumer

from .conftest import BusLauncher, depth, get_one, until

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("broker_shared")]


async def publish_event(
    channel: aio_pika.abc.AbstractChannel,
    exchange_name: str,
    key: str,
    data: bytes,
    headers: dict[str, object],
) -> None:
    exchange = await channel.get_exchange(exchange_name, ensure=False)
    await exchange.publish(
        aio_pika.Message(data, headers=headers, content_type="application/json"),
        key,
        timeout=5,
    )


CE = {"cloudEvents_specversion": "1.0", "cloudEvents_type": "rumor.signal_created"}


async def test_an_external_event_starts_its_listener_once(
    store: Store,
    start_launcher: Callable[..., BusLauncher],
    amqp: aio_pika.abc.AbstractChannel,
) -> None:
    running = start_launcher()
    await running.bus.open()
    headers = CE | {"cloudEvents_id": "sig-1", "cloudEvents_source": "rumor-service"}
    for _ in range(2):  # the same (source, id) twice: one event, one run
        await publish_event(
            amqp,
            running.bus.topology.job_events,
            "rumor.signal_created",
            json.dumps({"player": 7}).encode(),
            headers,
        )
    runs = await until(lambda: store.list_runs(RunFilter(job="listener")))
    await running.events.wait("finished", runs[0].id)
    await until(lambda: running.launcher.events.stats.acked >= 2)
    runs = await store.list_runs(RunFilter(job="listener"))
    assert len(runs) == 1
    assert runs[0].status is RunStatus.SUCCESS
    assert runs[0].trigger == "event"
    event = await store.get_event("rumor-service#sig-1")
    assert event.key == "rumor.signal_created"
    assert event.data == {"player": 7}


async def test_an_invalid_event_reaches_the_events_dead_letter_queue(
    store: Store,
    start_launcher: Callable[..., BusLauncher],
    amqp: aio_pika.abc.AbstractChannel,
) -> None:
    running = start_launcher()
    await running.bus.open()
    topology = running.bus.topology
    await publish_event(
        amqp,
        topology.job_events,
        "rumor.signal_created",
        b"[1, 2]",
        CE | {"cloudEvents_id": "sig-2", "cloudEvents_source": "rumor-service"},
    )
    await publish_event(
        amqp, topology.job_events, "rumor.signal_created", b"{}", CE | {"cloudEvents_id": "x"}
    )
    reasons = []
    for _ in range(2):
        message = await get_one(amqp, topology.events_dlq)
        reasons.append(str((message.headers or {})[REASON_HEADER]))
        await message.ack()
    assert reasons == [
        "data is not a JSON object",
        "no cloudEvents_source header: the event cannot be deduped by source",
    ]
    assert await store.list_runs(RunFilter(job="listener")) == []


class FlakyStore:
    """The store, with `record_event` failing as a database outage does, `failures` times."""

    def __init__(self, store: Store, failures: int) -> None:
        self._store = store
        self.failures = failures

    async def record_event(self, *args: Any, **kwargs: Any) -> Any:
        if self.failures > 0:
            self.failures -= 1
            raise DatabaseUnavailable("the database did not answer (a test's outage)")
        return await self._store.record_event(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def test_a_database_outage_never_spends_an_events_delivery_limit(
    store: Store,
    catalog: Catalog,
    make_bus: Callable[..., RabbitBus],
    amqp: aio_pika.abc.AbstractChannel,
) -> None:
    """While the database fails, a taken event stays unacked on the consumer and is tried
    again: rejected with requeue, each failure would count against `runlane.events`'
    delivery limit (5) and a longer outage would dead-letter an event that was fine."""
    bus = make_bus(store)
    await bus.open()
    topology = bus.topology
    flaky = FlakyStore(store, failures=8)  # more than the delivery limit
    consumer = EventConsumer(
        store=flaky,  # type: ignore[arg-type]
        bus=bus,
        catalog=catalog,
        accept=functools.partial(accept_run, store, catalog),
        max_wait=0.2,
        retry_pause=0.05,
    )
    stopping = asyncio.Event()
    task = asyncio.create_task(consumer.run(stopping))
    try:
        headers = CE | {"cloudEvents_id": "sig-outage", "cloudEvents_source": "rumor-service"}
        await publish_event(
            amqp, topology.job_events, "rumor.signal_created", b'{"player": 9}', headers
        )

        async def settled() -> bool:  # taken, or dead-lettered by the broker
            return consumer.stats.acked >= 1 or await depth(amqp, topology.events_dlq) >= 1

        await until(settled, within=30)
    finally:
        stopping.set()
        await asyncio.wait_for(task, 10)
    assert flaky.failures == 0  # every failure was met, and the event was taken after them
    assert consumer.stats.dead_lettered == 0
    assert await depth(amqp, topology.events_dlq) == 0
    assert await depth(amqp, topology.events_queue) == 0
    event = await store.get_event("rumor-service#sig-outage")
    assert event.data == {"player": 9}
    assert len(await store.list_runs(RunFilter(job="listener"))) == 1
