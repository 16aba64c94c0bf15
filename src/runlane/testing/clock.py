"""A clock a test moves by hand (`runlane.ports.Clock`): stores then pin every time to it."""

from __future__ import annotations

from datetime import datetime, timedelta


class FixedClock:
    """A clock a test moves by hand."""

    def __init__(self, at: datetime) -> None:
        self.at = at

    def now(self) -> datetime:
        return self.at

    def now_or_none(self) -> datetime | None:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at = self.at + timedelta(seconds=seconds)
