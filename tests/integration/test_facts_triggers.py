"""PostgreSQL's facts triggers on run_log fire only while facts are on (migration 0013): on the
database bus a run's state changes cost no trigger call. `set_bus_facts` switches the triggers
with the flag in one transaction: for a role that does not own run_log, in the order the flag
was written when two launchers disagree, without waiting on run_log when nothing changes, and
never fooled by a caller's temporary tables."""

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
from tests.support.waiting import eventually

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


def waiting_for_run_log(url: str) -> int:
    """How many sessions wait for a lock on run_log."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'run_log'::regclass"
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_setting_the_flag_it_already_has_does_not_wait_for_run_logs_writers(
    store: PostgresStore, catalog: Catalog, url: str
) -> None:
    """Every launcher sets the flag as it starts: when the triggers are already as asked, it
    must not take run_log's lock (which waits for a transaction writing runs)."""
    await store.set_bus_facts(True)
    with psycopg.connect(url) as writer:  # a transaction writing runs, not yet committed
        writer.execute("LOCK TABLE run_log IN ROW EXCLUSIVE MODE")
        await asyncio.wait_for(store.set_bus_facts(True), 5)
        assert trigger_states(url) == ON
        # Switching them does wait for it, then goes through.
        switching = asyncio.create_task(store.set_bus_facts(False))
        await eventually(lambda: waiting_for_run_log(url) == 1, "the switch waits for run_log")
        assert not switching.done()
        writer.rollback()
    await asyncio.wait_for(switching, 10)
    assert trigger_states(url) == OFF
    await one_run_to_the_end(store, catalog)
    assert await fact_topics(store) == []


async def test_two_launchers_that_disagree_leave_the_triggers_as_the_flag_says(
    store: PostgresStore, url: str
) -> None:
    """One launcher turns facts off while another turns them on: whichever writes the flag last,
    the triggers end as the flag says (a flag left on with its triggers off would lose every
    fact without a word)."""
    await store.set_bus_facts(True)
    with psycopg.connect(url) as first:  # facts off, switched, not yet committed
        first.execute("UPDATE bus_config SET facts = false WHERE id = 1")
        first.execute("SELECT runlane_sync_facts_triggers()")
        second = asyncio.create_task(store.set_bus_facts(True))  # waits for the flag's row

        def second_waits() -> bool:
            with psycopg.connect(url) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'"
                ).fetchone()
            return row is not None and row[0] >= 1

        await eventually(second_waits, "the second launcher waits for the first's flag")
        first.commit()
    await asyncio.wait_for(second, 10)
    assert (trigger_states(url), facts_flag(url)) == (ON, True)


def login_role(url: str, grant: bool) -> Iterator[str]:
    """A login role that does not own run_log (migrations ran as another), allowed to write
    runlane's tables (`grant`) or nothing at all; its URL."""
    role = f"runlane_user_{secrets.token_hex(4)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        if grant:
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


@pytest.fixture
def other_role(url: str) -> Iterator[str]:
    yield from login_role(url, grant=True)


@pytest.fixture
def stranger(url: str) -> Iterator[str]:
    yield from login_role(url, grant=False)


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


async def test_a_callers_temporary_tables_do_not_stand_in_for_runlanes(
    store: PostgresStore, url: str, stranger: str
) -> None:
    """The switch runs with run_log owner's rights: a role with no rights on runlane's tables
    may call it, and it only ever matches the real triggers to the real flag, whatever
    temporary tables the caller made under the same names."""
    with psycopg.connect(stranger, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE bus_config (id int PRIMARY KEY, facts boolean)")
        conn.execute("INSERT INTO bus_config VALUES (1, true)")
        conn.execute("CREATE TEMP TABLE run_log (id int)")
        conn.execute("SELECT runlane_sync_facts_triggers()")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO public.bus_config (id, facts) VALUES (1, true)")
    assert (trigger_states(url), facts_flag(url)) == (OFF, False)
    await store.set_bus_facts(True)
    with psycopg.connect(stranger, autocommit=True) as conn:
        conn.execute("CREATE TEMP TABLE bus_config (id int PRIMARY KEY, facts boolean)")
        conn.execute("INSERT INTO bus_config VALUES (1, false)")
        conn.execute("SELECT runlane_sync_facts_triggers()")
    assert (trigger_states(url), facts_flag(url)) == (ON, True)


async def test_an_upgrade_keeps_the_facts_a_database_had_on(url: str) -> None:
    """A database on the RabbitMQ bus before 0013 keeps its triggers firing (one on the
    database bus has them off: test_migrations.py compares an upgraded database with a new
    one, triggers' states included)."""
    migrations = load_migrations("runlane.adapters.postgres")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(load_queries("runlane.adapters.postgres")["bootstrap_migrations"].encode())
        for migration in [m for m in migrations if m.version < 13]:
            conn.execute(migration.sql.encode())
            conn.execute(
                "INSERT INTO schema_migrations (version) VALUES (%s)", (migration.version,)
            )
        conn.execute("INSERT INTO bus_config (id, facts) VALUES (1, true)")
    store = PostgresStore(url)
    await store.open()
    try:
        assert await store.upgrade() == [m.version for m in migrations if m.version >= 13]
    finally:
        await store.close()
    assert (trigger_states(url), facts_flag(url)) == (ON, True)
