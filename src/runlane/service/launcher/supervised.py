"""A run this launcher holds a lease on, as every part of the launcher sees it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from runlane.core.runs import Claimed, Lease
from runlane.ports import Execution, Executor


class Tunables(Protocol):
    """The launcher's tunable fields, read where they are used: they may change on a live
    launcher (tests do that)."""

    @property
    def retry_base_seconds(self) -> float: ...
    @property
    def repair_retry_seconds(self) -> float: ...
    @property
    def provider_end_trusted_after(self) -> float: ...


def loop_time() -> float:
    """Monotonic time of the running event loop."""
    return asyncio.get_running_loop().time()


async def wait_until(event: asyncio.Event, ready: Callable[[], bool], deadline: float) -> None:
    """Wait until `ready()`, looked at each time `event` is set, or until the loop's clock reaches
    `deadline`. One timer for the whole wait, never one per turn from what is left: uvloop's
    clock counts whole milliseconds and its timers round to them, so "wait what is left" in a
    loop goes round a hundred times in the last millisecond (what was left is 1e-13 s, a timer
    of 0 ms fires at once, and the clock has not moved)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout_at(deadline):
            while not ready():
                event.clear()
                await event.wait()


@dataclass(slots=True)
class Supervised:
    """A run this launcher holds a lease on."""

    claimed: Claimed
    lease: Lease
    executor: Executor
    execution: Execution | None = None
    lost: bool = False
    shutdown: bool = False
    cancel_grace: float | None = None  # the grace of the last cancel sent, if any
    cancel_requested: bool = False  # someone asked to cancel the run (seen since its claim)
    executing: bool = True  # False once the execution ended and only its outcome is pending
    task: asyncio.Task[None] | None = None
    claimed_at: float = field(default_factory=lambda: loop_time())
    ended_monotonic: float | None = None  # time.monotonic() when the execution ended
    started_monotonic: float | None = None  # time.monotonic() when it started (not reattached)

    async def cancel_execution(self, *, grace: float) -> None:
        """Ask the executor to end the execution: once, and again only with a shorter grace (a
        shutdown or a lost lease hurrying a cancel under way); its end still arrives as an
        event."""
        if self.execution is None or (self.cancel_grace is not None and grace >= self.cancel_grace):
            return
        self.cancel_grace = grace
        with contextlib.suppress(Exception):
            await self.executor.cancel(self.execution, grace=grace)
