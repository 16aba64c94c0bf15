"""CLI commands for triggers: schedules, chains, events, explain, docs generation."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the trigger commands to the `runlane` app (filled in by the triggers work)."""
    del app
