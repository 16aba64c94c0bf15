"""`/api/v1/launchers` and `/api/v1/schedule`: the launchers that report, and the schedule
table of a range."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from runlane.api.auth import Viewer
from runlane.api.deps import RuntimeDep
from runlane.api.models import LauncherPageView, ScheduleTableView
from runlane.api.problems import problem_responses
from runlane.service import operations
from runlane.service.views import iso, launcher_dict, slot_dict

router = APIRouter(prefix="/api/v1", tags=["status"])

# The API's schedule table is at most this many slots (the CLI's bound is far larger: a
# terminal pages, a JSON answer is held in memory whole).
MAX_API_SCHEDULE_ROWS = 5000


@router.get("/launchers", response_model=LauncherPageView, responses=problem_responses())
async def list_launchers(rt: RuntimeDep, _who: Viewer) -> JSONResponse:
    """Every launcher that has reported, live or stale."""
    states = await operations.list_launchers(rt)
    return JSONResponse({"items": [launcher_dict(s) for s in states], "next_cursor": None})


@router.get("/schedule", response_model=ScheduleTableView, responses=problem_responses())
async def schedule(
    rt: RuntimeDep,
    _who: Viewer,
    start: Annotated[
        str | None, Query(alias="from", description="ISO-8601 time or now (default now)")
    ] = None,
    end: Annotated[
        str | None, Query(alias="to", description="ISO-8601 time or now+7d (default 7 days on)")
    ] = None,
) -> JSONResponse:
    """Every slot of every schedule and chain in [from, to), with its local and UTC time, its
    season and whether it would fire (paused, out of season); at most 5000 slots (a note says
    when more were left out)."""
    table = await operations.schedule_table(rt, start=start, end=end)
    rows = table.rows[:MAX_API_SCHEDULE_ROWS]
    notes = [{"code": n.code, "message": n.message} for n in table.notes]
    if len(table.rows) > MAX_API_SCHEDULE_ROWS:
        notes.append(
            {
                "code": "rows_truncated",
                "message": f"the range holds more than {MAX_API_SCHEDULE_ROWS} slots; shown are "
                f"the first {MAX_API_SCHEDULE_ROWS} (narrow it with from/to)",
            }
        )
    return JSONResponse(
        {
            "start": iso(table.start),
            "end": iso(table.end),
            "items": [slot_dict(r) for r in rows],
            "next_cursor": None,
            "notes": notes,
        }
    )
