"""`wait_until` (the launcher's claim gathering and its other bounded waits) on asyncio's loop
and on uvloop, whose clock counts whole milliseconds: the wait ends at its deadline without
going round the loop in its last millisecond, and as soon as what it waits for is true."""

from __future__ import annotations

import asyncio
import time

import pytest

from runlane.service.launcher.supervised import wait_until
from tests.support.loops import LOOPS


@pytest.mark.parametrize("loop", LOOPS)
def test_a_wait_nothing_ends_ends_at_its_deadline_without_spinning(loop: str) -> None:
    looked = 0

    def ready() -> bool:
        nonlocal looked
        looked += 1
        return False

    async def go() -> float:
        event = asyncio.Event()
        running = asyncio.get_running_loop()
        started = time.monotonic()
        await wait_until(event, ready, running.time() + 0.02)
        return time.monotonic() - started

    for _ in range(20):
        with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
            looked = 0
            took = runner.run(go())
        # Looked at once, as the wait began: nothing set the event. (A wait for "what is left"
        # in a loop went round ~100 times in uvloop's last millisecond.)
        assert looked == 1
        assert 0.018 <= took < 1.0


@pytest.mark.parametrize("loop", LOOPS)
def test_a_wait_ends_as_soon_as_what_it_waits_for_is_true(loop: str) -> None:
    async def go() -> tuple[float, int]:
        event = asyncio.Event()
        state = {"free": 0, "looked": 0}

        def ready() -> bool:
            state["looked"] += 1
            return state["free"] >= 3

        async def free_one_by_one() -> None:
            for _ in range(3):
                await asyncio.sleep(0.001)
                state["free"] += 1
                event.set()

        feeder = asyncio.create_task(free_one_by_one())
        started = time.monotonic()
        await wait_until(event, ready, asyncio.get_running_loop().time() + 30)
        await feeder
        return time.monotonic() - started, state["looked"]

    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        took, looked = runner.run(go())
    assert took < 5  # far from the 30 s deadline
    assert looked == 4  # at the start, then once per event
