"""`/api/v1/runs`: the run log, a page at a time (newest first, keyset cursors), one run, and
cancelling a run (or a chain run) by id."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse

from runlane.api.auth import Operator, Viewer
from runlane.api.deps import RuntimeDep
from runlane.api.inputs import storable_parameters
from runlane.api.models import ChainRunView, RunPageView, RunView
from runlane.api.problems import problem_responses
from runlane.api.writes import audited
from runlane.core.runs import RunStatus, Trigger
from runlane.service import operations
from runlane.service.operations import CancelledRun
from runlane.service.views import chain_run_dict, run_dict

router = APIRouter(prefix="/api/v1", tags=["runs"], dependencies=[Depends(storable_parameters)])

RunId = Annotated[
    str, Path(description="A run's id, or a unique prefix of it (at least 6 characters)")
]

DEFAULT_PAGE = 50


@router.get("/runs", response_model=RunPageView, responses=problem_responses())
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
) -> JSONResponse:
    """The runs newest first (by queued time, then id), filtered; `next_cursor` (null on the
    last page) fetches the next page, which stays right while runs are inserted."""
    page = await operations.list_runs_page(
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
    )
    return JSONResponse(
        {"items": [run_dict(r) for r in page.items], "next_cursor": page.next_cursor}
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
