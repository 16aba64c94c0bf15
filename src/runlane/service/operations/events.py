"""Events: record one and start (or join, when debounced) the jobs listening for its key; the
recent events with the runs they started; the catalog's listeners."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runlane.core.access import Role
from runlane.core.runs import AcceptResult
from runlane.errors import Forbidden
from runlane.ports import Event, EventLink
from runlane.service.accept import PERSON_TRIGGERS
from runlane.service.operations.arguments import Requester, check_limit
from runlane.service.operations.notices import Notice, queued_run_notices
from runlane.service.runtime import Runtime


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
) -> EventEmitted:
    """Record the event `key` (idempotent by `event_id`) and start its listeners' runs. An
    event a person emits that starts a job with `acts: true` needs `confirmed`. Refusals:
    `bad_event`, `event_id_taken`, `confirmation_required`, and each listener's accept refusal
    (checked for all of them before anything is written); `forbidden` unless the requester
    may operate every job listening for `key` (each run it would start or join), and for a
    key nobody listens to unless the requester may operate every job (a job-scoped token may
    not: the event would still take its id, so another job's later event with that id would be
    refused as `event_id_taken`)."""
    from runlane.service.events import emit_event, subscribers

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
        confirmed=confirmed,
        check=rt.check_accept,
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
