"""runlane's RabbitMQ policies through the management HTTP API (`RUNLANE_RABBITMQ_MANAGEMENT_URL`,
docs/bus.md#topology): PUT at every (re)declare, read back by `runlane doctor`.

Every call is bounded (`TIMEOUT`); the credentials come from the URL's user info (never
logged: errors show the URL masked). A failure is one `BusUnavailable` line.
"""

from __future__ import annotations

import contextlib
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import httpx

from runlane.adapters.rabbitmq.topology import Topology
from runlane.core.secrets import mask_url
from runlane.errors import BusUnavailable

TIMEOUT = httpx.Timeout(5.0, connect=3.0)


def amqp_vhost(amqp_url: str) -> str:
    """The vhost of an AMQP URL: its path without the leading `/`, decoded; `/` when empty."""
    path = urlsplit(amqp_url).path
    return unquote(path[1:]) if len(path) > 1 else "/"


class Management:
    """The management API at `url` (http(s)://user:password@host:15672), for one vhost."""

    def __init__(self, url: str, vhost: str) -> None:
        parts = urlsplit(url)
        self.shown = mask_url(url)
        self._auth = (unquote(parts.username or ""), unquote(parts.password or ""))
        netloc = parts.hostname or ""
        if parts.port is not None:
            netloc = f"{netloc}:{parts.port}"
        self._base = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self._vhost = quote(vhost, safe="")  # `/` is `%2F`

    async def apply(self, topology: Topology) -> None:
        """PUT every policy of `topology` (idempotent: the same body again changes nothing)."""
        async with self._client() as client:
            for name, body in topology.policies().items():
                await self._call(client, "PUT", f"/api/policies/{self._vhost}/{_seg(name)}", body)

    async def delete(self, topology: Topology) -> None:
        """Delete the policies of `topology` (those missing are no error)."""
        async with self._client() as client:
            for name in topology.policies():
                path = f"/api/policies/{self._vhost}/{_seg(name)}"
                with contextlib.suppress(BusUnavailable):
                    await self._call(client, "DELETE", path)

    async def queue(self, queue: str) -> dict[str, Any]:
        """The management API's view of `queue` (arguments, policy, effective definition)."""
        async with self._client() as client:
            info = await self._call(client, "GET", f"/api/queues/{self._vhost}/{_seg(queue)}")
        return info if isinstance(info, dict) else {}

    async def queue_policy(self, queue: str) -> tuple[str | None, dict[str, Any]]:
        """The policy applied to `queue` and its effective definition (None, {} without one)."""
        info = await self.queue(queue)
        policy = info.get("policy")
        definition = info.get("effective_policy_definition")
        return (
            policy if isinstance(policy, str) and policy else None,
            definition if isinstance(definition, dict) else {},
        )

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self._base, auth=self._auth, timeout=TIMEOUT, follow_redirects=False
        )

    async def _call(
        self, client: httpx.AsyncClient, method: str, path: str, body: Any = None
    ) -> Any:
        try:
            response = await client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise self._unavailable(f"{type(exc).__name__}: {exc}".rstrip(": ")) from None
        if response.status_code == 401:
            raise self._unavailable("401 Unauthorized (check the user and password)")
        if response.status_code >= 400:
            raise self._unavailable(f"{response.status_code} {_reason(response)}")
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise self._unavailable("the answer is not JSON") from None

    def _unavailable(self, why: str) -> BusUnavailable:
        return BusUnavailable(f"RabbitMQ management API at {self.shown} failed: {why}")


def _seg(name: str) -> str:
    return quote(name, safe="")


def _reason(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.reason_phrase
    reason = body.get("reason") if isinstance(body, dict) else None
    return " ".join(str(reason).split())[:300] if reason else response.reason_phrase
