"""Incidents: what the alert rules open and resolve, and what each notification target was told
about them. Plain records; the rules are `core.alert_rules`, the store keeps them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

IncidentStatus = Literal["open", "resolved"]
SentState = Literal["none", "firing", "resolved"]  # what a target was last sent


@dataclass(frozen=True, slots=True)
class NewIncident:
    """One rule firing for one subject: opens an incident, or adds `count` occurrences to the
    open one with the same (rule, fingerprint) when `seen_at` is later than its `last_seen`."""

    rule: str
    fingerprint: str  # e.g. `run_failed:nightly-report`
    subject: str  # what it is about: a job, a launcher id, a chain run id
    level: str  # info | warning | critical
    title: str
    seen_at: datetime
    detail: str | None = None
    run_id: str | None = None  # the latest run that fired it (the link)
    count: int = 1


@dataclass(frozen=True, slots=True)
class Notice:
    """What one target was sent about one incident, and the state of a send in progress."""

    incident_id: str
    target: str
    sent_state: SentState = "none"
    sent_at: datetime | None = None
    attempts: int = 0  # failed attempts since the last success
    next_attempt_at: datetime | None = None
    last_error: str | None = None
    gave_up_at: datetime | None = None  # a permanent error: never sent again
    claim_owner: str | None = None
    claim_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class Incident:
    """One incident: a rule firing for one fingerprint, from `first_seen` until resolved."""

    id: str
    rule: str
    fingerprint: str
    subject: str
    level: str
    state: IncidentStatus
    title: str
    first_seen: datetime
    last_seen: datetime
    count: int
    detail: str | None = None
    run_id: str | None = None
    resolved_at: datetime | None = None
    resolution: str | None = None
    last_notified_at: datetime | None = None
    notices: Mapping[str, Notice] = field(default_factory=dict)  # by target name

    @property
    def key(self) -> str:
        """What the rule keys it by: the fingerprint after `rule:` (a job, a launcher id, a
        chain run id)."""
        return self.fingerprint.split(":", 1)[1] if ":" in self.fingerprint else self.fingerprint


@dataclass(frozen=True, slots=True)
class TargetHealth:
    """A notification target's record: its last success, its consecutive failures."""

    target: str
    last_ok_at: datetime | None
    last_error_at: datetime | None
    last_error: str | None
    failures: int
    paused_until: datetime | None = None  # a 429's Retry-After: no launcher sends before

    @property
    def failing(self) -> bool:
        return self.failures > 0

    def paused_for(self, now: datetime) -> float:
        """Seconds until a 429's pause ends (0 when not paused)."""
        if self.paused_until is None:
            return 0.0
        return max(0.0, (self.paused_until - now).total_seconds())


__all__ = ["Incident", "IncidentStatus", "NewIncident", "Notice", "SentState", "TargetHealth"]
