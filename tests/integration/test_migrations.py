"""Migrating an empty database gives exactly the reference schema (sql/schema.sql), per dialect."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from runlane.adapters.postgres import CURRENT_SCHEMA_VERSION as PG_VERSION
from runlane.adapters.postgres import PostgresStore
from runlane.adapters.sql.migrations import load_migrations, load_reference_schema
from runlane.adapters.sql.queries import load_queries
from runlane.adapters.sqlite import CURRENT_SCHEMA_VERSION as SQLITE_VERSION
from runlane.adapters.sqlite import SqliteStore
from runlane.errors import SchemaOutOfDate
from tests.support.waiting import eventually

PG_URL = os.environ.get("RUNLANE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _normalise(text: str | None) -> str:
    return re.sub(r"\s+", " ", text or "").strip()


# --- SQLite ---------------------------------------------------------------------------------


def sqlite_schema(path: Path) -> dict[str, object]:
    conn = sqlite3.connect(path)
    try:
        schema: dict[str, object] = {}
        objects = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master "
            "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
        ).fetchall()
        for kind, name, table, text in objects:
            entry: dict[str, object] = {"table": table, "sql": _normalise(text)}
            if kind == "table":
                entry["columns"] = conn.execute(f"PRAGMA table_info({name})").fetchall()
                entry["indexes"] = sorted(conn.execute(f"PRAGMA index_list({name})").fetchall())
            else:
                entry["columns"] = conn.execute(f"PRAGMA index_xinfo({name})").fetchall()
            schema[f"{kind}:{name}"] = entry
        return schema
    finally:
        conn.close()


async def test_sqlite_migrations_match_the_reference_schema(tmp_path: Path) -> None:
    migrated = tmp_path / "migrated.db"
    store = SqliteStore(str(migrated))
    await store.open()
    try:
        assert await store.schema_version() == 0
        with pytest.raises(SchemaOutOfDate, match="run `runlane db upgrade`"):
            await store.ensure_current()
        assert await store.upgrade() == list(range(1, SQLITE_VERSION + 1))
        first = sqlite_schema(migrated)
        assert await store.upgrade() == []  # idempotent
        assert sqlite_schema(migrated) == first
        assert await store.schema_version() == SQLITE_VERSION
        await store.ensure_current()
    finally:
        await store.close()

    reference = tmp_path / "reference.db"
    conn = sqlite3.connect(reference)
    try:
        conn.executescript(load_reference_schema("runlane.adapters.sqlite"))
    finally:
        conn.close()
    assert sqlite_schema(reference) == first
    assert "table:run_log" in first


async def test_sqlite_newer_database_is_refused(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "newer.db"))
    await store.open()
    try:
        await store.upgrade()
        conn = sqlite3.connect(tmp_path / "newer.db")
        conn.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (999, 'x')")
        conn.commit()
        conn.close()
        with pytest.raises(SchemaOutOfDate, match="newer runlane"):
            await store.ensure_current()
    finally:
        await store.close()


# --- PostgreSQL -----------------------------------------------------------------------------


@pytest.fixture
def pg_scratch() -> Iterator[list[str]]:
    """Creates scratch databases on demand (call `make()`); drops them all afterwards."""
    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        message = f"PostgreSQL at {PG_URL} is unreachable: {str(exc).strip().splitlines()[0]}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    names: list[str] = []
    urls: list[str] = []
    with admin:
        for _ in range(2):
            name = f"runlane_test_{secrets.token_hex(4)}"
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            names.append(name)
            urls.append(make_conninfo(PG_URL, dbname=name))
        try:
            yield urls
        finally:
            for name in names:
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )


def pg_schema(url: str) -> dict[str, object]:
    with psycopg.connect(url) as conn:
        columns = conn.execute(
            "SELECT table_name, ordinal_position, column_name, data_type, is_nullable, "
            "column_default, is_identity FROM information_schema.columns "
            "WHERE table_schema = 'public' ORDER BY table_name, ordinal_position"
        ).fetchall()
        indexes = conn.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes "
            "WHERE schemaname = 'public' ORDER BY tablename, indexname"
        ).fetchall()
        constraints = conn.execute(
            "SELECT c.conrelid::regclass::text, c.conname, pg_get_constraintdef(c.oid) "
            "FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace "
            "WHERE n.nspname = 'public' ORDER BY 1, 2"
        ).fetchall()
        # Triggers with whether they fire (0013 switches the facts ones with bus_config.facts),
        # and the functions with how they run (SECURITY DEFINER, their settings).
        triggers = conn.execute(
            "SELECT t.tgrelid::regclass::text, t.tgname, t.tgenabled, pg_get_triggerdef(t.oid) "
            "FROM pg_trigger t WHERE NOT t.tgisinternal ORDER BY 1, 2"
        ).fetchall()
        functions = conn.execute(
            "SELECT p.proname, p.prosecdef, p.proconfig, pg_get_function_arguments(p.oid) "
            "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = 'public' ORDER BY 1"
        ).fetchall()
    return {
        "columns": columns,
        "indexes": indexes,
        "constraints": constraints,
        "triggers": triggers,
        "functions": functions,
    }


@pytest.mark.postgres
async def test_postgres_migrations_match_the_reference_schema(pg_scratch: list[str]) -> None:
    migrated_url, reference_url = pg_scratch
    store = PostgresStore(migrated_url)
    await store.open()
    try:
        assert await store.schema_version() == 0
        with pytest.raises(SchemaOutOfDate, match="run `runlane db upgrade`"):
            await store.ensure_current()
        assert await store.upgrade() == list(range(1, PG_VERSION + 1))
        first = pg_schema(migrated_url)
        assert await store.upgrade() == []  # idempotent
        assert pg_schema(migrated_url) == first
        assert await store.schema_version() == PG_VERSION
        await store.ensure_current()
        with psycopg.connect(migrated_url, autocommit=True) as conn:
            conn.execute("INSERT INTO schema_migrations (version) VALUES (999)")
        with pytest.raises(SchemaOutOfDate, match="newer runlane"):
            await store.ensure_current()
    finally:
        await store.close()

    with psycopg.connect(reference_url, autocommit=True) as conn:
        conn.execute(load_reference_schema("runlane.adapters.postgres").encode())
    assert pg_schema(reference_url) == first
    assert any(row[0] == "run_log" for row in first["columns"])  # type: ignore[attr-defined]
    # A new database is on the database bus: its facts triggers are off (0013).
    assert {(t[1], t[2]) for t in first["triggers"] if t[0] == "run_log"} == {  # type: ignore[attr-defined]
        ("run_log_fact_insert", "D"),
        ("run_log_fact_update", "D"),
    }


# --- upgrading a database of an older version --------------------------------------------------
# 0003 added the heartbeat's catalog (digest, load time, jobs), 0004 its path and chains, 0005 its
# log directory: a row an older launcher wrote is kept, with NULL (not reported) in the new columns.


def _runlane(database_url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("version: 1\njobs:\n  hello: {command: [echo, hi], executor: inline}\n")
    env = dict(os.environ, RUNLANE_DATABASE_URL=database_url, RUNLANE_CATALOG=str(catalog))
    proc = subprocess.run(
        [sys.executable, "-m", "runlane", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


OLD_BEAT = (
    "INSERT INTO launcher_heartbeat (launcher_id, host, pid, version, started_at, beat_at,"
    " queue_depth, running) VALUES ('before', 'h', 1, '0.0.9', {t}, {t}, 0, '{{}}')"
)


def _check_upgrade_path(database_url: str, tmp_path: Path, old: int, current: int) -> None:
    """`serve` refuses the older database and says what to run; `db upgrade` applies the rest."""
    serve = _runlane(database_url, tmp_path, "serve")
    assert serve.returncode == 1
    assert serve.stderr.strip().splitlines() == [
        f"error: database is at schema version {old}, this runlane needs {current}: "
        "run `runlane db upgrade`"
    ]
    upgrade = _runlane(database_url, tmp_path, "db", "upgrade")
    assert upgrade.returncode == 0, upgrade.stderr
    applied = ", ".join(str(v) for v in range(old + 1, current + 1))
    assert upgrade.stdout.strip() == f"applied migrations {applied}; schema is at version {current}"


@pytest.mark.parametrize("old", [2, 3, 4])
async def test_sqlite_an_older_database_is_refused_then_upgraded(tmp_path: Path, old: int) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    try:
        conn.execute(load_queries("runlane.adapters.sqlite")["bootstrap_migrations"])
        for migration in load_migrations("runlane.adapters.sqlite")[:old]:
            conn.executescript(migration.sql)
            conn.execute("INSERT INTO schema_migrations VALUES (?, 'x')", (migration.version,))
        conn.execute(OLD_BEAT.format(t="'2031-01-01T00:00:00.000000Z'"))
        conn.commit()
    finally:
        conn.close()
    _check_upgrade_path(f"sqlite:///{path}", tmp_path, old, SQLITE_VERSION)

    reference = tmp_path / "reference.db"
    ref = sqlite3.connect(reference)
    try:
        ref.executescript(load_reference_schema("runlane.adapters.sqlite"))
    finally:
        ref.close()
    assert sqlite_schema(path) == sqlite_schema(reference)  # upgraded = created at the current
    store = SqliteStore(str(path))
    await store.open()
    try:
        (kept,) = await store.launchers()
        assert (kept.launcher_id, kept.catalog_digest, kept.catalog_jobs) == ("before", None, None)
        assert (kept.catalog_path, kept.catalog_chains, kept.heartbeat_interval) == (None,) * 3
        assert kept.log_dir is None
    finally:
        await store.close()


@pytest.mark.postgres
@pytest.mark.parametrize("old", [2, 3, 4])
async def test_postgres_an_older_database_is_refused_then_upgraded(
    pg_scratch: list[str], tmp_path: Path, old: int
) -> None:
    old_url, reference_url = pg_scratch
    with psycopg.connect(old_url, autocommit=True) as conn:
        conn.execute(load_queries("runlane.adapters.postgres")["bootstrap_migrations"].encode())
        for migration in load_migrations("runlane.adapters.postgres")[:old]:
            conn.execute(migration.sql.encode())
            conn.execute(
                "INSERT INTO schema_migrations (version) VALUES (%s)", (migration.version,)
            )
        conn.execute(OLD_BEAT.format(t="now()").encode())
    dbname = conninfo_to_dict(old_url)["dbname"]
    _check_upgrade_path(f"{PG_URL.rsplit('/', 1)[0]}/{dbname}", tmp_path, old, PG_VERSION)

    with psycopg.connect(reference_url, autocommit=True) as conn:
        conn.execute(load_reference_schema("runlane.adapters.postgres").encode())
    assert pg_schema(old_url) == pg_schema(reference_url)  # upgraded = created at the current
    store = PostgresStore(old_url)
    await store.open()
    try:
        (kept,) = await store.launchers()
        assert (kept.launcher_id, kept.catalog_digest, kept.catalog_jobs) == ("before", None, None)
        assert (kept.catalog_path, kept.catalog_chains, kept.heartbeat_interval) == (None,) * 3
        assert kept.log_dir is None
    finally:
        await store.close()


@pytest.mark.postgres
async def test_postgres_two_upgrades_of_a_new_database_at_once_both_succeed(
    pg_scratch: list[str],
) -> None:
    """Two `runlane db upgrade`s at once on an empty database (two init steps starting
    together): the one that comes second waits for the first's migrations table, instead of
    failing on PostgreSQL's race of two `CREATE TABLE IF NOT EXISTS` ("duplicate key value
    violates unique constraint pg_type_typname_nsp_index"). The first is held, by hand, in its
    first transaction: under the migrations' lock, the table created, not yet committed."""
    url, _ = pg_scratch
    queries = load_queries("runlane.adapters.postgres")
    first = await psycopg.AsyncConnection.connect(url)
    store = PostgresStore(url)
    await store.open()
    try:
        await first.execute(queries["migrate_lock"].encode())
        await first.execute(queries["bootstrap_migrations"].encode())
        second = asyncio.create_task(store.upgrade())

        async def second_waits() -> bool:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as probe:
                cur = await probe.execute(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
                row = await cur.fetchone()
                return row is not None and row[0] > 0

        await eventually(second_waits, "the second upgrade waiting for the first", within=5)
        await first.commit()
        async with asyncio.timeout(10):
            assert await second == list(range(1, PG_VERSION + 1))
        assert await store.schema_version() == PG_VERSION
    finally:
        await first.close()
        await store.close()
