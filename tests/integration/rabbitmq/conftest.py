"""Fixtures of the RabbitMQ bus tests: the session's vhost, a queue prefix of each test's own, a
PostgreSQL store that writes the outbox, and launchers on the RabbitMQ bus."""

from __future__ import annotations

import asyncio
import json
import secrets
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aio_pika
import pytest

from runlane.adapters.rabbitmq import RabbitBus, Topology
from runlane.catalog import Catalog, load_catalog
from runlane.ports import Store
from runlane.service.config import Settings
from runlane.service.launcher import Launcher
from runlane.service.wiring import build_executors, event_keys, store_from_url
from tests.integration.conftest import PY, Events, Running, launcher_settings
from tests.support.postgres import scratch_database, truncate_all
from tests.support.rabbitmq import broker_lock, session_vhost

pytestmark = pytest.mark.postgres

CATALOG = f"""
version: 1
global: {{max_deadline: 1h, manual_queue_ttl: 5m, kill_grace: 1s}}
defaults: {{executor: inline, overlap: allow, max_attempts: 1, deadline: 1m}}
jobs:
  hello:
    command: [{PY}, -c, "print('hello')"]
    params: {{week: int?}}
  counted:
    command: [{PY}, -c, "import os, pathlib; pathlib.Path(os.environ['RUNLANE_TEST_DIR'], os.environ['RUN_ID']).open('a').write('x')"]
  listener:
    command: [{PY}, -c, "print('heard')"]
    on_event: [{{key: rumor.signal_created}}]
"""


@pytest.fixture(scope="session")
def amqp_url() -> Iterator[str]:
    with session_vhost() as url:
        yield url


@pytest.fixture
def broker_shared() -> Iterator[None]:
    """This test uses the broker: a test that stops it waits until this one ends."""
    with broker_lock(exclusive=False):
        yield


@pytest.fixture
def prefix() -> str:
    return f"t{secrets.token_hex(4)}."


@pytest.fixture(scope="session")
def pg_bus_database() -> Iterator[str]:
    with scratch_database("runlane_bus") as url:
        yield url


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG)
    return load_catalog(path)


@pytest.fixture
def settings(
    pg_bus_database: str, tmp_path: Path, amqp_url: str, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    truncate_all(pg_bus_database)
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    monkeypatch.setenv("RUNLANE_TEST_DIR", str(tmp_path))
    return launcher_settings(
        pg_bus_database,
        tmp_path / "catalog.yaml",
        tmp_path,
        claim_interval=0.2,
        bus="rabbitmq",
        rabbitmq_url=amqp_url,
    )


@pytest.fixture
async def store(settings: Settings) -> AsyncIterator[Store]:
    s = store_from_url(settings.database_url, outbox=True)
    await s.open()
    await s.upgrade()
    yield s
    await s.close()


@pytest.fixture
async def make_bus(
    settings: Settings, prefix: str, catalog: Catalog
) -> AsyncIterator[Callable[..., RabbitBus]]:
    made: list[RabbitBus] = []

    def make(store: Store | None = None, **topology: Any) -> RabbitBus:
        bus = RabbitBus(
            settings.rabbitmq_url,
            store,
            topology=Topology(prefix=prefix, event_keys=event_keys(catalog), **topology),
            prefetch=settings.concurrency,
            reconnect_interval=0.2,
        )
        made.append(bus)
        return bus

    yield make
    for bus in made:
        await bus.close()


@dataclass
class BusLauncher:
    running: Running
    bus: RabbitBus

    @property
    def launcher(self) -> Launcher:
        return self.running.launcher

    @property
    def events(self) -> Events:
        return self.running.events


@pytest.fixture
async def start_launcher(
    store: Store, catalog: Catalog, settings: Settings, make_bus: Callable[..., RabbitBus]
) -> AsyncIterator[Callable[..., BusLauncher]]:
    started: list[BusLauncher] = []

    def start(*, bus: RabbitBus | None = None, **overrides: Any) -> BusLauncher:
        events = Events()
        s = replace(settings, launcher_id=f"test-{uuid.uuid4().hex[:6]}", **overrides)
        the_bus = bus or make_bus(store)
        launcher = Launcher(
            store=store,
            bus=the_bus,
            catalog=catalog,
            executors=build_executors(s),
            settings=s,
            hook=events,
            retry_base_seconds=0.05,
            queue_depths=the_bus.depths,  # as runtime.serve wires it on this bus
        )
        task = asyncio.create_task(launcher.run())
        r = BusLauncher(Running(launcher, task, events), the_bus)
        started.append(r)
        return r

    yield start
    for r in started:
        if not r.running.task.done():
            await r.running.stop()
        await r.bus.close()


async def until(condition: Callable[[], Any], *, within: float = 30.0, every: float = 0.05) -> Any:
    """Poll `condition` (sync or async) until it is truthy; its value. Fails after `within`."""
    async with asyncio.timeout(within):
        while True:
            value = condition()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return value
            await asyncio.sleep(every)


@pytest.fixture
async def amqp(amqp_url: str) -> AsyncIterator[aio_pika.abc.AbstractChannel]:
    """A plain channel of the test's own, with confirms, as another service would have."""
    connection = await aio_pika.connect(amqp_url, timeout=5)
    channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
    yield channel
    await connection.close()


async def publish_json(
    channel: aio_pika.abc.AbstractChannel, routing_key: str, body: Any, **kw: Any
) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    await channel.default_exchange.publish(
        aio_pika.Message(raw, content_type="application/json", **kw), routing_key, timeout=5
    )


async def depth(channel: aio_pika.abc.AbstractChannel, queue: str) -> int:
    declared = await channel.declare_queue(queue, passive=True)
    return declared.declaration_result.message_count or 0


async def get_one(
    channel: aio_pika.abc.AbstractChannel, queue: str, *, within: float = 10.0
) -> aio_pika.abc.AbstractIncomingMessage:
    q = await channel.get_queue(queue, ensure=False)
    async with asyncio.timeout(within):
        while True:
            message = await q.get(no_ack=False, fail=False)
            if message is not None:
                return message
            await asyncio.sleep(0.05)


async def outbox_drained(store: Store) -> bool:
    """Nothing waits in the outbox (commands and the facts runs write as they change)."""
    return await store.outbox_pending() == 0
