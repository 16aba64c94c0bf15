"""API tokens: create, list and revoke them (admins, or the local CLI), and authenticate a
request by its bearer secret (every request of a face that authenticates).

A secret is `rl_` and 256 random bits (`secrets.token_urlsafe(32)`); the store keeps only its
SHA-256, found through a unique index and compared with `hmac.compare_digest`. The secret is
returned once, by `create_token`; nothing can show it again. The `rl_` prefix lets secret
scanners and people recognise a leaked runlane token, and the first characters (`prefix`) are
kept in the clear so a leaked secret can be matched to its token and revoked.

A secret verified in the last `VERIFIED_FOR` seconds (1) is trusted again without reading its
row, by the same process and store: a busy client's requests cost one statement fewer each. So
a token revoked by another process (`runlane token revoke` while `runlane web` serves) is
refused within a second of the revocation; one revoked through this process (the API's, the
UI's or MCP's revoke) is refused at once; an expired one from its expiry time on.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog

from runlane.core.access import Access, Role
from runlane.core.durations import MAX_DURATION_SECONDS, parse_duration
from runlane.core.runs import Trigger
from runlane.errors import InvalidArgument, StoreError, Unauthenticated, UnknownToken
from runlane.ports import TokenRecord
from runlane.service.operations.arguments import LATEST, Requester, parse_iso
from runlane.service.runtime import Runtime

SECRET_PREFIX = "rl_"  # noqa: S105 (not a password: the mark every secret starts with)
SHOWN_PREFIX_CHARS = 10  # `rl_` and 7 characters of the random part (42 of its 256 bits)
TOUCH_EVERY = 60.0  # seconds: `last_used_at` is written at most this often per token
MAX_GLOBS = 100
MAX_GLOB_CHARS = 200
log = structlog.get_logger("runlane.tokens")

_NAME = re.compile(r"^[A-Za-z0-9._@-]{1,64}$")
_NAME_RULE = "1 to 64 letters, digits or . _ @ -"
# What `authenticate` says for an unknown, expired or revoked secret: the same words for each,
# so a caller learns nothing about which secrets were ever valid.
_REFUSED = "the bearer token is not valid (unknown, expired or revoked)"

# When this process last wrote `last_used_at` per (store, token name): `authenticate` then
# skips the write entirely for a minute, so a busy token costs one indexed read per request.
_touched: dict[tuple[int, str], float] = {}

VERIFIED_FOR = 1.0  # seconds a verified secret is trusted without reading its row again
MAX_VERIFIED = 1024  # secrets remembered per store (only verified ones: no guess gets in)
# Per store (held weakly: a closed store's entries go with it), secret hash -> (the monotonic
# time its row was read, the row). The clocks are module functions so that tests can move them.
_verified: weakref.WeakKeyDictionary[object, dict[str, tuple[float, TokenRecord]]] = (
    weakref.WeakKeyDictionary()
)
# When this process last revoked each token (monotonic): a read that began before it may have
# seen the row before the revocation and is not remembered.
_revoked: dict[str, float] = {}
_monotonic = time.monotonic


def _wall_now() -> datetime:
    return datetime.now(UTC)


def monotonic() -> float:
    """The clock of the trust windows here and in `sessions` (tests move it)."""
    return _monotonic()


def revoked_since(name: str, at: float) -> bool:
    """Whether this process revoked token `name` at or after `at` (a `monotonic()` time): what
    was read of it at `at` may predate the revocation, and must not be trusted again."""
    return _revoked.get(name, -VERIFIED_FOR) >= at


def _recently_verified(store: object, digest: str, now: float) -> TokenRecord | None:
    """The row of a secret verified less than VERIFIED_FOR ago and not expired since."""
    seen = _verified.get(store)
    hit = None if seen is None else seen.get(digest)
    if seen is None or hit is None:
        return None
    at, record = hit
    if now - at < VERIFIED_FOR and (record.expires_at is None or _wall_now() < record.expires_at):
        return record
    del seen[digest]
    return None


def _remember(store: object, digest: str, record: TokenRecord, read_at: float) -> None:
    if read_at <= _revoked.get(record.name, -VERIFIED_FOR):
        return
    seen = _verified.setdefault(store, {})
    if len(seen) >= MAX_VERIFIED:
        seen.clear()
    seen[digest] = (read_at, record)


def _forget(name: str) -> None:
    """Drop every remembered secret of token `name` (its revocation has just committed), in
    every store, and remember none read before now."""
    _revoked[name] = _monotonic()
    for seen in list(_verified.values()):
        for digest in [d for d, (_, record) in seen.items() if record.name == name]:
            seen.pop(digest, None)


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """A token as people see it: never its secret or hash."""

    name: str
    role: Role
    jobs: tuple[str, ...]
    prefix: str
    created_at: datetime | None
    created_by: str | None
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None


@dataclass(frozen=True, slots=True)
class TokenCreated:
    """What `create_token` made: the secret, shown this once, and the token."""

    secret: str
    token: TokenInfo


def hash_secret(secret: str) -> str:
    """The stored form of a secret: SHA-256, hex. A secret has 256 random bits, so a fast hash
    is enough (there is no dictionary to guess from); a slow one would cost every request."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _info(record: TokenRecord) -> TokenInfo:
    return TokenInfo(
        name=record.name,
        role=record.role,
        jobs=record.jobs,
        prefix=record.prefix,
        created_at=record.created_at,
        created_by=record.created_by,
        expires_at=record.expires_at,
        revoked_at=record.revoked_at,
        last_used_at=record.last_used_at,
    )


def check_token_name(name: str) -> str:
    """A token name: 1-64 of `[A-Za-z0-9._@-]` (it is recorded as `requested_by`)."""
    if not _NAME.match(name):
        raise InvalidArgument(f"token name {name!r}: expected {_NAME_RULE}")
    return name


def parse_role(role: Role | str) -> Role:
    """A role by name; `InvalidArgument` naming the roles otherwise."""
    if isinstance(role, Role):
        return role
    try:
        return Role(role.strip().lower())
    except ValueError:
        raise InvalidArgument(
            f"--role {role!r}: expected one of {', '.join(r.value for r in Role)}"
        ) from None


def _check_globs(jobs: Iterable[str]) -> tuple[str, ...]:
    globs = tuple(jobs)
    if len(globs) > MAX_GLOBS:
        raise InvalidArgument(f"--jobs: at most {MAX_GLOBS} globs, got {len(globs)}")
    for glob in globs:
        if not glob or not glob.strip() or len(glob) > MAX_GLOB_CHARS or not glob.isprintable():
            raise InvalidArgument(
                f"--jobs {glob!r}: expected a job name or an fnmatch glob such as etl.* "
                f"(1 to {MAX_GLOB_CHARS} printable characters)"
            )
    return globs


def _parse_expires(text: str | datetime, now: datetime) -> datetime:
    """`--expires`: a duration from now (`30d`) or a time after now (ISO text or a datetime)."""
    if isinstance(text, datetime):
        at = parse_iso(text.isoformat(), "--expires")
    else:
        try:
            seconds = parse_duration(text.strip(), maximum=MAX_DURATION_SECONDS)
        except ValueError:
            at = parse_iso(text, "--expires", "expected a duration such as 30d or an ISO time")
        else:
            if seconds <= 0:
                raise InvalidArgument(f"--expires {text!r}: the duration must be longer than zero")
            at = now + timedelta(seconds=seconds)
    if at <= now:
        raise InvalidArgument(f"--expires {str(text)!r} is not in the future")
    if at >= LATEST:
        raise InvalidArgument(f"--expires {str(text)!r}: expires before {LATEST:%Y-%m-%d}")
    return at


async def create_token(
    rt: Runtime,
    name: str,
    *,
    role: Role | str,
    jobs: Iterable[str] = (),
    expires: str | datetime | None = None,
    requester: Requester,
) -> TokenCreated:
    """Make a token named `name` with `role`, its writes limited to `jobs` (fnmatch globs;
    none = every job), expiring after `expires` (a duration such as `30d`, or a time; None =
    never). Admins only (`forbidden`); `invalid_argument` for a bad name, role, glob or time;
    `token_exists` for a name already used (revoked tokens keep theirs)."""
    requester.require(Role.ADMIN, action="create token")
    check_token_name(name)
    chosen = parse_role(role)
    globs = _check_globs(jobs)
    expires_at = None if expires is None else _parse_expires(expires, await rt.store.now())
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    record = TokenRecord(
        name=name,
        role=chosen,
        secret_hash=hash_secret(secret),
        prefix=secret[:SHOWN_PREFIX_CHARS],
        jobs=globs,
        created_by=requester.name,
        expires_at=expires_at,
    )
    stored = await rt.store.create_token(record)
    return TokenCreated(secret=secret, token=_info(stored))


async def list_tokens(rt: Runtime, *, requester: Requester) -> tuple[TokenInfo, ...]:
    """Every token, revoked and expired ones too, by name. Admins only (`forbidden`)."""
    requester.require(Role.ADMIN, action="list tokens")
    return tuple(_info(r) for r in await rt.store.tokens())


async def revoke_token(rt: Runtime, name: str, *, requester: Requester) -> TokenInfo:
    """Revoke `name` (at once: its next request is refused); revoking twice keeps the first
    time. Admins only (`forbidden`); `unknown_token`."""
    requester.require(Role.ADMIN, action="revoke token")
    record = await rt.store.revoke_token(name)
    _forget(name)
    if record is None:
        raise UnknownToken(f"no token is named {name!r} (`runlane token list` lists them)")
    return _info(record)


async def authenticate(
    rt: Runtime, secret: str | None, *, trigger: Trigger = Trigger.MANUAL
) -> Requester:
    """The requester a bearer secret names: the token's name, `trigger`, and its role and job
    globs. `unauthenticated` for no secret, or one that is unknown, expired or revoked (one
    message for all three). One indexed read, none for a secret this process and store
    verified less than VERIFIED_FOR ago (see the module's docstring: revocation by another
    process takes effect within that bound); `last_used_at` is written at most once a minute
    per token (by this process, and by the store whatever the process)."""
    if not secret:
        raise Unauthenticated("no bearer token: send the header Authorization: Bearer <token>")
    # A secret is ASCII (`rl_` and URL-safe base64): anything else names no token, and text
    # that is not even UTF-8 (RUNLANE_TOKEN's bytes, surrogate-escaped) could not be hashed.
    if not secret.startswith(SECRET_PREFIX) or len(secret) > 512 or not secret.isascii():
        raise Unauthenticated(_REFUSED)
    digest = hash_secret(secret)
    read_at = _monotonic()
    record = _recently_verified(rt.store, digest, read_at)
    if record is None:
        record = await rt.store.token_by_hash(digest)
        if record is None or not hmac.compare_digest(record.secret_hash, digest):
            raise Unauthenticated(_REFUSED)
        _remember(rt.store, digest, record, read_at)
    key = (id(rt.store), record.name)
    now = time.monotonic()
    if now - _touched.get(key, -TOUCH_EVERY) >= TOUCH_EVERY:
        _touched[key] = now
        try:
            await rt.store.touch_token(record.name, every=TOUCH_EVERY)
        except StoreError as exc:
            # Bookkeeping: a busy or read-only database must not refuse a valid token.
            log.warning("token.touch_failed", token=record.name, error=exc.code)
    return Requester(record.name, trigger, Access(record.role, record.jobs))


__all__ = [
    "SECRET_PREFIX",
    "TokenCreated",
    "TokenInfo",
    "authenticate",
    "create_token",
    "hash_secret",
    "list_tokens",
    "parse_role",
    "revoke_token",
]
