"""What every command shares: its common options, its settings, who it says asks, and running
its body on an open runtime."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from runlane.core.runs import Trigger
from runlane.service.config import Settings
from runlane.service.runtime import Runtime, open_runtime

if TYPE_CHECKING:
    from runlane.service.operations.arguments import Requester

T = TypeVar("T")

CatalogOpt = Annotated[
    str | None, typer.Option("--catalog", "-c", help="Catalog file (env RUNLANE_CATALOG).")
]
DatabaseOpt = Annotated[
    str | None,
    typer.Option("--database", "-d", help="Database URL (env RUNLANE_DATABASE_URL)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON and nothing else.")]
# A run started from inside a run (or any traced process) joins its trace: the OpenTelemetry
# environment carrier is the default.
TraceparentOpt = Annotated[
    str | None,
    typer.Option(
        "--traceparent",
        envvar="TRACEPARENT",
        show_envvar=False,
        help="W3C traceparent the run joins (default: env TRACEPARENT).",
    ),
]


def settings_from(catalog: str | None = None, database: str | None = None) -> Settings:
    return Settings.from_env(catalog_path=catalog, database_url=database)


def cli_requester(*, login_name: bool = False) -> Requester:
    """Who asks from the command line: `$USER` (then `$LOGNAME`, with `login_name`), else
    `cli`. Bytes of it that are not UTF-8 (which no database stores) are kept as escapes
    (`\\xe9`), as a refused argument shows them."""
    name = os.environ.get("USER") or (os.environ.get("LOGNAME") if login_name else None)
    if name:
        name = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    from runlane.service.operations.arguments import Requester

    return Requester(name or "cli", Trigger.CLI)


def run_async(
    coro: Coroutine[Any, Any, T],
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> T:
    """Run `coro` to its end on a new event loop (`loop_factory`'s; asyncio's by default)."""
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(coro)


def with_runtime(
    settings: Settings, body: Callable[[Runtime], Awaitable[T]], *, catalog: bool = True
) -> T:
    """Run `body` on a runtime opened from `settings` (the catalog loaded first, unless not
    needed), closed after."""

    async def go() -> T:
        async with open_runtime(settings, catalog=catalog) as rt:
            return await body(rt)

    return run_async(go())
