"""The one accept path: every trigger turns its request into a run command here.

A face (CLI, API, MCP), the scheduler, chains and events all call `accept_run`. It validates the
request against the catalog (job exists, params match the allowlist and types, `acts` jobs are
confirmed, payload size), decides the dedupe key and the overlap action for the trigger, and asks
the store to write the queued row (+ outbox row) in one transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from runlane.catalog.params import coerce_params
from runlane.core.runs import (
    AcceptResult,
    NewRun,
    OverlapAction,
    RunStatus,
    Trigger,
    first_attempt_key,
)
from runlane.errors import ConfirmationRequired, InvalidArgument, ParamError, RunRefused
from runlane.ports import RunLog

if TYPE_CHECKING:
    from runlane.catalog import Catalog, ResolvedJob

PERSON_TRIGGERS = frozenset({Trigger.MANUAL, Trigger.CLI, Trigger.MCP})
# The longest dedupe key or requested_by a run is written with, in UTF-8 bytes: PostgreSQL
# indexes both, and refuses an index entry past ~2.7 KB once compressed (SQLite takes any), so
# one limit, well inside it, makes both stores take and refuse the same.
MAX_KEY_BYTES = 1000


@dataclass(frozen=True, slots=True)
class RunRequest:
    """What a trigger asks for. `params` are raw: strings from a CLI, JSON values from an API."""

    job: str
    trigger: Trigger
    params: Mapping[str, object] | None = None
    params_from_strings: bool = False
    requested_by: str | None = None
    confirmed: bool = False  # `acts: true` jobs need an explicit yes from a person
    dedupe_key: str | None = None  # schedule/chain/event keys; None → fresh UUID
    parent_run_id: str | None = None
    chain_root_id: str | None = None
    event_id: str | None = None
    scheduled_for: datetime | None = None
    queue_ttl_seconds: float | None = None  # None → the trigger's default
    traceparent: str | None = None
    downstream: list[str] | None = None
    # Set by the scheduler and chains to record a slot or step that will not run (`missed`,
    # `paused`, `upstream_failed`, `chain_timeout`): the row is written `skipped` with this
    # `end_reason`, under the same dedupe key a run would have had.
    record_skipped: str | None = None


def text_problem(text: str) -> str | None:
    """Why `text` cannot be stored (PostgreSQL refuses U+0000 and neither database takes a lone
    surrogate, which is how Python carries bytes that were not UTF-8), or None."""
    if "\x00" in text:
        return "contains U+0000 (a NUL character)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"is not valid UTF-8 (a lone surrogate {text[exc.start]!r} at position {exc.start})"
    return None


def check_param_text(job: str, params: Mapping[str, object]) -> None:
    """ParamError naming every param whose name or text could not be stored."""
    problems: list[tuple[str | None, str]] = []
    for name, value in params.items():
        if isinstance(name, str) and (problem := text_problem(name)) is not None:
            problems.append((name, f"param name {name!r} {problem}"))
        elif isinstance(value, str) and (problem := text_problem(value)) is not None:
            problems.append((str(name), f"param {name!r} {problem}"))
    if problems:
        raise ParamError(f"job {job!r}: " + "; ".join(p for _, p in problems), problems)


def overlap_action_for(job: ResolvedJob, trigger: Trigger) -> OverlapAction:
    """`forbid` refuses a person (409 / exit 3) and records a machine trigger as `skipped`."""
    if job.overlap != "forbid":
        return "none"
    return "refuse" if trigger in PERSON_TRIGGERS else "skip"


def choose_executor(
    job: ResolvedJob, available: Collection[str], pod_fallback: str
) -> tuple[str, str | None]:
    """The executor a run will use, and a note when it is not the one the catalog asked for."""
    if job.executor in available:
        return job.executor, None
    if job.executor == "pod" and pod_fallback == "refuse":
        raise RunRefused(
            f"job {job.name!r} runs as a Kubernetes pod, but no cluster is configured "
            "and RUNLANE_POD_FALLBACK=refuse"
        )
    if "inline" not in available:
        raise RunRefused(f"job {job.name!r}: executor {job.executor!r} is not available here")
    reason = "no_cluster_fallback" if job.executor == "pod" else f"no_{job.executor}_fallback"
    return "inline", reason


def prepare_run(
    catalog: Catalog,
    request: RunRequest,
    *,
    available_executors: Collection[str] = ("inline",),
    pod_fallback: str = "inline",
) -> tuple[NewRun, OverlapAction]:
    """Validate `request` and build the row `accept_run` writes, with its overlap action; writes
    nothing. Raises what `accept_run` would refuse the request with, so a trigger that starts
    several runs (an event's listeners) can check them all before it records anything."""
    job = catalog.resolve(request.job)
    if job.acts and request.trigger in PERSON_TRIGGERS and not request.confirmed:
        raise ConfirmationRequired(
            f"job {job.name!r} acts on the outside world (acts: true); confirm it: --yes on "
            f"the CLI, confirm equal to {job.name!r} through the API or MCP"
        )
    check_param_text(job.name, request.params or {})
    for what, text in (("requested_by", request.requested_by), ("dedupe key", request.dedupe_key)):
        # Refused here, the same on each store (SQLite would keep a NUL PostgreSQL refuses).
        if text is not None and (problem := text_problem(text)) is not None:
            raise InvalidArgument(f"job {job.name!r}: {what} {text[:80]!r} {problem}")
        # (A character is at most 4 bytes: the common short text is never encoded.)
        if text is not None and len(text) * 4 > MAX_KEY_BYTES < (size := len(text.encode())):
            raise InvalidArgument(
                f"job {job.name!r}: {what} {text[:40]!r}… is {size} bytes as UTF-8; "
                f"at most {MAX_KEY_BYTES} bytes"
            )
    params: dict[str, Any] = coerce_params(
        job.params,
        request.params or {},
        job_name=job.name,
        from_strings=request.params_from_strings,
    )
    executor, note = choose_executor(job, available_executors, pod_fallback)
    queue_ttl = request.queue_ttl_seconds
    if queue_ttl is None and request.trigger in PERSON_TRIGGERS:
        queue_ttl = job.queue_ttl_seconds
    new = NewRun(
        id=str(uuid.uuid4()),
        job=job.name,
        trigger=request.trigger,
        # A key in a retry's form gets a terminator: no first attempt can take a retry's key.
        dedupe_key=first_attempt_key(request.dedupe_key)
        if request.dedupe_key
        else str(uuid.uuid4()),
        executor=executor,
        overlap=job.overlap,
        params=params,
        requested_by=request.requested_by,
        parent_run_id=request.parent_run_id,
        chain_root_id=request.chain_root_id,
        event_id=request.event_id,
        downstream=request.downstream,
        scheduled_for=request.scheduled_for,
        max_attempts=job.max_attempts,
        deadline_seconds=job.deadline_seconds,
        kill_grace_seconds=job.kill_grace_seconds,
        queue_ttl_seconds=queue_ttl,
        traceparent=request.traceparent,
        note=note,
    )
    if request.record_skipped is not None:
        return replace(new, status=RunStatus.SKIPPED, end_reason=request.record_skipped), "none"
    return new, overlap_action_for(job, request.trigger)


async def accept_run(
    store: RunLog,
    catalog: Catalog,
    request: RunRequest,
    *,
    available_executors: Collection[str] = ("inline",),
    pod_fallback: str = "inline",
) -> AcceptResult:
    """Validate `request` and write it as a queued run. Raises a `RunRefused` subclass with a
    message a person can act on; `OverlapRefused` carries the active run's id."""
    new, overlap_action = prepare_run(
        catalog, request, available_executors=available_executors, pod_fallback=pod_fallback
    )
    return await store.accept(new, overlap_action=overlap_action)
