"""Logging for every `runlane` command: structlog lines on stderr (console, plain lines for a
pipe, or JSON), and the libraries' own records in the same format."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import structlog

from runlane.cli.logline import LineRenderer
from runlane.errors import ConfigError


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is when a record comes: tests and embedding programs
    swap it, and a handler bound to a closed stream would only print logging errors."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


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
        structlog.processors.TimeStamper(fmt="iso", utc=True),
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
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
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
