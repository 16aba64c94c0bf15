"""Finding a run or a chain run by its id or a unique prefix of it (at least 6 characters, any
case, as git does). A refusal quotes the id as it was given, not as it was looked up."""

from __future__ import annotations

from runlane.core.runs import Run
from runlane.errors import AmbiguousId, NotFound, UnknownChainRun, UnknownRun
from runlane.ports import ChainRun, RunFilter
from runlane.service.operations.arguments import run_id_prefix
from runlane.service.runtime import Runtime

# How many of the newest runs (chain runs) a prefix is matched against.
RUN_PREFIX_WINDOW = 500
CHAIN_RUN_PREFIX_WINDOW = 1000


async def resolve_run(rt: Runtime, run_id: str) -> Run:
    """A run by its id or a unique prefix of it. `UnknownRun` when none has it, `AmbiguousId`
    when several do; `InvalidArgument` for a prefix that is too short."""
    prefix = run_id_prefix(run_id)
    typed = run_id.strip()
    try:
        return await rt.store.get_run(prefix)
    except NotFound:
        pass
    window = await rt.store.list_runs(RunFilter(limit=RUN_PREFIX_WINDOW))
    matches = [r for r in window if r.id.startswith(prefix)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise AmbiguousId(f"run id prefix {typed!r} is ambiguous ({len(matches)} runs)")
    raise UnknownRun(f"no run with id {typed!r}")


async def resolve_chain_run(rt: Runtime, chain_run_id: str) -> ChainRun:
    """A chain run by its id or a unique prefix of it. `UnknownChainRun` when none has it,
    `AmbiguousId` when several do; `InvalidArgument` for a prefix that is too short."""
    prefix = run_id_prefix(chain_run_id, "chain run")
    try:
        return await rt.store.get_chain_run(prefix)
    except NotFound:
        pass
    window = await rt.store.list_chain_runs(limit=CHAIN_RUN_PREFIX_WINDOW)
    matches = [r for r in window if r.id.startswith(prefix)]
    if len(matches) == 1:
        return matches[0]
    typed = chain_run_id.strip()
    if matches:
        raise AmbiguousId(f"chain run id prefix {typed!r} is ambiguous ({len(matches)} chain runs)")
    raise UnknownChainRun(f"no chain run with id {typed!r}")
