"""The one time format of every JSON output: UTC ISO-8601 with a Z."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(value: datetime | None) -> str | None:
    """UTC ISO-8601 with a Z, the one time format of every JSON output."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
