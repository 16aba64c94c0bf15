"""`/api/v1/chains` and `/api/v1/chain-runs`: the catalog's chains, starting a chain run, and a
chain run as a tree of steps with their statuses."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse

from runlane.api.auth import Operator, Viewer
from runlane.api.deps import RuntimeDep
from runlane.api.inputs import storable_parameters
from runlane.api.models import ChainPageView, ChainRunCreate, ChainRunPageView, ChainRunView
from runlane.api.problems import problem_responses
from runlane.api.writes import IdempotencyKey, Traceparent, created
from runlane.service import operations
from runlane.service.operations import ChainInfo
from runlane.service.views import chain_run_dict

router = APIRouter(prefix="/api/v1", tags=["chains"], dependencies=[Depends(storable_parameters)])

ChainName = Annotated[str, Path(description="The chain's name in the catalog")]
ChainRunId = Annotated[
    str, Path(description="A chain run's id, or a unique prefix of it (at least 6 characters)")
]


def chain_dict(info: ChainInfo) -> dict[str, Any]:
    return {
        "chain": info.name,
        "description": info.description,
        "schedule": info.schedule,
        "timezone": info.timezone,
        "max_duration_seconds": info.max_duration_seconds,
        "steps": [
            {
                "step": s.step,
                "job": s.job,
                "after": [{"step": p, "on": on} for p, on in s.after],
                "latest": s.latest,
            }
            for s in info.steps
        ],
    }


@router.get("/chains", response_model=ChainPageView, responses=problem_responses())
async def list_chains(rt: RuntimeDep, _who: Viewer) -> JSONResponse:
    """Every chain of the catalog, by name, with its steps in dependency order."""
    chains = await operations.list_chains(rt)
    return JSONResponse({"items": [chain_dict(c) for c in chains], "next_cursor": None})


@router.post(
    "/chains/{chain}/runs",
    status_code=201,
    response_model=ChainRunView,
    responses=problem_responses(400, 403, 404, 409),
)
async def run_chain(
    chain: ChainName,
    request: Request,
    rt: RuntimeDep,
    who: Operator,
    body: ChainRunCreate | None = None,
    idempotency_key: IdempotencyKey = None,
    traceparent: Traceparent = None,
) -> JSONResponse:
    """Start a run of `chain` now (its first steps are queued). A chain with a step whose job
    has `acts: true` needs `confirm` equal to the chain's name. `Idempotency-Key` as for runs."""
    wanted = body or ChainRunCreate()

    async def allowed() -> None:
        await operations.authorize_run_chain(rt, chain, requester=who)

    async def start(dedupe_key: str | None) -> tuple[dict[str, Any], datetime]:
        started = await operations.run_chain(
            rt,
            chain,
            requester=who,
            confirm=wanted.confirm,
            dedupe_key=dedupe_key,
            traceparent=traceparent,
        )
        run = started.view.run
        return chain_run_dict(run, started.view.steps), run.started_at

    return await created(
        request,
        rt,
        who,
        action="run_chain",
        target=chain,
        key=idempotency_key,
        body=wanted,
        allowed=allowed,
        make=start,
        location="/api/v1/chain-runs/{id}",
    )


@router.get("/chain-runs", response_model=ChainRunPageView, responses=problem_responses())
async def list_chain_runs(
    rt: RuntimeDep,
    _who: Viewer,
    limit: Annotated[int, Query(description="1 to 10000 chain runs, newest first")] = 20,
) -> JSONResponse:
    """The newest chain runs first (`runlane chains`), each with its steps and their statuses
    (one page: `next_cursor` is null)."""
    views = await operations.list_chain_runs(rt, limit=limit)
    return JSONResponse(
        {"items": [chain_run_dict(v.run, v.steps) for v in views], "next_cursor": None}
    )


@router.get(
    "/chain-runs/{chain_run_id}", response_model=ChainRunView, responses=problem_responses(404)
)
async def show_chain_run(chain_run_id: ChainRunId, rt: RuntimeDep, _who: Viewer) -> JSONResponse:
    """One chain run by id or unique prefix, with its steps and their statuses."""
    view = await operations.show_chain_run(rt, chain_run_id)
    return JSONResponse(chain_run_dict(view.run, view.steps))
