"""MCP over stdio (`runlane mcp`, for a desktop assistant): one identity for the whole session,
the token in `RUNLANE_TOKEN`, authenticated once at start (trigger `mcp`). Without a token the
read tools work and each write is refused as `unauthenticated`, saying to set RUNLANE_TOKEN.

stdout carries the protocol alone: everything else (logs, warnings) goes to stderr.
"""

from __future__ import annotations

from runlane.core.runs import Trigger
from runlane.errors import Unauthenticated
from runlane.mcp.tools import Caller, build_server
from runlane.service import operations
from runlane.service.config import Settings
from runlane.service.runtime import open_runtime

TOKEN_ENV = "RUNLANE_TOKEN"  # noqa: S105 - the variable's name, not a secret


async def serve_stdio(settings: Settings, token: str | None) -> None:
    """Serve runlane's tools on stdin/stdout until the client closes them. `token`: the secret
    of `RUNLANE_TOKEN` (None or empty: reads only); `unauthenticated` when it is not valid."""
    async with open_runtime(settings, catalog=False) as rt:
        requester = None
        if token:
            try:
                requester = await operations.authenticate(rt, token, trigger=Trigger.MCP)
            except Unauthenticated as exc:
                raise Unauthenticated(f"{TOKEN_ENV}: {exc.message}") from None
        caller = Caller(requester, "stdio")
        server = build_server(lambda: rt, lambda _ctx: caller)
        await server.run_stdio_async()
