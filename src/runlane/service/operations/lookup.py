"""Finding a run or a chain run by its id or a unique prefix of it (at least 6 characters, any
case, as git does). A refusal quotes the id as it was given, not as it was looked up.

A prefix is matched against every id in the store, however old, through a range on the primary
key (`run_ids_by_prefix`): no row is read until one id is left, and a whole id that names no run
is refused after that one lookup."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

from runlane.core.runs import Run
from runlane.errors import AmbiguousId, NotFound, UnknownChainRun, UnknownRun
from runlane.ports import ChainRun
from runlane.service.operations.arguments import run_id_prefix
from runlane.service.runtime import Runtime

T = TypeVar("T")

# How many matching ids an ambiguous prefix counts before it says "more than".
AMBIGUOUS_COUNTED = 10
# A canonical UUID's length: a whole id is no prefix of another.
_WHOLE_ID = 36


def _how_many(ids: list[str], what: str) -> str:
    more = len(ids) > AMBIGUOUS_COUNTED
    return f"more than {AMBIGUOUS_COUNTED} {what}" if more else f"{len(ids)} {what}"


async def resolve_run(rt: Runtime, run_id: str) -> Run:
    """A run by its id or a unique prefix of it. `UnknownRun` when none has it, `AmbiguousId`
    when several do; `InvalidArgument` for a prefix that is too short."""
    store = rt.store
    found = await _resolve(run_id_prefix(run_id), store.get_run, store.run_ids_by_prefix)
    typed = run_id.strip()
    if isinstance(found, list):
        raise AmbiguousId(f"run id prefix {typed!r} is ambiguous ({_how_many(found, 'runs')})")
    if found is None:
        # (One more lookup, on the refusal's path only: a chain run's id is a common slip.)
        chain = await _resolve(
            run_id_prefix(run_id), store.get_chain_run, store.chain_run_ids_by_prefix
        )
        if isinstance(chain, ChainRun):
            raise UnknownRun(
                f"no run with id {typed!r}: it is a chain run's (`runlane chain show` on the "
                "CLI, /api/v1/chain-runs/ID on the API, get_chain_run over MCP)"
            )
        raise UnknownRun(f"no run with id {typed!r}")
    return found


async def resolve_chain_run(rt: Runtime, chain_run_id: str) -> ChainRun:
    """A chain run by its id or a unique prefix of it. `UnknownChainRun` when none has it,
    `AmbiguousId` when several do; `InvalidArgument` for a prefix that is too short."""
    store = rt.store
    prefix = run_id_prefix(chain_run_id, "chain run")
    found = await _resolve(prefix, store.get_chain_run, store.chain_run_ids_by_prefix)
    typed = chain_run_id.strip()
    if isinstance(found, list):
        many = _how_many(found, "chain runs")
        raise AmbiguousId(f"chain run id prefix {typed!r} is ambiguous ({many})")
    if found is None:
        raise UnknownChainRun(f"no chain run with id {typed!r}")
    return found


async def _resolve(
    prefix: str,
    get: Callable[[str], Awaitable[T]],
    ids_by_prefix: Callable[..., Awaitable[list[str]]],
) -> T | list[str] | None:
    """The row `prefix` names (a whole id, or the prefix of one id only), the ids it matches
    when it matches several, or None."""
    with contextlib.suppress(NotFound):
        return await get(prefix)
    if len(prefix) >= _WHOLE_ID:  # a whole id is no other id's prefix
        return None
    ids = await ids_by_prefix(prefix, limit=AMBIGUOUS_COUNTED + 1)
    if len(ids) > 1:
        return ids
    if ids:
        with contextlib.suppress(NotFound):  # (unless deleted in between)
            return await get(ids[0])
    return None
