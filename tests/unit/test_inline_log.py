"""The inline executor's pure parts: the bounded log, the log tail, error and signal naming."""

from __future__ import annotations

import errno
import signal
from pathlib import Path

import pytest

from runlane.adapters.files.logfile import BoundedLog, follow_log, read_log_tail, tail_text
from runlane.adapters.local.process import signal_error_code, spawn_error
from runlane.errors import PermanentExecutorError, TemporaryExecutorError


def test_under_the_limit_the_file_is_the_output(tmp_path: Path) -> None:
    log = BoundedLog(tmp_path / "a.log", max_bytes=100, tail_bytes=10)
    log.feed(b"hello\n")
    log.feed(b"world\n")
    log.close()
    assert (tmp_path / "a.log").read_bytes() == b"hello\nworld\n"
    assert bytes(log.ring) == b"llo\nworld\n"


def test_over_the_limit_the_file_keeps_head_marker_and_tail(tmp_path: Path) -> None:
    log = BoundedLog(tmp_path / "a.log", max_bytes=10, tail_bytes=4)
    for chunk in (b"0123456", b"789abcdef", b"ghijklmnop"):
        log.feed(chunk)
    log.close()
    assert (tmp_path / "a.log").read_bytes() == (
        b"0123456789\n"
        b"[runlane: output truncated after 10 bytes; last bytes kept below]\n"
        b"[runlane: 12 bytes dropped]\n"
        b"mnop"
    )


def test_tail_shorter_than_dropped_part_keeps_only_dropped_bytes(tmp_path: Path) -> None:
    log = BoundedLog(tmp_path / "a.log", max_bytes=4, tail_bytes=10)
    log.feed(b"abc\ndef")  # 3 bytes dropped; the ring also holds bytes already written
    log.close()
    assert (tmp_path / "a.log").read_bytes() == (
        b"abc\n[runlane: output truncated after 4 bytes; last bytes kept below]\n"
        b"[runlane: 0 bytes dropped]\ndef"
    )


def test_close_is_idempotent(tmp_path: Path) -> None:
    log = BoundedLog(tmp_path / "a.log", max_bytes=4, tail_bytes=4)
    log.close()
    log.close()


@pytest.mark.parametrize(
    ("data", "lines", "expected"),
    [
        (b"a\nb\nc\n", 2, "b\nc\n"),
        (b"a\nb\nc", 2, "b\nc"),
        (b"a\nb\n", 5, "a\nb\n"),
        (b"", 3, ""),
        (b"\xff\xfeok\n", 1, "\ufffd\ufffdok\n"),
    ],
)
def test_tail_text(data: bytes, lines: int, expected: str) -> None:
    assert tail_text(data, lines) == expected


def test_signal_error_code() -> None:
    assert signal_error_code(signal.SIGSEGV) == "signal_sigsegv"
    assert signal_error_code(signal.SIGKILL) == "signal_sigkill"
    assert signal_error_code(99) == "signal_99"


@pytest.mark.parametrize(
    ("err", "kind", "code"),
    [
        (errno.ENOENT, PermanentExecutorError, "command_not_found"),
        (errno.EACCES, PermanentExecutorError, "permission_denied"),
        (errno.EAGAIN, TemporaryExecutorError, "spawn_failed"),
        (errno.EMFILE, TemporaryExecutorError, "spawn_failed"),
        (errno.ENOMEM, TemporaryExecutorError, "spawn_failed"),
    ],
)
def test_spawn_errors_are_classified(err: int, kind: type[Exception], code: str) -> None:
    error = spawn_error("tool", OSError(err, "boom"))
    assert isinstance(error, kind)
    assert getattr(error, "code", None) == code
    assert "'tool'" in str(error)


def test_read_log_tail(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    assert read_log_tail(path) == ""
    path.write_bytes(b"0123456789")
    assert read_log_tail(path, 4) == "6789"


async def test_follow_log_handles_split_utf8_and_stops(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    snowman = "☃".encode()
    path.write_bytes(b"a" + snowman[:1])
    with path.open("ab") as fh:
        fh.write(snowman[1:] + b"b\n")
    calls = 0

    async def stop() -> bool:
        nonlocal calls
        calls += 1
        return True

    chunks = [c async for c in follow_log(path, poll=0, stop=stop)]
    assert "".join(chunks) == "a☃b\n"
    assert calls == 1


async def test_follow_log_waits_for_the_file(tmp_path: Path) -> None:
    async def stop() -> bool:
        return True

    assert [c async for c in follow_log(tmp_path / "missing.log", poll=0, stop=stop)] == []
