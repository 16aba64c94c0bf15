"""Counters of the alert loop, for the metrics exporter (issue 18 §2) and `runlane status`:
notifications sent and failed by target, open incidents by rule, dead man's switch pings.

One `AlertStats` per launcher process (`ALERT_STATS`); the exporter reads its plain values
(`notifications_sent()`, `notifications_failed()`, `open_incidents_by_rule()`, …). Every target
and rule is present from the start with zero, so a series exists before its first event.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from runlane.core.alert_rules import RULES


@dataclass
class AlertStats:
    """Plain counters and gauges; only the launcher's alert loop writes them."""

    sent: dict[str, int] = field(default_factory=dict)  # by target: notifications delivered
    failed: dict[str, int] = field(default_factory=dict)  # by target: sends that failed
    open_by_rule: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RULES, 0))
    consecutive_failures: dict[str, int] = field(default_factory=dict)  # by target
    last_error: dict[str, str] = field(default_factory=dict)  # by target
    deadman_pings: int = 0
    deadman_failures: int = 0
    evaluations: int = 0
    evaluation_errors: int = 0
    last_evaluation_seconds: float = 0.0  # how long the last evaluation took

    def register_targets(self, names: Iterable[str]) -> None:
        for name in names:
            self.sent.setdefault(name, 0)
            self.failed.setdefault(name, 0)
            self.consecutive_failures.setdefault(name, 0)

    def count_sent(self, target: str) -> None:
        self.sent[target] = self.sent.get(target, 0) + 1
        self.consecutive_failures[target] = 0
        self.last_error.pop(target, None)

    def count_failed(self, target: str, error: str) -> None:
        self.failed[target] = self.failed.get(target, 0) + 1
        self.consecutive_failures[target] = self.consecutive_failures.get(target, 0) + 1
        self.last_error[target] = error

    def set_open(self, counts: dict[str, int]) -> None:
        self.open_by_rule = {**dict.fromkeys(RULES, 0), **counts}

    # --- what the exporter reads ----------------------------------------------------------------

    def notifications_sent(self) -> dict[str, int]:
        """`runlane_notifications_sent_total{target}`."""
        return dict(self.sent)

    def notifications_failed(self) -> dict[str, int]:
        """`runlane_notifications_failed_total{target}`."""
        return dict(self.failed)

    def open_incidents_by_rule(self) -> dict[str, int]:
        """`runlane_open_incidents{rule}`, as of the last evaluation."""
        return dict(self.open_by_rule)

    def failing_targets(self) -> dict[str, int]:
        """Targets whose last sends failed, with how many in a row."""
        return {t: n for t, n in self.consecutive_failures.items() if n > 0}


ALERT_STATS = AlertStats()
"""This process's alert counters (the launcher's alert loop writes them)."""

__all__ = ["ALERT_STATS", "AlertStats"]
