"""A recording `Notifier` for tests: keeps what was sent, fails as scripted."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from runlane.ports.notifier import Notification, NotifyError


@dataclass
class RecordingNotifier:
    """`runlane.ports.Notifier` that appends each notification it accepts to `sent`. Errors
    queued in `failures` are raised by the next calls, one each, before anything is recorded
    (a temporary one then a success: a retried send)."""

    name: str = "recording"
    sent: list[Notification] = field(default_factory=list)
    failures: deque[NotifyError] = field(default_factory=deque)
    withins: list[float] = field(default_factory=list)  # the `within` of every call

    def fail_next(self, *errors: NotifyError) -> None:
        self.failures.extend(errors)

    async def send(self, notification: Notification, *, within: float) -> None:
        self.withins.append(within)
        if self.failures:
            raise self.failures.popleft()
        self.sent.append(notification)

    def fingerprints(self) -> list[tuple[str, str]]:
        """(fingerprint, state) of every notification sent, in order."""
        return [(n.fingerprint, n.state) for n in self.sent]
