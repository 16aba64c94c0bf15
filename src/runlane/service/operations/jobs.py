"""Jobs: the catalog's jobs with their settings and pause state; pause, snooze and resume one;
explain why a job's (or chain's) latest slot did what it did."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from runlane.core.access import Role
from runlane.core.runs import Run
from runlane.errors import InvalidArgument
from runlane.ports import Override, RunFilter
from runlane.service.operations.arguments import Requester, check_reason, parse_time, parse_until
from runlane.service.runtime import Runtime

if TYPE_CHECKING:
    from runlane.catalog import ParamSpec, ResolvedJob
    from runlane.service.scheduler import Explanation


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A job as the catalog resolves it, with its pause state now (`pause`: None when it is
    not paused, or its snooze has ended) and, from `show_job`, its latest run."""

    name: str
    executor: str
    overlap: str
    max_attempts: int
    deadline_seconds: float
    acts: bool
    params: Mapping[str, ParamSpec]
    schedules: tuple[str, ...]
    description: str | None
    pause: Override | None
    last_run: Run | None = None


@dataclass(frozen=True, slots=True)
class Resumed:
    job: str
    was_paused: bool


def _job_info(job: ResolvedJob, override: Override | None, now: datetime) -> JobInfo:
    from runlane.service.scheduler import pause_of

    if pause_of(override, now) is None:  # not paused, or a snooze that has ended
        override = None
    return JobInfo(
        name=job.name,
        executor=job.executor,
        overlap=job.overlap,
        max_attempts=job.max_attempts,
        deadline_seconds=job.deadline_seconds,
        acts=job.acts,
        params=dict(job.params),
        schedules=tuple(s.cron for s in job.schedules),
        description=job.description,
        pause=override,
    )


async def list_jobs(rt: Runtime) -> tuple[JobInfo, ...]:
    """Every job of the catalog, by name."""
    cat = rt.require_catalog()
    overrides = await rt.store.overrides()
    now = await rt.store.now()
    return tuple(_job_info(cat.resolve(n), overrides.get(n), now) for n in cat.job_names())


@dataclass(frozen=True, slots=True)
class JobPage:
    """A page of the catalog's jobs (by name) whose names contain `match`: `total` is how many
    match, `offset` where this page starts; each job with its latest run (one read for all)."""

    items: tuple[JobInfo, ...]
    total: int
    offset: int
    limit: int
    match: str | None


MAX_JOB_PAGE = 500
MAX_MATCH_CHARS = 200


async def list_jobs_page(
    rt: Runtime, *, match: str | None = None, offset: int = 0, limit: int = 100
) -> JobPage:
    """The jobs whose names contain `match` (case-insensitive; None or empty: every job), by
    name, `limit` (1-500) of them from `offset`, each with its pause state and latest run: one
    read of the pauses and one of the latest runs, whatever the page's size (the web UI's jobs
    page). `invalid_argument` for a limit, offset or match out of range."""
    if not 1 <= limit <= MAX_JOB_PAGE:
        raise InvalidArgument(f"limit {limit}: expected a whole number from 1 to {MAX_JOB_PAGE}")
    if offset < 0:
        raise InvalidArgument(f"offset {offset}: expected a whole number, 0 or more")
    wanted = (match or "").strip().lower()
    if len(wanted) > MAX_MATCH_CHARS:
        raise InvalidArgument(f"match: at most {MAX_MATCH_CHARS} characters")
    cat = rt.require_catalog()
    names = [n for n in cat.job_names() if wanted in n.lower()] if wanted else cat.job_names()
    chosen = list(names[offset : offset + limit])
    overrides = await rt.store.overrides()
    now = await rt.store.now()
    latest = await rt.store.latest_runs(chosen)
    items = tuple(
        replace(_job_info(cat.resolve(n), overrides.get(n), now), last_run=latest.get(n))
        for n in chosen
    )
    return JobPage(items, len(names), offset, limit, wanted or None)


async def show_job(rt: Runtime, job: str) -> JobInfo:
    """One job (`unknown_job`), with its latest run."""
    resolved = rt.require_catalog().resolve(job)
    override = (await rt.store.overrides()).get(resolved.name)
    info = _job_info(resolved, override, await rt.store.now())
    latest = await rt.store.list_runs(RunFilter(job=resolved.name, limit=1))
    return replace(info, last_run=latest[0] if latest else None)


async def pause_job(
    rt: Runtime,
    job: str,
    *,
    requester: Requester,
    until: str | datetime | None = None,
    reason: str | None = None,
) -> Override:
    """Pause `job`'s scheduled and event runs until resumed, or snooze them `until` a time (a
    duration from now such as `2h`, `now+2h`, or an ISO time) that must be later than now
    (`invalid_argument` otherwise, as for a `reason` over 500 characters); `unknown_job`; `forbidden` unless the requester may
    operate `job`."""
    requester.require(Role.OPERATOR, jobs=[job], action="pause")
    rt.require_catalog().resolve(job)
    reason = check_reason(reason)
    paused_until = None if until is None else parse_until(until, await rt.store.now())
    return await rt.store.set_override(
        job, paused_until=paused_until, reason=reason, by=requester.name
    )


async def resume_job(rt: Runtime, job: str, *, requester: Requester) -> Resumed:
    """End `job`'s pause (`was_paused`: False when it was not paused); `unknown_job`;
    `forbidden` unless the requester may operate `job`."""
    requester.require(Role.OPERATOR, jobs=[job], action="resume")
    rt.require_catalog().resolve(job)
    return Resumed(job, await rt.store.clear_override(job))


async def explain(rt: Runtime, name: str, *, at: str | datetime | None = None) -> Explanation:
    """Why job (or chain) `name`'s latest slot at or before `at` (default now) fired, was
    skipped, deduplicated, paused, missed or out of season; `unknown_job`."""
    from runlane.service.scheduler import explain as explain_slot

    when = parse_time(at, await rt.store.now(), "--at")
    return await explain_slot(rt.store, rt.require_catalog(), name, when)


@dataclass(frozen=True, slots=True)
class JobSchedule:
    """A schedule of a job: its cron, its zone (the catalog's default when it names none) and
    its next slots after now, in UTC (`local_slots`: the same slots in the schedule's zone)."""

    cron: str
    timezone: str
    next_slots: tuple[datetime, ...]

    @property
    def local_slots(self) -> tuple[datetime, ...]:
        from zoneinfo import ZoneInfo

        zone = ZoneInfo(self.timezone)
        return tuple(slot.astimezone(zone) for slot in self.next_slots)


async def job_schedules(
    rt: Runtime, jobs: Sequence[str], *, count: int = 3, now: datetime | None = None
) -> dict[str, tuple[JobSchedule, ...]]:
    """Each of `jobs`' schedules with its next `count` slots after `now` (default: the
    database's now, read once for all of them); `unknown_job`."""
    from runlane.core.schedule import next_slot

    cat = rt.require_catalog()
    resolved = [cat.resolve(job) for job in jobs]
    after = now if now is not None else await rt.store.now()
    found: dict[str, tuple[JobSchedule, ...]] = {}
    for job in resolved:
        schedules = []
        for sched in job.schedules:
            zone = sched.tz or cat.global_.timezone
            slots: list[datetime] = []
            at = after
            while len(slots) < count:
                slot = next_slot(sched.cron, zone, at)
                if slot is None:
                    break
                slots.append(slot)
                at = slot
            schedules.append(JobSchedule(sched.cron, zone, tuple(slots)))
        found[job.name] = tuple(schedules)
    return found
