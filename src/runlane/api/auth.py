"""Who asks: the `Viewer`, `Operator` and `Admin` dependencies of the endpoints.

A request carries `Authorization: Bearer <token>`, checked by `operations.authenticate` (an
unknown, expired or revoked token is 401). In trusted-proxy mode (`RUNLANE_HTTP_TRUSTED_PROXIES`
set) a request from one of those addresses may instead name its user in
`RUNLANE_HTTP_USER_HEADER` and its groups in `RUNLANE_HTTP_GROUPS_HEADER`, mapped to the highest
role of `RUNLANE_HTTP_GROUP_ROLES`; from any other address the headers are ignored. A GET or
HEAD without an Authorization header may instead carry the web UI's session cookie (its
token's role and globs; docs/ui.md). The role a
write needs, and a token's job scope, are checked by the operations (`Requester.require`), so
every face refuses alike; the dependencies check only that a reader is at least a viewer.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

import structlog
from fastapi import Depends, Request

from runlane.api.deps import RuntimeDep
from runlane.core.access import Access, Role
from runlane.core.runs import Trigger
from runlane.errors import Forbidden, MalformedRequest, Unauthenticated
from runlane.service import operations
from runlane.service.config import Settings
from runlane.service.operations import Requester, sessions
from runlane.web.session import session_cookie

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
log = structlog.get_logger("runlane.api")

# A proxy user's name is recorded as `requested_by` and in the audit log: a name, not a page.
MAX_USER_CHARS = 200


@dataclass(frozen=True, slots=True)
class ProxyAuth:
    """Trusted-proxy mode: the proxies' networks, the two headers, and the group → role map."""

    networks: tuple[Network, ...]
    user_header: str
    groups_header: str
    group_roles: Mapping[str, Role]

    def trusts(self, host: str | None) -> bool:
        if not self.networks or host is None:
            return False
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return any(address in net for net in self.networks)


def proxy_auth_of(settings: Settings) -> ProxyAuth:
    """The trusted-proxy configuration of `settings` (no proxies: off). The settings have
    checked every value already (service/config.py), so nothing here can fail."""
    return ProxyAuth(
        networks=tuple(
            ipaddress.ip_network(text, strict=False) for text in settings.http_trusted_proxies
        ),
        user_header=settings.http_user_header,
        groups_header=settings.http_groups_header,
        group_roles={group: Role(role) for group, role in settings.http_group_roles},
    )


def bearer_secret(request: Request) -> str | None:
    """The token of `Authorization: Bearer <token>`; None when there is no such header.
    Another scheme, or a header without a token, is 401 (the header is there, but says nothing
    we accept)."""
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("the Authorization header must be `Bearer <token>`")
    return token.strip()


def _proxy_requester(request: Request, proxy: ProxyAuth) -> Requester | None:
    user = request.headers.get(proxy.user_header)
    if user is None:
        return None
    user = user.strip()
    if not user or not user.isprintable() or len(user) > MAX_USER_CHARS:
        raise MalformedRequest(
            f"the {proxy.user_header} header must be 1 to {MAX_USER_CHARS} printable characters"
        )
    groups = [g.strip() for g in request.headers.get(proxy.groups_header, "").split(",")]
    roles = [proxy.group_roles[g] for g in groups if g in proxy.group_roles]
    if not roles:
        raise Forbidden(
            f"user {user!r} is in no group that has a role "
            f"(groups from {proxy.groups_header}: {', '.join(g for g in groups if g) or 'none'})"
        )
    role = max(roles, key=lambda r: r.rank)
    return Requester(user, Trigger.MANUAL, access=Access(role))


def peer_is_trusted(request: Request) -> bool:
    """Whether the TCP peer is one of the trusted proxies (never X-Forwarded-For)."""
    proxy: ProxyAuth = request.app.state.proxy_auth
    return proxy.trusts(request.client.host if request.client else None)


def proxy_requester(request: Request) -> Requester | None:
    """The trusted proxy's user of `request`; None when the peer is not a trusted proxy or
    sends no user header. The web UI identifies its browsers with this too (it is handed over
    as `app.state.proxy_requester`: the UI does not import the API)."""
    if not peer_is_trusted(request):
        return None
    return _proxy_requester(request, request.app.state.proxy_auth)


SAFE_METHODS = frozenset({"GET", "HEAD"})


async def requester_of(request: Request, rt: RuntimeDep) -> Requester:
    """Who sends `request`: the trusted proxy's user, or the bearer token's, or (for a GET or
    HEAD without an Authorization header) the web UI session of its cookie, so the UI's
    script can read the API; 401 otherwise. Writes never take the cookie: a page's forms post
    to the UI, which checks their CSRF token."""
    found = proxy_requester(request)
    if found is not None:
        request.state.requester_kind = "proxy"  # whose Idempotency-Keys (api.writes)
        return found
    secret = bearer_secret(request)
    if secret is None and request.method in SAFE_METHODS:
        cookie = session_cookie(request)
        if cookie:
            request.state.requester_kind = "session"
            return await sessions.session_requester(rt, cookie)
    request.state.requester_kind = "token"
    return await operations.authenticate(rt, secret, trigger=Trigger.MANUAL)


async def viewer(requester: Annotated[Requester, Depends(requester_of)]) -> Requester:
    """Any authenticated caller: reading needs the viewer role, which every role has."""
    requester.require(Role.VIEWER, action="read")
    return requester


Viewer = Annotated[Requester, Depends(viewer)]
"""A caller that may read."""


async def writer(request: Request, rt: RuntimeDep) -> Requester:
    """A caller that asks to write. One that cannot be identified is refused (401, or 403 for
    a proxy user in no mapped group) and logged, not written to the audit table: anybody who
    can reach the port could fill that table with refusals. Once identified, every outcome,
    a refusal of the role or scope included, is an audit row (`runlane.api.writes`)."""
    try:
        return await requester_of(request, rt)
    except (Unauthenticated, Forbidden, MalformedRequest) as exc:
        log.warning(
            "api.write_refused",
            code=exc.code,
            method=request.method,
            path=request.url.path,
            remote=request.client.host if request.client else None,
        )
        raise


Operator = Annotated[Requester, Depends(writer)]
"""A caller that asks to run, cancel, pause, resume or emit: the operation checks the role
(operator) and the token's job scope, so a refusal is audited like any other outcome."""

Admin = Annotated[Requester, Depends(writer)]
"""A caller that asks to manage tokens: the operation checks the admin role."""
