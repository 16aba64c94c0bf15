"""PostgreSQL's facts triggers on run_log fire only while facts are on (migration 0013): on the
database bus a run's state changes cost no trigger call, and `set_bus_facts` switches the
triggers with the flag, for any role, without waiting on run_log when nothing changes."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

from runlane.adapters.postgres import PostgresStore
from runlane.adapters.sql.migrations import load_migrations
from runlane.adapters.sql.queries import load_queries
from runlane.catalog import Catalog, load_catalog
from runlane.core.runs import EndReason, Outcome, RunStatus, Trigger
from runlane.service.accept import RunRequest, accept_run
from tests.support.postgres import scratch_database

pytestmark = pytest.mark.postgres

CATALOG = "version: 1\njobs:\n  hello: {command: [echo, hi], executor: inline}\n"


@pytest.fixture
def url() -> Iterator[str]:
    with scratch_database("runlane_facts") as made:
        yield made


@pytest.fixture
async def store(url: str) -> AsyncIterator[PostgresStore]:
    made = PostgresStore(url)  # the database bus's store: accepting writes no command row
    await made.open()
    await made.upgrade()
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    return load_catalog(tmp_path / "catalog.yaml")


def trigger_states(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT tgname, tgenabled FROM pg_trigger "
            "WHERE tgrelid = 'run_log'::regclass AND NOT tgisinternal"
        ).fetchall()
    return dict(rows)


def facts_flag(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT coalesce(bool_or(facts), false) FROM bus_config").fetchone()
    assert row is not None
    return bool(row[0])


async def one_run_to_the_end(store: PostgresStore, catalog: Catalog) -> str:
    """Accept, claim and finish a run: its three state changes."""
    run = (await accept_run(store, catalog, RunRequest(job="hello", trigger=Trigger.CLI))).run
    (claimed,) = await store.claim(
        "launcher-a", limit=1, lease_ttl=30.0, executors=["inline"], executor_caps={}
    )
    assert claimed.run.id == run.id
    await store.finish(claimed.lease, Outcome(RunStatus.SUCCESS, EndReason.EXIT, exit_code=0))
    return run.id


async def fact_topics(store: PostgresStore) -> list[str]:
    """Every unpublished row's topic, in order (a key's rows come one at a time), all marked
    sent."""
    topics: list[str] = []
    while leased := await store.outbox_lease("reader", limit=100, lease_seconds=30):
        await store.outbox_mark_sent([m.message_id for m in leased])
        topics += [m.topic for m in leased]
    return topics


OFF = {"run_log_fact_insert": "D", "run_log_fact_update": "D"}
ON = {"run_log_fact_insert": "O", "run_log_fact_update": "O"}


async def test_facts_are_written_only_while_on_and_the_triggers_follow_the_flag(
    store: PostgresStore, catalog: Catalog, url: str
) -> None:
    assert trigger_states(url) == OFF  # a new database is on the database bus
    await one_run_to_the_end(store, catalog)
    assert await fact_topics(store) == []

    await store.set_bus_facts(True)  # the RabbitMQ bus's launcher, as it starts
    assert (trigger_states(url), facts_flag(url)) == (ON, True)
    await one_run_to_the_end(store, catalog)
    assert await fact_topics(store) == [
        "event:run.hello.queued",
        "event:run.hello.running",
        "event:run.hello.success",
    ]

    await store.set_bus_facts(False)  # a launcher of the database bus, as it starts
    assert (trigger_states(url), facts_flag(url)) == (OFF, False)
    await one_run_to_the_end(store, catalog)
    assert await fact_topics(store) == []


async def test_setting_the_flag_it_already_has_does_not_wait_for_run_logs_writers(
    store: PostgresStore, catalog: Catalog, url: str
) -> None:
    """Every launcher sets the flag as it starts: when the triggers are already as asked, it
    must not take run_log's lock (which waits for a transaction writing runs)."""
    await store.set_bus_facts(True)
    with psycopg.connect(url) as writer:  # a run being written, not yet committed
        writer.execute("LOCK TABLE run_log IN ROW EXCLUSIVE MODE")  # what a writer holds
        await asyncio.wait_for(store.set_bus_facts(True), 5)
        assert trigger_states(url) == ON
        # Switching them does wait for it (and then goes through).
        switching = asyncio.create_task(store.set_bus_facts(False))
        done, _ = await asyncio.wait([switching], timeout=0.5)
        assert not done
        writer.rollback()
    await asyncio.wait_for(switching, 10)
    assert trigger_states(url) == OFF
    assert await fact_topics(store) == []
    await one_run_to_the_end(store, catalog)
    assert await fact_topics(store) == []


@pytest.fixture
def other_role(url: str) -> Iterator[str]:
    """A login role that may use run_log but does not own it (migrations ran as another)."""
    role = f"runlane_user_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO {}").format(
                sql.Identifier(role)
            )
        )
    parts = urlsplit(url)
    try:
        yield urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port or 5432}"))
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


async def test_a_role_that_does_not_own_run_log_switches_the_triggers_too(
    store: PostgresStore, url: str, other_role: str
) -> None:
    with (
        psycopg.connect(other_role, autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("ALTER TABLE run_log ENABLE TRIGGER run_log_fact_insert")
    as_user = PostgresStore(other_role)
    await as_user.open()
    try:
        await as_user.set_bus_facts(True)
        assert (trigger_states(url), facts_flag(url)) == (ON, True)
        await as_user.set_bus_facts(False)
        assert (trigger_states(url), facts_flag(url)) == (OFF, False)
    finally:
        await as_user.close()


async def test_an_upgrade_keeps_the_facts_a_database_had_on(url: str) -> None:
    """A database on the RabbitMQ bus before 0013 keeps its triggers firing; one on the
    database bus has them switched off."""
    migrations = load_migrations("runlane.adapters.postgres")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(load_queries("runlane.adapters.postgres")["bootstrap_migrations"].encode())
        for migration in migrations[:12]:
            conn.execute(migration.sql.encode())
            conn.execute(
                "INSERT INTO schema_migrations (version) VALUES (%s)", (migration.version,)
            )
        conn.execute("INSERT INTO bus_config (id, facts) VALUES (1, true)")
    store = PostgresStore(url)
    await store.open()
    try:
        assert await store.upgrade() == [m.version for m in migrations[12:]]
    finally:
        await store.close()
    assert (trigger_states(url), facts_flag(url)) == (ON, True)
