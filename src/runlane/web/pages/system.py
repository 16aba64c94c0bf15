"""The pages about what drives the runs: `/events` (the recent events with the runs they
started, the catalog's listeners, and "Emit event" for operators), `/launchers` (each
launcher's heartbeat age, queue depth, runs by executor, version, and a warning when its
catalog is not the file's) and `/schedule` (the next days' slots, as `runlane schedule`).

They read `operations.list_events`, `event_listeners`, `status` and `schedule_table`; Emit
event calls `operations.emit` inside `operations.audited` (a listener with `acts: true` asks
the person to type the event's key first).
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from runlane.core.access import Role
from runlane.errors import ConfirmationRequired, Forbidden, RunlaneError
from runlane.service import operations
from runlane.service.operations import Requester
from runlane.service.runtime import Runtime
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

RECENT_EVENTS = 50
MAX_KEY_CHARS = 200
SCHEDULE_DAYS = 2.0
MAX_SCHEDULE_DAYS = 14.0
MAX_SCHEDULE_SLOTS = 2000  # slots the page lists (a note says when the range holds more)


def _may_operate(who: Requester) -> bool:
    """Whether `who` has the operator role at all (emit checks the listeners' jobs itself)."""
    try:
        who.require(Role.OPERATOR, action="emit")
    except Forbidden:
        return False
    return True


async def _events_page(
    request: Request,
    rt: Runtime,
    who: Requester,
    *,
    key: str | None = None,
    status: int = 200,
    error: RunlaneError | None = None,
    form: dict[str, str] | None = None,
    confirming: bool = False,
) -> Response:
    events = await operations.list_events(rt, key=key, limit=RECENT_EVENTS)
    return page(
        request,
        "events.html",
        status=status,
        nav="events",
        events=events,
        listeners=operations.event_listeners(rt),
        key=key or "",
        may_emit=_may_operate(who),
        error=error,
        form=form or {"key": "", "data": ""},
        confirming=confirming,
        data_text=lambda data: json.dumps(data, ensure_ascii=False, sort_keys=True),
    )


@router.get("/events")
async def events_page(
    request: Request,
    rt: WebRuntime,
    who: WebViewer,
    key: Annotated[str | None, Query(max_length=MAX_KEY_CHARS)] = None,
) -> Response:
    """The newest events (of `key`, when given) with the runs each started or joined, and the
    jobs listening for each key."""
    return await _events_page(request, rt, who, key=(key or "").strip() or None)


@router.post("/events")
async def emit_event(request: Request, rt: WebRuntime, who: WebOperator) -> Response:
    """Record an event (its key and JSON data) and start its listeners' runs; 303 back to the
    events of that key."""
    form = await request.form()
    fields = {name: form.get(name) for name in ("key", "data", "confirm")}
    text = {name: value if isinstance(value, str) else "" for name, value in fields.items()}
    key = text["key"].strip()
    typed = text["confirm"] if isinstance(fields["confirm"], str) else None
    shown = {"key": key, "data": text["data"]}
    try:
        data = operations.parse_event_data(text["data"], "data") if text["data"].strip() else {}
        emitted = await operations.audited(
            rt,
            who,
            action="emit",
            target=key,
            remote=remote_of(request),
            call=lambda: operations.emit(rt, key, data, requester=who, confirm=typed),
        )
    except ConfirmationRequired as exc:
        return await _events_page(
            request,
            rt,
            who,
            status=200 if typed is None else exc.http_status,
            error=None if typed is None else exc,
            form=shown,
            confirming=True,
        )
    except RunlaneError as exc:
        if isinstance(exc, Forbidden):
            raise
        return await _events_page(request, rt, who, status=exc.http_status, error=exc, form=shown)
    started = sum(1 for link in emitted.links if link.started)
    joined = len(emitted.links) - started
    said = "recorded" if emitted.created else "already recorded"
    return redirect(
        request,
        "/events?" + urllib.parse.urlencode({"key": key}),
        flash=f"Event {emitted.event.id[:8]} {said}: {started} run(s) started, {joined} joined",
    )


@router.get("/launchers")
async def launchers_page(request: Request, rt: WebRuntime, _who: WebViewer) -> Response:
    """Every launcher that has reported: heartbeat age, queue depth, runs by executor,
    version, and whether it runs the catalog file as it is now."""
    report = await operations.status(rt)
    return page(request, "launchers.html", nav="launchers", report=report)


@router.get("/schedule")
async def schedule_page(
    request: Request,
    rt: WebRuntime,
    _who: WebViewer,
    days: Annotated[float, Query(gt=0, le=MAX_SCHEDULE_DAYS)] = SCHEDULE_DAYS,
) -> Response:
    """The slots of every schedule and chain from now to `days` on, each in its zone and in
    UTC, with whether it would fire (paused, out of season)."""
    table = await operations.schedule_table(rt, days=days)
    rows = table.rows[:MAX_SCHEDULE_SLOTS]
    return page(
        request,
        "schedule.html",
        nav="schedule",
        table=table,
        rows=rows,
        cut=len(table.rows) - len(rows),
        days=days,
        day_choices=(1, 2, 7, 14),
    )
