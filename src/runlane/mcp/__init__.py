"""The MCP server: runlane's operations as MCP tools, on stdio (`runlane mcp`) and at `/mcp` on the
HTTP server (`runlane.api`). See docs/mcp.md."""
