"""`mcp`: runlane's MCP server on stdio, for a desktop assistant (docs/mcp.md)."""

from __future__ import annotations

import os

from runlane.cli.failures import one_line_errors
from runlane.cli.options import CatalogOpt, DatabaseOpt, run_async, settings_from


@one_line_errors
def mcp_cmd(catalog: CatalogOpt = None, database: DatabaseOpt = None) -> None:
    """Serve the MCP tools on stdin/stdout as the token in RUNLANE_TOKEN (without one: the read
    tools only). Point a desktop assistant's MCP config at `runlane mcp`."""
    from runlane.mcp.stdio import TOKEN_ENV, serve_stdio

    settings = settings_from(catalog, database)
    run_async(serve_stdio(settings, (os.environ.get(TOKEN_ENV) or "").strip() or None))
