"""Notifiers (`runlane.ports.Notifier`) over HTTP: ntfy topics and webhooks (runlane's JSON or
Alertmanager's webhook payload), each send bounded in time and its failure classified."""

from __future__ import annotations

from runlane.adapters.notify.http import HttpNotifier, classify_response, parse_retry_after
from runlane.adapters.notify.ntfy import NtfyNotifier, ntfy_request
from runlane.adapters.notify.webhook import (
    SIGNATURE_HEADER,
    WebhookNotifier,
    alertmanager_payload,
    runlane_payload,
    sign,
)

__all__ = [
    "SIGNATURE_HEADER",
    "HttpNotifier",
    "NtfyNotifier",
    "WebhookNotifier",
    "alertmanager_payload",
    "classify_response",
    "ntfy_request",
    "parse_retry_after",
    "runlane_payload",
    "sign",
]
