"""The ASGI app: one FastAPI application, its lifespan (the runtime it serves from), its
routers and its error handlers."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI

from runlane import __version__
from runlane.api.routes import health, logs
from runlane.service.config import Settings
from runlane.service.runtime import open_runtime

API_PREFIX = "/api/v1"
OPENAPI_URL = f"{API_PREFIX}/openapi.json"


def create_app(settings: Settings) -> FastAPI:
    """The app for `settings`: it opens the store when it starts (without refusing an old
    schema: `/readyz` reports it) and closes it when it stops."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_runtime(settings, application_name="runlane-api", check_schema=False) as rt:
            app.state.runtime = rt
            yield

    app = FastAPI(
        title="runlane",
        version=__version__,
        openapi_url=OPENAPI_URL,
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.include_router(health.router)
    app.include_router(logs.router)
    return app
