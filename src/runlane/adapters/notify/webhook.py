"""Webhooks: a JSON POST, runlane's own body or Alertmanager's webhook payload (version 4),
signed with `X-Runlane-Signature: sha256=<hex HMAC-SHA256 of the body>` when a secret is set."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import datetime
from typing import Any, Literal

import httpx

from runlane.adapters.notify.http import HttpNotifier
from runlane.ports.notifier import Notification

SIGNATURE_HEADER = "X-Runlane-Signature"
WEBHOOK_VERSION = 1
# Alertmanager writes this for an alert that has not ended.
_ZERO_TIME = "0001-01-01T00:00:00Z"

WebhookFormat = Literal["runlane", "alertmanager"]


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def sign(secret: str, body: bytes) -> str:
    """The signature header's value for `body`: `sha256=` and the hex HMAC-SHA256."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def runlane_payload(n: Notification) -> dict[str, Any]:
    """runlane's webhook body (docs/alerts.md shows one)."""
    return {
        "version": WEBHOOK_VERSION,
        "source": "runlane",
        "state": n.state,
        "rule": n.rule,
        "level": n.level,
        "fingerprint": n.fingerprint,
        "subject": n.subject,
        "title": n.title,
        "text": n.text,
        "count": n.count,
        "incident_id": n.incident_id,
        "run_id": n.run_id,
        "link": n.link,
        "first_seen": _iso(n.first_seen),
        "resolved_at": _iso(n.resolved_at),
    }


def alertmanager_payload(n: Notification, *, external_url: str | None = None) -> dict[str, Any]:
    """Alertmanager's webhook payload (version 4) holding one alert: what receivers written for
    Alertmanager (and tools that take its format) read."""
    status = "resolved" if n.state == "resolved" else "firing"
    labels = {"alertname": n.rule or "runlane", "severity": n.level, "fingerprint": n.fingerprint}
    if n.subject:
        labels["subject"] = n.subject
    annotations = {"summary": n.title, "description": n.text}
    if n.count > 1:
        annotations["count"] = str(n.count)
    alert = {
        "status": status,
        "labels": labels,
        "annotations": annotations,
        "startsAt": _iso(n.first_seen) or _ZERO_TIME,
        "endsAt": _iso(n.resolved_at) if n.state == "resolved" and n.resolved_at else _ZERO_TIME,
        "generatorURL": n.link or external_url or "",
        "fingerprint": hashlib.sha256(n.fingerprint.encode()).hexdigest()[:16],
    }
    group_labels = {"alertname": labels["alertname"]}
    return {
        "version": "4",
        "groupKey": "{}:" + "{alertname=" + json.dumps(labels["alertname"]) + "}",
        "truncatedAlerts": 0,
        "status": status,
        "receiver": "runlane",
        "groupLabels": group_labels,
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": external_url or "",
        "alerts": [alert],
    }


class WebhookNotifier(HttpNotifier):
    """A `Notifier` that POSTs JSON to one URL."""

    def __init__(
        self,
        name: str,
        url: str,
        *,
        secret: str | None = None,
        body_format: WebhookFormat = "runlane",
        external_url: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(name, transport=transport)
        self._url = url
        self._secret = secret
        self._format = body_format
        self._external_url = external_url

    def body(self, notification: Notification) -> bytes:
        if self._format == "alertmanager":
            payload = alertmanager_payload(notification, external_url=self._external_url)
        else:
            payload = runlane_payload(notification)
        return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()

    async def send(self, notification: Notification, *, within: float) -> None:
        body = self.body(notification)
        headers = {"Content-Type": "application/json", "User-Agent": "runlane"}
        if self._secret:
            headers[SIGNATURE_HEADER] = sign(self._secret, body)
        await self.request("POST", self._url, within=within, headers=headers, content=body)
