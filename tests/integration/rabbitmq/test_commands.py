"""Run commands on the real RabbitMQ: the relay publishes the outbox, launchers consume
`job_runs` and start each run once, a poison command reaches `job_runs.dlq` with the reason,
an external command is accepted through the one accept path, a relay that dies between the
confirm and the commit re-sends (the duplicate is absorbed), expired commands dead-letter."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import aio_pika
import pytest

from runlane.adapters.rabbitmq import REASON_HEADER, RabbitBus
from runlane.catalog import Catalog
from runlane.core.runs import RunStatus, Trigger
from runlane.ports import RunFilter, Store
from runlane.service.accept import RunRequest, accept_run
from runlane.service.launcher.bus_loops import OutboxRelay

from .conftest import BusLauncher, depth, get_one, outbox_drained, publish_json, until

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("broker_shared")]


async def accept(store: Store, catalog: Catalog, job: str, **kw: object) -> str:
    request = RunRequest(job=job, trigger=Trigger.CLI, **kw)  # type: ignore[arg-type]
    return (await accept_run(store, catalog, request)).run.id


async def test_a_run_goes_out_through_the_relay_and_its_command_is_settled(
    store: Store,
    catalog: Catalog,
    start_launcher: Callable[..., BusLauncher],
    amqp: aio_pika.abc.AbstractChannel,
) -> None:
    running = start_launcher()
    run_id = await accept(store, catalog, "hello", params={"week": 3})
    await running.events.wait("finished", run_id)
    assert (await store.get_run(run_id)).status is RunStatus.SUCCESS
    relay = running.launcher.relay
    await until(lambda: relay.stats.published >= 1)
    await until(lambda: outbox_drained(store))
    topology = running.bus.topology
    # The command was consumed and acked (after the claim): nothing waits, nothing dead.
    await until(lambda: running.launcher.commands.stats.acked >= 1)
    assert await depth(amqp, topology.job_runs) == 0
    assert await depth(amqp, topology.job_runs_dlq) == 0


async def test_a_poison_command_reaches_the_dead_letter_queue_with_its_reason(
    store: Store,
    catalog: Catalog,
    start_launcher: Callable[..., BusLauncher],
    amqp: aio_pika.abc.AbstractChannel,
) -> None:
    running = start_launcher()
    topology = running.bus.topology
    await running.bus.open()
    await publish_json(amqp, topology.job_runs, b"{not json", message_id="bad-1")
    await publish_json(amqp, topology.job_runs, {"run_id": str(uuid.uuid4()), "job": "no-such-job"})
    await publish_json(
        amqp,
        topology.job_runs,
        {"run_id": str(uuid.uuid4()), "job": "hello", "params": {"week": "soon"}},
    )
    reasons = []
    for _ in range(3):
        message = await get_one(amqp, topology.job_runs_dlq)
        reasons.append(str((message.headers or {})[REASON_HEADER]))
        await message.ack()
    assert reasons[0].startswith("not JSON")
    assert reasons[1].startswith("unknown_job")
    assert reasons[2].startswith("param_invalid")
    assert await store.list_runs(RunFilter()) == []  # nothing was accepted


async def test_an_external_command_is_accepted_once_through_the_accept_path(
    store: Store,
    catalog: Catalog,
    start_launcher: Callable[..., BusLauncher],
    amqp: aio_pika.abc.AbstractChannel,
) -> None:
    running = start_launcher()
    await running.bus.open()
    command = {
        "run_id": str(uuid.uuid4()),
        "job": "hello",
        "params": {"week": 9},
        "requested_by": "billing-service",
        "dedupe_key": "billing@2026-12-02",
    }
    for _ in range(2):  # a duplicate publish: the dedupe key absorbs it
        await publish_json(amqp, running.bus.topology.job_runs, command)
    runs = await until(lambda: store.list_runs(RunFilter(job="hello")))
    await running.events.wait("finished", runs[0].id)
    await until(lambda: running.launcher.commands.stats.accepted >= 2)
    runs = await store.list_runs(RunFilter(job="hello"))
    assert len(runs) == 1
    run = runs[0]
    assert run.status is RunStatus.SUCCESS
    assert run.params == {"week": 9}
    assert run.requested_by == "billing-service"
    assert run.dedupe_key == "billing@2026-12-02"


async def test_two_launchers_start_every_run_once(
    store: Store,
    catalog: Catalog,
    start_launcher: Callable[..., BusLauncher],
    tmp_path: Path,
) -> None:
    first, second = start_launcher(), start_launcher()
    ids = [await accept(store, catalog, "counted") for _ in range(20)]
    for run_id in ids:
        await until(
            lambda run_id=run_id: (tmp_path / run_id).exists() and store.get_run(run_id),
            within=60,
        )
    finished = await until(lambda: _all_final(store, ids), within=60)
    assert finished
    assert all((tmp_path / run_id).read_text() == "x" for run_id in ids)  # each ran once
    # Every outbox row went out (20 commands and the runs' facts), by one relay or the other.
    # The count is read once the outbox is drained: runs also start from the database queue,
    # so they can finish before the relay has confirmed their commands, and a relay counts a
    # batch only after its commit returns.
    await until(lambda: outbox_drained(store))
    relays = (first.launcher.relay, second.launcher.relay)
    assert await until(lambda: sum(r.stats.published for r in relays) >= 20)


async def _all_final(store: Store, ids: list[str]) -> bool:
    for run_id in ids:
        if not (await store.get_run(run_id)).status.is_final:
            return False
    return True


class RelayKilled(Exception):
    """The relay process dies after the broker confirmed, before the rows are marked sent."""


async def test_a_relay_killed_between_confirm_and_commit_resends_and_the_duplicate_is_absorbed(
    store: Store,
    catalog: Catalog,
    make_bus: Callable[..., RabbitBus],
    start_launcher: Callable[..., BusLauncher],
    tmp_path: Path,
    amqp: aio_pika.abc.AbstractChannel,
) -> None:
    run_id = await accept(store, catalog, "counted")
    dying_bus = make_bus(store)
    await dying_bus.open()

    async def die(confirmed: list[str]) -> None:
        raise RelayKilled(confirmed)

    dying = OutboxRelay(store, dying_bus, "relay-dying", lease_seconds=0.5, after_confirm=die)
    with pytest.raises(RelayKilled):
        await dying.relay_once()
    assert await store.outbox_pending() == 1  # confirmed, never marked sent
    assert await depth(amqp, dying_bus.topology.job_runs) == 1
    await dying_bus.close()
    running = start_launcher()  # its relay takes the row over once the lease lapses
    await running.events.wait("finished", run_id)
    await until(lambda: running.launcher.relay.stats.published >= 1)
    await until(lambda: outbox_drained(store))
    await until(
        lambda: running.launcher.commands.stats.acked + running.launcher.commands.stats.dropped >= 2
    )
    assert (tmp_path / run_id).read_text() == "x"  # two commands, one execution
    assert len(await store.list_runs(RunFilter(job="counted"))) == 1


async def test_a_command_past_its_ttl_is_dead_lettered(
    store: Store,
    catalog: Catalog,
    make_bus: Callable[..., RabbitBus],
    amqp: aio_pika.abc.AbstractChannel,
) -> None:
    bus = make_bus(store, command_ttl_seconds=0.2)  # no launcher consumes
    await bus.open()
    await accept(store, catalog, "hello")
    relay = OutboxRelay(store, bus, "relay-a")
    assert await relay.relay_once() == (1, False)
    message = await get_one(amqp, bus.topology.job_runs_dlq)
    body = json.loads(message.body)
    assert body["job"] == "hello"
    death = (message.headers or {}).get("x-death")
    assert isinstance(death, list)
    assert death[0]["reason"] == "expired"
    await message.ack()
