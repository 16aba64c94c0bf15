"""A run's log over HTTP: `GET /api/v1/runs/{id}/logs`, whole (or its last lines) as text, or
followed as server-sent events until the run (and its retries) end.

Where the log is and when the run has ended are the operations layer's (`run_output`,
`follow_run`); this module only frames it. A followed stream counts bytes: the run's output (its
attempts one after another, an incomplete log's marker and saved tail included; a log file's
own bytes, so a byte that is not UTF-8 counts one, as in the file a resume seeks in), and each `data` event's `id` is the offset just after it. A client that reconnects
with `Last-Event-ID: <offset>` gets exactly the rest: the operations layer reads the log from its
start again and the bytes before the offset are skipped, so nothing is lost or repeated (when
the run's own log file holds the offset, it is read from there, not from its start). `?after=`
says the same for the first request of an EventSource, which cannot set the header: the web UI
follows a run from the end of the tail its page shows. `?tail=N` reads the log from its end
(`run_output_tail`), at most MAX_TAIL_BYTES, and says which bytes it is in headers. Without
either, the log is streamed as the operations layer reads it, piece by piece (`LogDownload`):
a log file may be as large as log_max_bytes, and is never held whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Annotated, Any

import structlog
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import PlainTextResponse, StreamingResponse

from runlane.api.auth import ProxyAuth, Viewer, bearer_secret
from runlane.api.deps import RuntimeDep
from runlane.api.middleware import mark_streamed_body
from runlane.api.problems import PROBLEM_MEDIA_TYPE, problem_responses
from runlane.core.runs import Trigger
from runlane.errors import InvalidArgument, MalformedRequest, RunlaneError, TooManyStreams
from runlane.service import operations
from runlane.service.operations import (
    LogIncomplete,
    Notice,
    OutputBytes,
    OutputItem,
    OutputSkipped,
    OutputText,
    Retrying,
    RunEnded,
    run_output,
    run_output_tail,
)
from runlane.service.runtime import Runtime
from runlane.service.views import run_dict
from runlane.web.session import session_cookie

router = APIRouter(tags=["runs"])
log = structlog.get_logger("runlane.api")

# A comment this often keeps idle proxies (nginx: 60 s by default) from closing a quiet stream;
# a stream's token is checked again as often (a revoked or expired token ends it).
KEEPALIVE_SECONDS = 15.0
# Followed logs one requester may have open at once: each polls the database while it lasts.
MAX_STREAMS_PER_REQUESTER = 20
MAX_TAIL_LINES = 100_000
# The most of a log `?tail=N` answers with (the lines before are left out).
MAX_TAIL_BYTES = 8 * 1024 * 1024
# Where the text of `?tail=N` is in the log: its first byte's offset and the offset after it.
TAIL_HEADERS = {
    "Log-Start-Offset": "The byte offset of the first byte of the text in the log (as many "
    "bytes before it are left out).",
    "Log-End-Offset": "The byte offset just after the text: `after` for a follow that goes on "
    "from there.",
}
SSE_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # nginx (and ingress-nginx) pass each event on at once
}


def _last_event_id(value: str | None, after: int | None = None) -> int:
    """The byte offset a reconnecting client already has: its Last-Event-ID, else `after`
    (the first request's), else 0. A reconnecting EventSource sends both, and the header is
    the later."""
    if value is None or value.strip() == "":
        return after or 0
    text = value.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 18:  # (`"²".isdigit()`)
        raise MalformedRequest(
            f"Last-Event-ID {value[:40]!r}: expected the byte offset of an earlier event"
        )
    return int(text)


def _plain_text(item: OutputItem) -> bytes:
    if isinstance(item, OutputBytes):
        return item.data
    if isinstance(item, OutputText):
        return item.text.encode()
    if isinstance(item, LogIncomplete):
        return _incomplete_text(item).encode()
    return b""  # a notice (no output yet, none at all): the body is empty


def _incomplete_text(item: LogIncomplete) -> str:
    """An incomplete log's marker on its own line, then the tail saved with the run."""
    text = ("\n" if item.line_open else "") + item.marker + "\n"
    if item.tail:
        text += item.tail if item.tail.endswith("\n") else item.tail + "\n"
    return text


@router.get(
    "/api/v1/runs/{run_id}/logs",
    summary="A run's log: as text, or followed as server-sent events",
    response_class=PlainTextResponse,
    responses={
        **problem_responses(400, 403, 404),
        429: {
            "description": f"With `follow=true`: the requester has {MAX_STREAMS_PER_REQUESTER} "
            "followed logs open already; without `follow` or `tail`, as many logs downloading "
            "(`too_many_streams`)",
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        },
        200: {
            "content": {
                "text/plain": {"schema": {"type": "string"}},
                "text/event-stream": {"schema": {"type": "string"}},
            },
            "description": "The log as text; with `follow=true`, a stream of events: `data` "
            "(lines of output; `id` is the byte offset after them), `notice`, `retry`, and "
            "`end` (the run's final status) last.",
            "headers": {
                name: {"description": f"With `tail`: {text}", "schema": {"type": "integer"}}
                for name, text in TAIL_HEADERS.items()
            },
        },
    },
)
async def run_logs(
    run_id: str,
    request: Request,
    rt: RuntimeDep,
    _reader: Viewer,
    follow: Annotated[
        bool, Query(description="Stream as server-sent events to the run's end.")
    ] = False,
    tail: Annotated[
        int | None,
        Query(
            description=f"Only the last N lines (1..{MAX_TAIL_LINES}), at most "
            f"{MAX_TAIL_BYTES} bytes of them, read from the log's end; without `follow`."
        ),
    ] = None,
    after: Annotated[
        int | None,
        Query(
            ge=0,
            le=10**18 - 1,
            description="With `follow`: the byte offset to start after (a tail's "
            "`Log-End-Offset`), for a client that cannot send `Last-Event-ID` on its first "
            "request (an EventSource); `Last-Event-ID`, when sent, wins.",
        ),
    ] = None,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            description="With `follow`: the `id` of the last event received (a byte offset); "
            "the stream resumes just after it.",
        ),
    ] = None,
) -> Any:
    """The run's log (by id or unique prefix of 6+ characters): the log file as text, or with
    `follow=true` server-sent events to the end of the run and its retries (docs/serving.md).
    `unknown_run` 404, `ambiguous_id` 422, a `Last-Event-ID` that is not a byte offset
    `malformed_request` 400, a requester's 21st open stream `too_many_streams` 429."""
    if tail is not None and not 1 <= tail <= MAX_TAIL_LINES:
        raise InvalidArgument(f"tail {tail}: expected a number of lines from 1 to {MAX_TAIL_LINES}")
    if follow:
        if tail is not None:
            raise InvalidArgument("tail: not with follow=true (resume with Last-Event-ID)")
        offset = _last_event_id(last_event_id, after)
        # The run is found (404, 422) before the stream starts; from then on the answer is the
        # stream, sent at once: headers, then keep-alives while the run is queued or quiet.
        run = await operations.resolve_run(rt, run_id)
        holder, recheck = _stream_owner(request, rt, _reader)
        slots = _slots(request)
        slots.take(holder)
        return _EventStream(
            _events(
                run_output(rt, run.id, follow=True, start=offset),
                offset,
                getattr(request.app.state, "http_stopping", None),
                recheck=recheck,
            ),
            release=lambda: slots.give(holder),
        )
    if after is not None:
        raise InvalidArgument("after: only with follow=true")
    if tail is not None:
        end = await run_output_tail(rt, run_id, lines=tail, max_bytes=MAX_TAIL_BYTES, strict=True)
        text = end.text + (_incomplete_text(end.incomplete) if end.incomplete else "")
        return PlainTextResponse(
            text,
            media_type="text/plain; charset=utf-8",
            headers={
                "Log-Start-Offset": str(end.start_offset),
                "Log-End-Offset": str(end.end_offset),
            },
        )
    # A download takes one of the requester's download slots while it lasts (as a followed log
    # takes a stream slot): a slow reader holds its file and a task, so one token cannot hold
    # many.
    holder, _ = _stream_owner(request, rt, _reader)
    slots = _slots(request, "downloads")
    slots.take(holder)
    items = run_output(rt, run_id)
    try:
        # The run is found and its log opened (404, 422; a pod run's `not_found`) before the
        # answer starts: from then on it is the log, streamed as it is read.
        first = await anext(items, None)
    except BaseException:
        slots.give(holder)
        raise
    return LogDownload(_plain_pieces(first, items), release=lambda: slots.give(holder))


async def _plain_pieces(
    first: OutputItem | None, items: AsyncIterator[OutputItem]
) -> AsyncGenerator[bytes, None]:
    try:
        if first is not None and (piece := _plain_text(first)):
            yield piece
        async for item in items:
            if piece := _plain_text(item):
                yield piece
    finally:
        if isinstance(items, AsyncGenerator):
            await items.aclose()  # the log file is closed, however the answer ends


class LogDownload(StreamingResponse):
    """A run's log as text, streamed piece by piece as it is read (chunked: its length is not
    known before its end). It starts marked `STREAMED_BODY`, so the request's timeout bounds
    each piece, not the whole: a big log takes as long as it takes to send, a stalled one is
    cut (middleware.RequestTimeout)."""

    def __init__(
        self, content: AsyncGenerator[bytes, None], *, release: Callable[[], None]
    ) -> None:
        super().__init__(content, media_type="text/plain; charset=utf-8")
        self._pieces = content
        self._release = release  # the requester's download slot, given back once, at the end

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def marked(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = mark_streamed_body(message)
            await send(message)

        try:
            await super().__call__(scope, receive, marked)
        finally:
            self._release()
            await self._pieces.aclose()


class _StreamSlots:
    """The followed logs (or, a second count, the logs downloaded whole) each requester has
    open (the app's; one server process), so that one token cannot hold the database with a
    poll per stream, or files and tasks with slow downloads, without end."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.open: dict[str, int] = {}

    def take(self, holder: str) -> None:
        if self.open.get(holder, 0) >= MAX_STREAMS_PER_REQUESTER:
            raise TooManyStreams(
                f"{MAX_STREAMS_PER_REQUESTER} {self.what} are open for this requester "
                "already: close one (or let one end) and try again"
            )
        self.open[holder] = self.open.get(holder, 0) + 1

    def give(self, holder: str) -> None:
        left = self.open.get(holder, 0) - 1
        if left > 0:
            self.open[holder] = left
        else:
            self.open.pop(holder, None)


def _slots(request: Request, kind: str = "streams") -> _StreamSlots:
    """The app's slots of `kind`: `streams` (followed logs) or `downloads` (logs read whole)."""
    name = f"log_{kind}"
    slots: _StreamSlots | None = getattr(request.app.state, name, None)
    if slots is None:
        slots = _StreamSlots("followed logs" if kind == "streams" else "log downloads")
        setattr(request.app.state, name, slots)
    return slots


def _stream_owner(
    request: Request, rt: Runtime, reader: operations.Requester
) -> tuple[str, Callable[[], Awaitable[None]] | None]:
    """Whose the stream is (proxy users and tokens apart: they may share a name), and how its
    credentials are checked again while it lasts: the bearer token through `authenticate`, a
    web UI session cookie through `session_requester` (revoked, expired, logged out: the
    stream ends); a trusted proxy's user needs no check (the proxy vouched for the request,
    and has no token to revoke)."""
    proxy: ProxyAuth = request.app.state.proxy_auth
    peer = request.client.host if request.client else None
    if proxy.trusts(peer) and request.headers.get(proxy.user_header) is not None:
        return f"proxy:{reader.name}", None
    secret = bearer_secret(request)
    cookie = session_cookie(request)
    if secret is None and cookie and getattr(request.state, "requester_kind", None) == "session":
        # The web UI's live log: its session is checked as a token is (logged out, or its
        # token revoked: the stream ends). A session is its token's: they share the slots.

        async def recheck_session() -> None:
            await operations.sessions.session_requester(rt, cookie)

        return f"token:{reader.name}", recheck_session
    if secret is None:  # no token: the app's auth was replaced (a test's, an embedding's)
        return f"token:{reader.name}", None

    async def recheck() -> None:
        await operations.authenticate(rt, secret, trigger=Trigger.MANUAL)

    return f"token:{reader.name}", recheck


class _EventStream(StreamingResponse):
    """Server-sent events that give their requester's slot back when the response ends, however
    it ends (the run's end, the client gone, the server stopping)."""

    def __init__(self, content: AsyncIterator[bytes], *, release: Callable[[], None]) -> None:
        super().__init__(content, media_type="text/event-stream", headers=SSE_HEADERS)
        self._release = release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


# Where SSE ends a line: CRLF, a lone CR or LF. Each piece of the data goes out as its own
# `data:` line, so a job's carriage return cannot end the field and start one of its own (a forged
# `event: end` or `id:`).
_SSE_LINE_END = re.compile(r"\r\n|\r|\n")


def _event(name: str | None, data: str, event_id: int | None = None) -> bytes:
    lines = [f"event: {name}"] if name else []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines += [f"data: {line}" for line in _SSE_LINE_END.split(data)]
    return ("\n".join(lines) + "\n\n").encode()


def _json(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


class _Framer:
    """Turns the run's output into `data` events of whole lines, skipping the first `skip`
    bytes (what a reconnecting client has). A line is held back until its newline comes, so
    every event ends at a line's end; what is left when the run ends goes out before `end`."""

    def __init__(self, skip: int) -> None:
        self.skip = skip
        self.position = 0  # bytes of output seen
        self.pending = b""  # bytes past `skip` not sent yet (an unfinished line)

    def feed(self, data: bytes) -> bytes:
        """`data`, the next bytes of the output: the events of the whole lines it ends."""
        start = self.position
        self.position += len(data)
        if self.position <= self.skip:
            return b""
        if start < self.skip:
            data = data[self.skip - start :]
        self.pending += data
        cut = self.pending.rfind(b"\n")
        if cut < 0:
            return b""
        whole, self.pending = self.pending[: cut + 1], self.pending[cut + 1 :]
        return self._data(whole, self.position - len(self.pending))

    def flush(self) -> bytes:
        whole, self.pending = self.pending, b""
        return self._data(whole, self.position) if whole else b""

    @staticmethod
    def _data(chunk: bytes, offset: int) -> bytes:
        text = chunk.decode("utf-8", "replace")
        return _event(None, text.removesuffix("\n").removesuffix("\r"), offset)


def _meta(item: OutputItem) -> bytes:
    """A notice, a retry or the end as its own named event (not counted in the offsets)."""
    if isinstance(item, Notice):
        return _event(
            "notice", _json({"code": item.code, "message": item.message, "level": item.level})
        )
    if isinstance(item, Retrying):
        return _event(
            "retry",
            _json(
                {
                    "ended": {"id": item.ended.id, "status": item.ended.status.value},
                    "next_run_id": item.next_run.id,
                    "attempt": item.next_run.attempt,
                }
            ),
        )
    if isinstance(item, RunEnded):
        return _event("end", _json({"status": item.run.status.value, "run": run_dict(item.run)}))
    return b""


async def _events(
    items: AsyncIterator[OutputItem],
    skip: int,
    stopping: asyncio.Event | None = None,
    *,
    recheck: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[bytes]:
    """The stream: the operations layer's items as events, a keep-alive comment after every
    KEEPALIVE_SECONDS of silence, and nothing after `end`. Items are read by a task, so a
    quiet run's stream still sends its keep-alives from its start.

    Every KEEPALIVE_SECONDS (at each keep-alive, and as often on a busy stream) `recheck`
    checks the requester's token again: once it fails (revoked, expired), the stream ends
    with an `error` event of its code (`unauthenticated`) and no `end`.

    When the server stops (`stopping`, set by `serve_http`), the stream ends at once after the
    last whole event, without `end`: the client reconnects (to another replica behind the
    Service) with its Last-Event-ID and loses nothing, rather than hold the shutdown."""
    queue: asyncio.Queue[OutputItem | BaseException | None] = asyncio.Queue(maxsize=64)

    async def read() -> None:
        try:
            async for item in items:
                await queue.put(item)
        except Exception as exc:  # noqa: BLE001 - passed on to the stream, which ends on it
            await queue.put(exc)
        else:
            await queue.put(None)

    framer = _Framer(skip)
    reader = asyncio.create_task(read())
    stop_wait = asyncio.create_task(stopping.wait()) if stopping is not None else None
    loop = asyncio.get_running_loop()
    checked = loop.time()
    try:
        yield b"retry: 2000\n\n"  # how long an EventSource waits before it reconnects
        while True:
            getter = asyncio.ensure_future(queue.get())
            waits = {getter} if stop_wait is None else {getter, stop_wait}
            await asyncio.wait(
                waits, timeout=KEEPALIVE_SECONDS, return_when=asyncio.FIRST_COMPLETED
            )
            if stop_wait is not None and stop_wait.done() and not getter.done():
                getter.cancel()
                return
            if recheck is not None and loop.time() - checked >= KEEPALIVE_SECONDS:
                checked = loop.time()
                try:
                    await recheck()
                except RunlaneError as exc:
                    getter.cancel()
                    log.info("http.log_stream_ended", code=exc.code)
                    # Nothing more of the log (not even a held-back line): only why it ends.
                    yield _event("error", _json({"code": exc.code, "message": exc.message}))
                    return
            if not getter.done():
                getter.cancel()  # nothing was taken from the queue
                yield b": keep-alive\n\n"
                continue
            item = getter.result()
            if item is None:
                return
            if isinstance(item, BaseException):
                # The stream has started (200): an error can only be said as an event.
                if isinstance(item, RunlaneError):
                    code, message = item.code, item.message
                else:
                    log.error("http.log_stream_failed", error=repr(item))
                    code, message = "internal_error", "the log could not be read"
                yield framer.flush()
                yield _event("error", _json({"code": code, "message": message}))
                return
            if isinstance(item, OutputSkipped):
                framer.position += item.size  # read from there: the client has them
                continue
            if isinstance(item, OutputText):
                # The log file's own bytes when it was read from one: the offsets (the event
                # ids, Last-Event-ID, a tail's end) are the file's, whatever its bytes decode to.
                chunk = framer.feed(item.raw if item.raw is not None else item.text.encode())
            elif isinstance(item, OutputBytes):
                chunk = framer.feed(item.data)
            elif isinstance(item, LogIncomplete):
                chunk = framer.feed(_incomplete_text(item).encode())
            else:
                if isinstance(item, (Retrying, RunEnded)):
                    chunk = framer.flush()  # the attempt's last line, whole or not
                    if chunk:
                        yield chunk
                chunk = _meta(item) if framer.position >= skip else b""
                if isinstance(item, RunEnded):
                    chunk = _meta(item)  # always: it closes the stream
            if chunk:
                yield chunk
            if isinstance(item, RunEnded):
                return
    finally:
        reader.cancel()
        if stop_wait is not None:
            stop_wait.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader
