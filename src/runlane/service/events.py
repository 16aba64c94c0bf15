"""Events: record a fact with a key and start the jobs whose `on_event` matches, debounced.

The debounce window of an event is the epoch-aligned bucket of length `debounce` that contains
the event's (database) time. The first event of a bucket starts the run (dedupe key
`job@key@<bucket start>`); later events of the bucket are recorded and linked to that run and
start nothing. With no debounce, every event starts its own run (`job@key@<event id>`).
Emitting the same event id again is a no-op that returns what the first emit did.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from runlane.catalog import Catalog
from runlane.core.runs import AcceptResult, Trigger, event_dedupe_key
from runlane.errors import ConfigError
from runlane.ports import Event, EventLink, Store
from runlane.service.accept import RunRequest

log = structlog.get_logger("runlane.events")

AcceptFn = Callable[[RunRequest], Awaitable[AcceptResult]]


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
    store: Store,
    catalog: Catalog,
    accept: AcceptFn,
    key: str,
    data: Mapping[str, Any] | None = None,
    *,
    event_id: str | None = None,
) -> Emitted:
    """Record the event and start (or join) the runs of every job listening for `key`."""
    if not key or any(c.isspace() for c in key):
        raise ConfigError(f"an event key is one word such as rumor.signal_created, got {key!r}")
    event, created = await store.record_event(event_id or str(uuid.uuid4()), key, dict(data or {}))
    links: list[EventLink] = []
    runs: list[AcceptResult] = []
    for job, debounce in subscribers(catalog, event.key):
        result = await accept(
            RunRequest(
                job=job,
                trigger=Trigger.EVENT,
                dedupe_key=event_run_key(job, event.key, event, debounce),
                event_id=event.id,
                requested_by="event",
            )
        )
        runs.append(result)
        started = result.created or result.run.event_id == event.id
        links.append(EventLink(event.id, result.run.id, job, started))
    await store.link_event_runs(links)
    log.info("event.recorded", event_id=event.id, key=event.key, new=created, runs=len(links))
    return Emitted(event, created, links, runs)
