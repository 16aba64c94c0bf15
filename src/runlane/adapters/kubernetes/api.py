"""A thin, typed-enough door to the Kubernetes REST API: JSON in, JSON out.

lightkube supplies the configuration (kubeconfig, in-cluster token, certificates, auth plugins)
and its httpx transport. The requests themselves are written here because the executor needs
what lightkube's high-level calls do not expose: watch bookmarks, the resourceVersion of a
list, delete preconditions (UID), the `Retry-After` of a 429, and one place to rate-limit and
count every request.

Errors: 429 is retried after `Retry-After` a few times, then becomes `TemporaryExecutorError`;
5xx, timeouts and connection errors are `TemporaryExecutorError`; other statuses raise
`ApiStatus`, which callers turn into what they mean (409 → adopt, 404 → gone, 403/422 →
`PermanentExecutorError` via `permanent()`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import httpx2 as httpx
from lightkube.config.client_adapter import ConnectionParams
from lightkube.config.kubeconfig import SingleConfig

from runlane.adapters.kubernetes.pool import StackPool
from runlane.errors import PermanentExecutorError, TemporaryExecutorError

Json = dict[str, Any]

_MAX_RETRY_AFTER = 30.0


class ApiStatus(Exception):
    """A Kubernetes `Status` failure: HTTP code, reason word (`AlreadyExists`, `Expired`, …)."""

    def __init__(
        self, code: int, reason: str, message: str, details: Mapping[str, Any] | None = None
    ):
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = dict(details or {})

    @classmethod
    def from_body(cls, code: int, body: bytes | str) -> ApiStatus:
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if isinstance(data, dict) and data.get("kind") == "Status":
            return cls(
                int(data.get("code") or code),
                str(data.get("reason") or ""),
                str(data.get("message") or ""),
                data.get("details"),
            )
        text = body.decode(errors="replace") if isinstance(body, bytes) else body
        return cls(code, "", text.strip()[:500])

    def permanent(self, what: str) -> PermanentExecutorError:
        """The error a run ends with when this status answers `what` (e.g. "create Job x")."""
        codes = {401: "unauthorized", 403: "forbidden", 422: "invalid_spec", 400: "invalid_spec"}
        return PermanentExecutorError(
            f"Kubernetes refused to {what}: {self.message or self.reason}",
            error_code=codes.get(self.code, "kubernetes_error"),
        )


class RateLimiter:
    """A token bucket shared by every request of one client (client-go's QPS/burst).

    Each caller reserves the next slot and sleeps until it (golang.org/x/time/rate's
    `Reserve`): the bucket may go below zero, so a sleep that overshoots on a busy event loop
    loses no tokens, and the rate holds at `qps` however late the callers wake. A caller
    cancelled while it waits gives its slot back.
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.qps = qps
        self.burst = max(1, burst)
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(self.burst)
        self._last = clock()

    async def acquire(self) -> None:
        if self.qps <= 0:
            return
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps) - 1.0
        self._last = now
        if self._tokens < 0.0:
            try:
                await self._sleep(-self._tokens / self.qps)
            except asyncio.CancelledError:
                self._tokens += 1.0
                raise


def _retry_after(resp: httpx.Response, default: float) -> float:
    raw = resp.headers.get("Retry-After")
    try:
        return max(0.0, min(float(raw), _MAX_RETRY_AFTER)) if raw is not None else default
    except ValueError:
        return default


DEFAULT_MAX_IN_FLIGHT = 32

_JSON_CONTENT = {"Content-Type": "application/json"}
_encode = json.JSONEncoder().encode


class KubeApi:
    """JSON requests to one API server, rate-limited and counted (`counts["POST jobs"]`).

    At most `max_in_flight` requests (streams apart: watches, followed logs) are on the wire at
    once; the others wait their turn here, in order. Without that bound a burst of starts
    queues hundreds of requests inside the HTTP connection pool, whose every hand-over walks
    the whole queue (most of the launcher's CPU at 1,000 starts), and opens a connection for
    each request beyond the kept-alive ones.
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        qps: float = 50.0,
        burst: int = 100,
        throttle_retries: int = 3,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        self._client = client
        self._limiter = RateLimiter(qps, burst)
        self._in_flight = asyncio.Semaphore(max(1, max_in_flight))
        self.throttle_retries = throttle_retries
        self.counts: Counter[str] = Counter()

    @classmethod
    def from_config(
        cls,
        config: SingleConfig,
        *,
        timeout: float = 10.0,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        **kw: Any,
    ) -> KubeApi:
        params = ConnectionParams(timeout=httpx.Timeout(timeout))
        # lightkube's settings: server, the SSL context (CA, client certificate), auth (token,
        # token file, exec plugin, basic), timeouts.
        settings = params.httpx_params(config)
        idle = max_in_flight + 8  # a kept-alive connection for each request allowed in flight
        if settings.get("proxy") is None and not _environment_proxies(settings):
            # Our connection stack (pool.py) in place of httpcore2's pool, on the same SSL
            # context; the client above it still runs the auth flow and sets the timeouts.
            verify = settings.pop("verify")
            settings["transport"] = StackPool(
                ssl_context=httpx.create_ssl_context(
                    verify=verify, trust_env=bool(settings.get("trust_env", True))
                ),
                max_idle=idle,
            )
            client = httpx.AsyncClient(**settings)
        else:
            # Through a proxy: httpx2's own transports, which read the proxy settings. A pool
            # that keeps a connection alive for every request allowed in flight and never makes
            # a stream (a watch, a followed log) wait for a free connection.
            client = httpx.AsyncClient(
                **settings,
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=idle),
            )
        return cls(client, max_in_flight=max_in_flight, **kw)

    async def aclose(self) -> None:
        await self._client.aclose()

    def _count(self, method: str, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        # /api/v1/namespaces/ns/pods/name/log → "GET pods/log"; /apis/batch/v1/namespaces/ns/jobs → "jobs"
        resource = parts[-1]
        if "namespaces" in parts:
            rest = parts[parts.index("namespaces") + 2 :]
            resource = "/".join([rest[0], *rest[2:]]) if rest else "namespaces"
        self.counts[f"{method} {resource}"] += 1

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
    ) -> Json:
        """One request; the decoded JSON body (`{}` when there is none)."""
        resp = await self._send(method, path, params=params, body=body)
        if not resp.content:
            return {}
        data = resp.json()
        return data if isinstance(data, dict) else {"items": data}

    async def text(self, path: str, *, params: Mapping[str, Any] | None = None) -> str:
        resp = await self._send("GET", path, params=params)
        return resp.text

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
    ) -> httpx.Response:
        attempt = 0
        content: bytes | None = None  # encoded once, when first on its way (not while queued)
        headers = _JSON_CONTENT if body is not None else None
        while True:
            try:
                async with self._in_flight:
                    await self._limiter.acquire()
                    self._count(method, path)
                    if content is None and body is not None:
                        content = _encode(body).encode()
                    resp = await self._client.request(
                        method, path, params=_params(params), content=content, headers=headers
                    )
            except httpx.TimeoutException as exc:
                raise TemporaryExecutorError(
                    f"the Kubernetes API did not answer {method} {path} in time",
                    error_code="api_timeout",
                ) from exc
            except httpx.TransportError as exc:
                raise TemporaryExecutorError(
                    f"cannot reach the Kubernetes API ({type(exc).__name__}: {exc})",
                    error_code="api_unavailable",
                ) from exc
            if resp.status_code < 400:
                return resp
            if resp.status_code == 429:
                wait = _retry_after(resp, 1.0)
                attempt += 1
                if attempt <= self.throttle_retries:
                    await asyncio.sleep(wait)
                    continue
                raise TemporaryExecutorError(
                    f"the Kubernetes API throttled {method} {path} (429) {attempt} times",
                    error_code="api_throttled",
                    retry_after=max(wait, 1.0),
                )
            if resp.status_code >= 500:
                status = ApiStatus.from_body(resp.status_code, resp.content)
                raise TemporaryExecutorError(
                    f"the Kubernetes API failed {method} {path}: {status}",
                    error_code="api_unavailable",
                    retry_after=_retry_after(resp, 5.0),
                )
            raise ApiStatus.from_body(resp.status_code, resp.content)

    async def watch(
        self, path: str, *, params: Mapping[str, Any], read_timeout: float
    ) -> AsyncIterator[Json]:
        """The events of one watch request, decoded, until the server ends the stream.

        HTTP errors raise like `request` does (410 → `ApiStatus` with code 410). In-stream
        `ERROR` events are yielded for the caller to read.
        """
        await self._limiter.acquire()
        self._count("WATCH", path)
        timeout = httpx.Timeout(10.0, read=read_timeout)
        try:
            async with self._client.stream(
                "GET", path, params=_params({**params, "watch": "true"}), timeout=timeout
            ) as resp:
                if resp.status_code >= 400:
                    body = await resp.aread()
                    if resp.status_code == 429 or resp.status_code >= 500:
                        raise TemporaryExecutorError(
                            f"watch {path}: HTTP {resp.status_code}",
                            error_code="api_unavailable",
                            retry_after=_retry_after(resp, 1.0),
                        )
                    raise ApiStatus.from_body(resp.status_code, body)
                async for line in resp.aiter_lines():
                    if not line.strip():
                        continue
                    try:
                        event = json.loads(line)
                    except ValueError:
                        continue  # a cut line at a dropped connection; the next list repairs it
                    if isinstance(event, dict):
                        yield event
        except httpx.TimeoutException as exc:
            raise TemporaryExecutorError(
                f"watch {path} went quiet", error_code="api_timeout"
            ) from exc
        except httpx.TransportError as exc:
            raise TemporaryExecutorError(
                f"watch {path} dropped ({type(exc).__name__})", error_code="api_unavailable"
            ) from exc

    async def stream_text(self, path: str, *, params: Mapping[str, Any]) -> AsyncIterator[str]:
        """A followed pod log, line by line."""
        await self._limiter.acquire()
        self._count("GET", path)
        timeout = httpx.Timeout(10.0, read=None)
        async with self._client.stream(
            "GET", path, params=_params(params), timeout=timeout
        ) as resp:
            if resp.status_code >= 400:
                raise ApiStatus.from_body(resp.status_code, await resp.aread())
            async for line in resp.aiter_lines():
                yield line


def _environment_proxies(settings: Mapping[str, Any]) -> bool:
    """Whether httpx2 would read a proxy from the environment (HTTPS_PROXY, ALL_PROXY, …) for
    this client: only its own transports do that, so such a client keeps them."""
    if not settings.get("trust_env", True):
        return False
    found = urllib.request.getproxies()
    if "*" in (host.strip() for host in found.get("no", "").split(",")):
        return False  # NO_PROXY=*: httpx2 ignores every proxy
    return any(found.get(scheme) for scheme in ("http", "https", "all"))


def _params(params: Mapping[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (params or {}).items():
        if value is None:
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def jobs_path(namespace: str, name: str | None = None) -> str:
    base = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    return f"{base}/{name}" if name else base


def pods_path(namespace: str, name: str | None = None) -> str:
    base = f"/api/v1/namespaces/{namespace}/pods"
    return f"{base}/{name}" if name else base


def config_maps_path(namespace: str, name: str | None = None) -> str:
    base = f"/api/v1/namespaces/{namespace}/configmaps"
    return f"{base}/{name}" if name else base


def events_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/events"


async def close_quietly(api: KubeApi) -> None:
    with contextlib.suppress(Exception):
        await api.aclose()
