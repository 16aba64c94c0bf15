"""How a run dies with its launcher without the guardian: the kernel's parent-death signal, set by
util-linux `setpriv` or by `prctl` in a `preexec_fn`."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from functools import cache
from typing import Literal

PdeathsigMode = Literal["auto", "guardian", "setpriv", "prctl", "none"]

_PR_SET_PDEATHSIG = 1


@cache
def setpriv_supports_pdeathsig() -> str | None:
    """Path of a util-linux `setpriv` that accepts `--pdeathsig`, or None."""
    path = shutil.which("setpriv")
    if path is None:
        return None
    try:
        probe = subprocess.run(
            [path, "--pdeathsig", "KILL", "--", "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return path if probe.returncode == 0 else None


def prctl_pdeathsig(parent: int | None = None) -> Callable[[], None] | None:
    """A `preexec_fn` that asks the kernel to SIGKILL the child when its parent thread exits.

    A parent that died between the fork and the `prctl` would never send the signal: so the
    child then checks that its parent is still `parent` (the pid of the process that made
    this function, the launcher, unless given) and exits at once, before its command, if not."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl
    launcher = os.getpid() if parent is None else parent

    def set_pdeathsig() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != launcher:
            os._exit(1)  # the launcher is gone already: its run must not start unguarded

    return set_pdeathsig
