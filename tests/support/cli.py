"""`runlane ARGS` as a child process from async tests, so the loop a launcher runs on is never
blocked while the CLI works."""

from __future__ import annotations

import asyncio
import sys


async def cli(env: dict[str, str], *args: str, within: float = 60.0) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `runlane ARGS`; fails on a traceback (the CLI never shows
    one) or when it takes longer than `within` seconds."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "runlane",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(within):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    text_out, text_err = out.decode(), err.decode()
    assert "Traceback" not in text_err, text_err
    return proc.returncode, text_out, text_err
