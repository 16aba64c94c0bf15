"""Chains: the catalog's chains with their steps; start a chain run now, show one with its
steps, list the recent ones."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from runlane.core.access import Role
from runlane.errors import UnknownChain
from runlane.ports import ChainRun
from runlane.service.operations.arguments import (
    Requester,
    check_limit,
    check_traceparent,
    confirms,
)
from runlane.service.operations.lookup import resolve_chain_run
from runlane.service.operations.notices import Notice, chain_notices
from runlane.service.runtime import Runtime

if TYPE_CHECKING:
    from runlane.catalog import Catalog
    from runlane.service.chains import StepView

# The chain, event and schedule services are imported inside the operations that use them: at
# the top they would cost every `runlane` command ~0.3 s of imports.


@dataclass(frozen=True, slots=True)
class ChainStepInfo:
    """A step of a chain: the job it runs and the steps it waits for (`(step, on)`, `on`:
    success or finish)."""

    step: str
    job: str
    after: tuple[tuple[str, str], ...]
    latest: str | None


@dataclass(frozen=True, slots=True)
class ChainInfo:
    """A chain as the catalog defines it, its steps in dependency order."""

    name: str
    description: str | None
    schedule: str | None  # the cron, when it runs on one
    timezone: str | None  # the schedule's zone (the catalog's default when it names none)
    max_duration_seconds: float | None
    steps: tuple[ChainStepInfo, ...]


@dataclass(frozen=True, slots=True)
class ChainRunView:
    """A chain run and its steps in dependency order, each with its latest attempt."""

    run: ChainRun
    steps: tuple[StepView, ...]


@dataclass(frozen=True, slots=True)
class ChainStarted:
    """What `run_chain` did: the chain run with its first steps queued, and what the person
    should know (`no_launcher`, `launchers_lack_chain`)."""

    view: ChainRunView
    warnings: tuple[Notice, ...] = ()


def _chain_info(catalog: Catalog, name: str) -> ChainInfo:
    from runlane.core.chains import StepSpec, topological_order

    chain = catalog.chains[name]
    specs = {
        step: StepSpec(
            name=step,
            job=chain.step_job(step),
            after=tuple((d.step, d.on) for d in body.after),
            latest=None,
        )
        for step, body in chain.steps.items()
    }
    steps = tuple(
        ChainStepInfo(
            step,
            specs[step].job,
            tuple((p, str(on)) for p, on in specs[step].after),
            chain.steps[step].latest,
        )
        for step in topological_order(specs)
    )
    schedule = chain.schedule
    return ChainInfo(
        name=name,
        description=chain.description,
        schedule=None if schedule is None else schedule.cron,
        timezone=schedule.tz or catalog.global_.timezone if schedule is not None else None,
        max_duration_seconds=chain.max_duration,
        steps=steps,
    )


async def list_chains(rt: Runtime) -> tuple[ChainInfo, ...]:
    """Every chain of the catalog, by name, with its steps."""
    cat = rt.require_catalog()
    return tuple(_chain_info(cat, name) for name in sorted(cat.chains))


async def show_chain(rt: Runtime, chain: str) -> ChainInfo:
    """One chain of the catalog with its steps (`unknown_chain`)."""
    cat = rt.require_catalog()
    if chain not in cat.chains:
        known = ", ".join(sorted(cat.chains)) or "the catalog has none"
        raise UnknownChain(f"unknown chain {chain!r} (chains: {known})")
    return _chain_info(cat, chain)


async def view_of(rt: Runtime, run: ChainRun) -> ChainRunView:
    from runlane.service.chains import chain_view

    return ChainRunView(run, tuple(await chain_view(rt.store, rt.require_catalog(), run)))


async def authorize_run_chain(rt: Runtime, chain: str, *, requester: Requester) -> None:
    """`forbidden` unless `requester` may operate every step's job of `chain`
    (`unknown_chain` when there is no such chain): what `run_chain` checks first."""
    requester.require(Role.OPERATOR, action="run chain")
    info = await show_chain(rt, chain)  # unknown_chain, naming the chains there are
    requester.require(Role.OPERATOR, jobs=[s.job for s in info.steps], action="run chain")


async def run_chain(
    rt: Runtime,
    chain: str,
    *,
    requester: Requester,
    confirmed: bool = False,
    confirm: str | None = None,
    dedupe_key: str | None = None,
    traceparent: str | None = None,
) -> ChainStarted:
    """Start a run of `chain` now: its first steps are queued, a launcher advances it.
    `unknown_chain`; `confirmation_required` for a step whose job has `acts: true`;
    `forbidden` unless the requester may operate every step's job. With `dedupe_key` (an
    Idempotency-Key's) the chain run is written at most once under it, as for `run_job`.
    `confirm`: the name a person typed; it confirms when it is the chain's name.
    `traceparent`: the caller's trace, which every step's run joins (`invalid_traceparent`)."""
    from runlane.service.chains import ChainRunner

    trace = check_traceparent(traceparent)
    await authorize_run_chain(rt, chain, requester=requester)
    cat = rt.require_catalog()
    runner = ChainRunner(rt.store, cat, rt.accept)
    run = await runner.start(
        chain,
        trigger=requester.trigger,
        requested_by=requester.name,
        confirmed=confirmed or confirms(confirm, chain),
        dedupe_key=dedupe_key,
        traceparent=trace,
    )
    warnings = await chain_notices(rt, chain)
    return ChainStarted(await view_of(rt, run), tuple(warnings))


async def show_chain_run(rt: Runtime, chain_run_id: str) -> ChainRunView:
    """One chain run by id or unique prefix (`unknown_chain_run`, `ambiguous_id`)."""
    return await view_of(rt, await resolve_chain_run(rt, chain_run_id))


async def list_chain_runs(rt: Runtime, *, limit: int = 10) -> tuple[ChainRunView, ...]:
    """The newest chain runs first (`limit`: 1 to 10000), each with its steps."""
    check_limit(limit)
    runs = await rt.store.list_chain_runs(limit=limit)
    return tuple([await view_of(rt, r) for r in runs])
