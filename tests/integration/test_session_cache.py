"""`sessions.session_requester` trusts a live session it read less than `VERIFIED_FOR` (1 s)
ago without reading its row again, on SQLite and PostgreSQL (as `authenticate` does for bearer
tokens): what it saves (one read per page), and the bounds it keeps (ended by another process:
refused within the second; logged out or its token revoked through this one: at once; an
unknown cookie is never kept)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable

import pytest

from runlane.core.access import Role
from runlane.core.records import WebSession
from runlane.errors import Unauthenticated
from runlane.ports import Store
from runlane.service import operations
from runlane.service.operations import Requester, sessions, tokens
from runlane.service.runtime import Runtime
from tests.integration.test_token_cache import Clock, clock, elsewhere

__all__ = ["clock", "elsewhere"]  # the fixtures (the moved clock, another process) shared

ROOT = Requester("root")  # the local CLI's requester: every right


@pytest.fixture
def reads(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The session ids `store.web_session` was asked for, in order."""
    asked: list[str] = []
    real: Callable[..., Awaitable[WebSession | None]] = store.web_session

    async def counting(session_id: str, *, idle: float) -> WebSession | None:
        asked.append(session_id)
        return await real(session_id, idle=idle)

    monkeypatch.setattr(store, "web_session", counting)
    return asked


async def logged_in(rt: Runtime, name: str) -> str:
    """The cookie secret of a new session of a new viewer token `name`. Each test names its
    own token: this process remembers the tokens it revoked, by name, across tests."""
    made = await operations.create_token(rt, name, role=Role.VIEWER, requester=ROOT)
    return (await sessions.open_session(rt, made.secret)).secret


async def test_a_live_session_is_not_read_again_within_the_bound(
    rt: Runtime, clock: Clock, reads: list[str]
) -> None:
    cookie = await logged_in(rt, "s-cached")
    reads.clear()  # the store's insert reads the session it made
    for _ in range(5):
        assert (await sessions.session_requester(rt, cookie)).name == "s-cached"
        clock.now += tokens.VERIFIED_FOR / 10
    assert len(reads) == 1
    clock.now += tokens.VERIFIED_FOR
    assert (await sessions.session_requester(rt, cookie)).name == "s-cached"
    assert len(reads) == 2  # past the bound: read again
    for _ in range(3):  # an unknown cookie is read every time: nothing of it is kept
        with pytest.raises(Unauthenticated):
            await sessions.session_requester(rt, "x" * 43)
    assert len(reads) == 5


async def test_logged_out_through_this_process_is_refused_at_once(
    rt: Runtime, clock: Clock
) -> None:
    cookie = await logged_in(rt, "s-logout")
    assert (await sessions.session_requester(rt, cookie)).name == "s-logout"
    assert await sessions.close_session(rt, cookie)
    with pytest.raises(Unauthenticated):
        await sessions.session_requester(rt, cookie)


async def test_its_token_revoked_through_this_process_is_refused_at_once(
    rt: Runtime, elsewhere: Runtime, clock: Clock
) -> None:
    cookie = await logged_in(rt, "s-revoked")
    assert (await sessions.session_requester(rt, cookie)).name == "s-revoked"
    assert (await sessions.session_requester(elsewhere, cookie)).name == "s-revoked"
    await operations.revoke_token(rt, "s-revoked", requester=ROOT)
    for where in (rt, elsewhere):  # every store's memory of it, in this process
        with pytest.raises(Unauthenticated):
            await sessions.session_requester(where, cookie)


async def test_logged_out_elsewhere_is_refused_once_the_bound_has_passed(
    rt: Runtime, elsewhere: Runtime, clock: Clock
) -> None:
    cookie = await logged_in(rt, "s-gone")
    assert (await sessions.session_requester(rt, cookie)).name == "s-gone"
    assert await elsewhere.store.delete_web_session(tokens.hash_secret(cookie))
    clock.now += tokens.VERIFIED_FOR / 2
    # Within the bound this process may not have heard of it yet (the documented second); a
    # loaded machine may let the entry lapse sooner, which the upper bound allows.
    with contextlib.suppress(Unauthenticated):
        assert (await sessions.session_requester(rt, cookie)).name == "s-gone"
    clock.now += tokens.VERIFIED_FOR / 2
    with pytest.raises(Unauthenticated, match="session has ended"):
        await sessions.session_requester(rt, cookie)


async def test_its_token_revoked_elsewhere_is_refused_within_a_second_of_real_time(
    rt: Runtime, elsewhere: Runtime
) -> None:
    cookie = await logged_in(rt, "s-revoked-real")
    assert (await sessions.session_requester(rt, cookie)).name == "s-revoked-real"
    assert (
        await elsewhere.store.revoke_token("s-revoked-real") is not None
    )  # its memory is not ours
    revoked = time.monotonic()
    deadline = revoked + tokens.VERIFIED_FOR + 5.0  # the bound, and room for a slow machine
    while True:
        started = time.monotonic()
        try:
            await sessions.session_requester(rt, cookie)
        except Unauthenticated:
            break
        assert started - revoked < tokens.VERIFIED_FOR, "accepted past the bound"
        assert time.monotonic() < deadline, "a session of a revoked token was never refused"
