"""Trusted-proxy mode and CORS through the real server (SQLite), and the pure-ASGI limits on
their own: a request past its timeout is a 503 problem, a streamed body past the limit a 413,
a followed log is exempt from the timeout, and an answer that has started is left alone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from runlane.api.middleware import BodyLimit, RequestTimeout, SecurityHeaders

from .conftest import ApiServer, api_settings, running_api
from .test_endpoints import audit_rows, problem_of


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """The API trusting 127.0.0.1 as an auth proxy, with CORS for one origin."""
    tmp = tmp_path_factory.mktemp("api-proxy")
    settings = api_settings(
        tmp,
        f"sqlite:///{tmp / 'runlane.db'}",
        http_trusted_proxies=("127.0.0.0/8",),
        http_group_roles=(("ops", "operator"), ("sre", "admin"), ("all", "viewer")),
        http_cors_origins=("https://ui.example",),
    )
    with running_api(settings, "sqlite") as server:
        yield server


def test_a_trusted_proxys_user_gets_the_highest_role_of_its_groups(proxied: ApiServer) -> None:
    with proxied.client(
        None, **{"X-Forwarded-User": "alice", "X-Forwarded-Groups": "all, ops"}
    ) as c:
        run = c.post("/api/v1/jobs/hello/runs", json={})
    assert run.status_code == 201, run.text
    assert run.json()["requested_by"] == "alice"
    assert any(e.actor == "alice" for e in audit_rows(proxied, "run_job"))


def test_a_proxy_user_without_a_mapped_group_is_403(proxied: ApiServer) -> None:
    with proxied.client(None, **{"X-Forwarded-User": "bob", "X-Forwarded-Groups": "x"}) as c:
        problem_of(c.get("/api/v1/jobs"), 403, "forbidden")


def test_a_proxy_user_name_past_its_limit_is_a_400(proxied: ApiServer) -> None:
    with proxied.client(None, **{"X-Forwarded-User": "u" * 201, "X-Forwarded-Groups": "ops"}) as c:
        problem_of(c.get("/api/v1/jobs"), 400, "malformed_request")


def test_a_viewer_group_reads_but_does_not_write(proxied: ApiServer) -> None:
    with proxied.client(None, **{"X-Forwarded-User": "carol", "X-Forwarded-Groups": "all"}) as c:
        assert c.get("/api/v1/jobs").status_code == 200
        problem_of(c.post("/api/v1/jobs/hello/runs", json={}), 403, "forbidden")


def test_without_the_user_header_a_token_is_still_needed(proxied: ApiServer) -> None:
    with proxied.client(None) as c:
        problem_of(c.get("/api/v1/jobs"), 401, "unauthenticated")
    with proxied.client("viewer") as c:
        assert c.get("/api/v1/jobs").status_code == 200


def test_proxy_headers_from_an_untrusted_address_are_ignored(api: ApiServer) -> None:
    # `api` trusts no proxy: the headers say nothing, the missing token is a 401.
    with api.client(None, **{"X-Forwarded-User": "mallory", "X-Forwarded-Groups": "sre"}) as c:
        problem_of(c.get("/api/v1/jobs"), 401, "unauthenticated")


def test_cors_only_for_the_configured_origin(proxied: ApiServer, api: ApiServer) -> None:
    preflight = {
        "Origin": "https://ui.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,idempotency-key",
    }
    with proxied.client(None) as c:
        allowed = c.options("/api/v1/jobs/hello/runs", headers=preflight)
        other = c.options(
            "/api/v1/jobs/hello/runs", headers={**preflight, "Origin": "https://evil.example"}
        )
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == "https://ui.example"
    assert "access-control-allow-origin" not in other.headers
    with api.client("viewer", Origin="https://ui.example") as c:
        assert "access-control-allow-origin" not in c.get("/api/v1/jobs").headers


# ------------------------------------------------------------------------------ ASGI units


class Recorder:
    """The messages an app sent, as a server would receive them."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def __call__(self, message: Any) -> None:
        self.messages.append(dict(message))

    @property
    def status(self) -> int:
        return int(self.messages[0]["status"])

    @property
    def body(self) -> dict[str, Any]:
        data = b"".join(m.get("body", b"") for m in self.messages[1:])
        parsed: dict[str, Any] = json.loads(data)
        return parsed

    def header(self, name: bytes) -> bytes | None:
        return dict(self.messages[0]["headers"]).get(name)


def scope(path: str = "/api/v1/jobs", query: bytes = b"", **extra: Any) -> dict[str, Any]:
    return {"type": "http", "path": path, "query_string": query, "headers": [], **extra}


async def no_body() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


async def test_a_request_past_its_timeout_is_a_503_problem() -> None:
    never = asyncio.Event()

    async def stuck(_scope: Any, _receive: Any, _send: Any) -> None:
        await never.wait()

    sent = Recorder()
    await RequestTimeout(stuck, seconds=0.05)(scope(), no_body, sent)
    assert sent.status == 503
    assert sent.body["code"] == "request_timeout"
    assert sent.header(b"content-type") == b"application/problem+json"


async def test_a_started_answer_past_the_timeout_is_cut_not_replaced() -> None:
    never = asyncio.Event()

    async def slow_stream(_scope: Any, _receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await never.wait()

    sent = Recorder()
    await RequestTimeout(slow_stream, seconds=0.05)(scope(), no_body, sent)
    assert [m["type"] for m in sent.messages] == ["http.response.start"]


async def test_only_an_answer_that_streams_events_is_exempt_from_the_timeout() -> None:
    """The exemption is the route's decision (its answer is text/event-stream), not what the
    request says: a slow answer to a request that asks for a stream (Accept, a repeated
    `follow`) is still cut at the timeout."""
    never = asyncio.Event()

    async def streaming(_scope: Any, _receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream; charset=utf-8")],
            }
        )
        await asyncio.sleep(0.2)  # well past the timeout (not a wait for something)
        await send({"type": "http.response.body", "body": b"data: x\n\n", "more_body": False})

    sent = Recorder()
    await RequestTimeout(streaming, seconds=0.05)(
        scope("/api/v1/runs/abc/logs", b"follow=true"), no_body, sent
    )
    assert [m["type"] for m in sent.messages] == ["http.response.start", "http.response.body"]

    async def slow(_scope: Any, _receive: Any, _send: Any) -> None:
        await never.wait()

    asks_to_stream = scope(
        "/api/v1/runs/abc/logs",
        b"follow=true&follow=false",
        headers=[(b"accept", b"text/event-stream")],
    )
    sent = Recorder()
    async with asyncio.timeout(5):  # exempt, it would wait for ever
        await RequestTimeout(slow, seconds=0.05)(asks_to_stream, no_body, sent)
    assert sent.status == 503
    assert sent.body["code"] == "request_timeout"


def asgi_scope(path: str = "/api/v1/runs/abc/logs") -> dict[str, Any]:
    # ASGI 2.4: a StreamingResponse sends its body without listening for a disconnect.
    return scope(path, asgi={"version": "3.0", "spec_version": "2.4"})


async def test_a_log_streamed_whole_is_bounded_by_its_pauses_not_its_length() -> None:
    """A run's log downloaded whole (`GET /runs/{id}/logs`) is streamed as it is read: a big
    file takes longer than the request timeout. The timeout then bounds each piece (the wait
    for it and its send), not the whole: a download that keeps moving is not cut, one that
    stalls is (and without its last message, so the client sees it incomplete)."""
    from runlane.api.routes.logs import LogDownload

    async def moving() -> AsyncIterator[bytes]:
        for number in range(8):
            await asyncio.sleep(0.02)  # 0.16 s in all, past the 0.05 s timeout (not a wait)
            yield b"piece %d\n" % number

    sent = Recorder()
    await RequestTimeout(LogDownload(moving(), release=lambda: None), seconds=0.05)(
        asgi_scope(), no_body, sent
    )
    assert sent.status == 200
    assert b"".join(m.get("body", b"") for m in sent.messages[1:]) == b"".join(
        b"piece %d\n" % n for n in range(8)
    )
    assert sent.messages[-1]["more_body"] is False
    assert all(set(m) <= {"type", "status", "headers", "body", "more_body"} for m in sent.messages)

    never = asyncio.Event()

    async def stalled() -> AsyncIterator[bytes]:
        yield b"piece 0\n"
        await never.wait()
        yield b"never sent"

    sent = Recorder()
    async with asyncio.timeout(5):  # exempt from every bound, it would wait for ever
        await RequestTimeout(LogDownload(stalled(), release=lambda: None), seconds=0.05)(
            asgi_scope(), no_body, sent
        )
    assert [m.get("body") for m in sent.messages[1:]] == [b"piece 0\n"]  # cut, not ended

    # Any other answer that has started is still bounded as a whole.
    async def plain_stream(_scope: Any, _receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(8):
            await asyncio.sleep(0.02)
            await send({"type": "http.response.body", "body": b"x", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    sent = Recorder()
    await RequestTimeout(plain_stream, seconds=0.05)(asgi_scope(), no_body, sent)
    assert sent.messages[-1].get("more_body") is True  # cut at the timeout


async def test_a_streamed_body_past_the_limit_is_413_before_the_app_answers() -> None:
    chunks = [b"x" * 600, b"x" * 600]

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": chunks.pop(0), "more_body": bool(chunks)}

    read: list[int] = []

    async def reader(_scope: Any, receive: Any, _send: Any) -> None:
        while True:
            message = await receive()
            read.append(len(message["body"]))
            if not message.get("more_body"):
                break

    sent = Recorder()
    await BodyLimit(reader, limit=1000)(scope(), receive, sent)
    assert read == [600]
    assert sent.status == 413
    assert sent.body["code"] == "payload_too_large"


async def test_security_headers_are_added_and_not_doubled() -> None:
    async def app(_scope: Any, _receive: Any, send: Any) -> None:
        headers = [(b"x-frame-options", b"SAMEORIGIN")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}"})

    sent = Recorder()
    await SecurityHeaders(app)(scope(), no_body, sent)
    names = [name for name, _ in sent.messages[0]["headers"]]
    assert names.count(b"x-frame-options") == 1
    assert sent.header(b"x-content-type-options") == b"nosniff"
    assert sent.header(b"cache-control") == b"no-store"
