"""The runs pages: `/runs` (the run list with its filters and keyset pages, kept live by
`static/runs.js`) and `/runs/{id}` (every field of a run, its attempts, its error explained,
the tail of its log rendered here and followed live by `static/log.js`, and Cancel).

The list is `operations.list_run_items_page` (what the API's `GET /api/v1/runs` serves), the tail
`operations.run_output_tail`; Cancel calls `operations.cancel` inside `operations.audited`.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from fastapi import APIRouter, Request, Response

from runlane.core.run_errors import explain_error_code
from runlane.core.runs import Run, RunStatus, Trigger
from runlane.errors import Forbidden, InvalidArgument, NotCancellable, RunlaneError
from runlane.service import operations
from runlane.service.operations import Requester
from runlane.service.runtime import Runtime
from runlane.web.render import page
from runlane.web.session import (
    PageRoute,
    ViewerPageRoute,
    WebOperator,
    WebRuntime,
    WebViewer,
    redirect,
    remote_of,
)

router = APIRouter(route_class=PageRoute, include_in_schema=False)

RUNS_PER_PAGE = 50
# The run page's log: the last lines rendered with the page, at most this many bytes of them.
TAIL_LINES = 200
TAIL_BYTES = 256 * 1024
# How many lines the live log keeps in the page (log.js drops the oldest beyond).
LIVE_LINES = 2000
FILTERS = ("job", "status", "trigger", "requested_by", "since", "until")
# The filter form's choices (tuples: `render.select_options` keeps their options built).
STATUS_CHOICES = tuple(s.value for s in RunStatus)
TRIGGER_CHOICES = tuple(t.value for t in Trigger)
MAX_FILTER_CHARS = 200
MAX_CURSOR_CHARS = 400
# How the executors name a run's execution (`external_id`) on the run page.
EXTERNAL_ID_LABELS = {"pod": "Kubernetes Job", "slurm": "Slurm job id", "inline": "Process id"}


def _blank_is_none(value: str | None) -> str | None:
    """An empty filter field (a form submitted with it blank) filters nothing."""
    return value.strip() or None if value is not None else None


def _query_filters(request: Request) -> tuple[dict[str, str | None], str | None]:
    """The page's filters and cursor from the query, read here rather than declared as the
    route's parameters: FastAPI's solving of seven optional parameters was a tenth of the
    page's time, which is to be the API's (`GET /api/v1/runs`). As FastAPI read them: the last
    of repeated values; blank is none; more than MAX_FILTER_CHARS (a cursor: 400) or text the
    database cannot compare is `invalid_argument` (the error page, 422)."""
    query = request.query_params
    found: dict[str, str | None] = {}
    for name in (*FILTERS, "cursor"):
        values = query.getlist(name)
        value = values[-1] if values else None
        if value is not None:
            limit = MAX_CURSOR_CHARS if name == "cursor" else MAX_FILTER_CHARS
            if len(value) > limit:
                raise InvalidArgument(f"parameter {name!r}: at most {limit} characters")
            if (problem := operations.text_problem(value)) is not None:
                raise InvalidArgument(f"parameter {name!r} {problem}")
        found[name] = _blank_is_none(value)
    cursor = found.pop("cursor")
    return found, cursor


async def runs_page(request: Request, rt: WebRuntime, _who: WebViewer) -> Response:
    """The runs newest first, filtered by the GET parameters (`job`, `status`, `trigger`,
    `requested_by`, `since`, `until`), a page at a time ("Older runs" carries the `cursor`).
    A filter the operation refuses is shown with its message, 422."""
    given, cursor = _query_filters(request)
    filters = {k: v for k, v in given.items() if v is not None}
    error: RunlaneError | None = None
    items: list[dict[str, Any]] = []
    older = None
    try:
        # The API's rows (`render.run_rows` renders them): no `Run` per row, as the API; its
        # basic view, which reads no params, notes or saved log tails (up to 64 KiB a run).
        listing = await operations.list_run_items_page(
            rt, **filters, limit=RUNS_PER_PAGE, cursor=cursor, view="basic"
        )
    except InvalidArgument as exc:
        error = exc
    else:
        items = listing.items
        if listing.next_cursor is not None:
            older = "/runs?" + urllib.parse.urlencode({**filters, "cursor": listing.next_cursor})
    # What runs.js asks the API for: the same filters, the first page only (a later page is
    # history: nothing new arrives in it).
    live = None
    if error is None and not cursor:
        live = "/api/v1/runs?" + urllib.parse.urlencode(
            {**filters, "limit": RUNS_PER_PAGE, "view": "basic"}
        )
    return page(
        request,
        "runs.html",
        status=error.http_status if error else 200,
        nav="runs",
        runs=items,
        filters=filters,
        given={k: v or "" for k, v in given.items()},
        statuses=STATUS_CHOICES,
        triggers=TRIGGER_CHOICES,
        error=error,
        older=older,
        first_page="/runs?" + urllib.parse.urlencode(filters) if cursor else None,
        live_url=live,
    )


# Registered here rather than by a decorator: `route_class_override` (called without FastAPI's
# per-request solving of its parameters) is an argument of `add_api_route` only.
router.add_api_route("/runs", runs_page, methods=["GET"], route_class_override=ViewerPageRoute)


async def _may_cancel(run: Run, requester: Requester) -> bool:
    if run.status.is_final:
        return False
    try:
        operations.authorize_cancel(run, requester=requester)
    except Forbidden:
        return False
    return True


async def _run_page(
    request: Request,
    rt: Runtime,
    who: Requester,
    run_id: str,
    *,
    status: int = 200,
    error: RunlaneError | None = None,
) -> Response:
    run = await operations.show_run(rt, run_id)
    attempts = await operations.attempt_chain(rt, run)
    tail = await operations.run_output_tail(rt, run, lines=TAIL_LINES, max_bytes=TAIL_BYTES)
    zone = _job_zone(rt, run.job)
    follow = None
    if not run.status.is_final:
        follow = f"/api/v1/runs/{run.id}/logs?" + urllib.parse.urlencode(
            {"follow": "true", "after": tail.end_offset}
        )
    return page(
        request,
        "run.html",
        status=status,
        nav="runs",
        run=run,
        zone=zone,
        times=run_times(run),
        attempts=attempts,
        tail=tail,
        follow_url=follow,
        live_lines=LIVE_LINES,
        params_text=_params_text(run),
        error_text=explain_error_code(run.error_code),
        external_label=EXTERNAL_ID_LABELS.get(run.executor, "External id"),
        may_cancel=await _may_cancel(run, who),
        error=error,
    )


def _job_zone(rt: Runtime, job: str) -> str | None:
    """The zone of the job's first schedule (the "job's zone" of the time switch), if any."""
    try:
        cat = rt.require_catalog()
    except RunlaneError:
        return None
    spec = cat.jobs.get(job)
    if spec is None or not spec.schedules:
        return None
    return spec.schedules[0].tz or cat.global_.timezone


def _params_text(run: Run) -> str:
    """The run's params as indented JSON; the stored text when it is not valid JSON."""
    if run.params is None:
        return run.params_raw
    return json.dumps(run.params, indent=2, ensure_ascii=False, sort_keys=True)


@router.get("/runs/{run_id}")
async def run_page(request: Request, rt: WebRuntime, who: WebViewer, run_id: str) -> Response:
    """One run by id or unique prefix: every field, its attempts, its log's tail, Cancel."""
    return await _run_page(request, rt, who, run_id)


@router.post("/runs/{run_id}/cancel")
async def cancel_run(request: Request, rt: WebRuntime, who: WebOperator, run_id: str) -> Response:
    """Cancel the run (queued: at once; running: its launcher stops it); back to its page."""
    run = await operations.show_run(rt, run_id)
    try:
        await operations.audited(
            rt,
            who,
            action="cancel",
            target=run.id,
            remote=remote_of(request),
            call=lambda: operations.cancel(rt, run.id, requester=who),
        )
    except NotCancellable as exc:
        return await _run_page(request, rt, who, run.id, status=exc.http_status, error=exc)
    return redirect(
        request, f"/runs/{run.id}", flash=f"Run {run.id[:8]} cancelled (or asked to stop)"
    )


def run_times(run: Run) -> list[tuple[str, Any]]:
    """The run's times in the order they happen, as (label, datetime or None)."""
    return [
        ("Queued", run.queued_at),
        ("Scheduled for", run.scheduled_for),
        ("Not before", run.not_before),
        ("Expires from the queue", run.queue_expires_at),
        ("Started", run.started_at),
        ("Deadline", run.deadline_at),
        ("Cancel requested", run.cancel_requested_at),
        ("Finished", run.finished_at),
    ]
