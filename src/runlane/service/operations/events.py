"""Events: record one and start (or join, when debounced) the jobs listening for its key; the
recent events with the runs they started; the catalog's listeners."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runlane.catalog.params import MAX_PARAMS_BYTES
from runlane.core.access import Role
from runlane.core.runs import AcceptResult
from runlane.errors import Forbidden, InvalidArgument
from runlane.ports import Event, EventLink
from runlane.service.accept import PERSON_TRIGGERS
from runlane.service.events import BadEvent
from runlane.service.operations.arguments import (
    Requester,
    check_limit,
    check_traceparent,
    confirms,
)
from runlane.service.operations.notices import Notice, queued_run_notices
from runlane.service.runtime import Runtime

MAX_DATA_BYTES = MAX_PARAMS_BYTES  # an event's data a person types, as its compact JSON
MAX_DATA_DEPTH = 64  # how deeply that data may nest objects and arrays


@dataclass(frozen=True, slots=True)
class EventEmitted:
    """The event (`created`: False when its id was already recorded), a link and an accept
    result per listening job, and what the person should know (`no_launcher`, …)."""

    event: Event
    created: bool
    links: tuple[EventLink, ...]
    runs: tuple[AcceptResult, ...]
    warnings: tuple[Notice, ...] = ()


async def emit(
    rt: Runtime,
    key: str,
    data: Mapping[str, Any] | None = None,
    *,
    requester: Requester,
    event_id: str | None = None,
    confirmed: bool = False,
    traceparent: str | None = None,
    confirm: str | None = None,
) -> EventEmitted:
    """Record the event `key` (idempotent by `event_id`) and start its listeners' runs. An
    event a person emits that starts a job with `acts: true` needs `confirmed`. Refusals:
    `bad_event`, `event_id_taken`, `confirmation_required`, and each listener's accept refusal
    (checked for all of them before anything is written); `forbidden` unless the requester
    may operate every job listening for `key` (each run it would start or join), and for a
    key nobody listens to unless the requester may operate every job (a job-scoped token may
    not: the event would still take its id, so another job's later event with that id would be
    refused as `event_id_taken`). `traceparent`: the caller's trace, which the runs it starts
    join (`invalid_traceparent`). `confirm`: the key a person typed (the web UI); it confirms
    when it is the event's key, as `confirmed` (the CLI's --yes) does."""
    from runlane.service.events import emit_event, subscribers

    trace = check_traceparent(traceparent)
    listeners = sorted({job for job, _ in subscribers(rt.require_catalog(), key)})
    requester.require(Role.OPERATOR, jobs=listeners, action="emit")
    if not listeners and requester.access is not None and requester.access.jobs:
        raise Forbidden(
            f"emit of event key {key!r}: no job listens to it, and a token scoped to jobs "
            f"matching {', '.join(requester.access.jobs)} may only emit events its jobs "
            "listen to (an unheard event would still take its id from every other job)"
        )

    emitted = await emit_event(
        rt.store,
        rt.require_catalog(),
        rt.accept,
        key,
        data or {},
        event_id=event_id,
        by_person=requester.trigger in PERSON_TRIGGERS,
        confirmed=confirmed or confirms(confirm, key),
        check=rt.check_accept,
        traceparent=trace,
    )
    runs = [r.run for r in emitted.runs]
    warnings = await queued_run_notices(rt, runs, always=False)
    return EventEmitted(
        emitted.event, emitted.created, tuple(emitted.links), tuple(emitted.runs), tuple(warnings)
    )


@dataclass(frozen=True, slots=True)
class EventListener:
    """A job that listens for an event key (its `on_event` entry) and the debounce window in
    which further events of the key join the run the first one started."""

    key: str
    job: str
    debounce_seconds: float


@dataclass(frozen=True, slots=True)
class RecentEvent:
    """A recorded event and the runs it started or joined."""

    event: Event
    links: tuple[EventLink, ...]


def event_listeners(rt: Runtime) -> tuple[EventListener, ...]:
    """Every `on_event` entry of the catalog, by key, then job."""
    cat = rt.require_catalog()
    found = [
        EventListener(trigger.key, name, trigger.debounce)
        for name in cat.job_names()
        for trigger in cat.jobs[name].on_event
    ]
    return tuple(sorted(found, key=lambda li: (li.key, li.job)))


async def list_events(
    rt: Runtime, *, key: str | None = None, limit: int = 50
) -> tuple[RecentEvent, ...]:
    """The newest recorded events first (of `key`, when given; `limit`: 1 to 10000), each with
    the runs it started or joined."""
    check_limit(limit)
    events = await rt.store.list_events(key=key, limit=limit)
    return tuple([RecentEvent(e, tuple(await rt.store.event_links(e.id))) for e in events])


class _NotJsonConstant(ValueError):
    """NaN or Infinity in typed data: data no event can record (`bad_event`), not bad JSON."""


def _no_constants(name: str) -> Any:
    raise _NotJsonConstant(f"{name} is not allowed (JSON has no NaN or Infinity)")


def parse_event_data(text: str, name: str = "--data") -> dict[str, Any]:
    """An event's data as a person types it (`emit --data`, the web UI's emit form; `name`
    names the field in the messages): a JSON object of at most MAX_DATA_BYTES, nested at most
    MAX_DATA_DEPTH deep, without NaN or Infinity: `bad_event` otherwise, as `emit` refuses such
    data from every face; `invalid_argument` for text that is not a JSON object."""
    size = len(text.encode("utf-8", "surrogateescape"))
    if size > MAX_DATA_BYTES:
        raise BadEvent(f"{name} is {size} bytes; the limit is {MAX_DATA_BYTES} bytes (1 MiB)")
    depth = _nesting(text) if text.count("[") + text.count("{") > MAX_DATA_DEPTH else 0
    if depth > MAX_DATA_DEPTH:
        raise BadEvent(f"{name} is nested {depth} levels deep; the limit is {MAX_DATA_DEPTH}")
    try:
        parsed = json.loads(text, parse_constant=_no_constants)
    except RecursionError:  # pragma: no cover - _nesting catches this first
        raise BadEvent(f"{name} is nested too deeply; the limit is {MAX_DATA_DEPTH}") from None
    except _NotJsonConstant as exc:
        raise BadEvent(f"{name}: {exc}") from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):  # Python's own advice is no use here
            raise InvalidArgument(
                f"{name} holds a whole number of more than {sys.get_int_max_str_digits()} "
                "digits; send it as a string"
            ) from None
        raise InvalidArgument(f"{name} is not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise InvalidArgument(f"{name} must be a JSON object, got {type(parsed).__name__}")
    return parsed


def _nesting(text: str) -> int:
    """The deepest nesting of `[` and `{` outside strings (an upper bound is enough: invalid
    JSON is reported by the parser)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest
