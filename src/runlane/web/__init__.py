"""The web UI: server-rendered pages over the operations layer, mounted on the HTTP server
(`runlane.api`). See docs/ui.md."""
