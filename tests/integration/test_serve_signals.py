"""`runlane serve` takes SIGTERM from its first moment: a signal while it is still starting
(here: its broker does not answer the AMQP handshake, so opening the bus takes the connect
timeout) stops it cleanly with exit 0 and nothing claimed, instead of killing it with the
signal's default action (exit -15, which the chaos suite once saw in CI)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runlane.core.runs import RunStatus, Trigger
from runlane.ports import RunFilter
from runlane.service.accept import RunRequest, accept_run
from runlane.service.wiring import store_from_url
from runlane.testing.chaos import handles_signal

CATALOG = f"""
version: 1
defaults: {{executor: inline, overlap: allow, max_attempts: 1, deadline: 1m}}
jobs:
  hello:
    command: [{sys.executable}, -c, "print('hello')"]
"""


class SilentBroker:
    """A port that accepts TCP connections and never says a word: an AMQP client's handshake
    waits there for its connect timeout. `connected` is set once a client came."""

    def __init__(self) -> None:
        self.connected = asyncio.Event()
        self.writers: list[asyncio.StreamWriter] = []

    async def _client(self, _: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        self.connected.set()


@pytest.fixture
async def silent_broker() -> AsyncIterator[tuple[SilentBroker, int]]:
    broker = SilentBroker()
    server = await asyncio.start_server(broker._client, "127.0.0.1", 0)
    try:
        yield broker, server.sockets[0].getsockname()[1]
    finally:
        for writer in broker.writers:
            writer.close()
        server.close()


async def test_sigterm_while_the_broker_is_opened_stops_serve_cleanly(
    tmp_path: Path, silent_broker: tuple[SilentBroker, int]
) -> None:
    broker, port = silent_broker
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    url = f"sqlite:///{tmp_path / 'runlane.db'}"
    env = dict(
        os.environ,
        RUNLANE_DATABASE_URL=url,
        RUNLANE_CATALOG=str(tmp_path / "catalog.yaml"),
        RUNLANE_LOG_DIR=str(tmp_path / "logs"),
        RUNLANE_HTTP_ADDR="off",
        RUNLANE_BUS="rabbitmq",
        RUNLANE_RABBITMQ_URL=f"amqp://guest:guest@127.0.0.1:{port}/",
    )
    upgrade = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "runlane", "db", "upgrade", env=env
    )
    assert await upgrade.wait() == 0
    store = store_from_url(url)
    await store.open()
    try:
        from runlane.catalog import load_catalog

        catalog = load_catalog(tmp_path / "catalog.yaml")
        queued = await accept_run(store, catalog, RunRequest(job="hello", trigger=Trigger.CLI))
        log = tmp_path / "serve.log"
        with log.open("wb") as out:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "runlane", "serve", env=env, stdout=out, stderr=out
            )
        try:
            # It is opening the bus: its connection waits in the broker's handshake.
            async with asyncio.timeout(30):
                await broker.connected.wait()
            assert proc.returncode is None, log.read_text()
            assert handles_signal(
                proc.pid, signal.SIGTERM
            )  # the handler is there before the bus is open
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(20):
                code = await proc.wait()
            assert code == 0, log.read_text()
            assert "launcher.stopped_before_start" in log.read_text()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        # Nothing was claimed: the run waits for the next launcher, untouched.
        (run,) = await store.list_runs(RunFilter())
        assert run.id == queued.run.id
        assert run.status is RunStatus.QUEUED
        assert await store.launchers() == []
    finally:
        await store.close()
