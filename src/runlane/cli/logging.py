"""Logging for every `runlane` command: structlog lines on stderr (console, plain lines for a
pipe, or JSON), and the libraries' own records in the same format."""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import sys
import threading
import time
from typing import Any

import structlog

from runlane.cli.logline import LineRenderer
from runlane.errors import ConfigError

# Lines held for the end of a loop's turn before they are written whatever the turn's length.
_HELD_LINES = 256


class LineWriter:
    """Where every log line goes: whatever `sys.stderr` is when it is written (tests and
    embedding programs swap it).

    Lines at `info` and `debug` logged on a running event loop are held and written together,
    in one `write` queued behind the turn's work (`call_soon`): a launcher logs a line for every
    run that ends, and a busy one ends dozens a turn, where a write and a flush each cost as much
    as rendering the line. Such a line waits for the rest of its turn, never for a timer; 256
    held lines are written at once. Anything else is written at once, after whatever is held,
    so the order holds: a line logged off a loop (the CLI, threads), and every `warning` and
    above (a launcher about to be killed has said what went wrong). What is held when the loop
    ends is written as `asyncio.Runner` closes it (it runs the loop once more), or at exit; a
    SIGKILL or `os._exit` in the turn that logged an `info` line loses it. A stderr that is gone
    (a closed pipe, a full disk, none at all) loses the lines, never the run whose end they
    report: the launcher goes on.

    No lock is held while anything else runs: a write, or queueing the flush, can run the
    garbage collector, whose finalizers may log (asyncio's "Task was destroyed"), and that line
    comes back here on the same thread."""

    def __init__(self) -> None:
        self._held: list[str] = []
        self._lock = threading.Lock()  # the held lines and `_flush_on`
        self._write_lock = threading.RLock()  # one write at a time, in order; re-entered by a
        # line logged from within a write on the same thread
        # The loop whose queue holds the flush of the lines held now, if any. A line from
        # another loop (a thread's, or one that closed before its flush ran) queues its own.
        self._flush_on: asyncio.AbstractEventLoop | None = None
        os.register_at_fork(after_in_child=self._forget)

    def held(self, message: str) -> None:
        """An `info` or `debug` line: held to the end of the turn on a running loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.now(message)
            return
        with self._lock:
            self._held.append(message)
            full = len(self._held) >= _HELD_LINES
            queued = loop is self._flush_on
        if full:
            self.flush()
        elif not queued:
            loop.call_soon(self.flush)
            with self._lock:  # only once it is queued: a failed call_soon leaves it unset
                self._flush_on = loop

    def now(self, message: str) -> None:
        """Written at once, after the lines held before it."""
        with self._lock:
            self._held.append(message)
        self.flush()

    # structlog calls the method named after the level
    debug = info = held
    msg = warning = error = critical = exception = now

    def flush(self) -> None:
        with self._write_lock:
            with self._lock:
                held, self._held, self._flush_on = self._held, [], None
            if not held:
                return
            stream = sys.stderr
            if stream is None:  # started with descriptor 2 closed (some daemonizers)
                return
            try:
                stream.write("\n".join(held) + "\n")
                stream.flush()
            except (OSError, ValueError):  # a closed or broken stderr
                pass

    def _forget(self) -> None:
        """In a forked child: the parent writes its own lines (and a thread of the parent may
        have held a lock at the fork)."""
        self._held, self._flush_on = [], None
        self._lock, self._write_lock = threading.Lock(), threading.RLock()


class _Stamp:
    """structlog's processor: the time as `2026-12-01T07:20:05.149517Z` (UTC, always with its
    microseconds), as structlog's `TimeStamper(fmt="iso", utc=True)` writes it but for a second
    that ends in .000000, at a seventh of its cost (~0.7 us against ~5: the text up to the second
    is made once a second)."""

    def __init__(self) -> None:
        self._second: tuple[int, str] = (-1, "")  # one object: threads see both or neither

    def __call__(self, _logger: Any, _name: str, event_dict: Any) -> Any:
        second, ns = divmod(time.time_ns(), 1_000_000_000)
        seen = self._second
        if seen[0] != second:
            seen = self._second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        event_dict["timestamp"] = f"{seen[1]}.{ns // 1000:06d}Z"
        return event_dict


WRITER = LineWriter()
atexit.register(WRITER.flush)


def _writer(*_args: Any) -> LineWriter:
    return WRITER


class _StderrHandler(logging.Handler):
    """The libraries' records (warnings and up), formatted as runlane's lines and written at
    once by the same writer, so they keep their place among them. Without a lock of its own:
    the writer is thread-safe, and a handler lock held while it writes could deadlock against a
    record logged from within that write (a finalizer run by the garbage collector)."""

    def createLock(self) -> None:
        self.lock = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            WRITER.now(self.format(record))
        except Exception:  # noqa: BLE001 - as logging's own handlers do
            self.handleError(record)


def configure_logging(default_level: str = "warning") -> None:
    from runlane.service.config import env_log_format, env_log_level

    try:
        level_name = env_log_level(os.environ) or default_level
        log_format = env_log_format(os.environ)
    except ConfigError:  # reported in one line by the command, as it reads its settings
        level_name, log_format = default_level, "console"
    level = logging.getLevelNamesMapping()[level_name.upper()]
    # Tracebacks in logs never show local variables: they hold database URLs with passwords,
    # lease tokens and params (structlog's rich formatter shows them by default).
    renderer: Any
    processors: list[Any] = [
        # What a task bound for its whole life (a supervised run's trace_id) joins its lines.
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        _Stamp(),
    ]
    if log_format == "json":
        processors.append(structlog.processors.format_exc_info)
        renderer = structlog.processors.JSONRenderer()
    elif sys.stderr.isatty():
        renderer = structlog.dev.ConsoleRenderer(
            colors=True, exception_formatter=structlog.dev.plain_traceback
        )
    else:
        # The same layout for a pipe or a file (a launcher under systemd or Kubernetes), at a
        # fraction of the cost: a line per run is logged on the launcher's busy thread.
        processors.append(structlog.processors.format_exc_info)
        renderer = LineRenderer()
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=_writer,
        cache_logger_on_first_use=True,
    )
    # The libraries' own records (psycopg's pool retrying during an outage, asyncio, httpx) in
    # the same format, so a JSON log stays all JSON; warnings and up only, whatever the level:
    # at info the pool logs every connection it hands back.
    handler = _StderrHandler()
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *processors],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    handler.set_name("runlane")
    root = logging.getLogger()
    root.handlers = [h for h in root.handlers if h.get_name() != "runlane"] + [handler]
    root.setLevel(max(level, logging.WARNING))
