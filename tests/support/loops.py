"""The event loops runlane's asyncio code runs on, by name, for tests that run on each: asyncio's
own, and uvloop (`runlane serve`'s default, RUNLANE_EVENT_LOOP=auto) where it is installed (a
dependency on CPython outside Windows)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def _loop_factories() -> dict[str, LoopFactory]:
    factories: dict[str, LoopFactory] = {"asyncio": asyncio.new_event_loop}
    try:
        import uvloop
    except ImportError:
        return factories
    factories["uvloop"] = uvloop.new_event_loop
    return factories


LOOPS = _loop_factories()
