"""The Store contract for access control (API tokens, the audit log, idempotency keys) on SQLite
and PostgreSQL."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from runlane.core.access import Role
from runlane.errors import TokenExists
from runlane.ports import AuditEntry, Store, TokenRecord
from runlane.testing.clock import FixedClock

if TYPE_CHECKING:
    from conftest import StoreHarness

T0 = datetime(2031, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
DAY = 86400.0
HOUR = 3600.0


def token(
    name: str, *, expires_at: datetime | None = None, jobs: tuple[str, ...] = ()
) -> TokenRecord:
    return TokenRecord(
        name=name,
        role=Role.OPERATOR,
        secret_hash=hashlib.sha256(name.encode()).hexdigest(),
        prefix=f"rl_{name[:4]}",
        jobs=jobs,
        created_by="alice",
        expires_at=expires_at,
    )


async def clocked(h: StoreHarness) -> tuple[Store, FixedClock]:
    clock = FixedClock(T0)
    return await h.make_store(clock=clock), clock


async def test_a_token_is_stored_and_found_by_its_hash_only(h_clean: StoreHarness) -> None:
    store, _ = await clocked(h_clean)
    created = await store.create_token(token("ci", jobs=("etl.*", "report")))
    assert created.created_at == T0
    assert created.jobs == ("etl.*", "report")
    assert created.role is Role.OPERATOR
    found = await store.token_by_hash(hashlib.sha256(b"ci").hexdigest())
    assert found == created
    assert await store.token_by_hash(hashlib.sha256(b"other").hexdigest()) is None
    assert [t.name for t in await store.tokens()] == ["ci"]


async def test_a_token_name_is_taken_for_good(h_clean: StoreHarness) -> None:
    store = h_clean.store
    await store.create_token(token("ci"))
    await store.revoke_token("ci")
    with pytest.raises(TokenExists, match="'ci'"):
        await store.create_token(token("ci"))
    assert len(await store.tokens()) == 1


async def test_revoked_and_expired_tokens_do_not_authenticate(h_clean: StoreHarness) -> None:
    store, clock = await clocked(h_clean)
    await store.create_token(token("soon", expires_at=T0 + timedelta(hours=1)))
    await store.create_token(token("gone"))
    revoked = await store.revoke_token("gone")
    assert revoked is not None
    assert revoked.revoked_at == T0
    clock.advance(60)
    again = await store.revoke_token("gone")
    assert again is not None
    assert again.revoked_at == T0
    assert await store.revoke_token("nobody") is None
    assert await store.token_by_hash(hashlib.sha256(b"gone").hexdigest()) is None
    assert await store.token_by_hash(hashlib.sha256(b"soon").hexdigest()) is not None
    clock.advance(3600)
    assert await store.token_by_hash(hashlib.sha256(b"soon").hexdigest()) is None
    assert {t.name for t in await store.tokens()} == {"soon", "gone"}  # still listed


async def test_touch_writes_last_used_at_at_most_once_a_minute(h_clean: StoreHarness) -> None:
    store, clock = await clocked(h_clean)
    await store.create_token(token("ci"))
    await store.touch_token("ci")
    clock.advance(30)
    await store.touch_token("ci")
    (first,) = await store.tokens()
    assert first.last_used_at == T0
    clock.advance(31)
    await store.touch_token("ci")
    (second,) = await store.tokens()
    assert second.last_used_at == T0 + timedelta(seconds=61)


async def test_the_audit_log_pages_newest_first(h_clean: StoreHarness) -> None:
    store, clock = await clocked(h_clean)
    stored = []
    for n in range(5):
        entry = AuditEntry(
            action="run_job", outcome="ok", actor="ci", target=f"job{n}", remote="10.0.0.1"
        )
        stored.append(await store.record_audit(entry))
        clock.advance(1)
    assert stored[0].at == T0
    assert stored[0].remote == "10.0.0.1"
    ids = [e.id for e in stored]
    assert ids == sorted(ids)
    assert len(set(ids)) == 5
    page = await store.audit(limit=2)
    assert [e.target for e in page] == ["job4", "job3"]
    rest = await store.audit(limit=10, before=page[-1].id)
    assert [e.target for e in rest] == ["job2", "job1", "job0"]


async def test_an_idempotency_key_is_reserved_once(h_clean: StoreHarness) -> None:
    store, clock = await clocked(h_clean)
    assert (
        await store.reserve_key("ci", "k1", "fp-a", reservation="r", ttl=DAY, abandoned=HOUR)
        is None
    )
    held = await store.reserve_key("ci", "k1", "fp-b", reservation="r", ttl=DAY, abandoned=HOUR)
    assert held is not None
    assert held.fingerprint == "fp-a"
    assert held.status is None
    assert (
        await store.reserve_key("other", "k1", "fp-b", reservation="r", ttl=DAY, abandoned=HOUR)
        is None
    )  # per owner
    assert await store.complete_key("ci", "k1", 201, '{"id": "x"}', reservation="r")
    done = await store.reserve_key("ci", "k1", "fp-a", reservation="r", ttl=DAY, abandoned=HOUR)
    assert done is not None
    assert done.status == 201
    assert done.body is not None
    assert done.body.replace(" ", "") == '{"id":"x"}'
    assert not await store.release_key("ci", "k1", reservation="r")  # a completed key is kept
    assert (
        await store.reserve_key("ci", "k1", "fp-a", reservation="r", ttl=DAY, abandoned=HOUR)
        is not None
    )
    clock.advance(86401)
    assert (
        await store.reserve_key("ci", "k1", "fp-c", reservation="r", ttl=DAY, abandoned=HOUR)
        is None
    )  # stale: taken over
    fresh = await store.reserve_key("ci", "k1", "fp-a", reservation="r", ttl=DAY, abandoned=HOUR)
    assert fresh is not None
    assert fresh.fingerprint == "fp-c"
    assert fresh.status is None


async def test_a_reservation_left_in_flight_is_taken_over(h_clean: StoreHarness) -> None:
    store, clock = await clocked(h_clean)
    assert (
        await store.reserve_key("ci", "lost", "fp-a", reservation="r", ttl=DAY, abandoned=HOUR)
        is None
    )
    assert (
        await store.reserve_key("ci", "done", "fp-a", reservation="r", ttl=DAY, abandoned=HOUR)
        is None
    )
    assert await store.complete_key("ci", "done", 201, "{}", reservation="r")
    clock.advance(HOUR - 1)
    assert (
        await store.reserve_key("ci", "lost", "fp-b", reservation="r", ttl=DAY, abandoned=HOUR)
        is not None
    )
    clock.advance(2)
    assert (
        await store.reserve_key("ci", "lost", "fp-b", reservation="r", ttl=DAY, abandoned=HOUR)
        is None
    )
    done = await store.reserve_key("ci", "done", "fp-a", reservation="r", ttl=DAY, abandoned=HOUR)
    assert done is not None  # a completed key is kept for the whole ttl
    assert done.status == 201


async def test_only_the_request_holding_a_reservation_completes_or_releases_it(
    h_clean: StoreHarness,
) -> None:
    """A request slower than the takeover window (`abandoned`) finds its key taken over by a
    retry: its answer must not overwrite the retry's reservation, nor its failure delete it
    (a third request would then run while the retry still does)."""
    store, clock = await clocked(h_clean)
    assert (
        await store.reserve_key("ci", "k", "fp", reservation="slow", ttl=DAY, abandoned=HOUR)
        is None
    )
    clock.advance(HOUR + 1)
    assert (
        await store.reserve_key("ci", "k", "fp", reservation="retry", ttl=DAY, abandoned=HOUR)
        is None
    )
    # The slow request fails now: the retry's reservation stays in flight.
    assert not await store.release_key("ci", "k", reservation="slow")
    held = await store.reserve_key("ci", "k", "fp", reservation="third", ttl=DAY, abandoned=HOUR)
    assert held is not None
    assert held.status is None
    # Or it succeeds now: its answer is not kept over the retry's reservation.
    assert not await store.complete_key("ci", "k", 201, '{"by": "slow"}', reservation="slow")
    held = await store.reserve_key("ci", "k", "fp", reservation="third", ttl=DAY, abandoned=HOUR)
    assert held is not None
    assert held.status is None
    assert await store.complete_key("ci", "k", 201, '{"by": "retry"}', reservation="retry")
    done = await store.reserve_key("ci", "k", "fp", reservation="third", ttl=DAY, abandoned=HOUR)
    assert done is not None
    assert done.body is not None
    assert done.body.replace(" ", "") == '{"by":"retry"}'


async def test_a_released_key_may_be_reserved_again(h_clean: StoreHarness) -> None:
    store = h_clean.store
    assert (
        await store.reserve_key("ci", "k1", "fp", reservation="r", ttl=DAY, abandoned=HOUR) is None
    )
    assert await store.release_key("ci", "k1", reservation="r")
    assert (
        await store.reserve_key("ci", "k1", "fp", reservation="r", ttl=DAY, abandoned=HOUR) is None
    )


async def test_concurrent_reservations_have_one_winner(h_clean: StoreHarness) -> None:
    other = await h_clean.make_store()
    stores = [h_clean.store, other] * 4
    results = await asyncio.gather(
        *(
            s.reserve_key("ci", "race", "fp", reservation="r", ttl=DAY, abandoned=HOUR)
            for s in stores
        )
    )
    assert sum(r is None for r in results) == 1


async def test_prune_deletes_old_keys_only(h_clean: StoreHarness) -> None:
    store, clock = await clocked(h_clean)
    await store.reserve_key("ci", "old", "fp", reservation="r", ttl=DAY, abandoned=HOUR)
    clock.advance(7200)
    await store.reserve_key("ci", "new", "fp", reservation="r", ttl=DAY, abandoned=HOUR)
    assert await store.prune_keys(3600) == 1
    assert (
        await store.reserve_key("ci", "new", "fp", reservation="r", ttl=DAY, abandoned=HOUR)
        is not None
    )
    assert (
        await store.reserve_key("ci", "old", "fp", reservation="r", ttl=DAY, abandoned=HOUR) is None
    )


@pytest.fixture
async def h_clean(harness: StoreHarness) -> StoreHarness:
    for table in ("api_tokens", "audit_log", "idempotency_keys"):
        harness.query(f"DELETE FROM {table}", {})
    return harness
