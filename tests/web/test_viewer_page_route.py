"""`session.ViewerPageRoute`: a read-only page called without FastAPI's solving of its
parameters, which must therefore take exactly (request, rt, who) and nothing else."""

from __future__ import annotations

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, Request, Response

from runlane.web.session import ViewerPageRoute, WebRuntime, WebViewer


async def plain(request: Request, rt: WebRuntime, who: WebViewer) -> Response:
    return Response(f"{who.name}")


async def with_query(request: Request, rt: WebRuntime, who: WebViewer, job: str = "") -> Response:
    return Response(job)


async def with_header(request: Request, rt: WebRuntime, who: WebViewer, x_a: str = "") -> Response:
    return Response(x_a)


async def without_viewer(request: Request, rt: WebRuntime) -> Response:
    return Response("")


def include(endpoint: object, **kwargs: object) -> FastAPI:
    router = APIRouter()
    router.add_api_route("/p", endpoint, methods=["GET"], route_class_override=ViewerPageRoute)  # type: ignore[arg-type]
    app = FastAPI()
    app.include_router(router, **kwargs)  # type: ignore[arg-type]
    return app


def test_an_endpoint_of_request_runtime_and_viewer_is_taken() -> None:
    include(plain)


@pytest.mark.parametrize("endpoint", [with_query, with_header, without_viewer])
def test_any_other_endpoint_is_refused(endpoint: object) -> None:
    with pytest.raises(TypeError, match="ViewerPageRoute"):
        include(endpoint)


async def test_a_router_dependency_is_refused_never_skipped() -> None:
    # FastAPI builds an included route's handler with its router's dependencies when the route
    # is first matched: the refusal comes then, and the dependency is not silently left out.
    called: list[bool] = []

    async def extra() -> None:
        called.append(True)

    app = include(plain, dependencies=[Depends(extra)])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://page") as client:
        with pytest.raises(TypeError, match="ViewerPageRoute"):
            await client.get("/p")
    assert called == []
