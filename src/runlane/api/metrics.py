"""`GET /metrics`: the Prometheus text of this process's exporter (`runlane.service.metrics`).

On the HTTP server it needs a viewer token like every other read (Prometheus sends one:
`authorization: {credentials_file: ...}` in its scrape config), because that server may face
people and a token is what every other route there asks for. With `RUNLANE_METRICS_ADDR` set,
`runlane serve` also serves it on a listener of its own without a token: an address an
operator chose for it (a loopback or cluster-internal port), which serves nothing else.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.applications import Starlette
from starlette.routing import Route

from runlane.api.auth import Viewer
from runlane.service.config import Settings
from runlane.service.metrics import CONTENT_TYPE, Exporter, LauncherMetrics
from runlane.service.runtime import Runtime, open_runtime

METRICS_PATH = "/metrics"

router = APIRouter(tags=["metrics"])


def exporter_of(request: Request) -> Exporter:
    """The app's exporter, made at its first scrape over the app's store and the launcher's
    counters (`app.state.launcher_metrics`: None in `runlane web`, which has no launcher)."""
    state = request.app.state
    exporter: Exporter | None = getattr(state, "exporter", None)
    if exporter is None:
        runtime: Runtime = state.runtime
        launcher: LauncherMetrics | None = getattr(state, "launcher_metrics", None)
        exporter = state.exporter = Exporter(runtime.store, launcher)
    return exporter


async def scrape(request: Request) -> Response:
    """The exposition text, read now (the run log's gauges cached for a couple of seconds)."""
    return Response(await exporter_of(request).scrape(), media_type=CONTENT_TYPE)


@router.get(METRICS_PATH, include_in_schema=False)
async def metrics(request: Request, _who: Viewer) -> Response:
    return await scrape(request)


def create_metrics_app(settings: Settings, launcher: LauncherMetrics | None) -> Starlette:
    """The app of the metrics listener (`RUNLANE_METRICS_ADDR`): `/metrics` and nothing else,
    without a token, over a store of its own (opened when it starts)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with open_runtime(
            settings, catalog=False, check_schema=False, application_name="runlane-metrics"
        ) as rt:
            app.state.runtime = rt
            yield

    app = Starlette(routes=[Route(METRICS_PATH, scrape, methods=["GET"])], lifespan=lifespan)
    app.state.launcher_metrics = launcher
    return app
