"""A run's bounded log writer and its tail: `os` alone, so that the spawner process
(`runlane.adapters.local.spawner`, started with `python -I -S`) can use them without loading
asyncio or anything else of runlane."""

from __future__ import annotations

import os

READ_CHUNK = 65536  # bytes read from a pipe or a log file at once


def tail_text(data: bytes, tail_lines: int) -> str:
    """The last `tail_lines` lines of `data`, decoded leniently."""
    pos = len(data) - 1 if data.endswith(b"\n") else len(data)
    for _ in range(tail_lines):
        pos = data.rfind(b"\n", 0, pos)
        if pos < 0:
            break
    if pos >= 0:
        data = data[pos + 1 :]
    return data.decode("utf-8", errors="replace")


class BoundedLog:
    """Writes output to the run's log file up to `max_bytes`, then keeps only a tail in memory.

    The file ends up at most about `max_bytes + tail_bytes` plus two marker lines: writes after
    the limit are dropped, and at close the last `tail_bytes` of the output are appended.
    """

    __slots__ = (
        "_closed",
        "_fd",
        "_last_written",
        "_max",
        "_path",
        "_tail_bytes",
        "dropped",
        "ring",
        "write_error",
        "written",
    )

    def __init__(self, path: str, max_bytes: int, tail_bytes: int) -> None:
        # The file is created on the first byte of output: creating a file costs a journal
        # write, and most short runs print nothing. A run that prints nothing has no log file.
        self._path = path
        self._fd: int | None = None
        self._closed = False
        self._max = max_bytes
        self._tail_bytes = tail_bytes
        self._last_written = b"\n"
        self.written = 0
        self.dropped = 0  # bytes not written to the file
        self.ring = bytearray()  # the last `tail_bytes` bytes of all output
        # Why the file stopped being written (a full disk, a log directory gone): the output
        # still reaches the tail in memory, and the run's note says the file is incomplete.
        self.write_error: str | None = None

    def feed(self, data: bytes) -> None:
        # Local-disk writes are short and synchronous on purpose: a thread hop per chunk would
        # cost more than the write.
        if self.dropped == 0:
            room = self._max - self.written
            if len(data) <= room:
                self._write(data)
                self.written += len(data)
            else:
                self._write(data[:room])
                self.written += room
                self._write_marker(
                    f"[runlane: output truncated after {self._max} bytes; last bytes kept below]\n"
                )
                self.dropped = len(data) - room
        else:
            self.dropped += len(data)
        ring = self.ring
        ring += data
        excess = len(ring) - self._tail_bytes
        if excess > 0:
            del ring[:excess]

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self.dropped:
                kept = bytes(self.ring[-min(self.dropped, len(self.ring)) :]) if self.ring else b""
                self._write_marker(f"[runlane: {self.dropped - len(kept)} bytes dropped]\n")
                self._write(kept)
        finally:
            self._closed = True
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _write_marker(self, line: str) -> None:
        prefix = b"" if self._last_written.endswith(b"\n") else b"\n"
        self._write(prefix + line.encode())

    def _write(self, data: bytes) -> None:
        if not data or self._closed or self.write_error is not None:
            return
        try:
            if self._fd is None:
                # Truncate: the file belongs to this (run, attempt) execution alone, and the
                # bound must hold per file.
                self._fd = os.open(
                    self._path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644
                )
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
        except OSError as exc:
            # Never again for this run: one failed write per output chunk would flood the loop.
            self.write_error = exc.strerror or str(exc)
            return
        self._last_written = data[-1:]
