"""The store's `Incidents` role: incidents, their notifications, the alert rules' cursors and
the targets' health (migration 0009). Split from `ports.store` only for size; `Store` has it.

Contract, for every adapter (tests/conformance/test_store_incidents.py, SQLite and PostgreSQL):
- **One open incident per (rule, fingerprint).** `record_incident` opens one or counts into the
  open one, atomically: concurrent launchers recording the same occurrence open one incident,
  and an occurrence no later than the incident's `last_seen` is not counted again.
- **One sender per notice.** `claim_notice` is a conditional write: of launchers claiming the
  same (incident, target) in the same state, one gets True and holds it for `lease` seconds;
  `finish_notice` applies only for the claim's owner. A sender that dies between its send and
  `finish_notice` leaves the claim to expire, and the next claimer sends again: at most one
  duplicate per such crash.
- **Time is database time** (or the store's pinned `Clock`), as for every other role.

Internal and unstable: implemented only inside runlane (see `runlane.ports`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from runlane.core.incidents import Incident, NewIncident, SentState, TargetHealth
from runlane.core.records import ChainRun
from runlane.core.runs import Run


class Incidents(Protocol):
    """What the launcher's alert loop writes and the faces read (`runlane alerts`, status)."""

    async def failed_since(self, after_at: datetime, after_id: str, *, limit: int) -> list[Run]:
        """Runs that ended `failure`, `timeout` or `skipped` after (`after_at`, `after_id`), in
        (finished_at, id) order, at most `limit`: the run_failed rule's read, off an index of
        those runs alone (its cost follows the failures, not the runs)."""
        ...

    async def last_success(self, job: str, after_at: datetime, until: datetime) -> Run | None:
        """`job`'s latest success finished in (`after_at`, `until`], or None: one index probe."""
        ...

    async def overrun_chain_runs_ended(self, after_at: datetime, *, limit: int) -> list[ChainRun]:
        """Chain runs that ran past their `max_duration` (`overrun_at` set) and ended after
        `after_at`, with no chain_overdue incident (open or resolved) yet, in (finished_at, id)
        order, at most `limit`: the chain_overdue rule's read of those that ended before an
        evaluation saw them running late."""
        ...

    async def alert_cursor(self, rule: str) -> datetime | None:
        """How far `rule` has read the run log; None before its first evaluation."""
        ...

    async def advance_alert_cursor(self, rule: str, position: datetime) -> None:
        """Record `position` for `rule`. Monotonic: an earlier one leaves it unchanged."""
        ...

    async def record_incident(self, new: NewIncident) -> tuple[Incident, bool]:
        """Open an incident for `new`, or count `new.count` more occurrences into the open one
        of its (rule, fingerprint) when `new.seen_at` is after its `last_seen` (then
        `last_seen`, `run_id`, `detail` and `level` follow `new`). True when it was opened."""
        ...

    async def resolve_incident(self, incident_id: str, resolution: str) -> Incident | None:
        """open → resolved, `resolved_at` = now; None when it was not open (one caller wins)."""
        ...

    async def open_incidents(self) -> list[Incident]:
        """Every open incident, oldest first (by first_seen, then id)."""
        ...

    async def list_incidents(self, *, limit: int = 50, open_only: bool = False) -> list[Incident]:
        """Incidents newest first (by first_seen, then id), at most `limit`, with notices."""
        ...

    async def incidents_to_notify(self, resolved_within: float) -> list[Incident]:
        """Open incidents and those resolved in the last `resolved_within` seconds, oldest
        first, each with its `notices`: what the delivery loop looks at."""
        ...

    async def claim_notice(
        self,
        incident_id: str,
        target: str,
        *,
        owner: str,
        expect: SentState,
        lease: float,
        sent_before: datetime | None = None,
    ) -> bool:
        """Take the send of (incident, target) for `lease` seconds: True when its notice was
        sent `expect` (none: never sent, or no row yet), is not claimed (or the claim expired),
        is due (`next_attempt_at` passed), was not given up, and — with `sent_before` — was
        last sent no later than that (a repeat)."""
        ...

    async def finish_notice(
        self,
        incident_id: str,
        target: str,
        *,
        owner: str,
        sent: SentState | None,
        error: str | None = None,
        retry_in: float | None = None,
        give_up: bool = False,
    ) -> bool:
        """End `owner`'s claim: with `sent`, the target was sent that (attempts reset, the
        incident's `last_notified_at` = now); otherwise the send failed with `error`, due again
        in `retry_in` seconds, or never again with `give_up`. False when the claim was lost."""
        ...

    async def record_target_result(self, target: str, *, error: str | None) -> None:
        """A send to `target` succeeded (`error` None: failures reset) or failed."""
        ...

    async def pause_target(self, target: str, seconds: float) -> None:
        """`target` answered 429: no launcher sends to it for `seconds` from now (its record's
        `paused_until`; an earlier pause that ends later is kept)."""
        ...

    async def alert_targets(self) -> list[TargetHealth]:
        """Every target's record, by name."""
        ...

    async def open_incident_counts(self) -> dict[str, int]:
        """Open incidents by rule (one grouped read of the open-incident index)."""
        ...

    async def prune_incidents(self, older_than: float) -> int:
        """Delete incidents resolved more than `older_than` seconds ago, with their notices;
        how many."""
        ...


__all__ = ["Incidents"]
