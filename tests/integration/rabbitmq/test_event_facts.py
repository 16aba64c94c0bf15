"""Emitted events as facts on `job_events`: `runlane emit` publishes the event with its key as a
CloudEvent in binary mode, through the outbox; an event runlane took from the bus (another
service's) is recorded and never published again, so nothing loops."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass

import aio_pika
import psycopg
import pytest

from runlane.core.runs import RunStatus
from runlane.ports import RunFilter, Store
from runlane.service.config import Settings
from tests.support.cli import cli

from .conftest import BusLauncher, depth, get_one, outbox_drained, until
from .test_events import CE, publish_event

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("broker_shared")]

KEY = "rumor.signal_created"


@dataclass
class Listening:
    running: BusLauncher
    queue: aio_pika.abc.AbstractQueue  # another service's, bound to the key on job_events


@pytest.fixture
async def listening(
    store: Store,
    start_launcher: Callable[..., BusLauncher],
    amqp: aio_pika.abc.AbstractChannel,
    prefix: str,
) -> Listening:
    """A launcher on the bus, facts on, and a subscriber's queue bound to the event key."""
    running = start_launcher()
    await running.bus.open()
    queue = await amqp.declare_queue(f"{prefix}subscriber", exclusive=True)
    await queue.bind(running.bus.topology.job_events, KEY)
    await store.set_bus_facts(True)  # as the launcher's relay does when it starts
    return Listening(running, queue)


def event_facts_written(database_url: str) -> int:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM outbox WHERE topic = %s", (f"event:{KEY}",)
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_runlane_emit_publishes_the_event_as_a_cloudevent(
    store: Store,
    settings: Settings,
    listening: Listening,
    amqp: aio_pika.abc.AbstractChannel,
) -> None:
    running, queue = listening.running, listening.queue
    env = dict(os.environ) | {
        "RUNLANE_DATABASE_URL": settings.database_url,
        "RUNLANE_CATALOG": settings.catalog_path,
        "RUNLANE_BUS": "rabbitmq",
        "RUNLANE_RABBITMQ_URL": settings.rabbitmq_url,
        "RUNLANE_LOG_LEVEL": "warning",
    }
    code, _, err = await cli(env, "emit", KEY, "--data", '{"player": 7}', "--id", "sig-local-1")
    assert code == 0, err
    message = await get_one(amqp, queue.name)
    await message.ack()
    headers = dict(message.headers or {})
    assert message.routing_key == KEY
    assert headers["cloudEvents_specversion"] == "1.0"
    assert headers["cloudEvents_id"] == "sig-local-1"
    assert headers["cloudEvents_source"] == "runlane://events"
    assert headers["cloudEvents_type"] == KEY
    assert "cloudEvents_time" in headers
    assert message.content_type == "application/json"
    assert json.loads(message.body) == {"player": 7}
    # runlane's own event queue hears the fact too (it is bound to the key) and drops it: the
    # listener ran once and the event is recorded once (not again as `runlane://events#…`).
    runs = await until(lambda: store.list_runs(RunFilter(job="listener")))
    await running.events.wait("finished", runs[0].id)
    await until(lambda: running.launcher.events.stats.own_facts >= 1)
    await until(lambda: outbox_drained(store))
    assert len(await store.list_runs(RunFilter(job="listener"))) == 1
    assert [e.id for e in await store.list_events(key=KEY)] == ["sig-local-1"]
    assert event_facts_written(settings.database_url) == 1
    assert await depth(amqp, queue.name) == 0


async def test_an_event_taken_from_the_bus_is_not_published_again(
    store: Store,
    settings: Settings,
    listening: Listening,
    amqp: aio_pika.abc.AbstractChannel,
) -> None:
    running, queue = listening.running, listening.queue
    headers = CE | {"cloudEvents_id": "sig-9", "cloudEvents_source": "rumor-service"}
    await publish_event(
        amqp, running.bus.topology.job_events, KEY, json.dumps({"player": 9}).encode(), headers
    )
    runs = await until(lambda: store.list_runs(RunFilter(job="listener")))
    await running.events.wait("finished", runs[0].id)
    assert (await store.get_run(runs[0].id)).status is RunStatus.SUCCESS
    await until(lambda: outbox_drained(store))  # the run's own facts went out
    assert event_facts_written(settings.database_url) == 0
    # The subscriber has the external event itself, once, and nothing runlane added.
    message = await get_one(amqp, queue.name)
    await message.ack()
    assert dict(message.headers or {})["cloudEvents_source"] == "rumor-service"
    assert await depth(amqp, queue.name) == 0
    assert [e.id for e in await store.list_events(key=KEY)] == ["rumor-service#sig-9"]
