"""A PostgreSQL store with a bound (the launcher's RUNLANE_DB_TIMEOUT): its session and TCP
settings, what a lock wait, a slow statement and a silent server turn into, and the migrations
it leaves unbounded."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from runlane.adapters.postgres import PostgresStore
from runlane.errors import DatabaseConflict, DatabaseUnavailable
from tests.conformance.test_store_contract import claim_all, new_run
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import eventually

pytestmark = pytest.mark.postgres

BOUND = 1.0


@contextlib.asynccontextmanager
async def opened(url: str, bound: float | None = BOUND) -> AsyncIterator[PostgresStore]:
    store = PostgresStore(url, timeout=bound)
    await store.open()
    try:
        await store.upgrade()
        yield store
    finally:
        await store.close()


async def settings_of(store: PostgresStore) -> dict[str, str]:
    """The session settings and connection parameters a call of `store` runs with."""
    async with store._conn() as conn:
        cur = await conn.execute(
            "SELECT current_setting('statement_timeout'), current_setting('lock_timeout'),"
            " current_setting('TimeZone')"
        )
        row = await cur.fetchone()
        params = conn.info.get_parameters()
    assert row is not None
    return {"statement_timeout": row[0], "lock_timeout": row[1], "TimeZone": row[2], **params}


async def test_a_bounded_store_sets_its_bounds_and_keeps_those_the_url_sets(
    pg_scratch_url: str,
) -> None:
    async with opened(pg_scratch_url, bound=2.0) as store:
        bounded = await settings_of(store)
    assert (bounded["statement_timeout"], bounded["lock_timeout"]) == ("1s", "500ms")
    assert bounded["TimeZone"] == "UTC"
    assert (bounded["keepalives"], bounded["tcp_user_timeout"]) == ("1", "2000")
    assert bounded["connect_timeout"] == "2"

    own = make_conninfo(
        pg_scratch_url,
        options="-c statement_timeout=7s",
        tcp_user_timeout=9000,
        connect_timeout=4,
    )
    async with opened(own, bound=2.0) as store:
        kept = await settings_of(store)
    assert (kept["statement_timeout"], kept["lock_timeout"]) == ("7s", "500ms")
    assert (kept["tcp_user_timeout"], kept["connect_timeout"]) == ("9000", "4")

    # The CLI, the API and the SDK: the server's own settings, nothing added.
    async with opened(pg_scratch_url, bound=None) as store:
        plain = await settings_of(store)
    assert (plain["statement_timeout"], plain["lock_timeout"], plain["TimeZone"]) == (
        "0",
        "0",
        "UTC",
    )
    assert "tcp_user_timeout" not in plain


async def test_a_row_locked_past_the_lock_timeout_is_a_conflict_not_an_outage(
    pg_scratch_url: str,
) -> None:
    async with opened(pg_scratch_url) as store:
        await store.accept(new_run())
        [claimed] = await claim_all(store)
        with psycopg.connect(pg_scratch_url) as operator:  # BEGIN; a row lock, held
            operator.execute("SELECT 1 FROM run_log WHERE id = %s FOR UPDATE", (claimed.run.id,))
            began = time.monotonic()
            with pytest.raises(DatabaseConflict, match="lock timeout"):
                await store.renew([claimed.lease], 30.0)
            assert time.monotonic() - began < BOUND  # a quarter of it, and no hang-up
            operator.rollback()
        assert await store.renew([claimed.lease], 30.0) == {claimed.run.id}


async def test_a_statement_past_the_statement_timeout_is_unavailable_and_the_store_goes_on(
    pg_scratch_url: str,
) -> None:
    async with opened(pg_scratch_url) as store:
        with pytest.raises(
            DatabaseUnavailable, match=r"did not finish the statement: .*statement timeout"
        ):
            await store._fetchone("SELECT pg_sleep(5) AS slept", {})
        assert await store.count_queued() >= 0  # the same connection, cancelled cleanly


async def test_a_silent_server_fails_each_call_within_the_bound_then_is_used_again(
    pg_scratch_url: str,
) -> None:
    info = conninfo_to_dict(pg_scratch_url)
    proxy = TcpProxy(str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432))
    await proxy.start()
    try:
        async with opened(
            make_conninfo(pg_scratch_url, host="127.0.0.1", port=proxy.port)
        ) as store:
            proxy.black_hole()  # no error ever comes: the connections stay open, silent
            said = []
            for _ in range(2):  # the connection in hand, then the pool's wait for a new one
                began = time.monotonic()
                with pytest.raises(DatabaseUnavailable) as failed:
                    await store.count_queued()
                assert time.monotonic() - began < BOUND + 0.5
                said.append(str(failed.value))
            where = f"PostgreSQL at 127.0.0.1:{proxy.port}/{info['dbname']}"
            assert said[0] == f"{where} did not answer in 1 s"
            proxy.forward()

            async def answers() -> bool:  # the pool connects anew, after a backoff
                try:
                    await store.count_queued()
                except DatabaseUnavailable:
                    return False
                return True

            await eventually(answers, "the store back", poll=0.05)
    finally:
        await proxy.close()


async def test_migrations_are_not_bounded(pg_scratch_url: str) -> None:
    # A migration waits for a lock (another upgrade, a launcher's transaction) and may run long:
    # a launcher's store that upgrades (tests, the demo) neither gives up nor hangs up on it.
    async with opened(pg_scratch_url) as store:
        with psycopg.connect(pg_scratch_url) as other:  # holds the migration lock
            other.execute("SELECT pg_advisory_xact_lock(hashtext('runlane:migrate'))")
            upgrade = asyncio.create_task(store.upgrade())
            waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"

            def upgrade_waits() -> bool:
                with psycopg.connect(pg_scratch_url, autocommit=True) as probe:
                    row = probe.execute(waiting).fetchone()
                return row is not None and row[0] > 0

            await eventually(upgrade_waits, "the upgrade waiting on the migration lock", within=5)
            since = time.monotonic()
            # Past the lock timeout (a quarter of the bound) and the bound itself: still waiting.
            await eventually(
                lambda: time.monotonic() - since > BOUND + 0.5, "past the bound", within=BOUND + 2
            )
            assert not upgrade.done()
            other.rollback()
        assert await asyncio.wait_for(upgrade, 10) == []
