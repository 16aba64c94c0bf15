"""How the CLI shows things: JSON with the run log's column names, or rich tables for people."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.markup import escape

__all__ = ["chain_run_dict", "err", "escape", "iso", "jsonable", "out", "run_dict"]
from rich.table import Table
from rich.tree import Tree

from runlane.core.records import ChainRun
from runlane.core.runs import Run
from runlane.service.views import chain_run_dict, iso, jsonable, run_dict

if TYPE_CHECKING:
    from runlane.service.chains import StepView
    from runlane.service.operations.notices import Notice

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
# newline and tab, DEL, and the C1 range. Shown as visible escapes such as \x1b instead. And
# the bidirectional overrides and isolates, which reorder what is shown so that text reads
# otherwise than it is (CVE-2021-42574, "Trojan Source"): shown as \u202e.
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (9, 10)}
_CONTROLS.update({c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))})


def terminal_safe(text: str) -> str:
    """`text` with every control character but newline and tab shown as an escape (\x1b)."""
    return text.translate(_CONTROLS)


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


def print_notices(notices: Iterable[Notice], console: Console = err) -> None:
    """Each notice as one line (on stderr by default): `warning: …` or `note: …` in yellow, or
    the bare message for an `info` notice. Its text is anybody's: no markup, no controls."""
    for notice in notices:
        if notice.level == "info":
            console.print(terminal_safe(notice.message), markup=False)
        else:
            console.print(f"[yellow]{notice.level}:[/] {escape(terminal_safe(notice.message))}")


def chain_tree(run: ChainRun, steps: Sequence[StepView]) -> Tree:
    """A chain run as a tree of its steps with their statuses, for people."""
    title = (
        f"[bold]{escape(run.chain)}[/] {escape(run.id)} {status_text(run.status)}"
        + (" [red]overrun[/]" if run.overrun else "")
        + f"  started {short_time(run.started_at)}"
    )
    tree = Tree(title)
    nodes: dict[str, Tree] = {}
    for s in steps:
        parent = nodes.get(s.after[0][0]) if s.after else None
        label = f"{escape(s.step)} {status_text(s.status)}"
        if s.job != s.step:
            label += f" [dim]job {escape(s.job)}[/]"
        if s.end_reason and s.end_reason != "exit":
            label += f" ({escape(s.end_reason)})"
        if len(s.after) > 1:
            label += " [dim]after " + ", ".join(escape(p) for p, _ in s.after) + "[/]"
        if s.run_id:
            label += f" [dim]{escape(s.run_id[:8])}[/]"
        nodes[s.step] = (parent or tree).add(label)
    return tree
