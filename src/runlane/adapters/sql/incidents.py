"""The store's `Incidents` role (`runlane.ports.incidents`) for both SQL dialects, written once
over `SqlStoreBase`'s primitives; each dialect's statements are in its `sql/alerts.sql`."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import cast

from runlane.adapters.sql.base import SqlStoreBase
from runlane.adapters.sql.rows import Row, RowReader
from runlane.core.incidents import (
    Incident,
    IncidentStatus,
    NewIncident,
    Notice,
    SentState,
    TargetHealth,
)
from runlane.core.records import ChainRun
from runlane.core.runs import Run
from runlane.errors import StoreError

# The position before every run id: the run_failed rule's read starts after it.
FIRST_ID = "00000000-0000-0000-0000-000000000000"
_MAX_ERROR = 500  # a target's error text is kept this short (a status, not a response body)


class SqlIncidents(SqlStoreBase):
    """Incidents, notices, the rules' cursors and the targets' health."""

    # --- rows ---------------------------------------------------------------------------------

    def _incident(self, row: Row, notices: dict[str, Notice] | None = None) -> Incident:
        t, ot, text, opt = self._read.time, self._read.opt_time, RowReader.text, RowReader.opt_text
        return Incident(
            id=text(row, "id"),
            rule=text(row, "rule"),
            fingerprint=text(row, "fingerprint"),
            subject=text(row, "subject"),
            level=text(row, "level"),
            state=cast(IncidentStatus, text(row, "state")),
            title=text(row, "title"),
            first_seen=t(row, "first_seen"),
            last_seen=t(row, "last_seen"),
            count=RowReader.integer(row, "count", 1),
            detail=opt(row, "detail"),
            run_id=opt(row, "run_id"),
            resolved_at=ot(row, "resolved_at"),
            resolution=opt(row, "resolution"),
            last_notified_at=ot(row, "last_notified_at"),
            notices=notices or {},
        )

    def _notice(self, row: Row) -> Notice:
        ot, opt = self._read.opt_time, RowReader.opt_text
        return Notice(
            incident_id=RowReader.text(row, "incident_id"),
            target=RowReader.text(row, "target"),
            sent_state=cast(SentState, RowReader.text(row, "sent_state")),
            sent_at=ot(row, "sent_at"),
            attempts=RowReader.integer(row, "attempts"),
            next_attempt_at=ot(row, "next_attempt_at"),
            last_error=opt(row, "last_error"),
            gave_up_at=ot(row, "gave_up_at"),
            claim_owner=opt(row, "claim_owner"),
            claim_until=ot(row, "claim_until"),
        )

    def _with_notices(self, rows: list[Row], notice_rows: list[Row]) -> list[Incident]:
        by_incident: dict[str, dict[str, Notice]] = {}
        for r in notice_rows:
            notice = self._notice(r)
            by_incident.setdefault(notice.incident_id, {})[notice.target] = notice
        return [self._incident(r, by_incident.get(RowReader.text(r, "id"))) for r in rows]

    # --- the run log and the cursors ------------------------------------------------------------

    async def failed_since(self, after_at: datetime, after_id: str, *, limit: int) -> list[Run]:
        params = {
            "after_at": self._param_time(after_at),
            "after_id": after_id if after_id and self._is_id(after_id) else FIRST_ID,
            "limit": max(0, limit),
        }
        return [self._read.run(r) for r in await self._read_all("failed_since", params)]

    async def last_success(self, job: str, after_at: datetime, until: datetime) -> Run | None:
        params = {
            "job": job,
            "after_at": self._param_time(after_at),
            "until": self._param_time(until),
        }
        row = await self._read_one("last_success", params)
        return None if row is None else self._read.run(row)

    async def overrun_chain_runs_ended(self, after_at: datetime, *, limit: int) -> list[ChainRun]:
        params = {"after_at": self._param_time(after_at), "limit": max(0, limit)}
        rows = await self._read_all("overrun_chain_runs_ended", params)
        return [self._read.chain_run(r) for r in rows]

    async def alert_cursor(self, rule: str) -> datetime | None:
        row = await self._read_one("alert_cursor", {"rule": rule})
        return None if row is None else self._read.time(row, "position")

    async def advance_alert_cursor(self, rule: str, position: datetime) -> None:
        params = {"now": self._param_now(), "rule": rule, "position": self._param_time(position)}
        await self._execute("advance_alert_cursor", params)

    # --- incidents ------------------------------------------------------------------------------

    async def record_incident(self, new: NewIncident) -> tuple[Incident, bool]:
        incident_id = str(uuid.uuid4())
        params = {
            "id": incident_id,
            "rule": new.rule,
            "fingerprint": new.fingerprint,
            "subject": new.subject,
            "level": new.level,
            "title": new.title,
            "detail": new.detail,
            "run_id": new.run_id,
            "seen_at": self._param_time(new.seen_at),
            "count": max(1, new.count),
        }
        row = await self._write_one("record_incident", params)
        if row is not None:
            return self._incident(row), RowReader.text(row, "id") == incident_id
        # Open already and seen at or after `seen_at`: nothing to count.
        names = {"rule": new.rule, "fingerprint": new.fingerprint}
        row = await self._read_one("open_incident_of", names)
        if row is None:  # resolved in between: open a new one
            row = await self._write_one("record_incident", params)
            if row is None:
                raise StoreError(f"incident {new.fingerprint} could not be recorded")
            return self._incident(row), RowReader.text(row, "id") == incident_id
        return self._incident(row), False

    async def resolve_incident(self, incident_id: str, resolution: str) -> Incident | None:
        params = {"now": self._param_now(), "id": incident_id, "resolution": resolution}
        row = await self._write_one("resolve_incident", params)
        return None if row is None else self._incident(row)

    async def open_incidents(self) -> list[Incident]:
        return [self._incident(r) for r in await self._read_all("open_incidents", {})]

    async def list_incidents(self, *, limit: int = 50, open_only: bool = False) -> list[Incident]:
        params = {"limit": max(0, limit), "open_only": open_only}
        rows = await self._read_all("list_incidents", params)
        return self._with_notices(rows, await self._read_all("notices_of_listed", params))

    async def incidents_to_notify(self, resolved_within: float) -> list[Incident]:
        params = self._ago(resolved_within)
        rows = await self._read_all("incidents_to_notify", params)
        if not rows:
            return []
        return self._with_notices(rows, await self._read_all("notices_to_notify", params))

    async def open_incident_counts(self) -> dict[str, int]:
        rows = await self._read_all("open_incident_counts", {})
        return {RowReader.text(r, "rule"): RowReader.integer(r, "n") for r in rows}

    async def prune_incidents(self, older_than: float) -> int:
        params = self._ago(older_than)
        await self._execute("prune_notices", params)
        return len(await self._write_all("prune_incidents", params))

    # --- notices and targets --------------------------------------------------------------------

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
        params = {
            "now": self._param_now(),
            "incident_id": incident_id,
            "target": target,
            "owner": owner,
            "expect": expect,
            "lease": lease,
            "until": self._param_since(-lease),
            "sent_before": self._param_time(sent_before),
        }
        return await self._write_one("claim_notice", params) is not None

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
        names = {"now": self._param_now(), "incident_id": incident_id, "target": target}
        if sent is not None:
            row = await self._write_one("notice_sent", {**names, "owner": owner, "sent": sent})
            if row is not None:
                await self._execute("incident_notified", names)
            return row is not None
        wait = 0.0 if retry_in is None else max(0.0, retry_in)
        params = {
            **names,
            "owner": owner,
            "error": None if error is None else error[:_MAX_ERROR],
            "retry_in": wait,
            "retry_at": self._param_since(-wait),
            "give_up": give_up,
        }
        return await self._write_one("notice_failed", params) is not None

    async def record_target_result(self, target: str, *, error: str | None) -> None:
        params: dict[str, object] = {"now": self._param_now(), "target": target}
        if error is None:
            await self._execute("target_ok", params)
        else:
            await self._execute("target_failed", {**params, "error": error[:_MAX_ERROR]})

    async def pause_target(self, target: str, seconds: float) -> None:
        wait = max(0.0, seconds)
        params = {
            "now": self._param_now(),
            "target": target,
            "seconds": wait,
            "until": self._param_since(-wait),
        }
        await self._execute("pause_target", params)

    async def alert_targets(self) -> list[TargetHealth]:
        ot, opt = self._read.opt_time, RowReader.opt_text
        return [
            TargetHealth(
                target=RowReader.text(r, "target"),
                last_ok_at=ot(r, "last_ok_at"),
                last_error_at=ot(r, "last_error_at"),
                last_error=opt(r, "last_error"),
                failures=RowReader.integer(r, "failures"),
                paused_until=ot(r, "paused_until"),
            )
            for r in await self._read_all("alert_targets", {})
        ]


__all__ = ["FIRST_ID", "SqlIncidents"]
