"""`/api/v1/jobs`: the catalog's jobs (params as a JSON Schema, schedules with their next
slots, pause state, last run), running one now, pausing and resuming one, explaining its
latest slot."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import JSONResponse

from runlane.api.auth import Operator, Viewer
from runlane.api.deps import RuntimeDep
from runlane.api.inputs import storable_parameters
from runlane.api.models import (
    ExplainView,
    JobPageView,
    JobView,
    PauseCreate,
    PauseView,
    ResumeView,
    RunCreate,
    RunView,
)
from runlane.api.problems import problem_responses
from runlane.api.writes import IdempotencyKey, Traceparent, audited, created
from runlane.service import operations
from runlane.service.views import explanation_dict, job_view, pause_dict, run_dict

router = APIRouter(prefix="/api/v1", tags=["jobs"], dependencies=[Depends(storable_parameters)])

JobName = Annotated[str, Path(description="The job's name in the catalog (explain: or a chain's)")]


@router.get("/jobs", response_model=JobPageView, responses=problem_responses())
async def list_jobs(rt: RuntimeDep, _who: Viewer) -> JSONResponse:
    """Every job of the catalog, by name (one page: the catalog is small)."""
    infos = await operations.list_jobs(rt)
    schedules = await operations.job_schedules(rt, [i.name for i in infos if i.schedules])
    items = [job_view(i, schedules.get(i.name, ()), with_last_run=False) for i in infos]
    return JSONResponse({"items": items, "next_cursor": None})


@router.get("/jobs/{job}", response_model=JobView, responses=problem_responses(404))
async def show_job(job: JobName, rt: RuntimeDep, _who: Viewer) -> JSONResponse:
    """One job with its latest run (`unknown_job`: 404)."""
    info = await operations.show_job(rt, job)
    schedules = await operations.job_schedules(rt, [info.name]) if info.schedules else {}
    return JSONResponse(job_view(info, schedules.get(info.name, ()), with_last_run=True))


@router.post(
    "/jobs/{job}/runs",
    status_code=201,
    response_model=RunView,
    responses=problem_responses(400, 403, 404, 409, 413),
)
async def run_job(
    job: JobName,
    request: Request,
    rt: RuntimeDep,
    who: Operator,
    body: RunCreate | None = None,
    idempotency_key: IdempotencyKey = None,
    traceparent: Traceparent = None,
) -> JSONResponse:
    """Queue a run of `job` now (trigger `manual`, `requested_by` the caller). A job with
    `acts: true` needs `confirm` equal to its name (422 `confirmation_required`). With an
    `Idempotency-Key` header a retry returns the first run (header `Idempotency-Replayed:
    true`); the key with another body is 422 `idempotency_key_reused`. No body: no params."""
    wanted = body or RunCreate()

    async def allowed() -> None:
        await operations.authorize_run_job(rt, job, requester=who)

    async def queue(dedupe_key: str | None) -> tuple[dict[str, Any], datetime]:
        queued = await operations.run_job(
            rt,
            job,
            requester=who,
            params=wanted.params,
            confirm=wanted.confirm,
            dedupe_key=dedupe_key,
            traceparent=traceparent,
        )
        return run_dict(queued.run), queued.run.queued_at

    return await created(
        request,
        rt,
        who,
        action="run_job",
        target=job,
        key=idempotency_key,
        body=wanted,
        allowed=allowed,
        make=queue,
        location="/api/v1/runs/{id}",
    )


@router.post(
    "/jobs/{job}/pause",
    response_model=PauseView,
    responses=problem_responses(400, 403, 404),
)
async def pause_job(
    job: JobName, request: Request, rt: RuntimeDep, who: Operator, body: PauseCreate | None = None
) -> JSONResponse:
    """Pause `job`'s scheduled and event runs until resumed, or `until` a time or for a
    duration (`2h`); manual runs still run."""
    wanted = body or PauseCreate()

    async def call() -> dict[str, Any]:
        override = await operations.pause_job(
            rt, job, requester=who, until=wanted.until, reason=wanted.reason
        )
        return pause_dict(job, override)

    return JSONResponse(await audited(request, rt, who, action="pause_job", target=job, call=call))


@router.post(
    "/jobs/{job}/resume",
    response_model=ResumeView,
    responses=problem_responses(403, 404),
)
async def resume_job(job: JobName, request: Request, rt: RuntimeDep, who: Operator) -> JSONResponse:
    """End `job`'s pause (`was_paused`: false when it was not paused)."""

    async def call() -> dict[str, Any]:
        resumed = await operations.resume_job(rt, job, requester=who)
        return {"job": resumed.job, "was_paused": resumed.was_paused}

    return JSONResponse(await audited(request, rt, who, action="resume_job", target=job, call=call))


@router.get("/jobs/{job}/explain", response_model=ExplainView, responses=problem_responses(404))
async def explain_job(
    job: JobName,
    rt: RuntimeDep,
    _who: Viewer,
    at: Annotated[str | None, Query(description="ISO-8601 time, now, or now-2h")] = None,
) -> JSONResponse:
    """Why the job's (or chain's) latest slot at or before `at` fired, was skipped,
    deduplicated, paused, missed or out of season."""
    found = await operations.explain(rt, job, at=at)
    return JSONResponse(explanation_dict(found))
