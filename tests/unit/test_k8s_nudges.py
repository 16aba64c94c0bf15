"""A pod run's wake-ups from the shared watch (adapters/kubernetes/watch.py `Nudges`): several
become one, one that comes while nobody waits is kept, and a wait cancelled (a timeout) loses
none."""

from __future__ import annotations

import asyncio

from runlane.adapters.kubernetes.watch import Nudges


async def test_wake_ups_while_nobody_waits_become_one_that_is_kept() -> None:
    nudges = Nudges()
    assert nudges.empty()
    nudges.put_nowait()
    nudges.put_nowait("cancel")
    assert not nudges.empty()
    async with asyncio.timeout(1):
        await nudges.get()  # at once
    assert nudges.empty()
    waiter = asyncio.create_task(nudges.get())
    await asyncio.sleep(0)
    assert not waiter.done()  # nothing pending: it waits
    nudges.put_nowait()
    async with asyncio.timeout(1):
        await waiter


async def test_a_cancelled_wait_loses_no_wake_up() -> None:
    nudges = Nudges()
    waiter = asyncio.create_task(nudges.get())
    await asyncio.sleep(0)
    nudges.put_nowait()  # wakes the waiter...
    waiter.cancel()  # ...which is cancelled before it runs (its timeout fired as well)
    await asyncio.gather(waiter, return_exceptions=True)
    assert not nudges.empty()  # the wake-up is still there for the next look
    async with asyncio.timeout(1):
        await nudges.get()
    assert nudges.empty()
