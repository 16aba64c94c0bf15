"""How a run dies with its launcher without the guardian: the kernel's parent-death signal, set by
util-linux `setpriv` or by `prctl` in a `preexec_fn`."""

from __future__ import annotations

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


def prctl_pdeathsig() -> Callable[[], None] | None:
    """A `preexec_fn` that asks the kernel to SIGKILL the child when its parent thread exits."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl

    def set_pdeathsig() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return set_pdeathsig
