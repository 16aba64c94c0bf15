"""`operations.authenticate` trusts a secret it verified less than `VERIFIED_FOR` (1 s) ago
without reading its row again, on SQLite and PostgreSQL: what it saves (one read per request),
and the bounds it keeps (revoked by another process: refused within the second; revoked
through this one: at once; expired: from its expiry time; an unknown secret is never kept)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

import pytest

from runlane.core.access import Role
from runlane.errors import Unauthenticated
from runlane.ports import Store, TokenRecord
from runlane.service import operations
from runlane.service.config import Settings
from runlane.service.operations import Requester, tokens
from runlane.service.runtime import Runtime
from runlane.service.wiring import store_from_url

ROOT = Requester("root")  # the local CLI's requester: every right


class Clock:
    """The cache's monotonic clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(tokens, "_monotonic", fake)
    return fake


@pytest.fixture
def reads(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The secret hashes `store.token_by_hash` was asked for, in order."""
    asked: list[str] = []
    real: Callable[[str], Awaitable[TokenRecord | None]] = store.token_by_hash

    async def counting(secret_hash: str) -> TokenRecord | None:
        asked.append(secret_hash)
        return await real(secret_hash)

    monkeypatch.setattr(store, "token_by_hash", counting)
    return asked


@pytest.fixture
async def elsewhere(settings: Settings) -> AsyncIterator[Runtime]:
    """Another process's view of the same database: its own store. What that process revokes
    goes through its store alone (here, `store.revoke_token`: this process's
    `operations.revoke_token` also drops what this process remembers)."""
    other = store_from_url(settings.database_url)
    await other.open()
    yield Runtime(settings=settings, store=other, catalog=None)
    await other.close()


async def make(rt: Runtime, name: str, **kw: str) -> str:
    made = await operations.create_token(rt, name, role=Role.VIEWER, requester=ROOT, **kw)
    return made.secret


async def test_a_verified_secret_is_not_read_again_within_the_bound(
    rt: Runtime, clock: Clock, reads: list[str]
) -> None:
    secret = await make(rt, "dash")
    for _ in range(5):
        assert (await operations.authenticate(rt, secret)).name == "dash"
        clock.now += tokens.VERIFIED_FOR / 10
    assert len(reads) == 1
    clock.now += tokens.VERIFIED_FOR
    assert (await operations.authenticate(rt, secret)).name == "dash"
    assert len(reads) == 2  # past the bound: read again
    for _ in range(3):  # an unknown secret is read every time: nothing of it is kept
        with pytest.raises(Unauthenticated):
            await operations.authenticate(rt, "rl_" + "x" * 43)
    assert len(reads) == 5


async def test_revoked_elsewhere_is_refused_once_the_bound_has_passed(
    rt: Runtime, elsewhere: Runtime, clock: Clock
) -> None:
    secret = await make(rt, "ci")
    assert (await operations.authenticate(rt, secret)).name == "ci"
    assert await elsewhere.store.revoke_token("ci") is not None  # its memory is not ours
    clock.now += tokens.VERIFIED_FOR / 2
    # Within the bound this process may not have heard of it yet (the documented second); a
    # loaded machine may also let the cached entry lapse sooner, which is allowed: the bound is
    # an upper one. Past it, the refusal is certain.
    with contextlib.suppress(Unauthenticated):
        assert (await operations.authenticate(rt, secret)).name == "ci"
    clock.now += tokens.VERIFIED_FOR / 2
    with pytest.raises(Unauthenticated, match="not valid"):
        await operations.authenticate(rt, secret)
    with pytest.raises(Unauthenticated):
        await operations.authenticate(elsewhere, secret)


async def test_revoked_elsewhere_is_refused_within_a_second_of_real_time(
    rt: Runtime, elsewhere: Runtime
) -> None:
    secret = await make(rt, "ci")
    assert (await operations.authenticate(rt, secret)).name == "ci"
    assert await elsewhere.store.revoke_token("ci") is not None  # its memory is not ours
    revoked = time.monotonic()
    deadline = revoked + tokens.VERIFIED_FOR + 5.0  # the bound, and room for a slow machine
    while True:
        started = time.monotonic()
        try:
            await operations.authenticate(rt, secret)
        except Unauthenticated:
            break
        assert started - revoked < tokens.VERIFIED_FOR, "accepted past the bound"
        assert time.monotonic() < deadline, "a revoked token was never refused"


async def test_revoked_through_this_process_is_refused_at_once(
    rt: Runtime, elsewhere: Runtime, clock: Clock
) -> None:
    secret = await make(rt, "ci")
    assert (await operations.authenticate(rt, secret)).name == "ci"
    assert (await operations.authenticate(elsewhere, secret)).name == "ci"
    await operations.revoke_token(rt, "ci", requester=ROOT)
    for where in (rt, elsewhere):  # every store's memory of it, in this process
        with pytest.raises(Unauthenticated):
            await operations.authenticate(where, secret)


async def test_an_expired_secret_is_refused_from_its_expiry_on(rt: Runtime) -> None:
    """Remembered or not, a secret is never accepted after its expiry time (the wall clock,
    which is the database's on one host)."""
    secret = await make(rt, "brief", expires="2s")
    (info,) = [t for t in await operations.list_tokens(rt, requester=ROOT) if t.name == "brief"]
    assert info.expires_at is not None
    deadline = time.monotonic() + 2 + tokens.VERIFIED_FOR + 10.0
    accepted = 0
    while True:
        started = datetime.now(UTC)
        try:
            await operations.authenticate(rt, secret)
        except Unauthenticated:
            break
        accepted += 1
        assert started < info.expires_at, "accepted after its expiry"
        assert time.monotonic() < deadline, "an expired token was never refused"
    assert accepted > 0
