"""A run's log file: the bounded writer the inline executor feeds (`bounded`), and its readers."""

from __future__ import annotations

import asyncio
import codecs
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import BinaryIO

from runlane.adapters.files.bounded import READ_CHUNK, BoundedLog, tail_text

__all__ = ["READ_CHUNK", "BoundedLog", "follow_log", "read_log_tail", "tail_text"]


def read_log_tail(path: str | Path, tail_bytes: int = 65536) -> str:
    """The last `tail_bytes` of a log file, decoded leniently; "" when there is no file."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - tail_bytes))
            return fh.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def _open_if_exists(path: str | Path) -> BinaryIO | None:
    try:
        return open(path, "rb")
    except FileNotFoundError:
        return None


async def follow_log(
    path: str | Path,
    *,
    poll: float = 0.2,
    stop: Callable[[], Awaitable[bool]] | None = None,
) -> AsyncIterator[str]:
    """Yield a log file's text as it grows (from its start), like `tail -f`.

    Ends once `stop()` says the run has ended and the file has been read to its end; without
    `stop` it follows until cancelled. A file that does not exist yet is waited for.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    fh = None
    position = 0
    ended = False
    try:
        while True:
            if fh is None:
                fh = _open_if_exists(path)
            data = b""
            if fh is not None:
                if os.fstat(fh.fileno()).st_size < position:  # rewritten by a new execution
                    fh.seek(0)
                    decoder.reset()
                data = fh.read(READ_CHUNK)
                position = fh.tell()
            if data:
                text = decoder.decode(data)
                if text:
                    yield text
                continue
            if ended:
                if final := decoder.decode(b"", final=True):
                    yield final
                return
            if stop is not None and await stop():
                # Read to the end once more: the run may have written its last bytes after our
                # previous read but before it ended.
                ended = True
                continue
            await asyncio.sleep(poll)
    finally:
        if fh is not None:
            fh.close()
