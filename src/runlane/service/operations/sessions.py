"""Web UI sessions: log in with a token (or a one-time login code), find the session a
cookie names, log out; the CSRF token of a session; the first admin token and its login link.

A session's cookie holds a random secret (256 bits); the store keeps only its SHA-256, as for
tokens, so a leaked database opens no session. A session belongs to the token it was opened
with and lives only while that token does (the store's lookup joins the token): revoking or
expiring a token ends its sessions at the next request. A session ends `SESSION_IDLE` after its
last request and `SESSION_LIFETIME` after it was opened, whichever comes first.

The CSRF token of a session is an HMAC of its secret: the page's forms carry it, the server
recomputes it from the cookie, and neither the database nor a page of another session can
produce it.

A live session read in the last `VERIFIED_FOR` seconds (1, as for bearer tokens) is trusted
again by the same process and store without reading its row: a page and the API reads of its
script cost one statement fewer each. So a session ended by another process (a logout served by
another replica, its token revoked by `runlane token revoke`) ends here within a second; one
ended through this process (its logout, its token's revocation) at once; one past its absolute
end, or whose token expired, from that time on.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from runlane.core.access import Access, Role
from runlane.core.runs import Trigger
from runlane.errors import (
    CsrfRefused,
    InvalidArgument,
    StoreError,
    TokenExists,
    TokenNotLive,
    Unauthenticated,
    UnknownToken,
)
from runlane.ports import WebSession
from runlane.service.operations import tokens
from runlane.service.operations.arguments import Requester
from runlane.service.operations.tokens import (
    VERIFIED_FOR,
    TokenInfo,
    authenticate,
    check_token_name,
    create_token,
    hash_secret,
    list_tokens,
)
from runlane.service.runtime import Runtime

SESSION_IDLE = 12 * 3600.0  # seconds: a session unused this long has ended
SESSION_LIFETIME = 7 * 24 * 3600.0  # seconds: a session ends this long after login, used or not
LOGIN_CODE_TTL = 15 * 60.0  # seconds: a one-time login link works this long, once
TOUCH_EVERY = 60.0  # seconds: `last_seen_at` is written at most this often per session
FIRST_ADMIN = "admin"  # the name of the token `runlane serve` makes on a database with none
MAX_SECRET_CHARS = 200  # a cookie or code longer than this is not one we wrote
_CSRF_CONTEXT = b"runlane-web-csrf-v1"
_REFUSED = "the session has ended (logged out, expired, or its token was revoked): log in again"
log = structlog.get_logger("runlane.sessions")

# When this process last wrote `last_seen_at` per (store, session): the lookup then skips
# the write for a minute, so a busy page costs one indexed read per request.
_touched: dict[tuple[int, str], float] = {}

MAX_LIVE = 1024  # sessions remembered per store (only live ones: no guess gets in)
# Per store (held weakly), session id -> (the `tokens.monotonic()` time its row was read, the
# row); and when this process closed each session it closed in the last VERIFIED_FOR.
_live: weakref.WeakKeyDictionary[object, dict[str, tuple[float, WebSession]]] = (
    weakref.WeakKeyDictionary()
)
_closed: dict[str, float] = {}


def _recently_live(store: object, session_id: str, now: float) -> WebSession | None:
    """The row of a session read live less than VERIFIED_FOR ago, and not ended since by this
    process (logged out, its token revoked) nor by the clock (its end, its token's expiry)."""
    seen = _live.get(store)
    hit = None if seen is None else seen.get(session_id)
    if seen is None or hit is None:
        return None
    at, session = hit
    wall = datetime.now(UTC)
    token = session.token
    if (
        now - at < VERIFIED_FOR
        and wall < session.expires_at
        and (token.expires_at is None or wall < token.expires_at)
        and _closed.get(session_id, -VERIFIED_FOR) < at
        and not tokens.revoked_since(token.name, at)
    ):
        return session
    del seen[session_id]
    return None


def _remember_live(store: object, session: WebSession, read_at: float) -> None:
    if _closed.get(session.id, -VERIFIED_FOR) >= read_at or tokens.revoked_since(
        session.token.name, read_at
    ):
        return  # the read may predate the end: never trust it again
    seen = _live.setdefault(store, {})
    if len(seen) >= MAX_LIVE:
        seen.clear()
    seen[session.id] = (read_at, session)


@dataclass(frozen=True, slots=True)
class SessionOpened:
    """A new session: `secret` is the cookie's value (shown to nobody else), `requester` who
    it is, `max_age` how long the cookie may be kept (the session's absolute lifetime)."""

    secret: str
    requester: Requester
    max_age: int


@dataclass(frozen=True, slots=True)
class LoginLink:
    """A one-time login code for a token: `code` goes into `/login?code=...`."""

    token: str
    code: str
    ttl_seconds: float

    def url(self, base_url: str) -> str:
        """The link itself, under the UI's address `base_url` (no trailing slash)."""
        return f"{base_url}/login?code={self.code}"


def _requester(session: WebSession) -> Requester:
    token = session.token
    return Requester(token.name, Trigger.MANUAL, Access(token.role, token.jobs))


def _usable(secret: str | None) -> bool:
    return bool(secret) and len(secret or "") <= MAX_SECRET_CHARS and (secret or "").isascii()


async def _open(rt: Runtime, token_name: str) -> SessionOpened:
    secret = secrets.token_urlsafe(32)
    made = await rt.store.create_web_session(
        hash_secret(secret), token_name, lifetime=SESSION_LIFETIME
    )
    if made is None:  # the token was revoked between the check and the insert
        raise Unauthenticated(_REFUSED)
    try:
        await rt.store.prune_web_sessions(idle=SESSION_IDLE)
    except StoreError as exc:  # bookkeeping: never refuse a login for it
        log.warning("sessions.prune_failed", error=exc.code)
    return SessionOpened(secret, _requester(made), int(SESSION_LIFETIME))


async def open_session(rt: Runtime, token_secret: str | None) -> SessionOpened:
    """Log in with a token's secret: a new session of that token. `unauthenticated` for a
    secret that is missing, unknown, expired or revoked (one message for all)."""
    requester = await authenticate(rt, (token_secret or "").strip() or None)
    if requester.name is None:  # pragma: no cover - a token always has a name
        raise Unauthenticated("the token has no name")
    return await _open(rt, requester.name)


async def open_session_with_code(rt: Runtime, code: str | None) -> SessionOpened:
    """Log in with a one-time login code (`create_login_link`): a new session of its token.
    `unauthenticated` for a code that is unknown, used or expired (one message for all)."""
    if not _usable(code):
        raise Unauthenticated("the login link is not valid (unknown, used or expired)")
    token_name = await rt.store.redeem_login_code(hash_secret(code or ""))
    if token_name is None:
        raise Unauthenticated("the login link is not valid (unknown, used or expired)")
    return await _open(rt, token_name)


async def session_requester(rt: Runtime, secret: str | None) -> Requester:
    """Who the session of cookie `secret` is: its token's name, role and job globs, with the
    trigger `manual`. `unauthenticated` when there is no such live session."""
    if not _usable(secret):
        raise Unauthenticated(_REFUSED)
    session_id = hash_secret(secret or "")
    read_at = tokens.monotonic()
    session = _recently_live(rt.store, session_id, read_at)
    if session is None:
        session = await rt.store.web_session(session_id, idle=SESSION_IDLE)
        if session is None:
            raise Unauthenticated(_REFUSED)
        _remember_live(rt.store, session, read_at)
    key = (id(rt.store), session_id)
    now = time.monotonic()
    if now - _touched.get(key, -TOUCH_EVERY) >= TOUCH_EVERY:
        _touched[key] = now
        try:
            await rt.store.touch_web_session(session_id, every=TOUCH_EVERY)
        except StoreError as exc:  # bookkeeping: a busy database must not end a session
            log.warning("sessions.touch_failed", error=exc.code)
    return _requester(session)


async def close_session(rt: Runtime, secret: str | None) -> bool:
    """Log out: delete the session of cookie `secret` (False when there was none)."""
    if not _usable(secret):
        return False
    session_id = hash_secret(secret or "")
    _touched.pop((id(rt.store), session_id), None)
    now = tokens.monotonic()
    for old in [k for k, at in _closed.items() if now - at > VERIFIED_FOR]:
        del _closed[old]  # past the window, no remembered read can predate it
    _closed[session_id] = now
    seen = _live.get(rt.store)
    if seen is not None:
        seen.pop(session_id, None)
    return await rt.store.delete_web_session(session_id)


def csrf_token(secret: str) -> str:
    """The CSRF token of the session whose cookie is `secret` (HMAC-SHA256, hex)."""
    return hmac.new(secret.encode("utf-8"), _CSRF_CONTEXT, hashlib.sha256).hexdigest()


def check_csrf(secret: str | None, sent: str | None) -> None:
    """`csrf_refused` unless `sent` is the CSRF token of the session `secret` (constant time;
    `compare_digest` takes ASCII text only, and a token is hex)."""
    if (
        not secret
        or not sent
        or not sent.isascii()
        or not hmac.compare_digest(csrf_token(secret), sent.strip())
    ):
        raise CsrfRefused("the form's CSRF token is missing or wrong: reload the page and retry")


async def create_login_link(rt: Runtime, token_name: str) -> LoginLink:
    """A one-time login code for the token `token_name` (valid `LOGIN_CODE_TTL`, once)."""
    code = secrets.token_urlsafe(32)
    await rt.store.create_login_code(hash_secret(code), token_name, ttl=LOGIN_CODE_TTL)
    return LoginLink(token_name, code, LOGIN_CODE_TTL)


@dataclass(frozen=True, slots=True)
class TokenLoginLink:
    """What `token_login_link` made: the one-time code, the token it opens a session of, and
    whether that token was made for it (its secret then shown to nobody)."""

    link: LoginLink
    token: TokenInfo
    created: bool


async def token_login_link(
    rt: Runtime,
    name: str,
    *,
    requester: Requester,
    role: Role | str | None = None,
    jobs: Iterable[str] = (),
    expires: str | datetime | None = None,
) -> TokenLoginLink:
    """A one-time login link (`/login?code=...`, valid `LOGIN_CODE_TTL`, once) for the token
    `name`, as `runlane serve` prints for the first admin: for a person who should use the UI
    without ever handling a secret. Without `role`, for the existing token `name`
    (`unknown_token`; `token_not_live` when it is revoked or expired); with `role` (and
    optionally `jobs`, `expires`, as `create_token` takes them), for a new token made here
    whose secret nobody sees (`token_exists` when the name is taken). Admins only
    (`forbidden`)."""
    requester.require(Role.ADMIN, action="make a login link")
    check_token_name(name)
    jobs = tuple(jobs)
    if role is not None:
        made = await create_token(
            rt, name, role=role, jobs=jobs, expires=expires, requester=requester
        )
        return TokenLoginLink(await create_login_link(rt, name), made.token, created=True)
    if jobs or expires is not None:
        raise InvalidArgument(
            "--jobs and --expires describe a new token: give --role too, or leave them out "
            f"for a link to the existing token {name!r}"
        )
    found = [t for t in await list_tokens(rt, requester=requester) if t.name == name]
    if not found:
        raise UnknownToken(
            f"no token is named {name!r} (`runlane token list` lists them; "
            "--role ROLE makes a new one with its link)"
        )
    info = found[0]
    if info.revoked_at is not None:
        raise TokenNotLive(f"token {name!r} is revoked: nobody can log in with it")
    if info.expires_at is not None and info.expires_at <= await rt.store.now():
        raise TokenNotLive(f"token {name!r} has expired: nobody can log in with it")
    return TokenLoginLink(await create_login_link(rt, name), info, created=False)


async def first_admin_login(rt: Runtime) -> LoginLink | None:
    """On a database that has never had a token: make an admin token (`admin`) whose secret
    nobody sees, and a one-time login code for it, so the UI is usable at once. None when any
    token exists (then `runlane token create` gives one), or another process made it first."""
    if await rt.store.count_tokens() > 0:
        return None
    try:
        made = await create_token(
            rt, FIRST_ADMIN, role=Role.ADMIN, requester=Requester(None, Trigger.CLI)
        )
    except TokenExists:
        return None
    return await create_login_link(rt, made.token.name)


__all__ = [
    "FIRST_ADMIN",
    "LOGIN_CODE_TTL",
    "SESSION_IDLE",
    "SESSION_LIFETIME",
    "LoginLink",
    "SessionOpened",
    "TokenLoginLink",
    "check_csrf",
    "close_session",
    "create_login_link",
    "csrf_token",
    "first_admin_login",
    "open_session",
    "open_session_with_code",
    "session_requester",
    "token_login_link",
]
