"""Runs: run a job now, list and show runs, cancel a run or a chain run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runlane.core.access import Role
from runlane.core.runs import Run, RunStatus
from runlane.errors import InvalidArgument, InvalidTransition, NotCancellable, NotFound
from runlane.ports import ChainRun, RunFilter
from runlane.service.accept import RunRequest
from runlane.service.operations.arguments import Requester, check_limit
from runlane.service.operations.lookup import resolve_chain_run, resolve_run
from runlane.service.operations.notices import Notice, queued_run_notices
from runlane.service.runtime import Runtime

DEFAULT_LIST_LIMIT = 20


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


async def run_job(
    rt: Runtime,
    job: str,
    *,
    requester: Requester,
    params: Mapping[str, object] | None = None,
    params_from_strings: bool = False,
    confirmed: bool = False,
) -> RunQueued:
    """Queue a run of `job` through the one accept path. Raises what it refuses with
    (`unknown_job`, `param_invalid`, `payload_too_large`, `confirmation_required`,
    `overlap_refused` with the active run's id); `forbidden` unless the requester may operate
    `job`."""
    requester.require(Role.OPERATOR, jobs=[job], action="run")
    result = await rt.accept(
        RunRequest(
            job=job,
            trigger=requester.trigger,
            params=params,
            params_from_strings=params_from_strings,
            requested_by=requester.name,
            confirmed=confirmed,
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
) -> tuple[Run, ...]:
    """The newest runs first (`limit`: 1 to 10000, 20 by default), of `job` / in `status`."""
    if limit is not None:
        check_limit(limit)
    wanted = parse_status(status)
    runs = await rt.store.list_runs(
        RunFilter(job=job, status=wanted, limit=limit or DEFAULT_LIST_LIMIT)
    )
    return tuple(runs)


async def show_run(rt: Runtime, run_id: str) -> Run:
    """One run by its id or a unique prefix (`unknown_run`, `ambiguous_id`)."""
    return await resolve_run(rt, run_id)


async def next_attempt(rt: Runtime, run: Run) -> Run | None:
    """The retry of `run` (failed or timed out with tries left), once it is queued."""
    if run.status not in (RunStatus.FAILURE, RunStatus.TIMEOUT) or run.attempt >= run.max_attempts:
        return None
    for other in await rt.store.list_runs(RunFilter(job=run.job, limit=200)):
        if other.retry_of == run.id:
            return other
    return None


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
    except NotFound:
        try:
            found = await resolve_chain_run(rt, run_id)
        except NotFound:
            found = None
        if found is None:
            raise
        return await _cancel_chain_run(rt, found, requester)
    requester.require(Role.OPERATOR, jobs=[run.job], action="cancel")
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
