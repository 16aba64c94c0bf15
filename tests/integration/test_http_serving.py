"""The HTTP server (`runlane.api.server`) in this process with the real app, on SQLite and
PostgreSQL: the probes, a run's log as text and followed as server-sent events (a real launcher
runs the job), a reconnect with Last-Event-ID in the middle, and the address errors."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from runlane.api import auth
from runlane.api.app import create_app
from runlane.api.problems import install_problem_handlers
from runlane.api.routes import health
from runlane.api.server import ListenError, bind_socket, serve_http
from runlane.core.access import Access, Role
from runlane.core.runs import Trigger
from runlane.errors import RunlaneError
from runlane.ports import Store
from runlane.service.accept import RunRequest, accept_run
from runlane.service.config import Settings
from runlane.service.operations import Requester
from tests.support.waiting import eventually

from .conftest import Running

PY = sys.executable

# Output with a multi-byte character in it: offsets count bytes, not characters.
CATALOG = f"""
version: 1
global: {{max_deadline: 1h, manual_queue_ttl: 5m, kill_grace: 1s}}
defaults: {{executor: inline, overlap: allow, max_attempts: 1, deadline: 1m}}
jobs:
  halves:
    command: [{PY}, -c, "import os, time, pathlib\\nfor i in range(3): print('first', i, 'é', flush=True)\\ngate = pathlib.Path(os.environ['RUNLANE_PARAM_GATE'])\\nwhile not gate.exists(): time.sleep(0.02)\\nfor i in range(3): print('second', i, flush=True)\\nprint('no newline', end='', flush=True)"]
    params: {{gate: str}}
  flaky:
    command: [{PY}, -c, "import os, sys; print('attempt', os.environ['RUNLANE_ATTEMPT']); sys.exit(1 if os.environ['RUNLANE_ATTEMPT'] == '1' else 0)"]
    max_attempts: 2
"""


@pytest.fixture
def catalog_file(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG)
    return path


@dataclass
class Served:
    client: httpx.AsyncClient
    app: Any
    stop: asyncio.Event
    task: asyncio.Task[None]


def app_for(settings: Settings) -> Any:
    """The real app, with a viewer's access for every request (tokens are tested with auth)."""
    app = create_app(settings)
    if RunlaneError not in app.exception_handlers:
        install_problem_handlers(app)
    app.dependency_overrides[auth.viewer] = lambda: Requester(
        "reader", Trigger.MANUAL, access=Access(Role.VIEWER)
    )
    return app


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[Served]:
    """`app` served over real HTTP on a free loopback port; stopped (bounded) at the end."""
    sock = bind_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    stop, started = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        serve_http(app, "127.0.0.1", port, stop=stop, started=started, sock=sock)
    )
    async with asyncio.timeout(10):
        await started.wait()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=20) as client:
            yield Served(client, app, stop, task)
    finally:
        stop.set()
        async with asyncio.timeout(15):
            await task


@pytest.fixture
async def served(settings: Settings, store: Store) -> AsyncIterator[Served]:
    async with serving(app_for(settings)) as s:
        yield s


def parse_events(text: str) -> list[dict[str, str]]:
    """Server-sent events as dicts (`event`, `id`, `data` with its lines joined); comments and
    the `retry` field left out."""
    events = []
    for block in text.split("\n\n"):
        event: dict[str, str] = {}
        data: list[str] = []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            field, _, value = line.partition(": ")
            if field == "data":
                data.append(value)
            elif field in ("event", "id"):
                event[field] = value
        if data:
            event["data"] = "\n".join(data)
            events.append(event)
    return events


def output_of(events: list[dict[str, str]]) -> str:
    return "".join(e["data"] + "\n" for e in events if "event" not in e)


async def queue_run(store: Store, settings: Settings, job: str, **params: Any) -> str:
    from runlane.catalog import load_catalog

    catalog = load_catalog(settings.catalog_path)
    accepted = await accept_run(
        store, catalog, RunRequest(job=job, params=params, trigger=Trigger.CLI)
    )
    return accepted.run.id


async def test_probes(served: Served) -> None:
    live = await served.client.get("/healthz")
    assert (live.status_code, live.json()) == (200, {"status": "ok"})
    ready = await served.client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"
    assert ready.json()["schema_version"] >= 5


async def test_readyz_says_why_not(
    served: Served, monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> None:
    runtime = served.app.state.runtime
    monkeypatch.setattr(health, "READY_CHECK_SECONDS", 0.2)

    async def hangs() -> int:
        await asyncio.sleep(30)
        return 0

    monkeypatch.setattr(runtime.store, "schema_version", hangs)
    slow = await served.client.get("/readyz")
    assert slow.status_code == 503
    assert slow.headers["content-type"].startswith("application/problem+json")
    assert slow.json()["code"] == "database_unavailable"
    assert "0.2s" in slow.json()["detail"]

    async def old() -> int:
        return 1

    async def refuse_old() -> None:
        from runlane.errors import SchemaOutOfDate

        raise SchemaOutOfDate("the database schema is at version 1; run `runlane db upgrade`")

    monkeypatch.setattr(runtime.store, "schema_version", old)
    monkeypatch.setattr(runtime.store, "ensure_current", refuse_old)
    stale = await served.client.get("/readyz")
    assert (stale.status_code, stale.json()["code"]) == (503, "schema_out_of_date")
    assert (await served.client.get("/healthz")).status_code == 200  # liveness stays up


async def test_readyz_on_a_database_without_the_schema(tmp_path: Path, settings: Settings) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    async with serving(app_for(replace(settings, database_url=f"sqlite:///{empty}"))) as s:
        answer = await s.client.get("/readyz")
    assert (answer.status_code, answer.json()["code"]) == (503, "schema_out_of_date")


async def test_plain_log_and_tail(
    served: Served, store: Store, settings: Settings, start_launcher: Any, tmp_path: Path
) -> None:
    gate = tmp_path / "open"
    gate.touch()
    run_id = await queue_run(store, settings, "halves", gate=str(gate))
    running: Running = start_launcher()
    await running.events.wait("finished", run_id)
    whole = await served.client.get(f"/api/v1/runs/{run_id}/logs")
    assert whole.status_code == 200
    assert whole.headers["content-type"].startswith("text/plain")
    log_file = Path(settings.log_dir) / f"{run_id}.1.log"
    assert whole.content == log_file.read_bytes()
    assert whole.text.startswith("first 0 é\n")
    tail = await served.client.get(f"/api/v1/runs/{run_id}/logs", params={"tail": 2})
    assert tail.text == "second 2\nno newline"
    by_prefix = await served.client.get(f"/api/v1/runs/{run_id[:8]}/logs", params={"tail": 1})
    assert by_prefix.text == "no newline"


async def test_log_errors(served: Served) -> None:
    unknown = await served.client.get("/api/v1/runs/00000000-0000-0000-0000-000000000000/logs")
    assert unknown.status_code == 404
    assert unknown.json()["code"] == "unknown_run"
    assert unknown.headers["content-type"].startswith("application/problem+json")
    followed = await served.client.get(
        "/api/v1/runs/00000000-0000-0000-0000-000000000000/logs", params={"follow": "true"}
    )
    assert (followed.status_code, followed.json()["code"]) == (404, "unknown_run")
    bad_tail = await served.client.get("/api/v1/runs/abcdefgh/logs", params={"tail": 0})
    assert (bad_tail.status_code, bad_tail.json()["code"]) == (422, "invalid_argument")
    bad_id = await served.client.get(
        "/api/v1/runs/abcdefgh/logs",
        params={"follow": "true"},
        headers={"Last-Event-ID": "twelve"},
    )
    assert (bad_id.status_code, bad_id.json()["code"]) == (400, "malformed_request")


async def read_until(
    client: httpx.AsyncClient, url: str, stop_at: str, headers: dict[str, str] | None = None
) -> tuple[str, httpx.Response]:
    """The raw stream up to (and including) the first event whose data contains `stop_at`;
    the connection is then dropped, as a client that goes away does."""
    text = ""
    async with client.stream("GET", url, params={"follow": "true"}, headers=headers) as answer:
        async for chunk in answer.aiter_text():
            text += chunk
            if stop_at in text and text.endswith("\n\n"):
                break
    return text, answer


async def test_follow_reconnect_in_the_middle_loses_and_repeats_nothing(
    served: Served, store: Store, settings: Settings, start_launcher: Any, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    run_id = await queue_run(store, settings, "halves", gate=str(gate))
    start_launcher()
    url = f"/api/v1/runs/{run_id}/logs"
    first_text, first = await read_until(served.client, url, "first 2")
    assert first.headers["content-type"].startswith("text/event-stream")
    assert first.headers["cache-control"] == "no-cache"
    assert first.headers["x-accel-buffering"] == "no"
    events = parse_events(first_text)
    assert output_of(events) == "".join(f"first {i} é\n" for i in range(3))
    last_id = events[-1]["id"]
    assert int(last_id) == len("".join(f"first {i} é\n" for i in range(3)).encode())

    gate.touch()  # the run goes on while no client is connected
    rest_text, _ = await read_until(
        served.client, url, '"status":"success"', headers={"Last-Event-ID": last_id}
    )
    rest = parse_events(rest_text)
    assert rest[-1]["event"] == "end"
    assert json.loads(rest[-1]["data"])["status"] == "success"
    data = [e for e in rest if "event" not in e]
    assert output_of(data) == "".join(f"second {i}\n" for i in range(3)) + "no newline\n"
    log_bytes = (Path(settings.log_dir) / f"{run_id}.1.log").read_bytes()
    assert int(data[-1]["id"]) == len(log_bytes)  # the last line, without its newline, too

    # From the start, after the end: the whole log, then `end`, then the stream closes.
    async with served.client.stream("GET", url, params={"follow": "true"}) as whole:
        everything = parse_events((await whole.aread()).decode())
    assert output_of(everything).encode() == log_bytes + b"\n"
    assert [e.get("event") for e in everything][-1] == "end"
    # Resuming at the very end: only `end`.
    at_end, _ = await read_until(
        served.client, url, '"status"', headers={"Last-Event-ID": str(len(log_bytes))}
    )
    assert [e.get("event") for e in parse_events(at_end)] == ["end"]


async def test_follow_through_a_retry(
    served: Served, store: Store, settings: Settings, start_launcher: Any
) -> None:
    run_id = await queue_run(store, settings, "flaky")
    start_launcher()
    text, _ = await read_until(served.client, f"/api/v1/runs/{run_id}/logs", '"status":"success"')
    # (A `no_launcher` notice may come first: the request can beat the launcher's first
    # heartbeat.)
    events = [e for e in parse_events(text) if e.get("event") != "notice"]
    kinds = [e.get("event", "data") for e in events]
    assert kinds == ["data", "retry", "data", "end"], events
    assert events[0]["data"] == "attempt 1"
    assert json.loads(events[1]["data"])["ended"]["status"] == "failure"
    assert events[2]["data"] == "attempt 2"
    assert int(events[2]["id"]) == len(b"attempt 1\nattempt 2\n")


async def until_keepalives(
    client: httpx.AsyncClient, run_id: str, count: int = 2
) -> tuple[str, httpx.Response]:
    """A run's followed log up to its `count`th keep-alive (bounded: 5 s)."""
    text = ""
    async with (
        asyncio.timeout(5),
        client.stream("GET", f"/api/v1/runs/{run_id}/logs", params={"follow": "true"}) as answer,
    ):
        async for chunk in answer.aiter_text():
            text += chunk
            if text.count(": keep-alive") >= count:
                break
    return text, answer


async def test_follow_keeps_quiet_streams_alive(
    served: Served, store: Store, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runlane.api.routes import logs

    monkeypatch.setattr(logs, "KEEPALIVE_SECONDS", 0.05)
    run_id = await queue_run(store, settings, "flaky")  # queued: no launcher runs it
    text, _ = await until_keepalives(served.client, run_id)
    notices = [e for e in parse_events(text) if e.get("event") == "notice"]
    assert notices
    assert json.loads(notices[0]["data"])["code"] == "no_launcher"


async def test_an_address_in_use_is_one_line() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        with pytest.raises(ListenError) as caught:
            bind_socket("127.0.0.1", port)
        assert caught.value.message == (
            f"cannot listen on 127.0.0.1:{port}: address already in use "
            "(RUNLANE_HTTP_ADDR / --http-addr)"
        )
    finally:
        taken.close()
    with pytest.raises(ListenError, match=r"cannot listen on no-such-host\.invalid:80"):
        bind_socket("no-such-host.invalid", 80)


async def test_stop_shuts_down_with_a_stream_open(
    store: Store, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A followed log of a run that does not end does not hold a stopping server: the stream
    ends at once (the client would resume elsewhere with Last-Event-ID), well inside the
    server's grace for requests in flight."""
    from runlane.api import server

    monkeypatch.setattr(server, "SHUTDOWN_GRACE_SECONDS", 30)
    run_id = await queue_run(store, settings, "flaky")  # queued: no launcher runs it
    async with (
        serving(app_for(settings)) as s,
        s.client.stream("GET", f"/api/v1/runs/{run_id}/logs", params={"follow": "true"}) as answer,
    ):
        chunks = answer.aiter_text()
        async for chunk in chunks:
            if "no_launcher" in chunk:
                break
        began = time.monotonic()
        s.stop.set()
        async with asyncio.timeout(10):
            rest = "".join([chunk async for chunk in chunks])  # to its close
            await asyncio.shield(s.task)
        assert time.monotonic() - began < 5  # not the 30 s grace
        assert "event: end" not in rest  # the run has not ended: the client resumes later


async def test_the_log_needs_a_token_and_the_probes_do_not(
    settings: Settings, store: Store, tmp_path: Path, start_launcher: Any
) -> None:
    from runlane.service import operations

    app = create_app(settings)  # the real auth: no override
    async with serving(app) as s:
        gate = tmp_path / "open"
        gate.touch()
        run_id = await queue_run(store, settings, "halves", gate=str(gate))
        running: Running = start_launcher()
        await running.events.wait("finished", run_id)
        url = f"/api/v1/runs/{run_id}/logs"
        anonymous = await s.client.get(url)
        assert (anonymous.status_code, anonymous.json()["code"]) == (401, "unauthenticated")
        assert anonymous.headers["www-authenticate"].startswith("Bearer")
        assert (await s.client.get("/healthz")).status_code == 200
        assert (await s.client.get("/readyz")).status_code == 200
        made = await operations.create_token(
            app.state.runtime, "reader", role=Role.VIEWER, requester=Requester(None, Trigger.CLI)
        )
        bearer = {"Authorization": f"Bearer {made.secret}"}
        answer = await s.client.get(url, headers=bearer, params={"tail": 1})
        assert (answer.status_code, answer.text) == (200, "no newline")
        async with s.client.stream("GET", url, headers=bearer, params={"follow": "true"}) as sse:
            events = parse_events((await sse.aread()).decode())
        assert events[-1]["event"] == "end"


async def test_a_character_split_between_two_reads_comes_out_whole(
    served: Served, store: Store, settings: Settings
) -> None:
    """The log is read as it grows: a multi-byte character whose bytes land in two reads is
    decoded whole (not as two replacement characters), and the offsets stay the file's."""
    run_id = await queue_run(store, settings, "flaky")  # queued: its log is written here
    log_file = Path(settings.log_dir) / f"{run_id}.1.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.write_bytes(b"line one\nfirst \xc3")  # the first byte of "\xc3\xa9" (e-acute)
    text = ""
    async with served.client.stream(
        "GET", f"/api/v1/runs/{run_id}/logs", params={"follow": "true"}
    ) as answer:
        chunks = answer.aiter_text()
        async for chunk in chunks:
            text += chunk
            if "data: line one" in text:  # the server has read the first part
                break
        with log_file.open("ab") as fh:
            fh.write(b"\xa9 done\n")
        async for chunk in chunks:
            text += chunk
            if "done" in text and text.endswith("\n\n"):
                break
    data = [e for e in parse_events(text) if "event" not in e]
    assert [e["data"] for e in data] == ["line one", "first é done"]
    assert int(data[-1]["id"]) == len(log_file.read_bytes())


def spec_events(raw: str) -> tuple[list[dict[str, str]], str | None]:
    """Server-sent events as a browser's EventSource parses them (lines end at CRLF, a lone CR
    or LF; a blank line dispatches), and the last event id it would resume from."""
    events: list[dict[str, str]] = []
    data: list[str] = []
    name, last_id = "message", None
    for line in re.split(r"\r\n|\r|\n", raw):
        if line == "":
            if data:
                events.append({"event": name, "data": "\n".join(data)})
            data, name = [], "message"
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
        elif field == "id":
            last_id = value
    return events, last_id


async def test_carriage_returns_in_the_output_cannot_forge_events(
    served: Served, store: Store, settings: Settings
) -> None:
    """SSE ends a line at a lone CR too: output with CRs stays data (no forged `end` or id),
    and a progress line rewritten with CR shows every state."""
    run_id = await queue_run(store, settings, "flaky")  # queued: its log is written here
    log_file = Path(settings.log_dir) / f"{run_id}.1.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    forged = 'pwned\r\revent: end\rdata: {"status":"success"}\rid: 999999\r\r\n'
    log_file.write_bytes((forged + "progress 10%\rprogress 100%\r\n").encode())
    text, _ = await read_until(served.client, f"/api/v1/runs/{run_id}/logs", "progress 100%")
    events, last_id = spec_events(text)
    assert [e["event"] for e in events if e["event"] != "notice"] == ["message"]
    (data,) = [e["data"] for e in events if e["event"] == "message"]
    assert data == (
        'pwned\n\nevent: end\ndata: {"status":"success"}\nid: 999999\n\nprogress 10%\nprogress 100%'
    )
    assert last_id == str(len(log_file.read_bytes()))


async def test_a_quiet_run_is_streamed_at_once(
    served: Served, store: Store, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A followed run that has printed nothing (and has nothing to say) gets its status, its
    headers and keep-alives at once, not silence until its first line (a proxy cuts that)."""
    from runlane.api.routes import logs
    from runlane.service.operations import logs as output

    monkeypatch.setattr(logs, "KEEPALIVE_SECONDS", 0.05)

    async def no_notices(_rt: Any) -> list[Any]:
        return []  # a launcher is up, say: the queued run waits in silence

    monkeypatch.setattr(output, "no_launcher_notices", no_notices)
    run_id = await queue_run(store, settings, "flaky")  # queued: no launcher runs it
    text, answer = await until_keepalives(served.client, run_id)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert parse_events(text) == []


async def token_app(settings: Settings) -> tuple[Any, Any]:
    """The real app (real auth) and a function making viewer tokens for it."""
    from runlane.service import operations

    app = create_app(settings)

    async def token(name: str) -> dict[str, str]:
        made = await operations.create_token(
            app.state.runtime, name, role=Role.VIEWER, requester=Requester(None, Trigger.CLI)
        )
        return {"Authorization": f"Bearer {made.secret}"}

    return app, token


async def test_a_revoked_token_ends_its_open_stream(
    settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream's token is checked again at its keep-alives: revoked, the stream ends with an
    `error` event `unauthenticated` (and no `end`), rather than outlive the revocation."""
    from runlane.api.routes import logs
    from runlane.service import operations

    monkeypatch.setattr(logs, "KEEPALIVE_SECONDS", 0.05)
    app, token = await token_app(settings)
    run_id = await queue_run(store, settings, "flaky")  # queued: it does not end
    async with serving(app) as s:
        bearer = await token("watcher")
        text = ""
        async with (
            asyncio.timeout(10),
            s.client.stream(
                "GET", f"/api/v1/runs/{run_id}/logs", headers=bearer, params={"follow": "true"}
            ) as answer,
        ):
            chunks = answer.aiter_text()
            async for chunk in chunks:
                text += chunk
                if ": keep-alive" in text:  # checked again already, and still good
                    break
            await operations.revoke_token(
                app.state.runtime, "watcher", requester=Requester(None, Trigger.CLI)
            )
            text += "".join([chunk async for chunk in chunks])  # to its close
    events = parse_events(text)
    assert [e.get("event") for e in events][-1] == "error"
    assert json.loads(events[-1]["data"])["code"] == "unauthenticated"
    assert "event: end" not in text


async def test_streams_per_requester_are_capped(
    settings: Settings, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A requester may follow MAX_STREAMS_PER_REQUESTER logs at once (20); one more is a 429
    `too_many_streams` problem, another requester is not held by it, and a closed stream's
    slot is free again."""
    from runlane.api.routes import logs

    assert logs.MAX_STREAMS_PER_REQUESTER == 20
    monkeypatch.setattr(logs, "MAX_STREAMS_PER_REQUESTER", 2)
    monkeypatch.setattr(logs, "KEEPALIVE_SECONDS", 0.05)
    app, token = await token_app(settings)
    run_id = await queue_run(store, settings, "flaky")  # queued: its streams stay open
    url = f"/api/v1/runs/{run_id}/logs"
    follow = {"follow": "true"}
    async with serving(app) as s, contextlib.AsyncExitStack() as held:
        ana, bo = await token("ana"), await token("bo")
        for _ in range(2):
            opened = await held.enter_async_context(
                s.client.stream("GET", url, headers=ana, params=follow)
            )
            assert opened.status_code == 200
        refused = await s.client.get(url, headers=ana, params=follow)
        assert (refused.status_code, refused.json()["code"]) == (429, "too_many_streams")
        assert refused.headers["content-type"].startswith("application/problem+json")
        # Not a stream: not counted.
        assert (await s.client.get(url, headers=ana)).status_code == 200
        async with s.client.stream("GET", url, headers=bo, params=follow) as other:
            assert other.status_code == 200
        await held.aclose()  # ana's streams close

        async def slot_free() -> bool:
            async with s.client.stream("GET", url, headers=ana, params=follow) as again:
                return again.status_code == 200

        await eventually(slot_free, "a closed stream's slot is given back")
