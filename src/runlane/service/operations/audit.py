"""The audit log: every write through a face that authenticates (who, what, on what, when,
from where, and how it ended), recorded by the face and listed by `runlane audit`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import structlog

from runlane.core.runs import storable_text
from runlane.errors import InvalidArgument, RunlaneError
from runlane.ports import AuditEntry
from runlane.service.operations.arguments import Requester
from runlane.service.runtime import Runtime

T = TypeVar("T")
log = structlog.get_logger("runlane.audit")

MAX_AUDIT_LIMIT = 500
MAX_FIELD_CHARS = 2000  # a target, remote or detail longer than this is cut: the log stays small


@dataclass(frozen=True, slots=True)
class AuditPage:
    """A page of the audit log, newest first; `next_cursor` (None on the last page) is what
    `list_audit(before=...)` takes for the next one."""

    items: tuple[AuditEntry, ...]
    next_cursor: str | None


def _cut(text: str | None) -> str | None:
    """`text` as the audit table keeps it: storable (a refused request's target may hold
    U+0000, which PostgreSQL refuses: the audit row of the refusal was lost) and at most
    MAX_FIELD_CHARS long."""
    if text is None:
        return None
    text = storable_text(text)
    if len(text) <= MAX_FIELD_CHARS:
        return text
    return text[: MAX_FIELD_CHARS - 1] + "…"


async def record_audit(
    rt: Runtime,
    *,
    requester: Requester,
    action: str,
    target: str | None,
    outcome: str,
    remote: str | None,
    detail: str | None = None,
) -> None:
    """Append one entry: `requester.name` did `action` (an operation's name, such as
    `run_job`) on `target` (a job, a run id, a token name) from `remote` (the client's
    address); `outcome` is `ok` or the error's code."""
    entry = AuditEntry(
        action=action,
        outcome=outcome,
        actor=requester.name,
        target=_cut(target),
        remote=_cut(remote),
        detail=_cut(detail),
    )
    await rt.store.record_audit(entry)


async def audited(
    rt: Runtime,
    requester: Requester,
    *,
    action: str,
    target: str | None,
    remote: str | None,
    call: Callable[[], Awaitable[T]],
    outcome_of: Callable[[T], str] | None = None,
) -> T:
    """`call()` (a write of a face that authenticates: the API, the web UI, MCP), recorded in
    the audit table with its outcome: `ok`, or what `outcome_of` says of the result
    (`replayed` for an Idempotency-Key's stored answer). A refusal is recorded and then
    raised; when the audit row of a refusal cannot be written, the refusal still reaches the
    caller (and the failure the log). The role and job scope are checked by the operation
    (`Requester.require`), so its refusal (`forbidden`) is recorded like any other. `remote`:
    the client's address, when the face has one."""
    try:
        result = await call()
    except RunlaneError as exc:
        try:
            await record_audit(
                rt,
                requester=requester,
                action=action,
                target=target,
                outcome=exc.code,
                remote=remote,
                detail=exc.message[:500],
            )
        except RunlaneError as audit_exc:
            log.warning("audit_failed", action=action, target=target, error=audit_exc.code)
        raise
    outcome = "ok" if outcome_of is None else outcome_of(result)
    await record_audit(
        rt, requester=requester, action=action, target=target, outcome=outcome, remote=remote
    )
    return result


def _before(cursor: str | None) -> int | None:
    if cursor is None:
        return None
    if not cursor.isdecimal() or len(cursor) > 18:
        raise InvalidArgument(f"cursor {cursor!r}: expected the next_cursor of an audit page")
    return int(cursor)


async def list_audit(rt: Runtime, *, limit: int = 50, before: str | None = None) -> AuditPage:
    """The newest `limit` (1-500) entries, before the `before` cursor when given;
    `invalid_argument` for a limit out of range or a cursor that is not one."""
    if not 1 <= limit <= MAX_AUDIT_LIMIT:
        raise InvalidArgument(
            f"--limit {limit}: expected a whole number from 1 to {MAX_AUDIT_LIMIT}"
        )
    rows = await rt.store.audit(limit=limit + 1, before=_before(before))
    items = tuple(rows[:limit])
    more = len(rows) > limit and items[-1].id is not None
    return AuditPage(items, str(items[-1].id) if more else None)


__all__ = ["AuditPage", "audited", "list_audit", "record_audit"]
