"""What endpoints take from the request: the open runtime (one per app, opened by its lifespan)
and, in `runlane.api.auth`, who asks."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from runlane.service.runtime import Runtime


async def get_runtime(request: Request) -> Runtime:
    """The app's runtime (store, catalog, settings), opened once by the app's lifespan. Async
    although it awaits nothing: FastAPI runs a plain `def` dependency in a worker thread."""
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
