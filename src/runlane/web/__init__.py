"""The web UI: server-rendered pages over the operations layer, mounted on the HTTP server
(`runlane.api`). See docs/ui.md.

`router` holds every page (none in the OpenAPI document); `mount_static(app)` serves
`static/` (app.css, app.js) at `/static`. The HTTP server includes both
(`runlane.api.app.create_app`). A page module adds its `router` to `PAGE_ROUTERS`.
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from fastapi.staticfiles import StaticFiles

from runlane.web.pages import chains, jobs, login, runs, system

STATIC_PATH = "/static"
PAGE_ROUTERS = (login.router, jobs.router, runs.router, chains.router, system.router)

router = APIRouter(include_in_schema=False)
for _pages in PAGE_ROUTERS:
    router.include_router(_pages)


def mount_static(app: FastAPI) -> None:
    """Serve the UI's stylesheet and script (`runlane/web/static/`) at `/static`."""
    app.mount(STATIC_PATH, StaticFiles(packages=[("runlane.web", "static")]), name="static")


__all__ = ["STATIC_PATH", "mount_static", "router"]
