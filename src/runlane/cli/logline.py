"""The console log format, rendered cheaply for logs that go to a file or a pipe.

`runlane serve` logs a line for every run that ends. structlog's `ConsoleRenderer` is made for a
person at a terminal (colours, column formatters, padding objects) and costs ~30 us a line on
the launcher's only busy thread (~37 us measured with the full processor chain). A
launcher under systemd or Kubernetes writes to a pipe, where none of that shows: there this
renderer writes the same layout, the whole chain and the write taking ~11 us a line
(cli/logging.py's timestamp and per-turn writes). At a terminal the ConsoleRenderer stays.

    2026-12-01T07:20:05.149517Z [info     ] run.finished                   attempt=1 job=noop ...

Values that are not printable text (a newline in a job's output note, a control character in a
param) are written as Python reprs, so one record is always one line plus its traceback.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

# As ConsoleRenderer lays them out: the level padded to the longest name, the event to 30.
_LEVEL_WIDTH = 9
_EVENT_WIDTH = 30
_HEADS = {
    name: f"[{name:<{_LEVEL_WIDTH}}]" for name in ("debug", "info", "warning", "error", "critical")
}


def _text(value: object) -> str:
    if isinstance(value, str):
        return value if value.isprintable() else repr(value)
    return repr(value)


class LineRenderer:
    """structlog's last processor: the event dict as one console-format line (see above).

    Expects `format_exc_info` earlier in the chain when exceptions are logged: the traceback
    (as text, never frame locals) comes after the line."""

    def __call__(self, _logger: Any, _name: str, event_dict: MutableMapping[str, Any]) -> str:
        timestamp = event_dict.pop("timestamp", None)
        level = event_dict.pop("level", "")
        event = event_dict.pop("event", "")
        if type(event) is not str or not event.isprintable():
            event = _text(event)
        exception = event_dict.pop("exception", None)
        stack = event_dict.pop("stack", None)
        head = _HEADS.get(level) or f"[{level:<{_LEVEL_WIDTH}}]"
        if timestamp is not None:
            head = f"{timestamp} {head}"
        if event_dict:
            # A string as it is when printable (a str subclass, a StrEnum, through _text);
            # anything else (numbers, None, text with a newline or a control character) as its
            # repr.
            pairs = " ".join(
                [
                    f"{key}={value}"
                    if type(value) is str and value.isprintable()
                    else f"{key}={_text(value)}"
                    for key, value in sorted(event_dict.items())
                ]
            )
            line = f"{head} {event:<{_EVENT_WIDTH}} {pairs}"
        else:
            line = f"{head} {event}"
        if stack:
            line = f"{line}\n{stack}"
        if exception:
            line = f"{line}\n{exception}"
        return line
