"""`sessions.token_login_link` (what `runlane token login-link` calls), on SQLite and
PostgreSQL: a link for an existing live token or for a new one made with it, each redeemed
once; every refusal (unknown, revoked, expired, a taken name, flags of a new token without a
role, a role below admin) leaves no token and no code behind."""

from __future__ import annotations

import pytest

from runlane.core.access import Access, Role
from runlane.errors import Forbidden, InvalidArgument, TokenExists, TokenNotLive, UnknownToken
from runlane.service import operations
from runlane.service.operations import Requester, sessions
from runlane.service.runtime import Runtime

ROOT = Requester("root")  # the local CLI's requester: every right


async def test_a_link_for_an_existing_token_and_for_a_new_one(rt: Runtime) -> None:
    await operations.create_token(rt, "me", role=Role.VIEWER, requester=ROOT)
    mine = await sessions.token_login_link(rt, "me", requester=ROOT)
    new = await sessions.token_login_link(
        rt, "ops", requester=ROOT, role="operator", jobs=["etl.*"], expires="1d"
    )
    assert (mine.created, mine.token.name, mine.token.role) == (False, "me", Role.VIEWER)
    assert (new.created, new.token.role, new.token.jobs) == (True, Role.OPERATOR, ("etl.*",))
    assert new.token.expires_at is not None
    assert mine.link.ttl_seconds == sessions.LOGIN_CODE_TTL
    for made in (mine, new):
        opened = await sessions.open_session_with_code(rt, made.link.code)
        assert opened.requester.name == made.token.name
        assert opened.requester.access.role == made.token.role
        with pytest.raises(Exception, match="not valid"):  # once only
            await sessions.open_session_with_code(rt, made.link.code)


async def test_every_refusal_leaves_nothing_behind(rt: Runtime) -> None:
    await operations.create_token(rt, "gone", role=Role.VIEWER, requester=ROOT)
    await operations.revoke_token(rt, "gone", requester=ROOT)
    await operations.create_token(rt, "brief", role=Role.VIEWER, expires="2s", requester=ROOT)
    viewer = Requester("v", access=Access(Role.OPERATOR))
    with pytest.raises(UnknownToken, match="no token is named 'nobody'"):
        await sessions.token_login_link(rt, "nobody", requester=ROOT)
    with pytest.raises(TokenNotLive, match="'gone' is revoked"):
        await sessions.token_login_link(rt, "gone", requester=ROOT)
    with pytest.raises(TokenExists):
        await sessions.token_login_link(rt, "gone", requester=ROOT, role="viewer")
    with pytest.raises(InvalidArgument, match="give --role too"):
        await sessions.token_login_link(rt, "x", requester=ROOT, jobs=["a*"])
    with pytest.raises(InvalidArgument, match="token name"):
        await sessions.token_login_link(rt, "bad name", requester=ROOT, role="viewer")
    with pytest.raises(InvalidArgument, match="--role 'god'"):
        await sessions.token_login_link(rt, "x", requester=ROOT, role="god")
    with pytest.raises(Forbidden):
        await sessions.token_login_link(rt, "brief", requester=viewer)
    names = sorted(t.name for t in await operations.list_tokens(rt, requester=ROOT))
    assert names == ["brief", "gone"]


async def test_an_expired_token_gets_no_link(rt: Runtime) -> None:
    await operations.create_token(rt, "brief", role=Role.VIEWER, expires="1s", requester=ROOT)
    info = next(t for t in await operations.list_tokens(rt, requester=ROOT) if t.name == "brief")
    assert info.expires_at is not None
    first = await rt.store.now()
    while True:  # the database's clock decides: a link until its expiry, none from then on
        asked_at = await rt.store.now()
        try:
            await sessions.token_login_link(rt, "brief", requester=ROOT)
        except TokenNotLive:
            break
        assert asked_at <= info.expires_at, "a link for a token past its expiry"
        assert (asked_at - first).total_seconds() < 30, "an expired token kept getting links"
    with pytest.raises(TokenNotLive, match="'brief' has expired"):
        await sessions.token_login_link(rt, "brief", requester=ROOT)
