"""Times read from PostgreSQL are UTC instants whatever zone the server or database defaults to.

The store runs its sessions in UTC (psycopg then hands back datetime.UTC itself, which the row
reader keeps without converting): a database whose default zone is far from UTC must not shift
any instant, nor leak its zone into what the store returns.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from runlane.adapters.postgres import PostgresStore
from runlane.core.runs import NewRun, Trigger

pytestmark = pytest.mark.postgres

ZONE = "Asia/Kathmandu"  # +05:45: no whole-hour mistake can hide


@pytest.fixture
def far_zone_url(pg_scratch_url: str) -> Iterator[str]:
    """A database of its own whose default time zone is ZONE."""
    base = pg_scratch_url
    name = f"runlane_tz_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        admin.execute(
            sql.SQL("ALTER DATABASE {} SET timezone TO {}").format(
                sql.Identifier(name), sql.Literal(ZONE)
            )
        )
    try:
        yield make_conninfo(base, dbname=name)
    finally:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


async def test_times_come_back_as_utc_instants_on_a_database_in_another_zone(
    far_zone_url: str,
) -> None:
    with psycopg.connect(far_zone_url) as conn:  # the database's own default, as configured
        shown = conn.execute("SHOW TimeZone").fetchone()
    assert shown is not None
    assert shown[0] == ZONE

    store = PostgresStore(far_zone_url)
    await store.open()
    try:
        await store.upgrade()
        kathmandu = timezone(timedelta(hours=5, minutes=45))
        scheduled = datetime(2026, 3, 1, 9, 30, tzinfo=kathmandu)  # 03:45 UTC
        new = NewRun(
            id=str(uuid.uuid4()),
            job="tz",
            trigger=Trigger.SCHEDULE,
            dedupe_key=f"tz:{uuid.uuid4()}",
            executor="inline",
            overlap="allow",
            scheduled_for=scheduled,
        )
        await store.accept(new)
        before = datetime.now(UTC)
        [claimed] = await store.claim(
            "tz-test", limit=1, lease_ttl=30, executors=["inline"], executor_caps={}
        )
        after = datetime.now(UTC)
        run = claimed.run
        times = {
            "scheduled_for": run.scheduled_for,
            "queued_at": run.queued_at,
            "started_at": run.started_at,
            "deadline_at": run.deadline_at,
            "lease_expires_at": run.lease_expires_at,
            "db_now": claimed.db_now,
        }
        for name, value in times.items():
            assert value is not None, name
            assert value.tzinfo is UTC, f"{name} came back in {value.tzinfo!r}"
        assert run.scheduled_for == scheduled
        assert run.scheduled_for.hour == 3
        assert run.scheduled_for.minute == 45
        slack = timedelta(seconds=5)  # the database's clock against this process's
        assert before - slack <= claimed.db_now <= after + slack
        assert run.started_at is not None
        assert abs(run.started_at - claimed.db_now) < slack
        assert (await store.get_run(new.id)).scheduled_for == scheduled
    finally:
        await store.close()
