"""Alerts for every face: the incidents (open and recent) with what each target was sent, and
a test notification to every target of the catalog (`runlane alerts`, `runlane alerts test`)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from runlane.core.incidents import Incident, TargetHealth
from runlane.core.times import iso
from runlane.ports.notifier import Notification, NotifyError
from runlane.service.alerts.health import AlertHealth, alert_health
from runlane.service.alerts.targets import build_targets, close_targets, resolve_url
from runlane.service.operations.arguments import check_limit
from runlane.service.runtime import Runtime

TEST_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class IncidentList:
    """`runlane alerts`: incidents newest first, and the alerting health."""

    incidents: tuple[Incident, ...]
    health: AlertHealth


@dataclass(frozen=True, slots=True)
class TargetTest:
    """One target's answer to a test notification: `error` None when it accepted it."""

    target: str
    kind: str
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None


async def list_incidents(rt: Runtime, *, limit: int = 50, open_only: bool = False) -> IncidentList:
    """Open and recent incidents (or only the open ones), newest first, at most `limit`."""
    check_limit(limit)
    incidents = await rt.store.list_incidents(limit=limit, open_only=open_only)
    catalog = _catalog_or_none(rt)
    return IncidentList(tuple(incidents), await alert_health(rt.store, catalog))


async def send_test_notifications(rt: Runtime) -> list[TargetTest]:
    """Send one test notification to every target of the catalog's `alerts:` section, with this
    process's environment, each bounded; every target's result (a target that cannot be built
    is a failed one). Nothing is recorded: a test is not an incident."""
    catalog = rt.require_catalog()
    targets, problems = build_targets(catalog.alerts)
    results = [TargetTest(p.name, "?", p.problem) for p in problems]
    ui_url = resolve_url(catalog.alerts.ui_url)
    try:
        for target in targets:
            notification = Notification(
                fingerprint=f"test:{uuid.uuid4().hex[:12]}",
                state="firing",
                level="info",
                title="runlane test notification",
                text=f"runlane alerts test: target {target.name} receives notifications",
                link=ui_url,
                rule="test",
                subject=target.name,
            )
            try:
                await target.notifier.send(notification, within=TEST_TIMEOUT)
            except NotifyError as exc:
                results.append(TargetTest(target.name, target.kind, exc.message))
            else:
                results.append(TargetTest(target.name, target.kind, None))
    finally:
        await close_targets(targets)
    return sorted(results, key=lambda r: r.target)


def _catalog_or_none(rt: Runtime) -> Any:
    from runlane.errors import CatalogError

    try:
        return rt.require_catalog()
    except CatalogError:
        return None


def incident_dict(incident: Incident) -> dict[str, Any]:
    """An incident as JSON (`runlane alerts --json`), times in ISO-8601 UTC."""
    return {
        "id": incident.id,
        "rule": incident.rule,
        "fingerprint": incident.fingerprint,
        "subject": incident.subject,
        "level": incident.level,
        "state": incident.state,
        "title": incident.title,
        "detail": incident.detail,
        "run_id": incident.run_id,
        "count": incident.count,
        "first_seen": iso(incident.first_seen),
        "last_seen": iso(incident.last_seen),
        "resolved_at": iso(incident.resolved_at),
        "resolution": incident.resolution,
        "last_notified_at": iso(incident.last_notified_at),
        "notices": {
            name: {
                "sent": n.sent_state,
                "sent_at": iso(n.sent_at),
                "attempts": n.attempts,
                "next_attempt_at": iso(n.next_attempt_at),
                "last_error": n.last_error,
                "gave_up": n.gave_up_at is not None,
            }
            for name, n in sorted(incident.notices.items())
        },
    }


def target_dict(target: TargetHealth) -> dict[str, Any]:
    """A notify target's record as JSON (`runlane alerts --json`, `status --json`)."""
    return {
        "target": target.target,
        "failures": target.failures,
        "last_ok_at": iso(target.last_ok_at),
        "last_error_at": iso(target.last_error_at),
        "last_error": target.last_error,
        "paused_until": iso(target.paused_until),
    }


__all__ = [
    "IncidentList",
    "TargetTest",
    "incident_dict",
    "list_incidents",
    "send_test_notifications",
    "target_dict",
]
