"""ntfy (https://ntfy.sh): a POST of the message text to the topic URL, with ntfy's headers
(Title, Priority, Tags, Click, Authorization). A resolve is its own message."""

from __future__ import annotations

import base64

import httpx

from runlane.adapters.notify.http import HttpNotifier
from runlane.ports.notifier import Notification

# ntfy's priorities: 5 urgent, 4 high, 3 default.
PRIORITY = {"critical": "5", "warning": "4", "info": "3"}
_TAGS = {"firing": "rotating_light", "resolved": "white_check_mark"}


def _header_text(value: str) -> str:
    """A header value: ASCII as it is, anything else RFC 2047-encoded (ntfy decodes it)."""
    clean = " ".join(value.split())
    if clean.isascii():
        return clean
    return "=?UTF-8?B?" + base64.b64encode(clean.encode()).decode() + "?="


def ntfy_request(
    notification: Notification, *, token: str | None = None
) -> tuple[dict[str, str], bytes]:
    """The headers and body ntfy receives for `notification`."""
    n = notification
    resolved = n.state == "resolved"
    title = f"Resolved: {n.title}" if resolved else n.title
    headers = {
        "Title": _header_text(title),
        "Priority": "3" if resolved else PRIORITY.get(n.level, "3"),
        "Tags": ",".join(t for t in (_TAGS[n.state], n.rule or None, n.level) if t),
    }
    if n.link:
        headers["Click"] = n.link
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = n.text
    if n.count > 1 and not resolved:
        body = f"{body}\n({n.count} occurrences)"
    return headers, body.encode()


class NtfyNotifier(HttpNotifier):
    """A `Notifier` that publishes to one ntfy topic."""

    def __init__(
        self,
        name: str,
        url: str,
        *,
        token: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(name, transport=transport)
        self._url = url
        self._token = token

    async def send(self, notification: Notification, *, within: float) -> None:
        headers, body = ntfy_request(notification, token=self._token)
        await self.request("POST", self._url, within=within, headers=headers, content=body)
