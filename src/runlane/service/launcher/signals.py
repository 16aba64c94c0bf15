"""The launcher's test and observer signals: what its hook is called with, and when."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Final


class LauncherSignal(StrEnum):
    """Each signal is called as `hook(signal, run_id)`; the values are the names tests wait on."""

    CLAIMED = "claimed"  # the launcher took the run and starts supervising it
    STARTED = "started"  # its execution started (or was reattached to)
    FINISHED = "finished"  # its supervision ended: the outcome is saved, or the run given back
    LEASE_LOST = "lease_lost"  # another launcher holds the run now
    EXPIRED = "expired"  # a queued run outlived its queue TTL
    ORPHANED = "orphaned"  # a running run no launcher holds was ended
    # From the trigger loops the launcher runs (service/scheduler.py, service/chains.py):
    SCHEDULED = "scheduled"
    CHAIN_STARTED = "chain_started"
    CHAIN_STEP = "chain_step"
    CHAIN_OVERRUN = "chain_overrun"
    CHAIN_FINISHED = "chain_finished"


LauncherHook = Callable[[str, str], None]
"""Called as hook(signal, run_id) with a `LauncherSignal`. Tests wait on these instead of
sleeping; production passes nothing."""

# The members the launcher sends per run, as module constants: a member read through its class
# is a slow attribute lookup on Python 3.11, and these are sent several times a run.
CLAIMED: Final = LauncherSignal.CLAIMED
STARTED: Final = LauncherSignal.STARTED
FINISHED: Final = LauncherSignal.FINISHED
LEASE_LOST: Final = LauncherSignal.LEASE_LOST
EXPIRED: Final = LauncherSignal.EXPIRED
ORPHANED: Final = LauncherSignal.ORPHANED
