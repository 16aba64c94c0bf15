"""A broker that completes the AMQP handshake and then stops answering (an outage, a partition:
the TCP connection stays up, no frame comes back): connecting is bounded as a whole, channel and
declares included, so the dead-letter depth the alert rules read (and every other bus call)
gives up within `CONNECT_TIMEOUT` instead of waiting on the channel's open without end.

Between the bus and the real broker sits a proxy that passes every frame until the broker's
Connection.OpenOk, then swallows what the broker sends."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import pytest

from runlane.adapters.rabbitmq import RabbitBus, Topology
from runlane.adapters.rabbitmq import bus as bus_module

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("broker_shared")]

CONNECTION_OPEN_OK = struct.pack(">HH", 10, 41)  # class connection, method open-ok


class StallingProxy:
    """Forwards the client's bytes to the broker, and the broker's frames back up to and
    including Connection.OpenOk; nothing from the broker after that."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.stalled = False
        self.tasks: list[asyncio.Task[None]] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        broker_r, broker_w = await asyncio.open_connection(*self.upstream)
        self.writers += [client_w, broker_w]
        self.tasks.append(asyncio.create_task(self._to_broker(client_r, broker_w)))
        self.tasks.append(asyncio.create_task(self._to_client(broker_r, client_w)))

    async def _to_broker(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()

    async def _to_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        buffer = b""
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                if self.stalled:
                    continue
                buffer += data
                while len(buffer) >= 7 and not self.stalled:
                    kind, _channel, size = struct.unpack(">BHI", buffer[:7])
                    if len(buffer) < size + 8:
                        break
                    frame, buffer = buffer[: size + 8], buffer[size + 8 :]
                    writer.write(frame)
                    await writer.drain()
                    self.stalled = kind == 1 and frame[7:11] == CONNECTION_OPEN_OK

    async def aclose(self) -> None:
        for task in self.tasks:
            task.cancel()
        for writer in self.writers:
            writer.close()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


@pytest.fixture
async def stalling_url(amqp_url: str) -> AsyncIterator[tuple[str, StallingProxy]]:
    parts = urlsplit(amqp_url)
    proxy = StallingProxy(parts.hostname or "127.0.0.1", parts.port or 5672)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@127.0.0.1:{port}" if userinfo else f"127.0.0.1:{port}"
    yield urlunsplit(parts._replace(netloc=netloc)), proxy
    server.close()
    await proxy.aclose()


async def test_a_broker_silent_after_the_handshake_does_not_hold_the_depth_read(
    stalling_url: tuple[str, StallingProxy], prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bus_module, "CONNECT_TIMEOUT", 1.0)
    monkeypatch.setattr(bus_module, "CLOSE_TIMEOUT", 0.2)
    url, proxy = stalling_url
    bus = RabbitBus(url, topology=Topology(prefix=prefix))
    started = time.monotonic()
    try:
        async with asyncio.timeout(2.5):
            assert await bus.depths() is None  # down: the dlq_depth rule keeps its state
    finally:
        await bus.close()
    assert time.monotonic() - started < 2.0
    assert proxy.stalled  # the handshake went through; the channel's open got no answer
    assert bus.last_error == "TimeoutError"
