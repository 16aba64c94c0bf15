"""The one way a test waits for something another task, thread or process does in its own time:
poll a predicate until it holds or a bounded deadline passes, then fail saying what was awaited
(and, given `explain`, the state of whatever was to bring it about)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

WITHIN = 10.0  # seconds; generous for a loaded machine, short enough to fail a test quickly
POLL = 0.02  # the poll's interval, not a wait for the condition


async def eventually(
    predicate: Callable[[], T | Awaitable[T]],
    what: str,
    *,
    within: float = WITHIN,
    poll: float = POLL,
    explain: Callable[[], str] | None = None,
) -> T:
    """Poll `predicate` (sync or async) until it returns a true value and return that value;
    raise `AssertionError` naming `what` when `within` seconds pass first, followed by what
    `explain()` says then (the state that should have made it happen)."""
    deadline = time.monotonic() + within
    while True:
        answer = predicate()
        value: T = await answer if inspect.isawaitable(answer) else answer
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(within, what, explain))
        await asyncio.sleep(poll)


def eventually_sync(
    predicate: Callable[[], T],
    what: str,
    *,
    within: float = WITHIN,
    poll: float = POLL,
    explain: Callable[[], str] | None = None,
) -> T:
    """`eventually` for a test without an event loop (a thread or process it does not own)."""
    deadline = time.monotonic() + within
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(within, what, explain))
        time.sleep(poll)


def _timed_out(within: float, what: str, explain: Callable[[], str] | None) -> str:
    message = f"not within {within:g} s: {what}"
    if explain is not None:
        try:
            message += "\n" + explain()
        except Exception as exc:  # the explanation must not hide the timeout
            message += f"\n(explaining it failed: {exc!r})"
    return message
