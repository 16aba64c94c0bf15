"""The jobs page (every job: executor, schedules and their next slots, latest run, pause) and
a job's page (its run form from the params allowlist, the `acts` confirmation, pause, snooze
and resume, its recent runs, and "why did or didn't it run at …?").

Every write calls one operation (`run_job`, `pause_job`, `resume_job`) inside
`operations.audited`; what the operation refuses is shown on the page with its code and
message and the error's status (4xx), and nothing is written.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from starlette.datastructures import FormData

from runlane.catalog import ParamSpec
from runlane.errors import ConfirmationRequired, Forbidden, InvalidArgument, RunlaneError
from runlane.service import operations
from runlane.service.operations import Requester
from runlane.web.render import page
from runlane.web.session import (
    PageRoute,
    WebOperator,
    WebRuntime,
    WebViewer,
    redirect,
    remote_of,
)

router = APIRouter(route_class=PageRoute, include_in_schema=False)

JOBS_PER_PAGE = 100
NEXT_SLOTS = 2  # next slots shown per schedule on the jobs page
JOB_NEXT_SLOTS = 5  # … and on a job's page
RECENT_RUNS = 20
PARAM_PREFIX = "param_"
MAX_FIELD_CHARS = 100_000


@dataclass(frozen=True, slots=True)
class ParamField:
    """One input of a run form, as the template draws it."""

    name: str
    kind: str  # number | checkbox | select | text | tristate (an optional bool)
    optional: bool
    type: str
    choices: tuple[str, ...]
    step: str | None
    value: str


def param_fields(
    params: Mapping[str, ParamSpec], values: Mapping[str, str] | None = None
) -> list[ParamField]:
    """The inputs of a run form for a job's params allowlist (in the catalog's order): a number
    for int and float (`step` 1 or any), a checkbox for a required bool, a select of
    unset/true/false for an optional one, a select for `choice[...]`, text for str.
    `values`: what the person had typed, shown again when a run was refused."""
    given = values or {}
    fields = []
    for name, spec in params.items():
        kind = {"int": "number", "float": "number", "bool": "checkbox", "str": "text"}.get(
            spec.type, "select"
        )
        if spec.type == "bool" and spec.optional:
            kind = "tristate"
        if spec.choices:
            kind = "select"
        step = {"int": "1", "float": "any"}.get(spec.type)
        fields.append(
            ParamField(
                name, kind, spec.optional, spec.type, spec.choices, step, given.get(name, "")
            )
        )
    return fields


def form_params(form: FormData, params: Mapping[str, ParamSpec]) -> dict[str, str]:
    """The params a run form posted, as text (the operation coerces and checks them against
    the allowlist: `params_from_strings`). An empty optional field is left out; an unchecked
    required bool is `false`; fields the allowlist does not name are passed on, so the
    operation refuses them as it would from any face."""
    found: dict[str, str] = {}
    for key, value in form.multi_items():
        if not key.startswith(PARAM_PREFIX) or not isinstance(value, str):
            continue
        if len(value) > MAX_FIELD_CHARS:
            raise InvalidArgument(f"param {key[len(PARAM_PREFIX) :]!r}: the value is too long")
        found[key[len(PARAM_PREFIX) :]] = value
    for name, spec in params.items():
        if spec.type == "bool" and not spec.optional and not spec.choices:
            found[name] = "true" if found.get(name) in ("true", "on") else "false"
        elif name in found and found[name] == "" and spec.optional:
            del found[name]
    return found


async def _may_run(rt: Any, job: str, requester: Requester) -> bool:
    try:
        await operations.authorize_run_job(rt, job, requester=requester)
    except Forbidden:
        return False
    return True


@router.get("/jobs")
async def jobs_page(
    request: Request,
    rt: WebRuntime,
    who: WebViewer,
    q: Annotated[str | None, Query(max_length=200)] = None,
    page_number: Annotated[int, Query(alias="page", ge=1, le=1_000_000)] = 1,
) -> Response:
    """Every job, a page of `JOBS_PER_PAGE` at a time (filtered by `q`, a part of the name)."""
    listing = await operations.list_jobs_page(
        rt, match=q, offset=(page_number - 1) * JOBS_PER_PAGE, limit=JOBS_PER_PAGE
    )
    names = [job.name for job in listing.items]
    schedules = await operations.job_schedules(rt, names, count=NEXT_SLOTS)
    runnable = {name for name in names if await _may_run(rt, name, who)}
    pages = max(1, -(-listing.total // JOBS_PER_PAGE))

    def link(number: int) -> str:
        query = {"page": str(number), **({"q": listing.match} if listing.match else {})}
        return "/jobs?" + urllib.parse.urlencode(query)

    return page(
        request,
        "jobs.html",
        nav="jobs",
        listing=listing,
        schedules=schedules,
        runnable=runnable,
        page_number=page_number,
        pages=pages,
        previous_link=link(page_number - 1) if page_number > 1 else None,
        next_link=link(page_number + 1) if page_number < pages else None,
        q=listing.match or "",
    )


async def _job_page(
    request: Request,
    rt: Any,
    who: Requester,
    job: str,
    *,
    status: int = 200,
    error: RunlaneError | None = None,
    values: Mapping[str, str] | None = None,
    confirming: bool = False,
    explained: Any = None,
    explain_at: str = "",
) -> Response:
    info = await operations.show_job(rt, job)
    schedules = (await operations.job_schedules(rt, [info.name], count=JOB_NEXT_SLOTS))[info.name]
    # The run list's basic view: no params, notes or saved log tails (up to 64 KiB a run).
    recent = await operations.list_run_items_page(
        rt, job=info.name, limit=RECENT_RUNS, view="basic"
    )
    runs = recent.items
    return page(
        request,
        "job.html",
        status=status,
        nav="jobs",
        job=info,
        schedules=schedules,
        runs=runs,
        fields=param_fields(info.params, values),
        may_run=await _may_run(rt, info.name, who),
        error=error,
        confirming=confirming,
        values=values or {},
        explained=explained,
        explain_at=explain_at,
    )


@router.get("/jobs/{job}")
async def job_page(
    request: Request,
    rt: WebRuntime,
    who: WebViewer,
    job: str,
    at: Annotated[str | None, Query(max_length=100)] = None,
) -> Response:
    """A job: its run form, pause/snooze/resume, recent runs; with `at`, why its latest slot
    at or before that time did what it did (`explain`)."""
    explained = None
    error = None
    if at:
        try:
            explained = await operations.explain(rt, job, at=_utc_input(at))
        except InvalidArgument as exc:
            error = exc
    return await _job_page(
        request,
        rt,
        who,
        job,
        status=error.http_status if error else 200,
        error=error,
        explained=explained,
        explain_at=at or "",
    )


def _utc_input(text: str) -> str:
    """A `datetime-local` value (no zone: the form labels it UTC) as ISO text in UTC; any
    other text (`now`, `now-1d`, an ISO time with its zone) as it is."""
    value = text.strip()
    if len(value) in (16, 19) and value[4:5] == "-" and value[10:11] == "T":
        return value + "Z"
    return value


@router.post("/jobs/{job}/run")
async def run_job(request: Request, rt: WebRuntime, who: WebOperator, job: str) -> Response:
    """Run the job now with the form's params; for an `acts: true` job, first a confirmation
    in which the person types the job's name (`confirm`). 303 to the new run's page."""
    info = await operations.show_job(rt, job)
    form = await request.form()
    values = form_params(form, info.params)
    confirm = form.get("confirm")
    typed = confirm if isinstance(confirm, str) else None
    try:
        queued = await operations.audited(
            rt,
            who,
            action="run_job",
            target=info.name,
            remote=remote_of(request),
            call=lambda: operations.run_job(
                rt,
                info.name,
                requester=who,
                params=values,
                params_from_strings=True,
                confirm=typed,
            ),
        )
    except ConfirmationRequired as exc:
        # The first click on Run of an `acts` job: ask for the typed name (a normal step, 200);
        # a name typed wrong is a refusal (422).
        return await _job_page(
            request,
            rt,
            who,
            info.name,
            status=200 if typed is None else exc.http_status,
            error=None if typed is None else exc,
            values=values,
            confirming=True,
        )
    except RunlaneError as exc:
        if isinstance(exc, Forbidden):
            raise
        return await _job_page(
            request, rt, who, info.name, status=exc.http_status, error=exc, values=values
        )
    return redirect(
        request, f"/runs/{queued.run.id}", flash=f"Run {queued.run.id[:8]} of {info.name} queued"
    )


@router.post("/jobs/{job}/pause")
async def pause_job(request: Request, rt: WebRuntime, who: WebOperator, job: str) -> Response:
    """Pause the job (with a reason), or snooze it until a time (UTC)."""
    form = await request.form()
    reason = form.get("reason")
    until = form.get("until")
    until_text = _utc_input(until) if isinstance(until, str) and until.strip() else None
    try:
        await operations.audited(
            rt,
            who,
            action="pause_job",
            target=job,
            remote=remote_of(request),
            call=lambda: operations.pause_job(
                rt,
                job,
                requester=who,
                until=until_text,
                reason=reason.strip() or None if isinstance(reason, str) else None,
            ),
        )
    except InvalidArgument as exc:
        return await _job_page(request, rt, who, job, status=exc.http_status, error=exc)
    return redirect(
        request, f"/jobs/{urllib.parse.quote(job)}", flash="Snoozed" if until_text else "Paused"
    )


@router.post("/jobs/{job}/resume")
async def resume_job(request: Request, rt: WebRuntime, who: WebOperator, job: str) -> Response:
    """End the job's pause or snooze."""
    resumed = await operations.audited(
        rt,
        who,
        action="resume_job",
        target=job,
        remote=remote_of(request),
        call=lambda: operations.resume_job(rt, job, requester=who),
    )
    message = "Resumed" if resumed.was_paused else "The job was not paused"
    return redirect(request, f"/jobs/{urllib.parse.quote(job)}", flash=message)
