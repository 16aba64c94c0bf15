"""The MCP server under test, with the SDK's own client: in-process (`mcp.Client(server)`) on a
runtime of the test's own, on SQLite and PostgreSQL. Tokens are made through the operations, as
`runlane token create` makes them; each client is the identity of one of them (or of none)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from mcp import Client
from runlane.core.access import Role
from runlane.core.runs import Trigger
from runlane.mcp import Caller, build_server
from runlane.service import operations
from runlane.service.config import Settings
from runlane.service.runtime import Runtime, open_runtime
from tests.api.conftest import CATALOG as API_CATALOG
from tests.api.conftest import CLI
from tests.support.postgres import scratch_database, truncate_all

# The API tests' catalog, with an event an `acts` job listens to and a chain that runs it.
CATALOG = (
    API_CATALOG.replace("    acts: true\n", "    acts: true\n    on_event: [{key: poke}]\n", 1)
    + """  risky:
    steps:
      only: {job: careful}
"""
)
assert "poke" in CATALOG

# name → (role, job globs) of the tokens every test has
TOKENS: dict[str, tuple[Role, tuple[str, ...]]] = {
    "viewer": (Role.VIEWER, ()),
    "operator": (Role.OPERATOR, ()),
    "etl": (Role.OPERATOR, ("etl.*",)),
}


def write_catalog(directory: Path) -> Path:
    path = directory / "catalog.yaml"
    path.write_text(CATALOG)
    return path


def mcp_settings(tmp: Path, database_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        catalog_path=str(write_catalog(tmp)),
        log_dir=str(tmp / "logs"),
    )


async def make_tokens(rt: Runtime) -> dict[str, str]:
    """A token per entry of TOKENS: name → secret."""
    secrets: dict[str, str] = {}
    for name, (role, jobs) in TOKENS.items():
        made = await operations.create_token(rt, name, role=role, jobs=jobs, requester=CLI)
        secrets[name] = made.secret
    return secrets


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with scratch_database("runlane_mcp") as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def rt(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Runtime]:
    """An open runtime on a migrated, empty database of the test's dialect."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'runlane.db'}"
    else:
        url = request.getfixturevalue("pg_url")
        truncate_all(url)
    settings = mcp_settings(tmp_path, url)
    async with open_runtime(settings, create=True, check_schema=False) as runtime:
        await runtime.store.upgrade()
        yield runtime


Elicit = Callable[[Any, types.ElicitRequestParams], Any]
Connect = Callable[..., contextlib.AbstractAsyncContextManager[Client]]


@pytest.fixture
async def connect(rt: Runtime) -> Connect:
    """`async with connect("operator") as client`: the SDK's client of an in-process server
    whose caller is that token (None: no token, as `runlane mcp` without RUNLANE_TOKEN).
    `answer`: what the person answers to an elicitation (None: the client cannot be asked);
    `asked` collects the questions."""
    secrets = await make_tokens(rt)

    @contextlib.asynccontextmanager
    async def open_client(
        who: str | None = "operator",
        *,
        answer: dict[str, Any] | str | None = None,
        asked: list[str] | None = None,
    ) -> AsyncIterator[Client]:
        requester = (
            None
            if who is None
            else await operations.authenticate(rt, secrets[who], trigger=Trigger.MCP)
        )
        server = build_server(lambda: rt, lambda _ctx: Caller(requester, "in-process"))
        callback = None
        if answer is not None:

            async def callback(
                _context: Any, params: types.ElicitRequestParams
            ) -> types.ElicitResult:
                if asked is not None:
                    asked.append(params.message)
                if isinstance(answer, str):  # decline, cancel
                    return types.ElicitResult(action=answer)  # type: ignore[arg-type]
                return types.ElicitResult(action="accept", content=answer)

        async with Client(server, elicitation_callback=callback) as client:
            yield client

    return open_client


def structured(result: types.CallToolResult) -> dict[str, Any]:
    """The structured content of a successful call (the test fails on a tool error)."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def refusal(result: types.CallToolResult) -> tuple[str, str]:
    """The (code, message) of a tool error (the test fails on a success)."""
    assert result.is_error, result.structured_content
    assert result.structured_content is not None
    text = result.content[0]
    assert isinstance(text, types.TextContent)
    code, message = result.structured_content["code"], result.structured_content["message"]
    assert text.text == f"{code}: {message}"
    assert "Traceback" not in message
    return code, message
