"""The `Clock` port (where time comes from) and the production clock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """Where time comes from. In production the database is the clock: `now_or_none()` returns
    None and SQL uses `coalesce(:now, now())`. Tests pin time by returning a value
    (`runlane.testing.clock.FixedClock`)."""

    def now(self) -> datetime: ...

    def now_or_none(self) -> datetime | None: ...


class SystemClock:
    """The host clock; `now_or_none()` defers to the database's clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def now_or_none(self) -> datetime | None:
        return None
