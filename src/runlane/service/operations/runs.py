"""Runs: run a job now, list and show runs, cancel a run or a chain run."""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from runlane.core.access import Role
from runlane.core.runs import Run, RunStatus, Trigger
from runlane.errors import (
    AmbiguousId,
    InvalidArgument,
    InvalidTransition,
    NotCancellable,
    NotFound,
)
from runlane.ports import ChainRun, RunFilter
from runlane.service.accept import RunRequest
from runlane.service.operations.arguments import (
    EARLIEST,
    LATEST,
    Requester,
    check_limit,
    check_text,
    check_traceparent,
    confirms,
    parse_time,
)
from runlane.service.operations.lookup import resolve_chain_run, resolve_run
from runlane.service.operations.notices import Notice, queued_run_notices
from runlane.service.runtime import Runtime

DEFAULT_LIST_LIMIT = 20
DEFAULT_PAGE_LIMIT = 50
MAX_PAGE_LIMIT = 500  # a page of the API's run list holds at most this many runs
RunListView = Literal["full", "basic"]  # list_run_items_page's `view`
RUN_LIST_VIEWS: tuple[str, ...] = get_args(RunListView)
_CURSOR_VERSION = "v1"
_MAX_CURSOR_CHARS = 200  # a cursor this module writes is about 100 characters


@dataclass(frozen=True, slots=True)
class RunQueued:
    """What `run_job` did: the run (queued, or the one its dedupe key already had) and what
    the person should know (`no_launcher`, `launchers_lack_job`)."""

    run: Run
    created: bool
    warnings: tuple[Notice, ...] = ()


@dataclass(frozen=True, slots=True)
class CancelledRun:
    """A run `cancel` cancelled (queued: at once) or asked its launcher to stop (running)."""

    run: Run


@dataclass(frozen=True, slots=True)
class CancelledChainRun:
    """A chain run `cancel` ended `cancelled`, with its unfinished steps (each cancelled, or
    asked of its launcher)."""

    chain_run: ChainRun
    steps: tuple[Run, ...]


async def authorize_run_job(rt: Runtime, job: str, *, requester: Requester) -> None:
    """`forbidden` unless `requester` may run `job` (what `run_job` checks first; a face
    that answers without calling it, such as an idempotent replay, checks this)."""
    requester.require(Role.OPERATOR, jobs=[job], action="run")


async def run_job(
    rt: Runtime,
    job: str,
    *,
    requester: Requester,
    params: Mapping[str, object] | None = None,
    params_from_strings: bool = False,
    confirmed: bool = False,
    confirm: str | None = None,
    dedupe_key: str | None = None,
    traceparent: str | None = None,
) -> RunQueued:
    """Queue a run of `job` through the one accept path. Raises what it refuses with
    (`unknown_job`, `param_invalid`, `payload_too_large`, `confirmation_required`,
    `overlap_refused` with the active run's id); `forbidden` unless the requester may operate
    `job`. With `dedupe_key` (an Idempotency-Key's, `idempotency_dedupe_key`) the run is
    written at most once under it: a retry gets the run the first attempt wrote, even when
    that attempt failed after the write. `confirm`: the name a person typed to confirm
    (API, UI, MCP); it confirms when it is the job's name, as `confirmed` (the CLI's --yes) does.
    `traceparent`: the caller's W3C trace context, stored on the run and given to its process
    as TRACEPARENT (`invalid_traceparent` when it is not one)."""
    trace = check_traceparent(traceparent)
    await authorize_run_job(rt, job, requester=requester)
    result = await rt.accept(
        RunRequest(
            job=job,
            trigger=requester.trigger,
            params=params,
            params_from_strings=params_from_strings,
            requested_by=requester.name,
            confirmed=confirmed or confirms(confirm, job),
            dedupe_key=dedupe_key,
            traceparent=trace,
        )
    )
    warnings = await queued_run_notices(rt, [result.run])
    return RunQueued(result.run, result.created, tuple(warnings))


def parse_status(status: str | RunStatus | None) -> RunStatus | None:
    """A run status by name; `InvalidArgument` naming the statuses otherwise."""
    if status is None or isinstance(status, RunStatus):
        return status
    try:
        return RunStatus(status)
    except ValueError:
        raise InvalidArgument(
            f"--status {status!r}: expected one of {', '.join(s.value for s in RunStatus)}"
        ) from None


async def list_runs(
    rt: Runtime,
    *,
    job: str | None = None,
    status: str | RunStatus | None = None,
    limit: int | None = None,
    trigger: str | Trigger | None = None,
    requested_by: str | None = None,
    since: str | datetime | None = None,
    until: str | datetime | None = None,
) -> tuple[Run, ...]:
    """The newest runs first (`limit`: 1 to 10000, 20 by default), of `job` / in `status` /
    by `trigger` / asked for by `requested_by`, queued at or after `since` and before `until`
    (`runlane runs`; the API pages with `list_runs_page`)."""
    if limit is not None:
        check_limit(limit)
    wanted = parse_status(status)
    flt = RunFilter(
        job=job,
        status=wanted,
        trigger=parse_trigger(trigger, "--trigger"),
        requested_by=requested_by,
        since=(since_at := await _page_time(rt, since, "--since")),
        until=_after(since_at, since, await _page_time(rt, until, "--until"), until, "--"),
        limit=limit or DEFAULT_LIST_LIMIT,
    )
    return tuple(await rt.store.list_runs(flt))


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of the run list, newest first by (queued_at, id). `next_cursor` asks for the
    page after it; None when this page is the last."""

    items: tuple[Run, ...]
    next_cursor: str | None


def encode_cursor(run: Run) -> str:
    """The opaque position after `run` in the list: URL-safe base64 (no padding) of
    `v1|<queued_at ISO>|<id>`. The version lets a later runlane change the form and still
    refuse, rather than misread, an old cursor."""
    return _cursor(run.queued_at, run.id)


def _cursor(queued_at: datetime, run_id: str) -> str:
    text = f"{_CURSOR_VERSION}|{queued_at.isoformat()}|{run_id}"
    return base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The (queued_at, id) keyset position of a cursor `encode_cursor` wrote. Anything else
    (garbage, a tampered or truncated cursor, another version) is `InvalidArgument` naming
    `cursor`: a client's mistake, never a server error."""
    refused = InvalidArgument(
        f"cursor {cursor[:40]!r} is not a cursor of this run list: "
        "pass the next_cursor of the previous page unchanged, or leave cursor out"
    )
    if not cursor or len(cursor) > _MAX_CURSOR_CHARS:
        raise refused
    try:
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        version, at_text, run_id = raw.decode("utf-8").split("|")
        at = datetime.fromisoformat(at_text)
        canonical_id = str(uuid.UUID(run_id))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise refused from None
    if version != _CURSOR_VERSION or at.tzinfo is None or canonical_id != run_id:
        raise refused
    if not EARLIEST <= at < LATEST:  # a time no run has (and SQLite's text form could not hold)
        raise refused
    return at.astimezone(UTC), run_id


def parse_trigger(trigger: str | Trigger | None, name: str = "trigger") -> str | None:
    """A run trigger by name; `InvalidArgument` naming the triggers otherwise."""
    if trigger is None or isinstance(trigger, Trigger):
        return None if trigger is None else trigger.value
    try:
        return Trigger(trigger).value
    except ValueError:
        raise InvalidArgument(
            f"{name} {trigger!r}: expected one of {', '.join(t.value for t in Trigger)}"
        ) from None


async def _page_time(rt: Runtime, value: str | datetime | None, name: str) -> datetime | None:
    """`since`/`until` as `parse_time` reads them; the database's clock is asked only for the
    relative forms (`now-1d`), so a page without them costs one statement."""
    if value is None:
        return None
    needs_now = isinstance(value, str) and value.strip().lower().startswith("now")
    # An absolute time never reads `now`: no clock is asked (EARLIEST only fills the argument).
    now = await rt.store.now() if needs_now else EARLIEST
    return parse_time(value, now, name)


async def list_runs_page(
    rt: Runtime,
    *,
    job: str | None = None,
    status: str | RunStatus | None = None,
    trigger: str | Trigger | None = None,
    requested_by: str | None = None,
    chain_root_id: str | None = None,
    since: str | datetime | None = None,
    until: str | datetime | None = None,
    limit: int = DEFAULT_PAGE_LIMIT,
    cursor: str | None = None,
) -> RunPage:
    """A page of the run list, newest first by (queued_at, id), for the API's `GET /runs`.

    Keyset pagination: `cursor` (the previous page's `next_cursor`) carries the last row's
    (queued_at, id) and the next page is the rows strictly older, read off an index range. So
    a page 10,000 rows deep costs what the first does, and runs inserted while a client walks
    the pages (they are newer) never appear in later pages nor shift a row into a repeat or a
    gap, as OFFSET would. No count of the matching rows: that is a walk of all of them.
    `since` (inclusive) and `until` (exclusive) bound queued_at; `limit` is 1 to 500.
    """
    flt = await _page_filter(
        rt, job, status, trigger, requested_by, chain_root_id, since, until, limit, cursor
    )
    runs = await rt.store.list_runs(flt)
    items = tuple(runs[:limit])
    more = len(runs) > limit
    return RunPage(items, encode_cursor(items[-1]) if more and items else None)


@dataclass(frozen=True, slots=True)
class RunItemsPage:
    """A page of the run list as `list_run_items_page` returns it: each run the plain dict
    of `Store.list_run_items` (`views.run_dict`'s fields, times as UTC datetimes)."""

    items: list[dict[str, Any]]
    next_cursor: str | None


async def list_run_items_page(
    rt: Runtime,
    *,
    job: str | None = None,
    status: str | RunStatus | None = None,
    trigger: str | Trigger | None = None,
    requested_by: str | None = None,
    chain_root_id: str | None = None,
    since: str | datetime | None = None,
    until: str | datetime | None = None,
    limit: int = DEFAULT_PAGE_LIMIT,
    cursor: str | None = None,
    view: RunListView = "full",
) -> RunItemsPage:
    """`list_runs_page` (the same arguments, checks, rows and cursors) with each run as the
    dict a face shows rather than a `Run`: one pass from the row to what is encoded, for the
    API's `GET /runs`, whose time is mostly spent turning rows into JSON.

    `view`: `full` (every field) or `basic` (without `core.runs.BASIC_LEFT_OUT`: what a list
    shows, at a bounded size per run; the runs page and its live updates read this one)."""
    if view not in RUN_LIST_VIEWS:
        raise InvalidArgument(f"view {view!r}: expected one of {', '.join(RUN_LIST_VIEWS)}")
    flt = await _page_filter(
        rt, job, status, trigger, requested_by, chain_root_id, since, until, limit, cursor
    )
    items = await rt.store.list_run_items(flt, basic=view == "basic")
    more = len(items) > limit
    del items[limit:]
    last = items[-1] if more and items else None
    return RunItemsPage(items, None if last is None else _cursor(last["queued_at"], last["id"]))


async def _page_filter(
    rt: Runtime,
    job: str | None,
    status: str | RunStatus | None,
    trigger: str | Trigger | None,
    requested_by: str | None,
    chain_root_id: str | None,
    since: str | datetime | None,
    until: str | datetime | None,
    limit: int,
    cursor: str | None,
) -> RunFilter:
    """The store's filter for a page of the run list; what the arguments are refused with."""
    if not 1 <= limit <= MAX_PAGE_LIMIT:
        raise InvalidArgument(f"limit {limit}: expected a whole number from 1 to {MAX_PAGE_LIMIT}")
    before = None if cursor is None else decode_cursor(cursor)
    wanted = parse_status(status)
    return RunFilter(
        job=check_text(job, "job"),
        status=wanted,
        trigger=parse_trigger(trigger),
        requested_by=check_text(requested_by, "requested_by"),
        # A run id as written anywhere: PostgreSQL compares uuids, SQLite their lowercase text.
        chain_root_id=_lower(check_text(chain_root_id, "chain_root_id")),
        since=(since_at := await _page_time(rt, since, "since")),
        until=_after(since_at, since, await _page_time(rt, until, "until"), until, ""),
        before=before,
        limit=limit + 1,  # one more than the page: is there a next page, without a count
    )


def _after(
    since_at: datetime | None,
    since: object,
    until_at: datetime | None,
    until: object,
    dashes: str,
) -> datetime | None:
    """`until_at`, refused when it is not after `since_at`: the window would hold no run (an
    empty list would read as "nothing happened", where the arguments are what is wrong)."""
    if since_at is not None and until_at is not None and until_at <= since_at:
        raise InvalidArgument(
            f"{dashes}until {str(until)!r} is not after {dashes}since {str(since)!r}"
        )
    return until_at


def _lower(text: str | None) -> str | None:
    return None if text is None else text.lower()


async def show_run(rt: Runtime, run_id: str) -> Run:
    """One run by its id or a unique prefix (`unknown_run`, `ambiguous_id`)."""
    return await resolve_run(rt, run_id)


# The most attempts `attempt_chain` walks either way (a catalog's max_attempts is far lower).
MAX_ATTEMPT_CHAIN = 100


async def attempt_chain(rt: Runtime, run: Run) -> tuple[Run, ...]:
    """Every attempt of the run `run` is one of, first to last: back through `retry_of`, and
    on to the retry of each (looked up by its `retry_of`), at most MAX_ATTEMPT_CHAIN each way.
    A first attempt that is gone from the store ends the walk back there."""
    earlier: list[Run] = []
    at = run
    while at.retry_of is not None and len(earlier) < MAX_ATTEMPT_CHAIN:
        try:
            at = await rt.store.get_run(at.retry_of)
        except NotFound:
            break
        earlier.append(at)
    later: list[Run] = []
    at = run
    while len(later) < MAX_ATTEMPT_CHAIN:
        found = await rt.store.list_runs(RunFilter(job=at.job, retry_of=at.id, limit=1))
        if not found:
            break
        at = found[0]
        later.append(at)
    return (*reversed(earlier), run, *later)


def authorize_cancel(run: Run, *, requester: Requester) -> None:
    """`forbidden` unless `requester` may cancel `run` (the operator role for its job): what
    `cancel` checks of a run, for a face that shows a Cancel button only to those who may."""
    requester.require(Role.OPERATOR, action="cancel")
    requester.require(Role.OPERATOR, jobs=[run.job], action="cancel")


async def next_attempt(rt: Runtime, run: Run) -> Run | None:
    """The retry of `run` (failed or timed out with tries left), once it is queued: looked up
    by its `retry_of`, so it is found however many runs of the job came after."""
    if run.status not in (RunStatus.FAILURE, RunStatus.TIMEOUT) or run.attempt >= run.max_attempts:
        return None
    found = await rt.store.list_runs(RunFilter(job=run.job, retry_of=run.id, limit=1))
    return found[0] if found else None


async def cancel(
    rt: Runtime, run_id: str, *, requester: Requester
) -> CancelledRun | CancelledChainRun:
    """Cancel a queued run (at once) or a running one (its launcher stops it), by id or unique
    prefix; or, when no run has it, end a chain run of that id `cancelled` with its unfinished
    steps (a chain run whose chain left the catalog can be ended only so). `not_cancellable`
    when it has already ended; `unknown_run` when neither a run nor a chain run has the id;
    `forbidden` unless the requester may operate the run's job (every step job of a chain run)."""
    requester.require(Role.OPERATOR, action="cancel")
    try:
        run = await resolve_run(rt, run_id)
    except AmbiguousId:
        raise  # several runs begin so: give more of the id (it is no chain run's to cancel)
    except NotFound:
        try:
            found = await resolve_chain_run(rt, run_id)
        except AmbiguousId:
            raise  # no run, several chain runs: give more of the id
        except NotFound:
            found = None
        if found is None:
            raise
        return await _cancel_chain_run(rt, found, requester)
    authorize_cancel(run, requester=requester)
    try:
        return CancelledRun(await rt.store.request_cancel(run.id, by=requester.name))
    except InvalidTransition as exc:
        raise NotCancellable(exc.message) from None


async def _cancel_chain_run(
    rt: Runtime, found: ChainRun, requester: Requester
) -> CancelledChainRun:
    from runlane.service.chains import cancel_chain_run

    if requester.access is not None and requester.access.jobs:  # only globs need the step jobs
        steps = await rt.store.list_runs(RunFilter(chain_root_id=found.id, limit=10_000))
        jobs = {s.job for s in steps}
        cat = rt.require_catalog()
        if found.chain in cat.chains:
            chain = cat.chains[found.chain]
            jobs.update(chain.step_job(step) for step in chain.steps)
        requester.require(Role.OPERATOR, jobs=sorted(jobs), action="cancel")
    try:
        chain_run, steps = await cancel_chain_run(rt.store, found.id, by=requester.name)
    except InvalidTransition as exc:
        raise NotCancellable(exc.message) from None
    return CancelledChainRun(chain_run, tuple(steps))
