"""MCP over streamable HTTP, for `runlane.api.app` to mount at `/mcp`: the SDK's session manager
behind a gate that authenticates every request with the API's bearer tokens
(`operations.authenticate`, trigger `mcp`), so a token revoked mid-session is refused on its next
request. No token, or one that is unknown, expired or revoked: 401 with `WWW-Authenticate:
Bearer` before the SDK sees the request.

A session belongs to the token that opened it. A session id is not a credential: the gate
names the request's token to the SDK as its principal (`scope["user"]`, the SDK's
`AuthenticatedUser`), and the session manager keeps the principal that initialized each session
and answers a request for it with any other token 404, exactly as for an unknown session (its
stream, its tools, its DELETE and its pending questions alike).

The SDK's DNS-rebinding check (the `Host` and `Origin` headers) is on when the server listens on a
loopback address and off otherwise: a server reached by other names (a Service, an ingress)
would answer 421 to all of them, and a request needs a bearer token anyway, which a page that
rebinds a name cannot add.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import structlog
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings

from runlane.core.runs import Trigger
from runlane.errors import Unauthenticated
from runlane.mcp.tools import Caller, RuntimeOf, build_server
from runlane.service import operations
from runlane.service.config import Settings
from runlane.service.operations import Requester

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

MCP_PATH = "/mcp"
REQUESTER_KEY = "runlane.mcp.requester"  # where the gate leaves who asks, in the ASGI scope
log = structlog.get_logger("runlane.mcp")


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            text: str = value.decode("latin-1")
            scheme, _, token = text.strip().partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise Unauthenticated("the Authorization header must be `Bearer <token>`")
            return token.strip()
    return None


def _peer(scope: Scope) -> str | None:
    client = scope.get("client")
    return str(client[0]) if client else None


def caller_of_request(ctx: Context) -> Caller:
    """Who calls a tool over HTTP: the requester the gate authenticated for this request."""
    request = ctx.request_context.request
    scope: Scope = getattr(request, "scope", None) or {}
    requester = scope.get(REQUESTER_KEY)
    if not isinstance(requester, Requester):
        raise Unauthenticated("no bearer token: send the header Authorization: Bearer <token>")
    return Caller(requester, _peer(scope))


def _principal(secret: str | None, requester: Requester) -> AuthenticatedUser:
    """The SDK's user for a request of `requester`, authenticated by `secret`: the principal the
    session manager binds a session to, and compares every later request of it with. A token's
    name identifies it (names are never reused; one secret per token)."""
    if not secret or requester.name is None or requester.access is None:  # never: authenticated
        raise Unauthenticated("no bearer token: send the header Authorization: Bearer <token>")
    role = requester.access.role.value
    return AuthenticatedUser(AccessToken(token=secret, client_id=requester.name, scopes=[role]))


class _Gate:
    """The ASGI endpoint at `/mcp`: authenticate, then hand the request to the SDK's session
    manager of the running server (`McpHttp.running`)."""

    def __init__(self, runtime_of: RuntimeOf) -> None:
        self.runtime_of = runtime_of
        self.app: StreamableHTTPASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            secret = _bearer(scope)
            requester = await operations.authenticate(
                self.runtime_of(), secret, trigger=Trigger.MCP
            )
            user = _principal(secret, requester)
        except Unauthenticated as exc:
            log.warning("mcp.refused", code=exc.code, remote=_peer(scope))
            await _unauthenticated(send, exc.message)
            return
        if self.app is None:  # served outside the app's lifespan: nothing to answer with
            raise RuntimeError("the MCP session manager is not running")
        scope[REQUESTER_KEY] = requester
        scope["user"] = user  # the session's owner: another token's request for it is a 404
        await self.app(scope, receive, send)


async def _unauthenticated(send: Send, detail: str) -> None:
    body = json.dumps(
        {
            "type": "about:blank",
            "title": "Unauthorized",
            "status": 401,
            "code": "unauthenticated",
            "detail": detail,
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/problem+json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="runlane"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def transport_security(settings: Settings) -> TransportSecuritySettings:
    """The SDK's Host/Origin check for `settings`' listen address: on (loopback names only,
    plus the CORS origins) when it is a loopback address, off otherwise (see the module)."""
    listen = settings.http_listen
    host = listen[0] if listen is not None else "127.0.0.1"
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost", "[::1]"],
        allowed_origins=[
            "http://127.0.0.1:*",
            "http://localhost:*",
            "http://[::1]:*",
            *settings.http_cors_origins,
        ],
    )


class McpHttp:
    """What the HTTP server mounts: `endpoint` (the ASGI app for `MCP_PATH`) and `running()`,
    which the server's lifespan enters. Each entry runs a new session manager of the SDK (one
    runs once only), so an app whose lifespan runs again (tests) serves again."""

    def __init__(self, settings: Settings, runtime_of: RuntimeOf) -> None:
        self.server = build_server(runtime_of, caller_of_request)
        self.security = transport_security(settings)
        self.gate = _Gate(runtime_of)
        self.endpoint: Callable[[Scope, Receive, Send], Awaitable[None]] = self.gate

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        self.server.streamable_http_app(
            streamable_http_path=MCP_PATH, transport_security=self.security
        )
        manager = self.server.session_manager
        async with manager.run():
            self.gate.app = StreamableHTTPASGIApp(manager)
            try:
                yield
            finally:
                self.gate.app = None


def streamable_http(settings: Settings, runtime_of: RuntimeOf) -> McpHttp:
    """The MCP server at `MCP_PATH` over streamable HTTP, serving from `runtime_of()`."""
    return McpHttp(settings, runtime_of)
