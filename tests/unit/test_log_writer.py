"""How log lines reach stderr: off a loop at once; on a running loop, a turn's lines in one write
as the turn ends, in the order they were logged (the libraries' records among them); never lost
at the loop's end or the process's; never an error for the caller when stderr is gone."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator

import pytest
import structlog

from runlane.cli.logging import WRITER, configure_logging


class CountingStream:
    """A stderr that records each write."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    @property
    def lines(self) -> list[str]:
        return "".join(self.writes).splitlines()


class GoneStream(CountingStream):
    """A stderr whose reader has gone (a closed pipe)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield None
    root.handlers, root.level = handlers, level
    structlog.reset_defaults()


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch, restore_logging: None) -> CountingStream:
    """Runlane's logging on, in the console format at info. Each test puts the stream in
    sys.stderr itself: pytest puts its capture there after the fixtures are set up."""
    monkeypatch.setenv("RUNLANE_LOG_FORMAT", "console")
    monkeypatch.setenv("RUNLANE_LOG_LEVEL", "info")
    configure_logging()
    WRITER.flush()  # nothing an earlier test held
    return CountingStream()


def _logging_to(
    stream: CountingStream, monkeypatch: pytest.MonkeyPatch, name: str
) -> structlog.typing.FilteringBoundLogger:
    monkeypatch.setattr(sys, "stderr", stream)
    return structlog.get_logger(name)  # type: ignore[no-any-return]


def _events(lines: list[str]) -> list[str]:
    return [line.split("] ", 1)[1].split()[0] for line in lines]


def test_off_a_loop_each_line_is_written_at_once(
    stream: CountingStream, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _logging_to(stream, monkeypatch, "runlane.cli")
    log.info("one")
    assert _events(stream.lines) == ["one"]
    log.info("two")
    assert len(stream.writes) == 2


def test_a_turns_lines_go_out_together_as_the_turn_ends_in_their_order(
    stream: CountingStream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = _logging_to(stream, monkeypatch, "runlane.launcher")
    seen_in_turn: list[int] = []

    async def main() -> None:
        for i in range(40):
            log.info("run.finished", run_id=f"r{i}")
        seen_in_turn.append(len(stream.writes))
        await asyncio.sleep(0)  # the turn ends
        seen_in_turn.append(len(stream.writes))
        log.info("launcher.idle")
        await asyncio.sleep(0)

    asyncio.run(main())
    assert seen_in_turn == [0, 1]  # held during the turn, one write after it
    assert [line.rsplit("run_id=", 1)[1] for line in stream.lines[:40]] == [
        f"r{i}" for i in range(40)
    ]
    assert _events(stream.lines)[40:] == ["launcher.idle"]
    assert len(stream.writes) == 2


def test_a_warning_is_written_at_once_after_the_lines_held_before_it(
    stream: CountingStream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = _logging_to(stream, monkeypatch, "runlane.launcher")
    seen_in_turn: list[list[str]] = []

    async def main() -> None:
        for i in range(3):
            log.info("run.finished", run_id=f"r{i}")
        logging.getLogger("psycopg.pool").warning("error connecting")  # a library's
        seen_in_turn.append(_events(stream.lines))
        log.info("run.finished", run_id="r3")
        log.error("launcher.database_unavailable")  # runlane's own
        seen_in_turn.append(_events(stream.lines))
        log.info("run.finished", run_id="r4")
        seen_in_turn.append(_events(stream.lines))

    asyncio.run(main())
    first = ["run.finished"] * 3 + ["error"]
    second = [*first, "run.finished", "launcher.database_unavailable"]
    assert seen_in_turn == [first, second, second]  # the last info line held to the turn's end
    assert _events(stream.lines) == [*second, "run.finished"]


def test_a_line_logged_while_a_line_is_written_does_not_hang(
    stream: CountingStream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A write (or queueing the flush) can run the garbage collector, whose finalizers log:
    # asyncio's "Task was destroyed but it is pending!" comes back on the same thread.
    log = _logging_to(stream, monkeypatch, "runlane.launcher")
    inner = structlog.get_logger("runlane.inner")

    class Reentrant(CountingStream):
        def write(self, text: str) -> int:
            if len(self.writes) == 0:
                self.writes.append("")
                logging.getLogger("asyncio").error("Task was destroyed but it is pending!")
                inner.info("inner.line")
            return super().write(text)

    reentrant = Reentrant()
    monkeypatch.setattr(sys, "stderr", reentrant)

    async def main() -> None:
        log.info("run.finished", run_id="r1")
        await asyncio.sleep(0)
        log.warning("launcher.slow")

    worker = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "logging deadlocked on its own thread"
    assert sorted(_events(reentrant.lines)) == sorted(
        ["Task", "inner.line", "run.finished", "launcher.slow"]
    )


def test_a_turn_that_logs_more_than_256_lines_writes_them_as_it_goes(
    stream: CountingStream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = _logging_to(stream, monkeypatch, "runlane.launcher")
    during: list[int] = []

    async def main() -> None:
        for i in range(600):
            log.info("run.finished", run_id=f"r{i}")
        during.append(len(stream.lines))

    asyncio.run(main())
    assert during == [512]  # two writes of 256 in the turn, never more held than that
    assert len(stream.lines) == 600  # the rest at the turn's end


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_the_last_turns_lines_are_written_when_the_loop_ends(loop: str) -> None:
    # The last line is logged in the turn that ends the program: nothing runs after it but
    # the loop's close and the interpreter's exit.
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    script = textwrap.dedent(
        f"""
        import asyncio, os
        os.environ["RUNLANE_LOG_LEVEL"] = "info"
        from runlane.cli.logging import WRITER, configure_logging
        from runlane.cli.options import run_async
        from runlane.service.runtime import event_loop_factory
        import structlog
        configure_logging()
        log = structlog.get_logger("runlane.launcher")

        async def main():
            log.info("launcher.stopping")
            await asyncio.sleep(0)
            log.info("launcher.stopped")

        run_async(main(), event_loop_factory({loop!r}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert _events(done.stderr.splitlines()) == ["launcher.stopping", "launcher.stopped"]


def test_lines_held_by_a_loop_that_closed_are_written_by_the_next_loops_turn(
    stream: CountingStream,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = _logging_to(stream, monkeypatch, "runlane.launcher")
    loop = asyncio.new_event_loop()

    def log_and_stop() -> None:
        log.info("first")
        loop.stop()

    # the loop stops in the turn that logged: its flush is queued, never run, and it is closed
    loop.call_soon(log_and_stop)
    loop.run_forever()
    loop.close()
    assert stream.writes == []

    async def later() -> None:
        log.info("second")
        await asyncio.sleep(0)

    asyncio.run(later())
    assert _events(stream.lines) == ["first", "second"]


def test_a_gone_stderr_never_fails_the_caller(
    stream: CountingStream, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = GoneStream()
    monkeypatch.setattr(sys, "stderr", gone)
    log = structlog.get_logger("runlane.launcher")
    log.info("off.loop")  # a print to it would raise BrokenPipeError here

    async def main() -> str:
        log.info("run.finished", run_id="r1")
        logging.getLogger("psycopg.pool").warning("error connecting")
        await asyncio.sleep(0)
        return "the run went on"

    assert asyncio.run(main()) == "the run went on"
    monkeypatch.setattr(sys, "stderr", None)  # started with descriptor 2 closed
    log.warning("off.loop.no.stderr")
    assert asyncio.run(main()) == "the run went on"
    monkeypatch.setattr(sys, "stderr", stream)  # a reader again: the lines after it come out
    log.info("launcher.writes_again")
    assert _events(stream.lines) == ["launcher.writes_again"]
