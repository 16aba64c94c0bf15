"""`runlane demo`: the command; the tour itself is `runlane.cli.demo` (imported when run)."""

from __future__ import annotations

from typing import Annotated

import typer

from runlane.cli.failures import one_line_errors


@one_line_errors
def demo(
    keep: Annotated[bool, typer.Option("--keep", help="Keep the demo's directory.")] = False,
) -> None:
    """A guided tour on a throwaway SQLite database (a few seconds; nothing else needed)."""
    from runlane.cli.demo import run_demo

    raise typer.Exit(run_demo(keep=keep))
