"""A Python script run in a process of its own, as a launcher a test can kill."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def launched(script: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """`script` run by this interpreter with `args`, its stdout piped as text; killed and
    reaped on the way out whatever happened."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
