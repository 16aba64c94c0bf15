"""Chains: start chain runs and advance them, idempotently, from any number of launchers.

A chain run is a `chain_runs` row; its steps are run-log rows with `chain_root_id` = the chain
run's id and the dedupe key `job@chain_root` (`job@chain_root/step` when a step names another job),
so two launchers advancing the same chain at once write each step once. Advancing reads the steps'
rows, asks `core.chains.plan_chain` what to do, and applies it through the one accept path.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import structlog

from runlane.catalog import Catalog, Chain, load_catalog
from runlane.core.chains import (
    ChainPlan,
    StepSpec,
    chain_slot_key,
    plan_chain,
    scheduled_chain_run_id,
    step_dedupe_key,
    step_of,
)
from runlane.core.durations import format_duration
from runlane.core.runs import AcceptResult, EndReason, Outcome, Run, RunStatus, Trigger
from runlane.core.schedule import wall_instant
from runlane.core.trace import child_traceparent
from runlane.errors import (
    ConfirmationRequired,
    DatabaseConflict,
    DatabaseUnavailable,
    InvalidTransition,
    NotFound,
    RunlaneError,
    StoreError,
)
from runlane.ports import ChainLog, ChainRun, ChainStore, NewChainRun, RunFilter, RunLog
from runlane.service.accept import PERSON_TRIGGERS, RunRequest
from runlane.service.catalog_stamp import on_other_catalogs
from runlane.service.scheduler import pause_of

log = structlog.get_logger("runlane.chains")

# How long a run of a chain that this launcher's catalog lacks, but its catalog file has, waits
# for a launcher that has it (restarted to apply a catalog change) before it fails
# `unknown_chain`, when no other live launcher runs a different catalog. A chain the file lacks
# too was removed: its runs do not wait for that.
UNKNOWN_CHAIN_GRACE_SECONDS = 15 * 60

# Running chain runs are read this many at a time, every one of them each tick.
ACTIVE_CHAIN_PAGE = 500

AcceptFn = Callable[[RunRequest], Awaitable[AcceptResult]]
Hook = Callable[[str, str], None]

LATEST_GRACE = timedelta(minutes=30)  # a queued step with `latest` expires this long after it


def chain_zone(catalog: Catalog, chain: Chain) -> str:
    if chain.schedule is not None and chain.schedule.tz:
        return chain.schedule.tz
    return catalog.global_.timezone


def step_specs(catalog: Catalog, chain: Chain, run: ChainRun) -> dict[str, StepSpec]:
    """The chain's steps with `latest` resolved to an instant on the chain run's local date.

    A `latest` that had already passed when the chain run started (a manual run in the evening,
    a slot caught up late) does not apply to that run: the step waits for its parents like any
    other. Applied, it would start the step at once beside the first steps, and expire it
    unstarted once `latest` + 30 min is behind."""
    zone = chain_zone(catalog, chain)
    day = (run.scheduled_for or run.started_at).astimezone(ZoneInfo(zone)).date()
    specs: dict[str, StepSpec] = {}
    for name, step in chain.steps.items():
        latest = None
        if step.latest_time is not None:
            # As cron slots: a `latest` in a spring-forward gap is the first instant after it.
            latest = wall_instant(day, step.latest_time, zone)
            if latest <= run.started_at:
                latest = None
        specs[name] = StepSpec(
            name=name,
            job=chain.step_job(name),
            after=tuple((d.step, d.on) for d in step.after),
            latest=latest,
        )
    return specs


def latest_attempts(specs: dict[str, StepSpec], root: str, runs: list[Run]) -> dict[str, Run]:
    """Each step's row of the highest attempt."""
    by_step: dict[str, Run] = {}
    for run in runs:
        step = step_of(run.dedupe_key, run.job, root)
        if step is None or step not in specs:
            continue
        held = by_step.get(step)
        if held is None or run.attempt > held.attempt:
            by_step[step] = run
    return by_step


FileChains = tuple[tuple[int, int, int] | None, frozenset[str] | None]
"""What a catalog file held when it was last read: its version (modification time, size, inode)
and its chain names (None: it could not be read or loaded)."""


def file_chains(path: str, previous: FileChains | None) -> FileChains:
    """The chains of the catalog file at `path`: `previous` while the file has not changed."""
    try:
        info = Path(path).stat()
    except OSError:
        return (None, None)
    version = (info.st_mtime_ns, info.st_size, info.st_ino)
    if previous is not None and previous[0] == version:
        return previous
    try:
        return (version, frozenset(load_catalog(path).chains))
    except RunlaneError:
        return (version, None)


@dataclass
class ChainRunner:
    store: ChainStore
    catalog: Catalog
    accept: AcceptFn
    hook: Hook | None = None
    interval: float = 1.0
    # Set when a step of a chain ends (by the launcher that recorded it), so the chain advances
    # at once instead of at the next `interval` tick; the tick still catches what others end.
    nudge: asyncio.Event = field(default_factory=asyncio.Event)
    # Who runs this chain runner (a launcher; None for the CLI), the digest of its catalog and
    # when a heartbeat is stale: a run of a chain this catalog lacks waits while another live
    # launcher runs a different catalog, which may have the chain (see `_unknown_chain`).
    launcher_id: str | None = None
    catalog_digest: str | None = None
    # The file the catalog was loaded from: read again (when it changes) to tell a chain added
    # since this launcher started from one that was removed. None: cannot tell.
    catalog_path: str | None = None
    stale_after: float = 45.0
    # How long "no other launcher can be advancing it" must hold before such a run fails: one
    # missed heartbeat, or the restart of the launcher that has the chain, is not enough.
    unknown_settle: float = 120.0
    # Chain runs of chains this catalog lacks, already warned about (one warning each), and
    # since when (database time) no other live launcher could be advancing each.
    _unknown_warned: set[str] = field(default_factory=set)
    _unadvanced_since: dict[str, datetime] = field(default_factory=dict)
    _file_chains: FileChains | None = None

    async def start(
        self,
        chain_name: str,
        *,
        trigger: Trigger = Trigger.MANUAL,
        requested_by: str | None = None,
        slot: datetime | None = None,
        skipped_reason: str | None = None,
        confirmed: bool = False,
        dedupe_key: str | None = None,
        traceparent: str | None = None,
    ) -> ChainRun:
        """Record a chain run and start its first steps. With `slot`, idempotent by
        `chain@slot`; with `dedupe_key` (an Idempotency-Key's), by that key: the run written
        under it is the one returned (and advanced) again; `skipped_reason` records the slot
        as `skipped` without steps.

        Started by a person (`trigger` CLI, manual, MCP), a chain with a step whose job has
        `acts: true` needs `confirmed`, as `runlane run` of that job would: raises
        `ConfirmationRequired` before anything is recorded. `traceparent` (checked by the
        caller): the trace every step's run joins, each with a span id of its own."""
        chain = self.catalog.chains.get(chain_name)
        if chain is None:
            raise NotFound(f"unknown chain {chain_name!r}")
        if trigger in PERSON_TRIGGERS and not confirmed:
            acting = sorted(
                {job for job in map(chain.step_job, chain.steps) if self.catalog.resolve(job).acts}
            )
            if acting:
                raise ConfirmationRequired(
                    f"chain {chain_name!r} runs jobs that act on the outside world "
                    f"(acts: true): {', '.join(acting)}; confirm it: --yes on the CLI, confirm "
                    f"equal to {chain_name!r} through the API or MCP"
                )
        if slot is not None:
            dedupe = chain_slot_key(chain_name, slot)
            run_id = scheduled_chain_run_id(chain_name, slot)
        else:
            run_id = str(uuid.uuid4())
            dedupe = dedupe_key or run_id
        run, created = await self.store.create_chain_run(
            NewChainRun(
                id=run_id,
                chain=chain_name,
                dedupe_key=dedupe,
                trigger=str(trigger),
                requested_by=requested_by,
                scheduled_for=slot,
                max_duration_seconds=chain.max_duration,
                status="running" if skipped_reason is None else "skipped",
                end_reason=skipped_reason,
            )
        )
        if created:
            log.info("chain.started", chain=chain_name, chain_run_id=run.id, status=run.status)
            if self.hook is not None:
                self.hook("chain_started", run.id)
        if run.status == "running":
            try:
                await self.advance(run, traceparent=traceparent)
            except StoreError as exc:
                # The chain run is recorded: the chain loop starts its steps. Raised, the
                # caller would be told it failed, and a person would start a second one.
                log.warning("chain.advance_failed", chain_run_id=run.id, error=str(exc))
        return run

    async def start_scheduled(self, chain: str, slot: datetime, reason: str | None) -> None:
        await self.start(chain, trigger=Trigger.SCHEDULE, slot=slot, skipped_reason=reason)

    async def advance_all(self) -> int:
        """Advance every running chain run, a page at a time; return how many there were.
        Every page is read: with only the oldest page, chain runs that wait long (long steps,
        an unknown chain) would starve every newer one."""
        seen = 0
        after: ChainRun | None = None
        while True:
            page = await self.store.active_chain_runs(after=after, limit=ACTIVE_CHAIN_PAGE)
            for run in page:
                try:
                    await self.advance(run)
                except RunlaneError as exc:
                    log.warning("chain.advance_failed", chain_run_id=run.id, error=str(exc))
            seen += len(page)
            if len(page) < ACTIVE_CHAIN_PAGE:
                return seen
            after = page[-1]

    async def advance(self, run: ChainRun, *, traceparent: str | None = None) -> ChainPlan | None:
        """Start, skip or expire the steps the plan says, and end the chain run when it is
        done. The steps join the trace of `traceparent` (the chain run's start), else that of
        the steps already recorded (a chain run keeps no trace of its own).

        A chain run that has ended (cancelled by a person) starts nothing more, also when
        `run` was read before it ended (a page of the chain loop): the run is read again
        before any step is written, and after; a step written as the cancel went by (which
        listed the steps before it was written) is cancelled here."""
        if run.status != "running":
            return None
        chain = self.catalog.chains.get(run.chain)
        if chain is None:
            await self._unknown_chain(run)
            return None
        specs = step_specs(self.catalog, chain, run)
        rows = await self.store.list_runs(RunFilter(chain_root_id=run.id, limit=10_000))
        attempts = latest_attempts(specs, run.id, rows)
        trace = traceparent or next((r.traceparent for r in rows if r.traceparent), None)
        now = await self.store.now()
        plan = plan_chain(
            specs, {s: r.status.value for s, r in attempts.items()}, now, run.deadline_at
        )
        # `run` may have been read before a person cancelled it: then write no step.
        if (plan.start or plan.skip) and not await self._still_running(run.id):
            return None
        if plan.overrun and run.overrun_at is None:
            await self.store.mark_chain_overrun(run.id)
            log.warning("chain.overrun", chain=run.chain, chain_run_id=run.id)
            if self.hook is not None:
                self.hook("chain_overrun", run.id)
        for step in plan.expire_queued:
            with contextlib.suppress(InvalidTransition):
                await self.store.finish_unleased(
                    attempts[step].id,
                    RunStatus.QUEUED,
                    Outcome(
                        RunStatus.SKIPPED, "chain_timeout", note="the chain ran past max_duration"
                    ),
                )
        for step, reason in plan.skip:
            await self._step(run, specs[step], now, skipped=reason, trace=trace)
        overrides = await self.store.overrides() if plan.start else {}
        started: list[str] = []
        for step in plan.start:
            # A paused (or snoozed) job's step is recorded `skipped` / `paused` instead of run:
            # pausing a job stops every automatic start of it, chains included.
            paused = pause_of(overrides.get(specs[step].job), now) is not None
            result = await self._step(
                run, specs[step], now, skipped="paused" if paused else None, trace=trace
            )
            if result.created and result.run.status is RunStatus.QUEUED:
                started.append(result.run.id)
        if plan.start or plan.skip or plan.expire_queued:
            current = await self.store.get_chain_run(run.id)
            if current.status != "running":
                # Ended meanwhile: a cancel that listed the steps before these were written
                # did not cancel them.
                for run_id in started:
                    with contextlib.suppress(InvalidTransition):
                        await self.store.request_cancel(run_id)
                return None
            # Skips can unblock `on: finish` steps at once; plan again rather than wait a tick.
            return await self.advance(current)
        if plan.done and plan.outcome is not None:
            finished = await self.store.finish_chain_run(
                run.id, plan.outcome, "chain_timeout" if run.overrun_at or plan.overrun else None
            )
            if finished is not None:
                log.info(
                    "chain.finished", chain=run.chain, chain_run_id=run.id, status=plan.outcome
                )
                if self.hook is not None:
                    self.hook("chain_finished", run.id)
        return plan

    async def _still_running(self, chain_run_id: str) -> bool:
        return (await self.store.get_chain_run(chain_run_id)).status == "running"

    async def _unknown_chain(self, run: ChainRun) -> None:
        """A run of a chain this catalog lacks. Either the chain was added to the file (and
        started from the CLI, or by a launcher already on the newer catalog) after this launcher
        loaded it, or it was removed since the run started.

        Added (the catalog file has it now, or cannot be read): the run waits for a launcher
        that knows the chain (this one restarted, or another replica) instead of failing here:
        failed, a rolling catalog change would fail chain runs whose first steps had already
        started. It waits `UNKNOWN_CHAIN_GRACE_SECONDS` from its start (or until its deadline,
        `max_duration`, when sooner). Removed (the file lacks it too), it does not wait for that.
        Then it fails with `unknown_chain` once no other launcher could have been advancing it
        for `unknown_settle` seconds: none live runs a different catalog that has the chain (or,
        for one that lists no chains, the jobs of the run's steps). A launcher that has the
        chain handles its deadline itself (`chain_timeout`).
        """
        now = await self.store.now()
        in_file = await self._file_has_chain(run.chain)
        grace = 0 if in_file is False else UNKNOWN_CHAIN_GRACE_SECONDS
        waited = now - run.started_at >= timedelta(seconds=grace)
        if waited or (run.deadline_at is not None and now >= run.deadline_at):
            if await self._may_be_advanced_elsewhere(run, now):
                self._unadvanced_since.pop(run.id, None)
            else:
                if len(self._unadvanced_since) >= 10_000:  # bounded, like the warnings
                    self._unadvanced_since.clear()
                since = self._unadvanced_since.setdefault(run.id, now)
                if now - since >= timedelta(seconds=self.unknown_settle):
                    self._unadvanced_since.pop(run.id, None)
                    await self._fail_unknown(run, removed=in_file is False)
                    return
        if run.id in self._unknown_warned:
            return
        if len(self._unknown_warned) >= 10_000:  # bounded: one warning each, roughly
            self._unknown_warned.clear()
        self._unknown_warned.add(run.id)
        log.warning(
            "chain.unknown_chain",
            chain=run.chain,
            chain_run_id=run.id,
            hint=self._unknown_hint(run, in_file),
        )

    def _unknown_hint(self, run: ChainRun, in_file: bool | None) -> str:
        """What the `chain.unknown_chain` warning tells a person, from what the file says."""
        settle = format_duration(self.unknown_settle)
        grace = format_duration(UNKNOWN_CHAIN_GRACE_SECONDS)
        if in_file is False:
            return (
                f"chain {run.chain!r} is neither in this launcher's catalog nor in its file "
                f"{self.catalog_path} (removed?): the run ends `unknown_chain` once no live "
                f"launcher has the chain for {settle}; `runlane cancel {run.id}` ends it now"
            )
        if in_file:
            return (
                f"chain {run.chain!r} was added to {self.catalog_path} after this launcher "
                "loaded it: restart `runlane serve` to load the current catalog; meanwhile the "
                f"run waits for a launcher that has the chain (it ends `unknown_chain` {grace} "
                "after its start if none has)"
            )
        return (
            "this launcher's catalog does not define the chain: the run waits for a launcher "
            f"that does (`runlane serve` on a catalog that has it); it ends `unknown_chain` "
            f"{grace} after its start if none has, and `runlane cancel {run.id}` ends it now"
        )

    async def _file_has_chain(self, chain: str) -> bool | None:
        """Whether the catalog file this launcher was started on defines `chain` now; None when
        there is no file or it cannot be read or loaded. Read again only when it changes."""
        if self.catalog_path is None:
            return None
        self._file_chains = await asyncio.to_thread(
            file_chains, self.catalog_path, self._file_chains
        )
        known = self._file_chains[1]
        return None if known is None else chain in known

    async def _fail_unknown(self, run: ChainRun, *, removed: bool) -> None:
        if await self.store.finish_chain_run(run.id, "failure", "unknown_chain") is not None:
            log.warning(
                "chain.unknown_chain_failed",
                chain=run.chain,
                chain_run_id=run.id,
                reason=(
                    f"the chain is not in the catalog file {self.catalog_path} and no live "
                    "launcher has it"
                    if removed
                    else "no launcher that knows the chain advanced it in time"
                ),
            )
            # An ended chain run starts nothing more: its steps still queued are cancelled (as
            # a cancelled chain run's are); one running finishes as it would.
            note = (
                f"cancelled: its chain run {run.id} ended `unknown_chain` (chain {run.chain!r} "
                "is in no live launcher's catalog)"
            )
            steps = await self.store.list_runs(RunFilter(chain_root_id=run.id, limit=10_000))
            for step in steps:
                if step.status is RunStatus.QUEUED:
                    with contextlib.suppress(InvalidTransition):  # claimed or ended meanwhile
                        await self.store.finish_unleased(
                            step.id,
                            RunStatus.QUEUED,
                            Outcome(RunStatus.CANCELLED, EndReason.CANCELLED, note=note),
                        )
            if self.hook is not None:
                self.hook("chain_finished", run.id)

    async def _may_be_advanced_elsewhere(self, run: ChainRun, now: datetime) -> bool:
        """True when another live launcher has the chain (its heartbeat lists its chains), or
        may have it: one that does not list its chains (an older runlane), runs a different
        catalog (or does not say which) and has every job the run's steps ran."""
        others = on_other_catalogs(
            await self.store.launchers(),
            now,
            self.stale_after,
            launcher_id=self.launcher_id,
            catalog_digest=self.catalog_digest,
        )
        if any(h.catalog_chains is not None and run.chain in h.catalog_chains for h in others):
            return True
        unlisted = [h for h in others if h.catalog_chains is None]
        if not unlisted:
            return False
        steps = await self.store.list_runs(RunFilter(chain_root_id=run.id, limit=10_000))
        jobs = {step.job for step in steps}
        return any(h.catalog_jobs is None or jobs <= set(h.catalog_jobs) for h in unlisted)

    async def _step(
        self,
        run: ChainRun,
        step: StepSpec,
        now: datetime,
        *,
        skipped: str | None,
        trace: str | None = None,
    ) -> AcceptResult:
        ttl = None
        if step.latest is not None:
            ttl = max(1.0, (step.latest + LATEST_GRACE - now).total_seconds())
        request = RunRequest(
            job=step.job,
            trigger=Trigger.CHAIN,
            dedupe_key=step_dedupe_key(step.name, step.job, run.id),
            chain_root_id=run.id,
            requested_by=run.requested_by,
            queue_ttl_seconds=ttl,
            record_skipped=skipped,
            traceparent=child_traceparent(trace),
        )
        try:
            result = await self.accept(request)
        except (DatabaseUnavailable, DatabaseConflict):
            # The database failed for now (nothing was refused): the next advance starts the
            # step. (Any other store error would fail the same way at every tick: a refusal.)
            raise
        except RunlaneError as exc:
            # A refused step must not wedge the chain: record it as skipped with the reason.
            log.error("chain.step_refused", chain_run_id=run.id, step=step.name, error=str(exc))
            if skipped is None:
                result = await self.accept(
                    RunRequest(
                        job=step.job,
                        trigger=Trigger.CHAIN,
                        dedupe_key=request.dedupe_key,
                        chain_root_id=run.id,
                        record_skipped="start_failed",
                        traceparent=request.traceparent,
                    )
                )
            else:
                raise
        if result.created and self.hook is not None:
            self.hook("chain_step", result.run.id)
        return result

    async def run(self, stopping: asyncio.Event) -> None:
        """Advance running chains every `interval` until `stopping` is set."""
        while not stopping.is_set():
            self.nudge.clear()
            try:
                await self.advance_all()
            except RunlaneError as exc:
                log.warning("chains.tick_failed", error=str(exc))
            stop = asyncio.ensure_future(stopping.wait())
            nudged = asyncio.ensure_future(self.nudge.wait())
            try:
                await asyncio.wait(
                    {stop, nudged}, timeout=self.interval, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                stop.cancel()
                nudged.cancel()


async def cancel_chain_run(
    store: ChainLog, chain_run_id: str, *, by: str | None = None
) -> tuple[ChainRun, list[Run]]:
    """End a running chain run `failure` / `cancelled` (a person ended it), then cancel its
    steps still queued (at once) or running (by their launchers). Works whether or not the
    chain is still in any catalog: it is how a person ends a run of a removed chain now.
    `InvalidTransition` when the chain run had already ended; `NotFound` for an unknown id."""
    run = await store.get_chain_run(chain_run_id)
    ended = await store.finish_chain_run(run.id, "failure", "cancelled")
    if ended is None:
        ended = await store.get_chain_run(run.id)
        why = f" ({ended.end_reason})" if ended.end_reason else ""
        raise InvalidTransition(f"chain run {run.id} has already ended: {ended.status}{why}")
    log.info("chain.cancelled", chain=run.chain, chain_run_id=run.id, by=by)
    steps = await store.list_runs(RunFilter(chain_root_id=run.id, limit=10_000))
    cancelled: list[Run] = []
    for step in steps:
        if step.status in (RunStatus.QUEUED, RunStatus.RUNNING):
            with contextlib.suppress(InvalidTransition):  # it ended meanwhile
                cancelled.append(await store.request_cancel(step.id, by=by))
    return ended, cancelled


@dataclass(frozen=True, slots=True)
class StepView:
    step: str
    job: str
    after: tuple[tuple[str, str], ...]
    status: str  # "pending" when the step has no row yet
    end_reason: str | None
    run_id: str | None
    attempt: int | None


async def chain_view(store: RunLog, catalog: Catalog, run: ChainRun) -> list[StepView]:
    """The steps of a chain run in dependency order, with their latest attempts."""
    from runlane.core.chains import topological_order

    chain = catalog.chains.get(run.chain)
    rows = await store.list_runs(RunFilter(chain_root_id=run.id, limit=10_000))
    if chain is None:  # the chain left the catalog: show its rows as they are
        return [
            StepView(r.job, r.job, (), r.status.value, r.end_reason, r.id, r.attempt) for r in rows
        ]
    specs = step_specs(catalog, chain, run)
    attempts = latest_attempts(specs, run.id, rows)
    views: list[StepView] = []
    for name in topological_order(specs):
        spec = specs[name]
        row = attempts.get(name)
        views.append(
            StepView(
                step=name,
                job=spec.job,
                after=tuple((p, str(on)) for p, on in spec.after),
                status=row.status.value if row else "pending",
                end_reason=row.end_reason if row else None,
                run_id=row.id if row else None,
                attempt=row.attempt if row else None,
            )
        )
    return views
