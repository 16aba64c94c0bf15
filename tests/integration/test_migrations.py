"""Migrating an empty database gives exactly the reference schema (sql/schema.sql), per dialect."""

from __future__ import annotations

import os
import re
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from runlane.adapters import sqlcommon
from runlane.adapters.postgres import CURRENT_SCHEMA_VERSION as PG_VERSION
from runlane.adapters.postgres import PostgresStore
from runlane.adapters.sqlite import CURRENT_SCHEMA_VERSION as SQLITE_VERSION
from runlane.adapters.sqlite import SqliteStore
from runlane.errors import SchemaOutOfDate

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
        conn.executescript(sqlcommon.load_reference_schema("runlane.adapters.sqlite"))
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
    return {"columns": columns, "indexes": indexes, "constraints": constraints}


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
        conn.execute(sqlcommon.load_reference_schema("runlane.adapters.postgres").encode())
    assert pg_schema(reference_url) == first
    assert any(row[0] == "run_log" for row in first["columns"])  # type: ignore[attr-defined]
