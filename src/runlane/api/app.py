"""The ASGI app: one FastAPI application, its lifespan (the runtime it serves from), its
routers, its error handlers (every error a problem: `runlane.api.problems`) and its middleware
(body limit, request timeout, security headers, CORS when configured)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Receive, Scope, Send

from runlane import __version__
from runlane.api import metrics
from runlane.api.auth import Viewer, peer_is_trusted, proxy_auth_of, proxy_requester
from runlane.api.middleware import BodyLimit, PageGzip, RequestTimeout, SecurityHeaders
from runlane.api.problems import (
    PROBLEM_MEDIA_TYPE,
    FieldProblem,
    Problem,
    install_problem_handlers,
    problem_responses,
)
from runlane.api.routes import chains, events, health, jobs, logs, runs, status
from runlane.mcp.http import MCP_PATH, streamable_http
from runlane.service.config import Settings
from runlane.service.metrics import LauncherMetrics
from runlane.service.runtime import Runtime, open_runtime
from runlane.web import PAGE_ROUTERS, mount_static
from runlane.web import router as web_router

API_PREFIX = "/api/v1"
OPENAPI_URL = f"{API_PREFIX}/openapi.json"
PUBLIC_PATHS = frozenset({"/healthz", "/readyz"})  # the probes: served without a token

DESCRIPTION = """\
The HTTP API of runlane: the jobs and chains of the catalog, the run log, runs, cancels,
events, pauses, the launchers and the schedule. Every request but `/healthz` and `/readyz`
needs `Authorization: Bearer <token>` (`runlane token create`); every error is
`application/problem+json` with a stable `code` (docs/errors.md). See docs/api.md."""


def create_app(
    settings: Settings,
    *,
    runtime: Runtime | None = None,
    launcher_metrics: LauncherMetrics | None = None,
) -> FastAPI:
    """The app for `settings`: it opens the store when it starts (without refusing an old
    schema: `/readyz` reports it) and closes it when it stops. `runtime`: one already open
    (tests, the launcher's own), used as it is and not closed. `launcher_metrics`: the counters
    of the launcher beside it, which `/metrics` serves (docs/monitoring.md)."""

    mcp = streamable_http(settings, lambda: app.state.runtime)  # MCP at /mcp (docs/mcp.md)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if runtime is not None:
            app.state.runtime = runtime
            async with mcp.running():
                yield
            return
        async with open_runtime(settings, application_name="runlane-api", check_schema=False) as rt:
            app.state.runtime = rt
            async with mcp.running():
                yield

    app = FastAPI(
        title="runlane",
        version=__version__,
        description=DESCRIPTION,
        openapi_url=None,  # served below, to callers with a token like every other route
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.proxy_auth = proxy_auth_of(settings)
    # The web UI identifies trusted-proxy users with the API's own rule (it cannot import it).
    app.state.proxy_requester = proxy_requester
    app.state.proxy_trusted = peer_is_trusted
    if runtime is not None:
        app.state.runtime = runtime
    install_problem_handlers(app)
    for module in (health, jobs, runs, logs, chains, events, status):
        app.include_router(module.router)
    app.router.routes.append(Route(MCP_PATH, mcp.endpoint, methods=["GET", "POST", "DELETE"]))
    if settings.metrics_enabled:
        app.state.launcher_metrics = launcher_metrics
        app.include_router(metrics.router)
    before = len(app.router.routes)
    app.include_router(web_router)  # the web UI's pages (docs/ui.md)
    if len(app.router.routes) == before + 1:
        # FastAPI adds an included router as one route (0.165): tried first, for the pages'
        # own paths. A FastAPI that adds the router's routes one by one leaves them where
        # they are, after the API's: slower to find, never wrong.
        app.router.routes.insert(0, PagesFirst(app.router.routes.pop(), page_sections()))
    mount_static(app)
    # Outermost last: the headers go on every answer, a refusal of the limits included.
    app.add_middleware(RequestTimeout, seconds=settings.http_request_timeout)
    app.add_middleware(BodyLimit)
    if settings.http_cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.http_cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=[
                "Authorization",
                "Content-Type",
                "Idempotency-Key",
                "Last-Event-ID",
                "traceparent",
            ],
            expose_headers=["Location", "Idempotency-Replayed"],
        )
    app.add_middleware(SecurityHeaders, api_prefix=f"{API_PREFIX}/")
    app.add_middleware(PageGzip, api_prefix=f"{API_PREFIX}/")
    app.openapi = lambda: openapi_of(app)  # type: ignore[method-assign]

    @app.get(OPENAPI_URL, include_in_schema=False)
    async def openapi_json(_who: Viewer) -> JSONResponse:
        return JSONResponse(app.openapi())

    return app


def page_sections() -> frozenset[str]:
    """The first path segments of the web UI's pages (`jobs` of `/jobs/{job}`, `` of `/`)."""
    return frozenset(
        route.path.lstrip("/").split("/", 1)[0]
        for pages in PAGE_ROUTERS
        for route in pages.routes
        if isinstance(route, Route)
    )


class PagesFirst(BaseRoute):
    """The web UI's router, tried before the API's routes, and only for a path in one of the
    pages' sections (`page_sections`): FastAPI matches routes one by one, so a page (`/runs`)
    was found only after every API route had been tried (84 µs against 23 µs for
    `/api/v1/runs`), while an API request passes this by one set lookup. Pages and API routes
    share no path, so which is tried first decides nothing else."""

    def __init__(self, pages: BaseRoute, sections: frozenset[str]) -> None:
        if any("{" in section for section in sections):
            raise ValueError(f"a page path starts with a parameter: {sorted(sections)}")
        self.pages = pages
        self.sections = sections

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] == "http":
            section = scope["path"].lstrip("/").split("/", 1)[0]
            if section in self.sections:
                return self.pages.matches(scope)
        return Match.NONE, {}

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.pages.handle(scope, receive, send)

    def url_path_for(self, name: str, /, **path_params: Any) -> Any:
        return self.pages.url_path_for(name, **path_params)


def openapi_of(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI 3.1 document, with the problem schemas every error response names
    and the bearer scheme every operation but the probes needs (built once, then cached)."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    from fastapi.openapi.utils import get_openapi

    spec = get_openapi(
        title=app.title,
        version=app.version,
        openapi_version="3.1.0",
        description=app.description,
        routes=app.routes,
    )
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    for model in (Problem, FieldProblem):
        found = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in found.pop("$defs", {}).items():
            schemas.setdefault(name, sub)
        schemas[model.__name__] = found
    spec["components"]["securitySchemes"] = {
        "bearer": {"type": "http", "scheme": "bearer", "description": "runlane token create"}
    }
    problem_content = {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}
    for path, operations in spec.get("paths", {}).items():
        public = path in PUBLIC_PATHS
        for operation in operations.values():
            answers = operation.setdefault("responses", {})
            if public:
                answers.pop("401", None)  # the probes need no token
            else:
                operation["security"] = [{"bearer": []}]
                for status, answer in problem_responses(*([404] if "{" in path else [])).items():
                    answers.setdefault(str(status), answer)
            # Every error is a problem, on routes that documented it otherwise too (FastAPI's
            # own 422 shape is never sent: the handlers render validation as a problem).
            for status, answer in answers.items():
                if status.startswith(("4", "5")):
                    answer["content"] = dict(problem_content)
            operation["responses"] = dict(sorted(answers.items()))
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    app.openapi_schema = spec
    return spec
