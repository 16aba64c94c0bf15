"""MCP over streamable HTTP at `/mcp` of the real API server (uvicorn, as `runlane serve` runs
it), with the SDK's own client, on SQLite and PostgreSQL: the API's bearer tokens and roles,
401 without one, runs started with trigger `mcp` as the token, writes audited with the peer."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp import Client
from runlane.core.access import Role
from runlane.mcp.http import transport_security
from runlane.service import operations
from runlane.service.config import Settings
from tests.api.conftest import ApiServer, running_api
from tests.mcp.conftest import CLI, mcp_settings, refusal, structured
from tests.support.postgres import scratch_database

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def api(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    tmp = tmp_path_factory.mktemp(f"mcp-http-{request.param}")
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp / 'runlane.db'}"
        else:
            url = stack.enter_context(scratch_database("runlane_mcp_http"))
        yield stack.enter_context(running_api(mcp_settings(tmp, url), request.param))


@contextlib.asynccontextmanager
async def mcp_client(api: ApiServer, role: str, **options: Any) -> AsyncIterator[Client]:
    """The SDK's client of `/mcp` with `role`'s token; `options` for `mcp.Client`."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {api.tokens[role]}"}, timeout=30)
    transport = streamable_http_client(f"{api.base_url}/mcp", http_client=http)
    async with http, Client(transport, **options) as c:
        yield c


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer rl_not-a-token"}, {"Authorization": "Basic dXNlcjpwdw=="}],
    ids=["no-token", "unknown-token", "other-scheme"],
)
def test_mcp_without_a_valid_token_is_401(api: ApiServer, headers: dict[str, str]) -> None:
    with httpx.Client(base_url=api.base_url, timeout=30) as http:
        answer = http.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **headers})
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert answer.json()["code"] == "unauthenticated"


def test_a_valid_token_gets_the_mcp_handshake(api: ApiServer) -> None:
    with api.client("viewer", **MCP_HEADERS) as http:
        answer = http.post("/mcp", json=INITIALIZE)
    assert answer.status_code == 200, answer.text
    assert "runlane" in answer.text


async def test_tools_over_http_as_the_token(api: ApiServer) -> None:
    async with mcp_client(api, "operator") as client:
        names = {t.name for t in (await client.list_tools()).tools}
        run = structured(await client.call_tool("run_job", {"job": "hello"}))
        shown = structured(await client.call_tool("get_run", {"run_id": run["id"]}))
        acts = refusal(await client.call_tool("run_job", {"job": "careful"}))
        confirmed = structured(
            await client.call_tool("run_job", {"job": "careful", "confirm": "careful"})
        )
        cancelled = structured(await client.call_tool("cancel_run", {"run_id": confirmed["id"]}))
    assert {"run_job", "get_run_logs", "explain"} <= names
    assert (run["trigger"], run["requested_by"]) == ("mcp", "operator")
    assert shown["id"] == run["id"]
    assert acts[0] == "confirmation_required"
    assert cancelled["status"] == "cancelled"
    audit = api.call(lambda rt: operations.list_audit(rt, limit=10)).items
    mine = [e for e in audit if e.action == "run_job" and e.actor == "operator"]
    assert mine
    assert mine[0].remote == "127.0.0.1"


async def test_a_viewer_and_a_scoped_token_over_http(api: ApiServer) -> None:
    async with mcp_client(api, "viewer") as client:
        jobs = structured(await client.call_tool("list_jobs", {}))
        refused: Any = refusal(await client.call_tool("run_job", {"job": "hello"}))
    assert jobs["items"]
    assert refused[0] == "forbidden"
    async with mcp_client(api, "etl") as client:
        scoped = refusal(await client.call_tool("run_job", {"job": "hello"}))
        allowed = structured(await client.call_tool("run_job", {"job": "etl.load"}))
    assert scoped[0] == "forbidden"
    assert "etl.*" in scoped[1]
    assert allowed["requested_by"] == "etl-operator"


def test_the_api_is_unchanged_beside_mcp(api: ApiServer) -> None:
    with api.client("viewer") as http:
        jobs = http.get("/api/v1/jobs")
        spec = http.get("/api/v1/openapi.json").json()
    assert jobs.status_code == 200
    assert "/mcp" not in spec["paths"]


async def test_a_token_revoked_during_a_session_is_refused_at_its_next_request(
    api: ApiServer,
) -> None:
    made = api.call(
        lambda rt: operations.create_token(rt, "short-lived", role=Role.OPERATOR, requester=CLI)
    )
    api.tokens["short-lived"] = made.secret
    answered: list[Any] = []

    async def session() -> None:
        async with mcp_client(api, "short-lived") as client:
            structured(await client.call_tool("list_jobs", {}))
            api.call(lambda rt: operations.revoke_token(rt, "short-lived", requester=CLI))
            answered.append(await client.call_tool("list_jobs", {}))

    with pytest.raises(BaseExceptionGroup) as refused:
        await session()
    assert refused.group_contains(MCPError)  # the SDK's client reports the 401 so
    assert answered == []
    async with httpx.AsyncClient(base_url=api.base_url, timeout=30) as http:
        again = await http.post(
            "/mcp",
            json=INITIALIZE,
            headers={**MCP_HEADERS, "Authorization": f"Bearer {made.secret}"},
        )
    assert again.status_code == 401


def test_a_host_the_server_does_not_answer_to_is_refused(api: ApiServer) -> None:
    with api.client("viewer", **MCP_HEADERS, Host="rebound.example") as http:
        answer = http.post("/mcp", json=INITIALIZE)
    assert answer.status_code == 421


@pytest.mark.parametrize(
    ("addr", "checked"),
    [
        ("127.0.0.1:8080", True),
        ("localhost:9000", True),
        ("[::1]:8080", True),
        ("0.0.0.0:8080", False),
    ],
)
def test_the_host_check_follows_the_listen_address(addr: str, checked: bool) -> None:
    found = transport_security(Settings(http_addr=addr))
    assert found.enable_dns_rebinding_protection is checked


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_acts_job_is_confirmed_by_elicitation_over_http(api: ApiServer, mode: str) -> None:
    asked: list[str] = []

    async def yes(_context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"confirm": True})

    async with mcp_client(api, "operator", elicitation_callback=yes, mode=mode) as client:
        run = structured(await client.call_tool("run_job", {"job": "careful"}))
        cancelled = structured(await client.call_tool("cancel_run", {"run_id": run["id"]}))
    assert run["job"] == "careful"
    assert cancelled["status"] == "cancelled"
    assert len(asked) == 1
    assert "careful" in asked[0]


def _open_session(http: httpx.Client) -> str:
    """Initialize a session as `http`'s token; its `Mcp-Session-Id`."""
    opened = http.post("/mcp", json=INITIALIZE)
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    ready = http.post(
        "/mcp",
        json={"jsonrpc": "2.0", "method": "notifications/initialized"},
        headers=_in_session(session),
    )
    assert ready.status_code == 202, ready.text
    return session


def _in_session(session: str) -> dict[str, str]:
    return {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}


@pytest.mark.parametrize("intruder", ["viewer", "etl"])
def test_a_session_answers_only_the_token_that_opened_it(api: ApiServer, intruder: str) -> None:
    """A session id is not a credential: another valid token sending it (a viewer, or an
    operator scoped to other jobs) gets 404 as for an unknown session, on POST, GET (the
    session's stream) and DELETE, and the session goes on serving the token that opened it."""
    with (
        api.client("operator", **MCP_HEADERS) as owner,
        api.client(intruder, **MCP_HEADERS) as other,
    ):
        session = _open_session(owner)
        headers = _in_session(session)
        posted = other.post("/mcp", json=_call("list_jobs", {}), headers=headers)
        with other.stream("GET", "/mcp", headers={**headers, "Accept": "text/event-stream"}) as got:
            streamed = got.status_code
        deleted = other.delete("/mcp", headers=headers)
        still = owner.post("/mcp", json=_call("list_jobs", {}), headers=headers)
    assert (posted.status_code, streamed, deleted.status_code) == (404, 404, 404)
    assert "Session not found" in posted.text
    assert still.status_code == 200, still.text
    assert '"isError":false' in still.text.replace(" ", "")
