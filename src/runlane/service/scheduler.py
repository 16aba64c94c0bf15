"""The scheduler loop: plan every schedule of the catalog and accept what is due.

Each tick reads database time, plans each due schedule with `core.schedule.plan_schedule` from its
last planned slot (table `schedule_state`), accepts the decisions through the one accept path and
then moves the state forward. Several launchers may tick at once: a slot's run has the unique key
`job@slot` (a chain run `chain@slot`), so each slot makes exactly one row, and the state only
moves forward. A crash between accepting and saving the state re-plans the same slots, which the
dedupe keys turn into no-ops.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import structlog

from runlane.catalog import Catalog
from runlane.core.chains import scheduled_chain_run_id
from runlane.core.runs import AcceptResult, Trigger, schedule_dedupe_key
from runlane.core.schedule import (
    Pause,
    SchedulePlan,
    ScheduleSpec,
    SeasonWindow,
    SlotDecision,
    next_slot,
    plan_schedule,
    previous_slot,
)
from runlane.errors import DatabaseConflict, DatabaseUnavailable, NotFound, RunlaneError
from runlane.ports import ExplainStore, Override, SchedulerStore
from runlane.service.accept import RunRequest
from runlane.service.catalog_stamp import on_other_catalogs

log = structlog.get_logger("runlane.scheduler")

AcceptFn = Callable[[RunRequest], Awaitable[AcceptResult]]
Hook = Callable[[str, str], None]
ChainStarter = Callable[[str, datetime, str | None], Awaitable[None]]
"""start_scheduled_chain(chain, slot, skipped_reason): start (reason None) or record a slot."""

STATE_REFRESH_SECONDS = 60.0
ACCEPT_CONCURRENCY = 8  # accepts in flight per tick (a store pool serves them in parallel)


def schedule_specs(catalog: Catalog) -> list[ScheduleSpec]:
    """Every schedule of the catalog: each job's schedules and each chain's schedule."""
    default_tz = catalog.global_.timezone
    specs: list[ScheduleSpec] = []
    for name in catalog.job_names():
        for sched in catalog.jobs[name].schedules:
            specs.append(
                ScheduleSpec("job", name, sched.cron, sched.tz or default_tz, sched.catch_up)
            )
    for name in sorted(catalog.chains):
        chain = catalog.chains[name]
        if chain.schedule is None:
            continue
        seasons = tuple(
            SeasonWindow(s, catalog.global_.seasons[s].start, catalog.global_.seasons[s].end)
            for s in chain.schedule.seasons
            if s in catalog.global_.seasons
        )
        specs.append(
            ScheduleSpec(
                "chain",
                name,
                chain.schedule.cron,
                chain.schedule.tz or default_tz,
                chain.schedule.catch_up,
                seasons,
            )
        )
    return specs


def pause_of(override: Override | None, now: datetime) -> Pause | None:
    """The pause `override` puts on its job at `now` (database time): None when there is none,
    or when it was a snooze whose `paused_until` has passed (the row stays until `resume`)."""
    if override is None:
        return None
    if override.paused_until is not None and override.paused_until <= now:
        return None
    return Pause(override.paused_until)


@dataclass
class TickReport:
    """What one tick did (tests and the benchmark read it)."""

    now: datetime
    planned: int = 0  # schedules planned
    accepted: list[AcceptResult] = field(default_factory=list)
    created: int = 0
    chains: int = 0
    # Schedules with a slot the database failed to take: planned again at the next tick.
    failed: set[str] = field(default_factory=set)


@dataclass
class Scheduler:
    store: SchedulerStore
    catalog: Catalog
    accept: AcceptFn
    start_chain: ChainStarter | None = None
    hook: Hook | None = None
    interval: float = 1.0
    # The launcher this runs in and the digest of its catalog (`service.catalog_stamp`): with
    # them, the state of a schedule this catalog lacks is kept while another live launcher runs
    # another catalog, which may have it (`_forget_others`). Without (a tool), as if alone.
    launcher_id: str | None = None
    catalog_digest: str | None = None
    stale_after: float = 45.0

    def __post_init__(self) -> None:
        self.specs = schedule_specs(self.catalog)
        self._state: dict[str, datetime] | None = None
        self._next_due: dict[str, datetime | None] = {}
        self._state_loaded_at: datetime | None = None

    async def _load_state(self, now: datetime) -> dict[str, datetime]:
        if (
            self._state is None
            or self._state_loaded_at is None
            or (now - self._state_loaded_at).total_seconds() >= STATE_REFRESH_SECONDS
        ):
            stored = await self.store.schedule_states()
            await self._forget_others(stored)
            own = {spec.key for spec in self.specs}
            merged = {key: slot for key, slot in stored.items() if key in own}
            for key, slot in (self._state or {}).items():
                if key not in merged or merged[key] < slot:
                    merged[key] = slot
            if merged != self._state:
                self._next_due.clear()
            self._state = merged
            self._state_loaded_at = now
        return self._state

    async def _forget_others(self, stored: dict[str, datetime]) -> None:
        """Drop the state of every schedule this catalog does not have: one removed, or whose
        cron or zone was edited (its key changed). Kept, it would be the anchor of that schedule
        when it comes back (an edit undone, a job restored), which would then replay or record
        as missed its slots of the time it was gone. A launcher still on an older catalog keeps
        planning from the state it holds in memory, and writes it back as it advances.

        Nothing is forgotten while another live launcher runs another catalog (a rolling
        restart): the schedule may be its, and forgotten, the slots owed to it when its launcher
        restarts would be lost. Once every live launcher runs this catalog, it is."""
        own = {spec.key for spec in self.specs}
        gone = sorted(key for key in stored if key not in own)
        if gone and await self._another_catalog_is_live():
            return
        if gone:
            await self.store.forget_schedules(gone)
            log.info("schedule.forgotten", schedules=gone, note="not in this launcher's catalog")

    async def _another_catalog_is_live(self) -> bool:
        if self.launcher_id is None:
            return False
        others = on_other_catalogs(
            await self.store.launchers(),
            await self.store.now(),
            self.stale_after,
            launcher_id=self.launcher_id,
            catalog_digest=self.catalog_digest,
        )
        return bool(others)

    def _due(self, spec: ScheduleSpec, state: dict[str, datetime], now: datetime) -> bool:
        key = spec.key
        if key not in self._next_due:
            self._next_due[key] = next_slot(spec.cron, spec.tz, state[key])
        due = self._next_due[key]
        return due is not None and due <= now

    def next_due(self) -> datetime | None:
        """The earliest known next slot over every schedule (None before the first tick)."""
        dues = [d for d in self._next_due.values() if d is not None]
        return min(dues) if dues else None

    async def tick(self, now: datetime | None = None) -> TickReport:
        """Plan every due schedule at `now` (database time by default) and accept its slots."""
        if now is None:
            now = await self.store.now()
        report = TickReport(now=now)
        state = await self._load_state(now)
        advanced: dict[str, datetime] = {}
        for spec in self.specs:
            if spec.key not in state:
                # First sight of this schedule (or of an edited cron/zone): it is anchored here,
                # and nothing is owed from before.
                state[spec.key] = advanced[spec.key] = now - timedelta(seconds=1)
        due = [spec for spec in self.specs if self._due(spec, state, now)]
        if not due:
            if advanced:
                await self.store.advance_schedules(advanced)
            return report
        overrides = await self.store.overrides()
        work: list[tuple[ScheduleSpec, SlotDecision]] = []
        before = {spec.key: state[spec.key] for spec in due}
        for spec in due:
            pause = pause_of(overrides.get(spec.target), now) if spec.kind == "job" else None
            plan = plan_schedule(spec, state.get(spec.key), now, pause=pause)
            report.planned += 1
            self._log_plan(spec, plan)
            work.extend((spec, decision) for decision in plan.decisions)
            if plan.planned_through is not None:
                advanced[spec.key] = plan.planned_through
        # Accepts are independent (one dedupe key each): several in flight at once, so 200 jobs
        # due on one slot are queued in a few round trips' time rather than 200.
        limit = asyncio.Semaphore(ACCEPT_CONCURRENCY)

        async def accept_one(spec: ScheduleSpec, decision: SlotDecision) -> None:
            async with limit:
                await self._accept_slot(spec, decision, report)

        await asyncio.gather(*(accept_one(spec, d) for spec, d in work))
        for key in report.failed:
            # A slot the database did not take keeps its schedule where it was, so the next
            # tick plans it again (the dedupe keys make the slots that were taken no-ops).
            advanced[key] = before[key]
        if advanced:
            await self.store.advance_schedules(advanced)
            for key, slot in advanced.items():
                state[key] = slot
                self._next_due.pop(key, None)
        return report

    def _log_plan(self, spec: ScheduleSpec, plan: SchedulePlan) -> None:
        if plan.unrecorded:
            log.warning(
                "schedule.missed_unrecorded",
                schedule=spec.key,
                count=plan.unrecorded,
                first=plan.first_unrecorded.isoformat() if plan.first_unrecorded else None,
                last=plan.last_unrecorded.isoformat() if plan.last_unrecorded else None,
                note="older missed slots beyond the recorded 100 are only counted here",
            )
        if plan.lookback_from is not None:
            log.warning(
                "schedule.lookback_capped",
                schedule=spec.key,
                examined_from=plan.lookback_from.isoformat(),
            )

    async def _accept_slot(
        self, spec: ScheduleSpec, decision: SlotDecision, report: TickReport
    ) -> None:
        reason = None if decision.action == "fire" else decision.action
        try:
            if spec.kind == "chain":
                if self.start_chain is not None:
                    await self.start_chain(spec.target, decision.slot, reason)
                    report.chains += 1
                return
            result = await self.accept(
                RunRequest(
                    job=spec.target,
                    trigger=Trigger.SCHEDULE,
                    dedupe_key=schedule_dedupe_key(spec.target, decision.slot),
                    scheduled_for=decision.slot,
                    # The slot's window ends `window_seconds` after the slot, however late
                    # the slot was planned: a run caught up late waits only what is left of it.
                    queue_ttl_seconds=max(
                        1.0,
                        (
                            decision.slot + timedelta(seconds=spec.window_seconds) - report.now
                        ).total_seconds(),
                    ),
                    requested_by="scheduler",
                    record_skipped=reason,
                )
            )
        except (DatabaseUnavailable, DatabaseConflict) as exc:
            # The database failed (a dropped connection, a lock timeout): nothing was refused.
            report.failed.add(spec.key)
            log.warning(
                "schedule.accept_failed",
                schedule=spec.key,
                slot=decision.slot.isoformat(),
                error=str(exc),
                note="planned again at the next tick",
            )
            return
        except RunlaneError as exc:
            log.error(
                "schedule.refused",
                schedule=spec.key,
                slot=decision.slot.isoformat(),
                error=str(exc),
            )
            return
        report.accepted.append(result)
        if result.created:
            report.created += 1
            log.info(
                "schedule.accepted",
                job=spec.target,
                slot=decision.slot.isoformat(),
                run_id=result.run.id,
                status=result.run.status.value,
                end_reason=result.run.end_reason,
            )
            if self.hook is not None:
                self.hook("scheduled", result.run.id)

    async def run(self, stopping: asyncio.Event) -> None:
        """Tick until `stopping` is set; sleep until the next due slot (at most `interval`)."""
        while not stopping.is_set():
            wait = self.interval
            try:
                report = await self.tick()
                nxt = self.next_due()
                if nxt is not None:
                    wait = min(self.interval, max(0.005, (nxt - report.now).total_seconds()))
            except RunlaneError as exc:
                log.warning("scheduler.tick_failed", error=str(exc))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await stopping.wait()


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a job's slot did what it did, for `runlane explain`."""

    job: str
    at: datetime
    slot: datetime | None
    spec: ScheduleSpec | None
    verdict: str  # fired | skipped | deduplicated | out_of_season | paused | missed | ...
    lines: list[str]
    run_id: str | None = None


EXPLAIN_LOOKBACK = timedelta(days=400)
"""How far back `runlane explain` looks for a schedule's latest slot."""


def _latest_slot(specs: list[ScheduleSpec], at: datetime) -> tuple[datetime, ScheduleSpec] | None:
    """The latest slot at or before `at` of any of `specs` (within `EXPLAIN_LOOKBACK`), and
    its schedule: computed, not walked, so an every-second cron costs what a daily one does."""
    best: tuple[datetime, ScheduleSpec] | None = None
    for spec in specs:
        last = previous_slot(spec.cron, spec.tz, at, after=at - EXPLAIN_LOOKBACK)
        if last is not None and (best is None or last > best[0]):
            best = (last, spec)
    return best


def _slot_to_explain(
    name: str, prefix: str, specs: list[ScheduleSpec], at: datetime, unscheduled: str
) -> Explanation | tuple[datetime, ScheduleSpec, list[str]]:
    """The latest slot of `specs` at or before `at`, its schedule and the line that says so
    (`prefix` names a chain); or the whole explanation when there is no slot to explain."""
    if not specs:
        return Explanation(name, at, None, None, "unscheduled", [unscheduled])
    best = _latest_slot(specs, at)
    if best is None:
        return Explanation(name, at, None, None, "no_slot", ["no slot in the 400 days before"])
    slot, spec = best
    local = spec.local(slot)
    line = (
        f"{prefix}slot {slot:%Y-%m-%dT%H:%M:%SZ} ({local:%Y-%m-%d %H:%M:%S %Z} in {spec.tz}) "
        f"from cron {spec.cron!r}"
    )
    return slot, spec, [line]


async def explain_chain(
    store: ExplainStore, catalog: Catalog, chain: str, at: datetime
) -> Explanation:
    """Why chain `chain`'s latest scheduled slot at or before `at` started, or did not."""
    specs = [s for s in schedule_specs(catalog) if s.kind == "chain" and s.target == chain]
    found = _slot_to_explain(
        chain,
        f"chain {chain!r} ",
        specs,
        at,
        f"chain {chain!r} has no schedule: it runs when started by hand (`runlane chain run`)",
    )
    if isinstance(found, Explanation):
        return found
    slot, spec, lines = found
    if not spec.in_season(slot):
        names = ", ".join(f"{w.name} ({w.start}..{w.end})" for w in spec.seasons)
        lines.append(f"out of season: the chain fires only in {names}; nothing is recorded")
        return Explanation(chain, at, slot, spec, "out_of_season", lines)
    season = spec.season_of(slot)
    if season is not None:
        lines.append(f"in season {season!r}")
    try:
        run = await store.get_chain_run(scheduled_chain_run_id(chain, slot))
    except NotFound:
        state = (await store.schedule_states()).get(spec.key)
        if state is None or state < slot:
            lines.append("no launcher has planned this slot yet (is `runlane serve` running?)")
            return Explanation(chain, at, slot, spec, "not_planned", lines)
        lines.append(
            "no chain run: the schedule was first seen (or its cron/zone changed) after this slot"
        )
        return Explanation(chain, at, slot, spec, "before_anchor", lines)
    lines.append(
        f"chain run {run.id}: {run.status}"
        + (f" ({run.end_reason})" if run.end_reason else "")
        + (" — ran past max_duration" if run.overrun else "")
    )
    verdict = {"missed": "missed", "paused": "paused"}.get(run.end_reason or "", "fired")
    if run.status == "skipped" and verdict == "fired":
        verdict = "skipped"
    return Explanation(chain, at, slot, spec, verdict, lines, run.id)


async def explain(store: ExplainStore, catalog: Catalog, job: str, at: datetime) -> Explanation:
    """Read the planner and the run log to say why `job`'s latest slot at or before `at` ran or
    did not. `job` may also name a chain; a job that runs only as a chain step is explained
    through its chains' slots."""
    if job in catalog.chains and job not in catalog.jobs:
        return await explain_chain(store, catalog, job, at)
    catalog.resolve(job)  # UnknownJob with a did-you-mean hint
    specs = [s for s in schedule_specs(catalog) if s.kind == "job" and s.target == job]
    chains = [
        name
        for name in sorted(catalog.chains)
        if any(catalog.chains[name].step_job(step) == job for step in catalog.chains[name].steps)
    ]
    if not specs and chains:
        parts = [await explain_chain(store, catalog, name, at) for name in chains]
        lines = [
            f"job {job!r} has no schedule of its own; it runs as a step of "
            f"{', '.join(repr(c) for c in chains)}"
        ]
        for part in parts:
            lines += [f"{part.job}: {part.verdict}"] + [f"  {line}" for line in part.lines]
        first = parts[0]
        return Explanation(job, at, first.slot, first.spec, first.verdict, lines, first.run_id)
    found = _slot_to_explain(
        job,
        "",
        specs,
        at,
        f"job {job!r} has no schedules: it runs only when a person, a chain or an event starts it",
    )
    if isinstance(found, Explanation):
        return found
    slot, spec, lines = found
    state = (await store.schedule_states()).get(spec.key)
    run = await store.run_by_dedupe_key(schedule_dedupe_key(job, slot))
    override = (await store.overrides()).get(job)
    if run is not None:
        lines.append(
            f"run {run.id}: {run.status.value}" + (f" ({run.end_reason})" if run.end_reason else "")
        )
        if run.trigger != "schedule":
            verdict = "deduplicated"
            lines.append(f"the slot's key was already taken by a {run.trigger} run")
        elif run.end_reason == "missed":
            verdict = "missed"
            lines.append(
                f"no launcher planned it within catch_up ({spec.catch_up:g}s): recorded as missed"
            )
        elif run.end_reason == "paused":
            verdict = "paused"
            lines.append("the job was paused or snoozed at planning time")
        elif run.end_reason == "overlap":
            verdict = "skipped"
            lines.append("overlap: forbid — another run of the job was active")
        elif run.end_reason == "expired":
            verdict = "skipped"
            lines.append(f"it was still queued {spec.window_seconds:g}s after its slot and expired")
        else:
            verdict = "fired"
        return Explanation(job, at, slot, spec, verdict, lines, run.id)
    if state is None or state < slot:
        if state is None:
            lines.append("no launcher has planned this schedule yet (is `runlane serve` running?)")
        else:
            lines.append(f"the scheduler has planned up to {state:%Y-%m-%dT%H:%M:%SZ} only")
        verdict = "not_planned"
    else:
        verdict = "before_anchor"
        lines.append(
            "no run: the schedule was first seen (or its cron/zone changed) after this slot, "
            "so nothing was owed, or the slot fell in a lookback gap"
        )
    # A snooze whose `paused_until` has passed pauses nothing (by the database's clock).
    if override is not None and pause_of(override, await store.now()) is not None:
        until = override.paused_until
        lines.append(
            "the job is paused"
            + (f" until {until:%Y-%m-%dT%H:%M:%SZ}" if until else "")
            + (f": {override.reason}" if override.reason else "")
        )
    return Explanation(job, at, slot, spec, verdict, lines)
