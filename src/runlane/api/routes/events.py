"""`POST /api/v1/events`: record an event and start (or join) the runs of the jobs listening
for its key."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from runlane.api.auth import Operator
from runlane.api.deps import RuntimeDep
from runlane.api.inputs import storable_parameters
from runlane.api.models import EventCreate, EventEmittedView
from runlane.api.problems import problem_responses
from runlane.api.writes import Traceparent, audited
from runlane.service import operations
from runlane.service.views import emitted_dict

router = APIRouter(prefix="/api/v1", tags=["events"], dependencies=[Depends(storable_parameters)])


@router.post(
    "/events",
    response_model=EventEmittedView,
    responses=problem_responses(400, 403, 404, 409, 413),
)
async def emit_event(
    body: EventCreate,
    request: Request,
    rt: RuntimeDep,
    who: Operator,
    traceparent: Traceparent = None,
) -> JSONResponse:
    """Record the event `key` with `data` (idempotent by `id`: the same id again returns the
    event as first recorded, `new: false`) and start its listeners' runs."""

    async def call() -> dict[str, Any]:
        emitted = await operations.emit(
            rt,
            body.key,
            body.data,
            requester=who,
            event_id=body.id,
            confirmed=body.confirm,
            traceparent=traceparent,
        )
        return emitted_dict(emitted)

    return JSONResponse(await audited(request, rt, who, action="emit", target=body.key, call=call))
