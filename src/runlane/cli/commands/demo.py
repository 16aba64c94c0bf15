"""`runlane demo`: the command; the tour itself is `runlane.cli.demo` (imported when run)."""

from __future__ import annotations

from typing import Annotated

import typer

from runlane.cli.failures import one_line_errors


@one_line_errors
def demo(
    keep: Annotated[bool, typer.Option("--keep", help="Keep the demo's directory.")] = False,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve",
            help="After the tour, keep the launcher and the web UI running on the demo's "
            "database (until Ctrl-C) and print a one-time login link.",
        ),
    ] = False,
    http_addr: Annotated[
        str,
        typer.Option("--http-addr", metavar="ADDR", help="Where --serve listens (HOST:PORT)."),
    ] = "127.0.0.1:8080",
) -> None:
    """A guided tour on a throwaway SQLite database (a few seconds; nothing else needed)."""
    from runlane.cli.commands.setup import flag_http_addr
    from runlane.cli.demo import run_demo

    listen = flag_http_addr(http_addr) if serve else None
    if serve and listen is None:
        raise typer.BadParameter("--serve needs an address, not off", param_hint="--http-addr")
    raise typer.Exit(run_demo(keep=keep, serve=listen))
