"""External events on `job_events`: an event another service publishes with a key the catalog
listens to starts a run exactly like `runlane emit` (deduplicated by source and id); an invalid
one reaches the events' dead-letter queue with the reason."""

from __future__ import annotations

import json
from collections.abc import Callable

import aio_pika
import pytest

from runlane.adapters.rabbitmq import REASON_HEADER
from runlane.core.runs import RunStatus
from runlane.ports import RunFilter, Store

from .conftest import BusLauncher, get_one, until

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
