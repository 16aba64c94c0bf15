"""The `Notifier` port: send one notification about an incident (a failed run, a stale
launcher) opening or resolving, to a person's channel (ntfy, Slack, e-mail, a webhook).

Contract, for every adapter:
- **One message per call, bounded in time:** `send` returns when the channel accepted it, or
  raises before `within` seconds pass.
- **Idempotency is the caller's:** alert state (rule, fingerprint, firing since) lives in the
  run log and notifications go out through the outbox, so a restart re-sends nothing; channels
  with an idempotency key get `fingerprint` + `state`.
- **Errors are classified:** `NotifyTemporaryError` (a timeout, a 5xx, a 429 with its
  `retry_after`): send again later, with backoff; `NotifyPermanentError` (a 4xx, a bad URL or
  token): it will never succeed as configured, so say so once and stop.

Internal and unstable: implemented only inside runlane (see `runlane.ports`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from runlane.errors import RunlaneError

NotificationLevel = Literal["info", "warning", "critical"]
IncidentState = Literal["firing", "resolved"]


@dataclass(frozen=True, slots=True)
class Notification:
    """One message about one incident. `fingerprint` names the incident (a rule and what it is
    about, e.g. `run_failed:nightly-report`): the opening and the resolve of one incident carry
    the same one, and `count` says how many occurrences one message stands for."""

    fingerprint: str
    state: IncidentState
    level: NotificationLevel
    title: str
    text: str
    link: str | None = None  # where a person sees more (a run's page)
    count: int = 1
    # What formats with structured fields (a webhook, Alertmanager's payload) carry besides.
    rule: str = ""  # run_failed, launcher_stale, chain_overdue, dlq_depth, test
    subject: str = ""  # the job, launcher or chain run it is about
    incident_id: str | None = None
    run_id: str | None = None
    first_seen: datetime | None = None
    resolved_at: datetime | None = None


class NotifyError(RunlaneError):
    """A notification was not sent."""

    code = "notify_failed"


class NotifyTemporaryError(NotifyError):
    """Not sent for now (a timeout, a 5xx, rate-limited): send again after `retry_after`."""

    code = "notify_temporary"

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class NotifyPermanentError(NotifyError):
    """Never sent as configured (refused, a bad URL or token): sending again will not help."""

    code = "notify_permanent"


class Notifier(Protocol):
    """Where notifications go."""

    name: str  # "ntfy", "webhook", …

    async def send(self, notification: Notification, *, within: float) -> None:
        """Deliver one notification; raise `NotifyTemporaryError` or `NotifyPermanentError`
        (nothing else) before `within` seconds pass when the channel did not accept it."""
        ...
