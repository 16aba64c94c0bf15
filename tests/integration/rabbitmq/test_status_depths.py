"""`runlane status` shows the broker's run-command queues as a live launcher's heartbeat last
recorded them (the CLI never talks to the broker): a dead-lettered command shows in
`job_runs.dlq`, in the JSON and in the text; on the database bus there is nothing to show."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import aio_pika
import pytest

from runlane.ports import Store
from runlane.service.config import Settings
from tests.support.cli import cli

from .conftest import BusLauncher, get_one, publish_json, until

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("broker_shared")]


async def status(settings: Settings, *args: str) -> tuple[int, str, str]:
    env = dict(os.environ)
    env.update(
        RUNLANE_DATABASE_URL=settings.database_url,
        RUNLANE_CATALOG=settings.catalog_path,
        RUNLANE_LOG_LEVEL="warning",
        RUNLANE_BUS="database",  # the CLI reads the heartbeat, not the broker
    )
    return await cli(env, "status", *args)


async def recorded(store: Store, launcher_id: str) -> Any:
    beats = {h.launcher_id: h for h in await store.launchers()}
    return beats.get(launcher_id)


async def test_status_shows_the_dead_letter_depth_the_heartbeat_recorded(
    store: Store,
    settings: Settings,
    start_launcher: Callable[..., BusLauncher],
    amqp: aio_pika.abc.AbstractChannel,
) -> None:
    running = start_launcher()
    topology = running.bus.topology
    launcher_id = running.launcher.settings.launcher_id
    # A beat with both queues empty first: the depths are recorded as 0, not left out.
    hb = await until(
        lambda: _with_depths(store, launcher_id, lambda h: h.bus_dlq_depth == 0), within=30
    )
    assert hb.bus_queue_depth == 0
    # A poison command is dead-lettered by the consumer: the next beats record it.
    await publish_json(amqp, topology.job_runs, b"{not json", message_id="poison-1")
    await until(lambda: _with_depths(store, launcher_id, lambda h: h.bus_dlq_depth == 1), within=30)
    code, out, _ = await status(settings, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["bus_queues"] == {
        "job_runs": 0,
        "job_runs_dlq": 1,
        "launcher_id": launcher_id,
        "seen_seconds": data["bus_queues"]["seen_seconds"],
    }
    assert isinstance(data["bus_queues"]["seen_seconds"], float)
    (mine,) = [entry for entry in data["launchers"] if entry["launcher_id"] == launcher_id]
    assert (mine["bus_queue_depth"], mine["bus_dlq_depth"]) == (0, 1)
    code, text, _ = await status(settings)
    assert code == 0
    assert "bus: job_runs 0 ready, job_runs.dlq 1 (read by launcher" in text
    # Drained by a person: the next beats say so.
    message = await get_one(amqp, topology.job_runs_dlq)
    await message.ack()
    await until(lambda: _with_depths(store, launcher_id, lambda h: h.bus_dlq_depth == 0), within=30)


async def _with_depths(store: Store, launcher_id: str, check: Callable[[Any], bool]) -> Any:
    hb = await recorded(store, launcher_id)
    return hb if hb is not None and hb.bus_dlq_depth is not None and check(hb) else None
