"""KubeApi's HTTP connections: a stack of kept-alive connections, one per request on the wire.

httpcore2's own pool keeps every request in one queue and, on every hand-over (a request
added, a response closed), walks all the queued requests and all the connections, probing the
idle ones' sockets: at a few dozen requests in flight that walk was most of the launcher's CPU
in a burst of pod starts. KubeApi already bounds the requests on the wire and queues the rest
itself, so the pool has nothing to schedule: a request takes the most recently returned idle
connection (or opens one), sends on it, and gives it back when its response is closed.

- A connection is reused only if it is connected and idle (its last response read to the end)
  and not expired (keep-alive time passed, or the server closed it: one socket probe, on the
  connection taken). Any error or cancellation while a request is sent, and any response closed
  before its end, closes the connection instead.
- At most `max_idle` connections wait on the stack; one returned beyond that is closed, and so
  are those at its bottom idle for longer than the keep-alive expiry.
- Nothing bounds the connections in use: KubeApi bounds plain requests (`max_in_flight`), and
  watches and followed logs must never wait for a connection.
- HTTP/1.1 only, one request per connection at a time. The connections are httpcore2's own
  (`AsyncHTTPConnection` on its anyio backend), given the SSL context the client was configured
  with; the client above (httpx) still applies lightkube's auth, headers and timeouts.
"""

from __future__ import annotations

import ssl
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from contextlib import contextmanager

import anyio
import httpcore2
import httpx2 as httpx

_Key = tuple[bytes, bytes, int]  # an origin: scheme, host, port

# httpcore2's errors as httpx2 raises them (what httpx2's own transport does), most specific
# first in each class's MRO.
_ERRORS: dict[type[Exception], type[httpx.HTTPError]] = {
    httpcore2.ConnectTimeout: httpx.ConnectTimeout,
    httpcore2.ReadTimeout: httpx.ReadTimeout,
    httpcore2.WriteTimeout: httpx.WriteTimeout,
    httpcore2.PoolTimeout: httpx.PoolTimeout,
    httpcore2.TimeoutException: httpx.TimeoutException,
    httpcore2.ConnectError: httpx.ConnectError,
    httpcore2.ReadError: httpx.ReadError,
    httpcore2.WriteError: httpx.WriteError,
    httpcore2.NetworkError: httpx.NetworkError,
    httpcore2.ProxyError: httpx.ProxyError,
    httpcore2.UnsupportedProtocol: httpx.UnsupportedProtocol,
    httpcore2.LocalProtocolError: httpx.LocalProtocolError,
    httpcore2.RemoteProtocolError: httpx.RemoteProtocolError,
    httpcore2.ProtocolError: httpx.ProtocolError,
}


@contextmanager
def _as_httpx_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for cls in type(exc).__mro__:
            mapped = _ERRORS.get(cls)
            if mapped is not None:
                raise mapped(str(exc)) from exc
        raise


class StackPool(httpx.AsyncBaseTransport):
    """An httpx2 transport over httpcore2 connections kept on a LIFO stack per origin."""

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None,
        max_idle: int,
        keepalive_expiry: float | None = 5.0,
        network_backend: httpcore2.AsyncNetworkBackend | None = None,
    ) -> None:
        self._ssl_context = ssl_context
        self.max_idle = max(0, max_idle)
        self._keepalive_expiry = keepalive_expiry
        self._backend = network_backend
        # Per origin: (returned at, connection), the most recently returned on the right.
        self._idle: dict[_Key, deque[tuple[float, httpcore2.AsyncHTTPConnection]]] = {}
        self._in_use: set[httpcore2.AsyncHTTPConnection] = set()
        self._closed = False
        self.opened = 0  # connections opened, ever (tests and benchmarks read it)

    def idle_count(self) -> int:
        return sum(len(stack) for stack in self._idle.values())

    def in_use_count(self) -> int:
        return len(self._in_use)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.raw_scheme not in (b"http", b"https"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme in {url}", request=request)
        core_request = httpcore2.Request(
            method=request.method,
            url=httpcore2.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        origin = core_request.url.origin
        key = (origin.scheme, origin.host, origin.port)
        with _as_httpx_errors():
            while True:
                conn, reused = await self._take(key, origin)
                try:
                    response = await conn.handle_async_request(core_request)
                except httpcore2.ConnectionNotAvailable:
                    # Not idle after all (it cannot happen to a connection taken from the
                    # stack; kept for safety): drop it and send on another.
                    await self._discard(conn)
                    if reused:
                        continue
                    raise
                except BaseException:
                    # An error or a cancellation mid-request: the connection's state is not
                    # known to be clean, so it is never reused.
                    await self._discard(conn)
                    raise
                break
        assert isinstance(response.stream, AsyncIterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_PooledStream(response.stream, self, conn, key),
            extensions=response.extensions,
        )

    async def _take(
        self, key: _Key, origin: httpcore2.Origin
    ) -> tuple[httpcore2.AsyncHTTPConnection, bool]:
        stack = self._idle.get(key)
        while stack:
            _, conn = stack.pop()
            if conn.is_connected() and conn.is_idle() and not conn.has_expired():
                self._in_use.add(conn)
                return conn, True
            await self._close(conn)
        conn = httpcore2.AsyncHTTPConnection(
            origin=origin,
            ssl_context=self._ssl_context,
            keepalive_expiry=self._keepalive_expiry,
            network_backend=self._backend,
        )
        self.opened += 1
        self._in_use.add(conn)
        return conn, False

    async def _give_back(self, conn: httpcore2.AsyncHTTPConnection, key: _Key) -> None:
        """A response was closed: its connection goes on the stack if it can take another
        request, else it is closed."""
        self._in_use.discard(conn)
        if self._closed or not (conn.is_connected() and conn.is_idle()):
            await self._close(conn)
            return
        now = time.monotonic()
        stack = self._idle.setdefault(key, deque())
        expiry = self._keepalive_expiry
        while stack and expiry is not None and now - stack[0][0] > expiry:
            await self._close(stack.popleft()[1])  # unused for longer than a kept-alive lasts
        if len(stack) >= self.max_idle:
            await self._close(conn)
            return
        stack.append((now, conn))

    async def _discard(self, conn: httpcore2.AsyncHTTPConnection) -> None:
        self._in_use.discard(conn)
        await self._close(conn)

    @staticmethod
    async def _close(conn: httpcore2.AsyncHTTPConnection) -> None:
        if conn.is_closed():
            return
        with anyio.CancelScope(shield=True):
            await conn.aclose()

    async def aclose(self) -> None:
        self._closed = True
        closing = [conn for stack in self._idle.values() for _, conn in stack]
        closing.extend(self._in_use)
        self._idle.clear()
        self._in_use.clear()
        for conn in closing:
            await self._close(conn)


class _PooledStream(httpx.AsyncByteStream):
    """A response body; closing it gives its connection back to the pool (once)."""

    def __init__(
        self,
        stream: AsyncIterable[bytes],
        pool: StackPool,
        conn: httpcore2.AsyncHTTPConnection,
        key: _Key,
    ) -> None:
        self._stream = stream
        self._pool = pool
        self._conn: httpcore2.AsyncHTTPConnection | None = conn
        self._key = key

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _as_httpx_errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                # httpcore2's stream: the connection goes idle if the body was read to its
                # end, and is closed otherwise.
                closer = getattr(self._stream, "aclose", None)
                if closer is not None:
                    with _as_httpx_errors():
                        await closer()
            finally:
                await self._pool._give_back(conn, self._key)
