"""The API under test: the real app served by uvicorn (`runlane.api.server.serve_http`) on
127.0.0.1, port 0, in a thread of the test process with its own event loop, once per module and
per dialect (SQLite, PostgreSQL); tests talk to it with httpx like any client.

`ApiServer.call(fn)` runs `fn(runtime)` on the server's loop with the app's own runtime, to seed
what a test needs (tokens, runs) through the operations, as the CLI would.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from runlane.api.app import create_app
from runlane.api.server import bind_socket, serve_http
from runlane.core.access import Role
from runlane.core.runs import Trigger
from runlane.service import operations
from runlane.service.config import Settings
from runlane.service.operations import Requester
from runlane.service.runtime import Runtime, open_runtime
from tests.support.postgres import scratch_database

T = TypeVar("T")
PY = sys.executable
CLI = Requester(None, Trigger.CLI)  # the local CLI: full access, as `runlane token create`

CATALOG = f"""
version: 1
global: {{max_deadline: 1h, manual_queue_ttl: 1h, kill_grace: 1s, timezone: Europe/Berlin}}
defaults: {{executor: inline, overlap: allow, max_attempts: 1, deadline: 1m}}
jobs:
  hello:
    command: [{PY}, -c, "print('hello')"]
    schedules: [{{cron: "0 * * * *"}}, {{cron: "30 6 * * *", tz: America/New_York}}]
    on_event: [{{key: greet}}]
    description: says hello
  typed:
    command: [{PY}, -c, "pass"]
    params: {{count: int, label: str?, mode: "choice[fast,slow]?", ratio: float?, dry: bool?}}
  careful:
    command: [{PY}, -c, "print('acted')"]
    acts: true
  single:
    command: [{PY}, -c, "pass"]
    overlap: forbid
  etl.load:
    command: [{PY}, -c, "pass"]
  etl.clean:
    command: [{PY}, -c, "pass"]
chains:
  pair:
    steps:
      first: {{job: hello}}
      second: {{job: etl.load, after: [{{step: first, on: success}}]}}
"""

ROLES = ("viewer", "operator", "admin")


@dataclass
class ApiServer:
    """A running API: its base URL, a token per role (and an operator scoped to `etl.*`)."""

    base_url: str
    dialect: str
    loop: asyncio.AbstractEventLoop
    runtime: Runtime
    tokens: dict[str, str] = field(default_factory=dict)

    def call(self, fn: Callable[[Runtime], Awaitable[T]]) -> T:
        """`fn(runtime)` on the server's loop; its result (or its exception)."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(_awaited(fn(self.runtime)), self.loop)
        return future.result(timeout=30)

    def client(self, role: str | None = "admin", **headers: str) -> httpx.Client:
        """An httpx client of the API, with the token of `role` (None: no token)."""
        sent = dict(headers)
        if role is not None:
            sent["Authorization"] = f"Bearer {self.tokens[role]}"
        return httpx.Client(base_url=self.base_url, headers=sent, timeout=30)


async def _awaited(value: Awaitable[T]) -> T:
    return await value


def write_catalog(directory: Path) -> Path:
    path = directory / "catalog.yaml"
    path.write_text(CATALOG)
    return path


@contextlib.contextmanager
def running_api(settings: Settings, dialect: str) -> Iterator[ApiServer]:
    """Serve the app for `settings` (its database migrated first) until the block ends."""
    ready = threading.Event()
    holder: dict[str, Any] = {}
    failure: list[BaseException] = []

    async def main() -> None:
        async with open_runtime(settings, create=True, check_schema=False) as rt:
            await rt.store.upgrade()
            app = create_app(settings, runtime=rt)
            stop = asyncio.Event()
            sock = bind_socket("127.0.0.1", 0)
            port = sock.getsockname()[1]
            started = asyncio.Event()
            holder.update(loop=asyncio.get_running_loop(), stop=stop, runtime=rt, port=port)
            serving = asyncio.create_task(
                serve_http(app, "127.0.0.1", port, stop=stop, started=started, sock=sock)
            )
            waiting = asyncio.create_task(started.wait())
            await asyncio.wait({serving, waiting}, return_when=asyncio.FIRST_COMPLETED)
            ready.set()
            await serving

    def thread_main() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:
            failure.append(exc)
        finally:
            ready.set()

    thread = threading.Thread(target=thread_main, name=f"api-{dialect}", daemon=True)
    thread.start()
    started_in_time = ready.wait(timeout=120)
    if failure:
        raise failure[0]
    if not started_in_time or "port" not in holder:
        raise AssertionError(f"the {dialect} API server did not start within 120 s")
    server = ApiServer(
        base_url=f"http://127.0.0.1:{holder['port']}",
        dialect=dialect,
        loop=holder["loop"],
        runtime=holder["runtime"],
    )
    try:
        for role in ROLES:
            made = server.call(
                lambda rt, role=role: operations.create_token(
                    rt, role, role=Role(role), requester=CLI
                )
            )
            server.tokens[role] = made.secret
        scoped = server.call(
            lambda rt: operations.create_token(
                rt, "etl-operator", role=Role.OPERATOR, jobs=("etl.*",), requester=CLI
            )
        )
        server.tokens["etl"] = scoped.secret
        yield server
    finally:
        holder["loop"].call_soon_threadsafe(holder["stop"].set)
        thread.join(timeout=30)
        if failure:
            raise failure[0]


def api_settings(tmp: Path, database_url: str, **overrides: Any) -> Settings:
    settings = Settings(
        database_url=database_url,
        catalog_path=str(write_catalog(tmp)),
        log_dir=str(tmp / "logs"),
    )
    return replace(settings, **overrides)


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def api(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """The API on a fresh database of the module's own, on each dialect."""
    tmp = tmp_path_factory.mktemp(f"api-{request.param}")
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp / 'runlane.db'}"
        else:
            url = stack.enter_context(scratch_database("runlane_api"))
        yield stack.enter_context(running_api(api_settings(tmp, url), request.param))
