"""The `runlane` command: a thin face over the service layer."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, help="runlane: a durable job launcher.")


@app.command()
def version() -> None:
    """Print the runlane version."""
    from runlane import __version__

    typer.echo(__version__)


def main() -> None:
    app()
