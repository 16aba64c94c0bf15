"""A broker outage (`rabbitmqctl stop_app` / `start_app`, the VM staying up): runs still start
from the database, the outbox backlog grows while the broker is down and drains after, with
every row published and every run started once. Holds the broker lock exclusively: the other
RabbitMQ tests (other workers) wait while the broker is down."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runlane.catalog import Catalog
from runlane.core.runs import RunStatus, Trigger
from runlane.ports import Store
from runlane.service.accept import RunRequest, accept_run
from tests.support.rabbitmq import broker_lock, can_control_broker, rabbitmqctl

from .conftest import BusLauncher, outbox_drained, until

pytestmark = pytest.mark.postgres


@pytest.fixture
def broker_exclusive() -> Iterator[None]:
    if not can_control_broker():
        pytest.skip("stopping the broker needs rabbitmqctl as root on the broker's host")
    with broker_lock(exclusive=True):
        try:
            yield
        finally:
            rabbitmqctl("start_app")  # whatever happened, the broker is back for the others


@pytest.mark.timeout(180)
async def test_runs_start_from_the_database_while_the_broker_is_down_and_the_outbox_drains(
    broker_exclusive: None,
    store: Store,
    catalog: Catalog,
    start_launcher: Callable[..., BusLauncher],
    tmp_path: Path,
) -> None:
    running = start_launcher()
    await running.bus.open()
    before = (await accept_run(store, catalog, RunRequest(job="counted", trigger=Trigger.CLI))).run
    await running.events.wait("finished", before.id)
    rabbitmqctl("stop_app")
    during = [
        (await accept_run(store, catalog, RunRequest(job="counted", trigger=Trigger.CLI))).run.id
        for _ in range(5)
    ]
    for run_id in during:  # the claim loop does not need the bus
        await running.events.wait("finished", run_id, within=60)
    # The backlog waits for the broker: 5 commands, and the facts of the runs' changes.
    assert await store.outbox_pending() >= 5
    rabbitmqctl("start_app")
    await until(lambda: outbox_drained(store), within=90)
    for run_id in [before.id, *during]:
        assert (await store.get_run(run_id)).status is RunStatus.SUCCESS
        assert (tmp_path / run_id).read_text() == "x"  # once each, redelivered or not
