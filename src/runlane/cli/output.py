"""How the CLI shows things: JSON with the run log's column names, or rich tables for people."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from enum import Enum
from pathlib import PurePath
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape

__all__ = ["err", "escape", "out"]
from rich.table import Table

from runlane.core.runs import Run

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

STATUS_STYLE = {
    "queued": "cyan",
    "running": "yellow",
    "success": "green",
    "failure": "red",
    "timeout": "magenta",
    "skipped": "dim",
    "cancelled": "dim",
}

# Control characters a job's output could use on the terminal of whoever reads it (clear the
# screen, retitle the window, move the cursor to overwrite text): everything below U+0020 but
# newline and tab, DEL, and the C1 range. Shown as visible escapes such as \x1b instead.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (9, 10)}


def terminal_safe(text: str) -> str:
    """`text` with every control character but newline and tab shown as an escape (\x1b)."""
    return text.translate(_CONTROLS)


# The note the inline executor records on a run whose log file it could not write whole (a full
# disk, the log directory gone): `_Child._outcome` in adapters/local/inline.py. Runs carry no
# structured field for it (`error_code` classifies failures, and the run may have succeeded), so
# the note is the record; the file it names must be the run's own (`<run id>.<attempt>.log`).
_INCOMPLETE_LOG = re.compile(
    r"the log file (?P<path>[^\n]+?) is incomplete: writing it failed \((?P<error>[^\n]*?)\); "
    r"the tail here is complete"
)


def incomplete_log_error(note: str | None, log_name: str) -> str | None:
    """Why the log file named `log_name` was left incomplete (`No space left on device`), as
    the run's note says; None when the note says no such thing of that file."""
    for found in _INCOMPLETE_LOG.finditer(note or ""):
        if PurePath(found["path"]).name == log_name:
            return found["error"]
    return None


def incomplete_log_marker(size: int | None, error: str, *, tail: bool) -> str:
    """The line that says where an incomplete log file stops (`size` bytes; None when there is
    no file to read) and that the run's saved tail follows."""
    where = f"the log file stopped at {size} bytes" if size is not None else "there is no log file"
    then = "its last lines as saved with the run follow" if tail else "no lines were saved"
    return f"[runlane: {where}: writing it failed ({error}); {then}]"


# Lease token is a secret of the launcher holding it: never printed.
HIDDEN = frozenset({"lease_token", "params_raw"})


def iso(value: datetime | None) -> str | None:
    """UTC ISO-8601 with a Z, the one time format of every JSON output."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    return value


def run_dict(run: Run) -> dict[str, Any]:
    data = {f.name: jsonable(getattr(run, f.name)) for f in fields(run) if f.name not in HIDDEN}
    if run.params is None:
        data["params_raw"] = run.params_raw
    return data


def print_json(data: Any) -> None:
    print(json.dumps(jsonable(data), indent=2, sort_keys=False, ensure_ascii=False))


def print_columns(header: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    """Rows as plain columns aligned by padding, one write: for long listings, where a rich
    Table costs ~0.7 ms a row. Cells must already be terminal-safe text."""
    table = [tuple(header), *(tuple(r) for r in rows)]
    widths = [max(map(len, column)) for column in zip(*table, strict=True)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in table
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


def status_text(status: str) -> str:
    return f"[{STATUS_STYLE.get(status, 'white')}]{escape(status)}[/]"


def short_time(value: datetime | None) -> str:
    """Local time; the date only when it is not today."""
    if value is None:
        return "-"
    local = value.astimezone()
    if local.date() == datetime.now().astimezone().date():
        return local.strftime("%H:%M:%S")
    return local.strftime("%Y-%m-%d %H:%M")


def duration_text(run: Run) -> str:
    if run.started_at is None:
        return "-"
    end = run.finished_at or datetime.now(UTC)
    seconds = (end - run.started_at).total_seconds()
    if seconds < 10:
        return f"{seconds:.2f}s"
    if seconds < 120:
        return f"{seconds:.0f}s"
    return f"{seconds / 60:.0f}m"


def runs_table(runs: Sequence[Run], *, title: str | None = None) -> Table:
    """The run log for people. On a narrow terminal (80 columns, or piped) the id, the status
    and the end reason stay whole, as wide as their longest value: they are what a person reads
    and what `runs show` takes. The job, trigger, attempt, queued time and duration give up
    room first, shortened with an ellipsis."""
    statuses = [r.status.value for r in runs]
    reasons = [r.end_reason or r.error_code or "" for r in runs]
    table = Table(
        title=title,
        show_lines=False,
        header_style="bold",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    whole = {
        "id": 8,
        "status": max(map(len, statuses), default=0),
        "end_reason": max(map(len, reasons), default=0),
    }
    for col in ("id", "job", "status", "attempt", "trigger", "queued", "took", "end_reason"):
        if col in whole:
            table.add_column(col, no_wrap=True, min_width=max(whole[col], 4), overflow="fold")
        else:
            # Wrappable so that rich shrinks these first; a value has no space to break at,
            # so it is shortened with an ellipsis rather than wrapped.
            table.add_column(col, overflow="ellipsis", min_width=3)
    for r, reason in zip(runs, reasons, strict=True):
        table.add_row(
            escape(r.id[:8]),
            escape(r.job),
            status_text(r.status.value),
            f"{r.attempt}/{r.max_attempts}",
            escape(r.trigger),
            short_time(r.queued_at),
            duration_text(r),
            escape(reason),
        )
    return table


def kv_table(rows: Iterable[tuple[str, Any]]) -> Table:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        if value is None or value == "":
            continue
        table.add_row(escape(key), escape(terminal_safe(str(value))))
    return table
