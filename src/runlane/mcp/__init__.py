"""The MCP server: runlane's operations as MCP tools, on stdio (`runlane mcp`) and at `/mcp` on the
HTTP server (`runlane.api`). See docs/mcp.md."""

from __future__ import annotations

from runlane.mcp.tools import Caller, build_server

__all__ = ["Caller", "build_server"]
