"""Facts on `job_events`: a subscriber bound to `run.<job>.success` sees the run's end as a
CloudEvent in binary mode, written to the outbox by the run's own state change."""

from __future__ import annotations

import json
from collections.abc import Callable

import aio_pika
import pytest

from runlane.catalog import Catalog
from runlane.core.runs import Trigger
from runlane.ports import Store
from runlane.service.accept import RunRequest, accept_run

from .conftest import BusLauncher, get_one

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("broker_shared")]


async def test_a_subscriber_sees_run_success_as_a_cloudevent(
    store: Store,
    catalog: Catalog,
    start_launcher: Callable[..., BusLauncher],
    amqp: aio_pika.abc.AbstractChannel,
    prefix: str,
) -> None:
    running = start_launcher()
    await running.bus.open()
    queue = await amqp.declare_queue(f"{prefix}subscriber", exclusive=True)
    await queue.bind(running.bus.topology.job_events, "run.hello.*")
    await store.set_bus_facts(True)  # as the launcher's relay does when it starts
    run = (await accept_run(store, catalog, RunRequest(job="hello", trigger=Trigger.CLI))).run
    await running.events.wait("finished", run.id)
    seen: list[tuple[str, dict[str, object]]] = []
    while not seen or seen[-1][0] != "run.hello.success":
        message = await get_one(amqp, queue.name)
        headers = dict(message.headers or {})
        seen.append((message.routing_key or "", headers))
        await message.ack()
        if message.routing_key == "run.hello.success":
            body = json.loads(message.body)
    assert [key for key, _ in seen] == [
        "run.hello.queued",
        "run.hello.running",
        "run.hello.success",
    ]
    headers = seen[-1][1]
    assert headers["cloudEvents_specversion"] == "1.0"
    assert headers["cloudEvents_type"] == "runlane.run.success"
    assert headers["cloudEvents_subject"] == run.id
    assert headers["cloudEvents_id"] == f"{run.id}:success"
    assert str(headers["cloudEvents_source"]).startswith("runlane://")
    assert body["run_id"] == run.id
    assert body["status"] == "success"
    assert body["exit_code"] == 0
