"""A loopback TCP proxy a test can cut, silence and restore: a database outage without touching
the server."""

from __future__ import annotations

import asyncio
import contextlib


class TcpProxy:
    """Forwards 127.0.0.1:<port> to a target. `cut()` drops every connection and refuses new
    ones; `restore()` listens again on the same port. `black_hole()` stops forwarding but keeps
    every socket open and accepts new connections without answering them (a partition that
    drops packets, a frozen server): a client sees no error, only silence. `forward()` resumes
    forwarding, and what was held back is delivered, as a healed network would."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._forwarding = asyncio.Event()
        self._forwarding.set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    def black_hole(self) -> None:
        self._forwarding.clear()

    def forward(self) -> None:
        self._forwarding.set()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                await self._forwarding.wait()
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        await self._forwarding.wait()  # silent: accepted, never answered
        if writer.is_closing():  # cut meanwhile
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers.add(up_writer)
        for t in (self._pipe(reader, up_writer), self._pipe(up_reader, writer)):
            task = asyncio.create_task(t)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def cut(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()
        if server is not None:
            await server.wait_closed()

    async def restore(self) -> None:
        await self.start()

    async def close(self) -> None:
        self._forwarding.set()  # nothing left waiting on it
        await self.cut()
        for task in list(self._tasks):
            task.cancel()
