"""The API's limits and headers, as pure ASGI middleware (Starlette's BaseHTTPMiddleware
buffers responses and breaks server-sent events): a bound on the request body, a per-request
timeout, and the security headers every response carries.

Each refuses with a problem (`runlane.api.problems`) before the app has answered, and lets a
response that has started pass untouched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import structlog

from runlane.api.headers import SECURITY_HEADERS
from runlane.api.problems import PROBLEM_MEDIA_TYPE, problem_bytes
from runlane.catalog.params import MAX_PARAMS_BYTES
from runlane.errors import PayloadTooLarge

log = structlog.get_logger("runlane.api")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# The params a run may carry are limited to 1 MiB as compact JSON (the accept path checks it);
# a body may be that plus room for its envelope (`{"params": ..., "confirm": ...}`, whitespace),
# so params at their limit can be sent and params past it are refused by the accept path.
MAX_BODY_BYTES = MAX_PARAMS_BYTES + 64 * 1024

RAW_SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = tuple(
    (name.lower().encode(), value.encode()) for name, value in SECURITY_HEADERS
)


async def send_problem(
    send: Send, status: int, code: str, detail: str, *, instance: str | None = None
) -> None:
    body = problem_bytes(status, code, detail, instance=instance)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class _Tracked:
    """`send` that remembers whether the response has started (after which no problem can be
    sent in its place)."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        await self.send(message)


class BodyLimit:
    """Refuse a body over `limit` bytes with 413 `payload_too_large`: at once when its
    Content-Length says so, or as soon as the streamed body passes it (a chunked upload)."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        detail = f"the request body is larger than {self.limit} bytes"
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await send_problem(
                        send, 400, "malformed_request", "Content-Length is not a number"
                    )
                    return
                if declared > self.limit:
                    await send_problem(
                        send, 413, "payload_too_large", detail, instance=scope.get("path")
                    )
                    return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    # Raised into the app, whose handlers render it (FastAPI wraps an error
                    # of reading the body in a 400 whose cause it is: see problems.py).
                    raise PayloadTooLarge(detail)
            return message

        tracked = _Tracked(send)
        try:
            await self.app(scope, limited, tracked)
        except PayloadTooLarge:
            if not tracked.started:
                await send_problem(
                    send, 413, "payload_too_large", detail, instance=scope.get("path")
                )


EVENT_STREAM = b"text/event-stream"


def is_event_stream(message: Message) -> bool:
    """Whether a response's start says it is a stream of server-sent events (a run's log
    followed to its end): such a response lasts as long as the run, past any request timeout."""
    return any(
        name.lower() == b"content-type" and value.split(b";")[0].strip().lower() == EVENT_STREAM
        for name, value in message.get("headers", ())
    )


# The key of a response's start message by which a route says its body is long and streamed
# as it is read (a run's log file whole): the request's bound then applies to each piece of the
# body, not to the whole. Taken out of the message before it goes on to the server.
STREAMED_BODY = "runlane.streamed_body"


def mark_streamed_body(message: Message) -> Message:
    """`message`, a response's start, saying that its body is streamed (`STREAMED_BODY`)."""
    return {**message, STREAMED_BODY: True}


class RequestTimeout:
    """Bound each request to `seconds`: past it, 503 `request_timeout` (the work is cancelled;
    a write that had committed stays written, which an Idempotency-Key makes safe to retry).

    A response that starts as server-sent events is exempt from then on: the route decided to
    stream (after it had checked the request and found the run, inside the bound). A response
    that starts marked `STREAMED_BODY` (a log file downloaded whole, which may take longer
    than the bound) is bounded piece by piece from then on: each part of its body must come,
    and be sent, within `seconds` of the one before, or the response is cut there, without
    its last message (a chunked body then lacks its last chunk: the client sees it is
    incomplete). What the request says (its path, its `follow`, its Accept) decides nothing
    here, so no other request can spell its way out of the bound."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.seconds <= 0:
            await self.app(scope, receive, send)
            return
        tracked = _Tracked(send)
        loop = asyncio.get_running_loop()
        piece_by_piece = False
        try:
            async with asyncio.timeout(self.seconds) as bound:

                async def exempting(message: Message) -> None:
                    nonlocal piece_by_piece
                    if message["type"] == "http.response.start":
                        if is_event_stream(message):
                            bound.reschedule(None)
                        elif message.get(STREAMED_BODY):
                            message = {k: v for k, v in message.items() if k != STREAMED_BODY}
                            piece_by_piece = True
                    if piece_by_piece:
                        bound.reschedule(loop.time() + self.seconds)
                    await tracked(message)

                await self.app(scope, receive, exempting)
        except TimeoutError:
            if piece_by_piece:
                log.info("http.stream_stalled", path=scope.get("path"), seconds=self.seconds)
            if not tracked.started:
                await send_problem(
                    send,
                    503,
                    "request_timeout",
                    f"the request took longer than {self.seconds:g} s",
                    instance=scope.get("path"),
                )


class SecurityHeaders:
    """The headers every response carries: no sniffing, no framing, no referrer, no content
    the page did not bring; `Cache-Control: no-store` on the API (its answers are live state
    and may be secrets, such as a new token)."""

    def __init__(self, app: ASGIApp, api_prefix: str = "/api/") -> None:
        self.app = app
        self.api_prefix = api_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        no_store = scope.get("path", "").startswith(self.api_prefix)

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                present = {name.lower() for name, _ in headers}
                headers.extend(h for h in RAW_SECURITY_HEADERS if h[0] not in present)
                if no_store and b"cache-control" not in present:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


# Level 1, not 6: on a runs page (36 KB of HTML) it costs 0.10 ms instead of 0.25 ms, and the
# pages are repetitive table rows that level 1 still shrinks about sevenfold (docs/ui.md).
PAGE_GZIP_LEVEL = 1


class PageGzip:
    """Gzip the web UI's pages and static files for browsers that accept it (a jobs page of a
    big catalog shrinks about tenfold); never the API (its clients are programs, and its hot
    paths should not spend CPU on it) and never server-sent events (Starlette's gzip leaves
    `text/event-stream` alone, and a stream must not wait for a compressor's buffer)."""

    def __init__(self, app: ASGIApp, api_prefix: str = "/api/", minimum_size: int = 1000) -> None:
        from starlette.middleware.gzip import GZipMiddleware

        self.app = app
        self.api_prefix = api_prefix
        self.gzip = GZipMiddleware(app, minimum_size=minimum_size, compresslevel=PAGE_GZIP_LEVEL)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path", "").startswith(self.api_prefix):
            await self.app(scope, receive, send)
            return
        await self.gzip(scope, receive, send)
