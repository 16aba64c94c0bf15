"""Events: record a fact with a key and start the jobs whose `on_event` matches, debounced.

The debounce window of an event is the epoch-aligned bucket of length `debounce` that contains
the event's (database) time. The first event of a bucket starts the run (dedupe key
`job@key@<bucket start>`); later events of the bucket are recorded and linked to that run and
start nothing. With no debounce, every event starts its own run (`job@key@<event id>`). A job
paused or snoozed at the event's time gets a `skipped` (`paused`) row under that key instead.
Emitting the same event id again is a no-op that returns what the first emit did.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from runlane.catalog import Catalog
from runlane.catalog.params import MAX_PARAMS_BYTES
from runlane.core.runs import AcceptResult, RunStatus, Trigger, event_dedupe_key
from runlane.core.trace import child_traceparent
from runlane.errors import ConfigError, ConfirmationRequired, EventIdTaken
from runlane.ports import Event, EventFact, EventLink, EventStore
from runlane.ports.bus import RUNLANE_EVENT_SOURCE
from runlane.service.accept import RunRequest, prepare_run, text_problem
from runlane.service.scheduler import pause_of

log = structlog.get_logger("runlane.events")

AcceptFn = Callable[[RunRequest], Awaitable[AcceptResult]]
CheckFn = Callable[[RunRequest], object]
"""Raises what the accept path would refuse a request with; writes nothing."""

MAX_EVENT_DATA_BYTES = MAX_PARAMS_BYTES
"""The largest an event's data may be, as compact JSON (UTF-8): 1 MiB, as for run params."""
MAX_EVENT_DATA_DEPTH = 64
"""How deeply an event's data may nest objects and arrays."""
MAX_EVENT_TEXT_CHARS = 200
"""The longest an event's key and id may be: they are names, shown in lists and logs."""
MAX_EVENT_TEXT_BYTES = 255
"""...and their most bytes as UTF-8: on the RabbitMQ bus the key is a routing key and the id a
message id, AMQP short strings (200 characters of `é` would be 400 bytes, and a fact no frame
can carry)."""


class BadEvent(ConfigError):
    """The event's key, id or data cannot be recorded."""

    code = "bad_event"
    exit_code = 2
    http_status = 422


def check_event(key: str, event_id: str | None, data: Mapping[str, Any]) -> None:
    """BadEvent, naming the place, for a key, id or data that could not be stored faithfully:
    strings with U+0000 or lone surrogates, a key or id longer than MAX_EVENT_TEXT_CHARS, NaN
    or Infinity, nesting deeper than
    MAX_EVENT_DATA_DEPTH, or more than MAX_EVENT_DATA_BYTES."""
    if not key or any(c.isspace() for c in key):
        raise BadEvent(f"an event key is one word such as rumor.signal_created, got {key!r}")
    for what, text in (("event key", key), ("event id", event_id)):
        if text is not None and (problem := text_problem(text)) is not None:
            raise BadEvent(f"the {what} {problem}")
        if text is not None and len(text) > MAX_EVENT_TEXT_CHARS:
            raise BadEvent(
                f"the {what} is {len(text)} characters long; at most {MAX_EVENT_TEXT_CHARS}"
            )
        if text is not None and len(text.encode()) > MAX_EVENT_TEXT_BYTES:
            raise BadEvent(
                f"the {what} is {len(text.encode())} bytes as UTF-8; at most "
                f"{MAX_EVENT_TEXT_BYTES} (the bus publishes it as an AMQP routing key or "
                "message id)"
            )
    if event_id is not None and not event_id.strip():
        raise BadEvent("the event id is empty")
    # Iterative, so deep nesting is reported rather than overflowing the stack.
    stack: list[tuple[str, object, int]] = [("data", dict(data), 1)]
    while stack:
        where, value, depth = stack.pop()
        if depth > MAX_EVENT_DATA_DEPTH:
            raise BadEvent(f"event data is nested deeper than {MAX_EVENT_DATA_DEPTH} levels")
        if isinstance(value, str):
            if (problem := text_problem(value)) is not None:
                raise BadEvent(f"event {where} {problem}")
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise BadEvent(f"event {where} is {value!r}; JSON has no NaN or Infinity")
        elif isinstance(value, Mapping):
            for k, v in value.items():
                if not isinstance(k, str):
                    raise BadEvent(f"event {where} has a key that is not a string: {k!r}")
                if (problem := text_problem(k)) is not None:
                    raise BadEvent(f"a key in event {where} {problem}")
                stack.append((f"{where}.{k}", v, depth + 1))
        elif isinstance(value, list | tuple):
            stack.extend((f"{where}[{i}]", v, depth + 1) for i, v in enumerate(value))
        elif value is not None and not isinstance(value, bool | int):
            raise BadEvent(f"event {where} is not a JSON value: {type(value).__name__}")
    size = len(json.dumps(dict(data), separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_EVENT_DATA_BYTES:
        raise BadEvent(
            f"event data is {size} bytes as JSON; the limit is {MAX_EVENT_DATA_BYTES} bytes (1 MiB)"
        )


def debounce_bucket(at: datetime, debounce_seconds: float) -> datetime:
    """Start of the epoch-aligned window of length `debounce_seconds` containing `at`."""
    ts = at.timestamp()
    start = ts - (ts % debounce_seconds)
    return datetime.fromtimestamp(start, UTC)


def event_run_key(job: str, key: str, event: Event, debounce_seconds: float) -> str:
    if debounce_seconds <= 0:
        return f"{job}@{key}@{event.id}"
    return event_dedupe_key(job, key, debounce_bucket(event.occurred_at, debounce_seconds))


def subscribers(catalog: Catalog, key: str) -> list[tuple[str, float]]:
    """(job, debounce seconds) for every job with an `on_event` entry for `key`."""
    found: list[tuple[str, float]] = []
    for name in catalog.job_names():
        for trigger in catalog.jobs[name].on_event:
            if trigger.key == key:
                found.append((name, trigger.debounce))
    return found


@dataclass(frozen=True, slots=True)
class Emitted:
    event: Event
    created: bool  # False: this event id was already recorded
    links: list[EventLink]
    runs: list[AcceptResult]


async def emit_event(
    store: EventStore,
    catalog: Catalog,
    accept: AcceptFn,
    key: str,
    data: Mapping[str, Any] | None = None,
    *,
    event_id: str | None = None,
    by_person: bool = False,
    confirmed: bool = False,
    check: CheckFn | None = None,
    traceparent: str | None = None,
    external_source: str | None = None,
) -> Emitted:
    """Record the event and start (or join) the runs of every job listening for `key`.

    An event a person emits (`by_person`: `runlane emit`) that starts a job with `acts: true`
    needs `confirmed`, as `runlane run` of that job would: raises `ConfirmationRequired`
    before anything is recorded. Events from systems (the API, other jobs) need none.

    `check` raises what `accept` would refuse a listener's run with, writing nothing (the
    runtime's `check_accept`; by default the catalog's own checks, `prepare_run`). Every
    listener is checked before the event is recorded, so a refused emit writes nothing: not
    the event, nor the run of a listener that comes before the refused one.

    `traceparent` (checked by the caller): the trace the runs it starts join, each with a
    span id of its own (a run it joins, debounced, keeps the trace it started with).

    A new event of runlane's own (`runlane emit`, the API, MCP, the web UI) is published as a
    fact on the bus (`event:<key>`, source RUNLANE_EVENT_SOURCE) in the transaction that
    records it, when the bus carries facts. `external_source`: the CloudEvents source of an
    event another service published on the bus, which is recorded but never published again
    (it is on the bus already; republishing it would loop)."""
    check_event(key, event_id, data or {})
    listeners = subscribers(catalog, key)
    if by_person and not confirmed:
        acting = sorted(job for job, _ in listeners if catalog.resolve(job).acts)
        if acting:
            raise ConfirmationRequired(
                f"event {key!r} starts jobs that act on the outside world (acts: true): "
                f"{', '.join(acting)}; confirm it: --yes on the CLI, confirm: true through the "
                "API or MCP"
            )
    for job, _ in listeners:
        # What refuses a run depends on its job and trigger only, not on its dedupe key, event
        # id or pause, which are known once the event is recorded.
        request = RunRequest(job=job, trigger=Trigger.EVENT, requested_by="event")
        if check is None:
            prepare_run(catalog, request)
        else:
            check(request)
    fact = None if external_source is not None else EventFact(RUNLANE_EVENT_SOURCE, traceparent)
    event, created = await store.record_event(
        event_id or str(uuid.uuid4()), key, dict(data or {}), fact=fact
    )
    if event.key != key:
        # The id is taken by an event of another key: its listeners are not the ones checked
        # (or meant) above, so nothing is started for it.
        raise EventIdTaken(
            f"event id {event.id!r} was recorded with key {event.key!r}, not {key!r}: give "
            "another --id, or the same key to repeat that event"
        )
    links: list[EventLink] = []
    runs: list[AcceptResult] = []
    overrides = await store.overrides() if listeners else {}
    for job, debounce in listeners:
        # A paused (or snoozed) job's window is recorded `skipped` (`paused`) under the key its
        # run would have had, as the scheduler records a paused slot: judged at the event's time.
        paused = pause_of(overrides.get(job), event.occurred_at) is not None
        result = await accept(
            RunRequest(
                job=job,
                trigger=Trigger.EVENT,
                dedupe_key=event_run_key(job, event.key, event, debounce),
                event_id=event.id,
                requested_by="event",
                record_skipped="paused" if paused else None,
                traceparent=child_traceparent(traceparent),
            )
        )
        runs.append(result)
        # This event started the run, unless the run was recorded as skipped (the job paused, or
        # `overlap: forbid` and still busy with the previous window's run): then nothing started.
        started = result.run.event_id == event.id and result.run.status is not RunStatus.SKIPPED
        links.append(EventLink(event.id, result.run.id, job, started))
    await store.link_event_runs(links)
    log.info("event.recorded", event_id=event.id, key=event.key, new=created, runs=len(links))
    return Emitted(event, created, links, runs)
