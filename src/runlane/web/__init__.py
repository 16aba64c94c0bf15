"""The web UI: server-rendered pages over the operations layer, mounted on the HTTP server
(`runlane.api`). See docs/ui.md.

`router` holds every page (none in the OpenAPI document); `mount_static(app)` serves
`static/` (app.css, app.js, …) at `/static`, cached for good when asked for by the versioned
URL the pages use (`render.asset`). The HTTP server includes both
(`runlane.api.app.create_app`). A page module adds its `router` to `PAGE_ROUTERS`.
"""

from __future__ import annotations

import os
import urllib.parse
from os import PathLike

from fastapi import APIRouter, FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.types import Scope

from runlane.web.pages import chains, jobs, login, runs, system
from runlane.web.render import ASSET_VERSION_PARAM

STATIC_PATH = "/static"
PAGE_ROUTERS = (login.router, jobs.router, runs.router, chains.router, system.router)

router = APIRouter(include_in_schema=False)
for _pages in PAGE_ROUTERS:
    router.include_router(_pages)


# A file asked for by its versioned URL (`?v=<hash of its content>`, what the pages link) never
# changes under that URL, so the browser keeps it without asking again: a run page opened in a
# new tab paints without waiting for its stylesheet and scripts to be revalidated. Without the
# version (an old bookmark, a hand-typed URL) the browser revalidates each time (ETag).
IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"


class UiStaticFiles(StaticFiles):
    """StaticFiles with the cache policy above."""

    def file_response(
        self,
        full_path: PathLike[str] | str,
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
        response.headers["Cache-Control"] = (
            IMMUTABLE if ASSET_VERSION_PARAM in query else REVALIDATE
        )
        return response


def mount_static(app: FastAPI) -> None:
    """Serve the UI's stylesheets and scripts (`runlane/web/static/`) at `/static`."""
    app.mount(STATIC_PATH, UiStaticFiles(packages=[("runlane.web", "static")]), name="static")


__all__ = ["STATIC_PATH", "mount_static", "router"]
