"""The Store contract for the web UI (sessions, one-time login codes, the latest run of each
job) on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest

from runlane.core.access import Role
from runlane.core.runs import NewRun, Trigger
from runlane.ports import Store, TokenRecord
from runlane.testing.clock import FixedClock

if TYPE_CHECKING:
    from conftest import StoreHarness

T0 = datetime(2031, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)
HOUR = 3600.0
DAY = 24 * HOUR


def token(name: str, *, expires_at: datetime | None = None) -> TokenRecord:
    return TokenRecord(
        name=name,
        role=Role.OPERATOR,
        secret_hash=hashlib.sha256(name.encode()).hexdigest(),
        prefix=f"rl_{name[:4]}",
        jobs=("etl.*",),
        expires_at=expires_at,
    )


async def clocked(h: StoreHarness) -> tuple[Store, FixedClock]:
    clock = FixedClock(T0)
    return await h.make_store(clock=clock), clock


async def test_a_session_carries_its_live_token(h_clean: StoreHarness) -> None:
    store, _ = await clocked(h_clean)
    await store.create_token(token("alice"))
    made = await store.create_web_session("s1", "alice", lifetime=DAY)
    assert made is not None
    assert (made.created_at, made.last_seen_at, made.expires_at) == (T0, T0, T0 + timedelta(days=1))
    assert made.token.name == "alice"
    assert made.token.role is Role.OPERATOR
    assert made.token.jobs == ("etl.*",)
    assert await store.web_session("s1", idle=HOUR) == made
    assert await store.web_session("other", idle=HOUR) is None


async def test_a_session_ends_idle_absolute_and_with_its_token(h_clean: StoreHarness) -> None:
    store, clock = await clocked(h_clean)
    await store.create_token(token("alice"))
    await store.create_token(token("bob", expires_at=T0 + timedelta(hours=5)))
    await store.create_web_session("idle", "alice", lifetime=DAY)
    await store.create_web_session("busy", "alice", lifetime=4 * HOUR)
    await store.create_web_session("bob", "bob", lifetime=DAY)
    for _ in range(4):  # the busy session is seen every 50 minutes; the idle one never
        clock.advance(50 * 60)
        await store.touch_web_session("busy")
    assert await store.web_session("idle", idle=HOUR) is None  # idle for 3h20
    busy = await store.web_session("busy", idle=HOUR)
    assert busy is not None
    assert busy.last_seen_at == T0 + timedelta(minutes=200)
    clock.advance(HOUR)  # 4h20 in: past the busy one's absolute end (4h)
    assert await store.web_session("busy", idle=DAY) is None
    assert await store.web_session("bob", idle=DAY) is not None
    clock.advance(HOUR)  # bob's token has expired
    assert await store.web_session("bob", idle=DAY) is None
    await store.create_token(token("carol"))
    await store.create_web_session("carol", "carol", lifetime=DAY)
    await store.revoke_token("carol")
    assert await store.web_session("carol", idle=DAY) is None
    assert await store.create_web_session("again", "carol", lifetime=DAY) is None


async def test_touch_writes_at_most_once_a_minute(h_clean: StoreHarness) -> None:
    store, clock = await clocked(h_clean)
    await store.create_token(token("alice"))
    await store.create_web_session("s", "alice", lifetime=DAY)
    clock.advance(30)
    await store.touch_web_session("s", every=60)
    seen = await store.web_session("s", idle=HOUR)
    assert seen is not None
    assert seen.last_seen_at == T0


async def test_logout_deletes_and_prune_removes_what_ended(h_clean: StoreHarness) -> None:
    store, clock = await clocked(h_clean)
    await store.create_token(token("alice"))
    await store.create_web_session("out", "alice", lifetime=DAY)
    await store.create_web_session("old", "alice", lifetime=DAY)
    await store.create_login_code("code", "alice", ttl=60)
    assert await store.delete_web_session("out")
    assert not await store.delete_web_session("out")
    clock.advance(2 * HOUR)
    await store.create_web_session("new", "alice", lifetime=DAY)
    assert await store.prune_web_sessions(idle=HOUR) == 2  # "old" (idle) and the code
    assert await store.web_session("new", idle=HOUR) is not None
    rows = h_clean.query("SELECT id FROM web_sessions", {})
    assert [r[0] for r in rows] == ["new"]


async def test_a_login_code_works_once_and_expires(h_clean: StoreHarness) -> None:
    store, clock = await clocked(h_clean)
    await store.create_token(token("admin"))
    await store.create_login_code("once", "admin", ttl=15 * 60)
    await store.create_login_code("late", "admin", ttl=15 * 60)
    assert await store.redeem_login_code("once") == "admin"
    assert await store.redeem_login_code("once") is None
    assert await store.redeem_login_code("unknown") is None
    clock.advance(15 * 60)
    assert await store.redeem_login_code("late") is None


async def test_concurrent_redemptions_have_one_winner(h_clean: StoreHarness) -> None:
    await h_clean.store.create_token(token("admin"))
    await h_clean.store.create_login_code("race", "admin", ttl=600)
    stores = [await h_clean.make_store() for _ in range(4)]
    got = await asyncio.gather(*(s.redeem_login_code("race") for s in stores))
    assert sorted(got, key=str) == [None, None, None, "admin"]


async def test_count_tokens_counts_revoked_ones(h_clean: StoreHarness) -> None:
    store = h_clean.store
    assert await store.count_tokens() == 0
    await store.create_token(token("a"))
    await store.revoke_token("a")
    assert await store.count_tokens() == 1


async def test_latest_runs_gives_the_newest_run_of_each_job(h_clean: StoreHarness) -> None:
    store, clock = await clocked(h_clean)
    newest = {}
    for i in range(9):
        job = f"job{i % 3}"
        accepted = await store.accept(
            NewRun(
                id=str(uuid.uuid4()),
                job=job,
                trigger=Trigger.MANUAL,
                dedupe_key=str(uuid.uuid4()),
                executor="inline",
                overlap="allow",
            )
        )
        newest[job] = accepted.run.id
        clock.advance(1)
    found = await store.latest_runs(["job0", "job2", "nothing"])
    assert {job: run.id for job, run in found.items()} == {
        "job0": newest["job0"],
        "job2": newest["job2"],
    }
    assert await store.latest_runs([]) == {}


@pytest.fixture
async def h_clean(harness: StoreHarness) -> StoreHarness:
    for table in ("web_sessions", "web_login_codes", "api_tokens", "run_log", "outbox"):
        harness.query(f"DELETE FROM {table}", {})
    return harness
