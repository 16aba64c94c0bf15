"""`/api/v1/runs`: the run log, a page at a time (newest first, keyset cursors), one run, and
cancelling a run (or a chain run) by id."""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

import msgspec
from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute

from runlane.api.auth import Operator, Viewer, requester_of, viewer
from runlane.api.deps import RuntimeDep, get_runtime
from runlane.api.inputs import storable_parameters
from runlane.api.models import ChainRunView, RunPageView, RunView
from runlane.api.problems import problem_responses
from runlane.api.writes import audited
from runlane.core.runs import RunStatus, Trigger
from runlane.service import operations
from runlane.service.operations import RUN_LIST_VIEWS, CancelledRun, RunListView, text_problem
from runlane.service.runtime import Runtime
from runlane.service.views import chain_run_dict, iso, run_dict

router = APIRouter(prefix="/api/v1", tags=["runs"], dependencies=[Depends(storable_parameters)])

RunId = Annotated[
    str, Path(description="A run's id, or a unique prefix of it (at least 6 characters)")
]

DEFAULT_PAGE = 50


async def list_runs(
    rt: RuntimeDep,
    _who: Viewer,
    job: str | None = None,
    status: RunStatus | None = None,
    trigger: Trigger | None = None,
    requested_by: str | None = None,
    chain_root_id: str | None = None,
    since: Annotated[str | None, Query(description="queued at or after (ISO-8601, now-1d)")] = None,
    until: Annotated[str | None, Query(description="queued before (ISO-8601, now)")] = None,
    limit: Annotated[int, Query(description="1 to 500 runs a page")] = DEFAULT_PAGE,
    cursor: Annotated[str | None, Query(description="`next_cursor` of the page before")] = None,
    view: Annotated[
        RunListView,
        Query(
            description="`full`: every field; `basic`: without `params`, `note` and "
            "`log_tail` (a finished run's saved tail is up to 64 KiB): what a list shows"
        ),
    ] = "full",
) -> Response:
    """The runs newest first (by queued time, then id), filtered; `next_cursor` (null on the
    last page) fetches the next page, which stays right while runs are inserted."""
    return await run_page(
        rt,
        job=job,
        status=status,
        trigger=trigger,
        requested_by=requested_by,
        chain_root_id=chain_root_id,
        since=since,
        until=until,
        limit=limit,
        cursor=cursor,
        view=view,
    )


async def run_page(rt: Runtime, **query: Any) -> Response:
    """The page `query` asks for, as the route's JSON (both ways in: `RunListRoute`)."""
    page = await operations.list_run_items_page(rt, **query)
    return Response(
        json_bytes({"items": page.items, "next_cursor": page.next_cursor}),
        media_type="application/json",
    )


_ENCODER = msgspec.json.Encoder()


def json_bytes(content: Any) -> bytes:
    """`content` as compact UTF-8 JSON, times as `views.iso` writes them (msgspec writes an
    aware UTC datetime the same way): ~7x faster than `json.dumps` for a page of runs. A value
    msgspec refuses (an integer past 64 bits in a run's params) goes through `json.dumps`, as
    every response did before."""
    try:
        return _ENCODER.encode(content)
    except (TypeError, OverflowError, ValueError):
        return json.dumps(
            content, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=iso
        ).encode("utf-8")


# The run list's query, as the hot path takes it: each name at most once, every value a
# non-empty text the database can compare; `status` and `trigger` one of their values, `limit`
# at most 4 digits. Anything else (a typo, a repeat, `limit=abc`) goes the general way.
_TEXT_PARAMS = frozenset({"job", "requested_by", "chain_root_id", "since", "until", "cursor"})
_STATUSES = frozenset(s.value for s in RunStatus)
_TRIGGERS = frozenset(t.value for t in Trigger)
_VIEWS = frozenset(RUN_LIST_VIEWS)


def plain_query(request: Request) -> dict[str, Any] | None:
    """The arguments of a run-list request whose query needs no parsing beyond the above, or
    None for any other (which FastAPI then validates, so its problems stay the route's)."""
    query: dict[str, Any] = {}
    for name, value in request.query_params.multi_items():
        if name in query or not value or text_problem(value) is not None:
            return None
        if name in _TEXT_PARAMS:
            query[name] = value
        elif name == "limit":
            if len(value) > 4 or not (value.isascii() and value.isdigit()):
                return None
            query[name] = int(value)
        elif (
            (name == "status" and value in _STATUSES)
            or (name == "trigger" and value in _TRIGGERS)
            or (name == "view" and value in _VIEWS)
        ):
            query[name] = value
        else:
            return None
    return query


class RunListRoute(APIRoute):
    """`GET /api/v1/runs`, the API's busiest read, with a hot path. A request whose query is
    plain (`plain_query`) skips FastAPI's per-request solving of dependencies and parameters
    (a third of the route's fixed cost): it is checked, authenticated and answered by the same
    functions the dependencies call (`storable_parameters`' check, `auth.requester_of` and
    `auth.viewer`, then `run_page`), in the same order. Every other request takes FastAPI's
    way, so the route's validation problems and its OpenAPI document are FastAPI's."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        general = super().get_route_handler()

        async def handle(request: Request) -> Response:
            query = plain_query(request)
            if query is None:
                return await general(request)
            rt = await get_runtime(request)
            await viewer(await requester_of(request, rt))
            return await run_page(rt, **query)

        return handle


router.add_api_route(
    "/runs",
    list_runs,
    methods=["GET"],
    response_model=RunPageView,
    responses=problem_responses(),
    route_class_override=RunListRoute,
)


@router.get("/runs/{run_id}", response_model=RunView, responses=problem_responses(404))
async def show_run(run_id: RunId, rt: RuntimeDep, _who: Viewer) -> JSONResponse:
    """One run by its id or a unique prefix of at least 6 characters."""
    return JSONResponse(run_dict(await operations.show_run(rt, run_id)))


@router.post(
    "/runs/{run_id}/cancel",
    status_code=202,
    response_model=RunView | ChainRunView,
    responses=problem_responses(403, 404, 409),
)
async def cancel_run(
    run_id: RunId, request: Request, rt: RuntimeDep, who: Operator
) -> JSONResponse:
    """Cancel a queued run (at once) or a running one (its launcher stops it: 202, the run as
    it is now), or, for a chain run's id, end it with its unfinished steps."""

    async def call() -> dict[str, Any]:
        done = await operations.cancel(rt, run_id, requester=who)
        if isinstance(done, CancelledRun):
            return run_dict(done.run)
        view = await operations.show_chain_run(rt, done.chain_run.id)
        return chain_run_dict(view.run, view.steps)

    body = await audited(request, rt, who, action="cancel", target=run_id, call=call)
    return JSONResponse(body, status_code=202)
