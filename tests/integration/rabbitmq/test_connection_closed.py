"""Connections closed mid-stream (`rabbitmqctl close_connection`): while the relay publishes a
backlog and the consumer takes commands, the broker closes the launcher's connection, twice.
Every run finishes exactly once, every outbox row is published, and the launcher reconnects by
itself. Only this test's launcher connection (named by its `connection_name`) is closed, so the
other RabbitMQ tests are not touched and the broker lock is held shared."""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import aio_pika
import pytest

from runlane.adapters.rabbitmq import RabbitBus
from runlane.catalog import Catalog
from runlane.core.runs import Run, RunStatus, Trigger
from runlane.ports import RunFilter, Store
from runlane.service.accept import RunRequest, accept_run
from tests.support.rabbitmq import can_control_broker, rabbitmqctl

from .conftest import BusLauncher, outbox_drained, publish_json, until

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("broker_shared")]

RUNS = 40


def close_connections_named(name: str) -> int:
    """Close every broker connection whose client-provided name is `name`; how many."""
    listed = rabbitmqctl(
        "-q", "--no-table-headers", "list_connections", "pid", "client_properties"
    ).stdout
    mark = json.dumps(["connection_name", name])[1:-1].replace(", ", ",")
    closed = 0
    for line in listed.splitlines():
        pid, _, props = line.partition("\t")
        if "{" + mark + "}" in props:
            rabbitmqctl("close_connection", pid, "runlane test: closed mid-stream")
            closed += 1
    return closed


@pytest.fixture
async def named(
    store: Store,
    make_bus: Callable[..., RabbitBus],
    start_launcher: Callable[..., BusLauncher],
) -> tuple[BusLauncher, str]:
    """A launcher on the bus, connected, its connection named uniquely; and that name."""
    if not can_control_broker():
        pytest.skip("closing a connection needs rabbitmqctl as root on the broker's host")
    name = f"runlane test-{secrets.token_hex(4)}"
    bus = make_bus(store)
    bus.connection_name = name
    running = start_launcher(bus=bus)
    await running.bus.open()
    return running, name


@pytest.mark.timeout(120)
async def test_runs_finish_once_and_the_outbox_drains_across_closed_connections(
    store: Store,
    catalog: Catalog,
    named: tuple[BusLauncher, str],
    tmp_path: Path,
) -> None:
    running, name = named
    launcher = await until(lambda: hasattr(running.launcher, "commands") and running.launcher)
    relay, consumer = launcher.relay, launcher.commands
    runs: list[str] = []
    for cut in range(2):
        for _ in range(RUNS // 2):
            request = RunRequest(job="counted", trigger=Trigger.CLI)
            runs.append((await accept_run(store, catalog, request)).run.id)
        # Mid-stream: connected (again), the relay under way on a backlog of four rows a run
        # (its command and its facts), the consumer taking commands and the runs running.
        await until(lambda cut=cut: relay.stats.published > 0 and running.bus.connects == cut + 1)
        assert close_connections_named(name) >= 1
    for run_id in runs:
        await running.events.wait("finished", run_id, within=60)
    await until(lambda: outbox_drained(store), within=60)
    assert running.bus.connects >= 3  # reconnected by itself after each close
    await until(lambda: consumer.held == 0, within=40)  # no delivery left waiting
    for run_id in runs:
        assert (await store.get_run(run_id)).status is RunStatus.SUCCESS
        assert (tmp_path / run_id).read_text() == "x"  # executed exactly once


@pytest.mark.timeout(60)
async def test_a_quiet_launcher_reconnects_and_hears_commands_after_its_connection_closed(
    store: Store,
    named: tuple[BusLauncher, str],
    amqp: aio_pika.abc.AbstractChannel,
) -> None:
    """Nothing to publish, so no failed publish reveals the closed connection: the consumer
    itself must notice (a plain aio-pika connection closed by the broker still says
    `is_closed` False) and consume again."""
    running, name = named
    bus = running.bus
    for n in range(2):  # consuming (and all published), then the connection closed: again
        command = {"run_id": str(uuid.uuid4()), "job": "hello", "trigger": "manual"}
        await publish_json(amqp, bus.topology.job_runs, command)
        runs = await until(
            lambda n=n: _at_least(store.list_runs(RunFilter(job="hello")), n + 1), within=30
        )
        await running.events.wait("finished", runs[0].id)
        await until(lambda: outbox_drained(store))  # quiet: nothing left to publish
        if n == 0:
            assert close_connections_named(name) == 1
    assert bus.connects == 2


async def _at_least(runs: Awaitable[list[Run]], n: int) -> list[Run] | None:
    found = await runs
    return found if len(found) >= n else None
