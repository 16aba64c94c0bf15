"""Poison on the real broker: a command or event that no database outage explains is
dead-lettered with its reason, never left unacked (a prefetch slot leaked), retried for ever, or
let crash the consumer's loop; a row the broker can never take does not stall the relay."""

from __future__ import annotations

import functools
import json
import secrets
import uuid
from collections.abc import Callable

import aio_pika
import pytest
from structlog.testing import capture_logs

from runlane.adapters.rabbitmq import REASON_HEADER, RabbitBus
from runlane.catalog import Catalog
from runlane.core.runs import AcceptResult, Trigger
from runlane.ports import RunFilter, Store
from runlane.service.accept import RunRequest, accept_run
from runlane.service.events import BadEvent, emit_event
from runlane.service.launcher.bus_loops import CommandConsumer, EventConsumer, OutboxRelay

from .conftest import depth, get_one, publish_json
from .test_events import CE, publish_event

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("broker_shared")]

DEEP = b"[" * 100_000  # JSON nested past Python's recursion limit: RecursionError, not ValueError


def commands(store: Store, catalog: Catalog, bus: RabbitBus) -> CommandConsumer:
    return CommandConsumer(
        store=store,
        bus=bus,
        catalog=catalog,
        accept=functools.partial(accept_run, store, catalog),
        free_slots=lambda: 4,
        wake=lambda: None,
        max_wait=2.0,
    )


async def dead_lettered_reason(
    amqp: aio_pika.abc.AbstractChannel, queue: str, within: float = 10.0
) -> str:
    """The reason header of the one message in the dead-letter queue `queue` (acked)."""
    message = await get_one(amqp, queue, within=within)
    await message.ack()
    return str((message.headers or {})[REASON_HEADER])


async def test_a_command_nested_too_deep_is_dead_lettered_not_a_crash(
    store: Store,
    catalog: Catalog,
    make_bus: Callable[..., RabbitBus],
    amqp: aio_pika.abc.AbstractChannel,
) -> None:
    bus = make_bus(store)
    await bus.open()
    await publish_json(amqp, bus.topology.job_runs, DEEP, message_id="deep")
    consumer = commands(store, catalog, bus)
    await consumer.consume_once()
    assert (await dead_lettered_reason(amqp, bus.topology.job_runs_dlq)).startswith("not JSON")
    assert consumer.stats.dead_lettered == 1


async def test_an_event_nested_too_deep_is_dead_lettered_not_a_crash(
    store: Store,
    catalog: Catalog,
    make_bus: Callable[..., RabbitBus],
    amqp: aio_pika.abc.AbstractChannel,
) -> None:
    bus = make_bus(store)
    await bus.open()
    headers = CE | {"cloudEvents_id": "deep", "cloudEvents_source": "rumor-service"}
    await publish_event(
        amqp, bus.topology.job_events, "rumor.signal_created", b'{"a": ' + DEEP, headers
    )
    consumer = EventConsumer(
        store=store,
        bus=bus,
        catalog=catalog,
        accept=functools.partial(accept_run, store, catalog),
    )
    [delivery] = await bus.receive("events", limit=1, max_wait=5.0)
    await consumer.take(delivery)
    assert (await dead_lettered_reason(amqp, bus.topology.events_dlq)).startswith(
        "data is not JSON"
    )
    assert consumer.stats.dead_lettered == 1


async def test_a_command_whose_dedupe_key_cannot_be_indexed_is_dead_lettered(
    store: Store,
    catalog: Catalog,
    make_bus: Callable[..., RabbitBus],
    amqp: aio_pika.abc.AbstractChannel,
) -> None:
    bus = make_bus(store)
    await bus.open()
    command = {"run_id": str(uuid.uuid4()), "job": "hello", "dedupe_key": secrets.token_hex(20_000)}
    await publish_json(amqp, bus.topology.job_runs, command)
    consumer = commands(store, catalog, bus)
    await consumer.consume_once()  # it used to be deferred as an outage, and retried for ever
    assert (await dead_lettered_reason(amqp, bus.topology.job_runs_dlq, within=3)).startswith(
        "invalid_argument"
    )
    assert consumer.stats.dead_lettered == 1
    assert await store.list_runs(RunFilter(job="hello")) == []


async def test_a_row_no_amqp_frame_can_carry_never_stalls_the_relay(
    store: Store,
    catalog: Catalog,
    make_bus: Callable[..., RabbitBus],
    amqp: aio_pika.abc.AbstractChannel,
) -> None:
    """An event fact whose key is past AMQP's 255-byte routing key (written before emit
    refused such keys) can never be published: it used to end every batch at itself, so the
    rows after it were published again at every round and never marked sent. It is logged as
    lost and marked done, so that it heads no batch (a healthy broker looked down: the relay
    backed off up to 30 s)."""
    bus = make_bus(store)
    await bus.open()
    key = "é" * 150  # 150 characters, 300 bytes as UTF-8
    fact = {"cloudevent": {"id": "e-1", "source": "runlane://events", "type": key}, "data": {}}
    await store.outbox_add_fact(f"event:{key}", json.dumps(fact), key="event:e-1")
    await accept_run(store, catalog, RunRequest(job="hello", trigger=Trigger.CLI))
    relay = OutboxRelay(store, bus, "relay-a")
    with capture_logs() as logged:
        first = await relay.relay_once()
        assert await relay.relay_once() == (0, False)  # nothing left: no back-off, no resend
    assert first[0] is not None  # not taken for a broker outage
    assert await store.outbox_pending() == 0
    assert await depth(amqp, bus.topology.job_runs) == 1  # the command went out once
    assert [e["event"] for e in logged if e["log_level"] == "error"] == ["bus.publish_impossible"]


async def test_emit_refuses_an_event_key_or_id_past_255_bytes(
    store: Store, catalog: Catalog
) -> None:
    async def accept(request: RunRequest) -> AcceptResult:
        return await accept_run(store, catalog, request)

    with pytest.raises(BadEvent, match="300 bytes as UTF-8"):
        await emit_event(store, catalog, accept, "é" * 150)
    with pytest.raises(BadEvent, match="300 bytes as UTF-8"):
        await emit_event(store, catalog, accept, "rumor.signal_created", event_id="é" * 150)
    assert await store.outbox_pending() == 0


async def test_an_event_whose_dead_letter_copy_fails_is_rejected_not_left_unacked(
    store: Store,
    catalog: Catalog,
    make_bus: Callable[..., RabbitBus],
    amqp: aio_pika.abc.AbstractChannel,
) -> None:
    """The copy to `runlane.events.dlq` is returned (the queue was deleted under the launcher):
    the event goes back to the queue (its delivery limit dead-letters it in the end), never
    kept unacked on the channel, where it held a prefetch slot until the connection closed."""
    bus = make_bus(store)
    await bus.open()
    await amqp.queue_delete(bus.topology.events_dlq)
    headers = CE | {"cloudEvents_id": "bad", "cloudEvents_source": "rumor-service"}
    await publish_event(amqp, bus.topology.job_events, "rumor.signal_created", b"[1]", headers)
    consumer = EventConsumer(
        store=store,
        bus=bus,
        catalog=catalog,
        accept=functools.partial(accept_run, store, catalog),
    )
    [delivery] = await bus.receive("events", limit=1, max_wait=5.0)
    await consumer.take(delivery)
    assert isinstance(delivery.tag, aio_pika.abc.AbstractIncomingMessage)
    assert delivery.tag.processed  # settled: rejected back to the queue
    assert consumer.stats.dead_lettered == 0
