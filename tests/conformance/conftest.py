"""Store conformance fixtures: every contract test runs against SQLite and PostgreSQL.

PostgreSQL comes from `RUNLANE_TEST_POSTGRES_URL` (default: the local `test` database). A fresh
scratch database is created per session and dropped at the end; tables are truncated between
tests. An unreachable server skips the PostgreSQL cases locally and fails them in CI.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from runlane.adapters.postgres import PostgresStore
from runlane.adapters.sqlite import SqliteStore
from runlane.ports import Clock, Store

PG_URL = os.environ.get("RUNLANE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
TABLES = ("run_log", "job_overrides", "launcher_heartbeat", "outbox")


def postgres_unreachable(reason: str) -> None:
    """Skip locally; in CI a missing PostgreSQL service is a failure, not a skip."""
    message = f"PostgreSQL at {PG_URL} is unreachable: {reason}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def pg_scratch_url() -> Iterator[str]:
    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        postgres_unreachable(str(exc).strip().splitlines()[0])
        raise  # unreachable: skip/fail raise
    name = f"runlane_test_{secrets.token_hex(4)}"
    with admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(PG_URL, dbname=name)
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@dataclass
class StoreHarness:
    """The store under test plus what a test needs around it."""

    dialect: str
    store: Store
    # Another store on the same database (own connections), e.g. a second launcher.
    make_store: Callable[..., Awaitable[Store]]
    # Raw SQL for tests that must reach under the store (corrupt a row, count outbox rows).
    # Both dialects take `:name` placeholders here.
    query: Callable[[str, Mapping[str, object]], list[tuple[object, ...]]]
    # The database's URL (PostgreSQL) or file path (SQLite), for tests that need one connection
    # across several statements.
    location: str = ""
    extra: list[Store] = field(default_factory=list)


def _pg_query(url: str) -> Callable[[str, Mapping[str, object]], list[tuple[object, ...]]]:
    def run(text: str, params: Mapping[str, object]) -> list[tuple[object, ...]]:
        # Translate `:name` to psycopg's style so tests write one SQL text for both dialects.
        converted = text
        for key in sorted(params, key=len, reverse=True):
            converted = converted.replace(f":{key}", f"%({key})s")
        with psycopg.connect(url, autocommit=True) as conn:
            cur = conn.execute(converted.encode(), dict(params))
            return list(cur.fetchall()) if cur.description else []

    return run


def _sqlite_query(path: str) -> Callable[[str, Mapping[str, object]], list[tuple[object, ...]]]:
    def run(text: str, params: Mapping[str, object]) -> list[tuple[object, ...]]:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            rows: Sequence[tuple[object, ...]] = conn.execute(text, dict(params)).fetchall()
            return list(rows)
        finally:
            conn.close()

    return run


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreHarness]:
    opened: list[Store] = []

    if request.param == "sqlite":
        path = str(tmp_path / "runlane.db")

        async def make_store(clock: Clock | None = None, outbox: bool = False) -> Store:
            store = SqliteStore(path, clock=clock, outbox=outbox)
            await store.open()
            opened.append(store)
            await store.upgrade()
            return store

        query = _sqlite_query(path)
    else:
        url: str = request.getfixturevalue("pg_scratch_url")
        with psycopg.connect(url, autocommit=True) as conn:
            exists = conn.execute("SELECT to_regclass('run_log') IS NOT NULL").fetchone()
            if exists is not None and exists[0]:
                conn.execute(
                    sql.SQL("TRUNCATE {}").format(sql.SQL(", ").join(map(sql.Identifier, TABLES)))
                )

        async def make_store(clock: Clock | None = None, outbox: bool = False) -> Store:
            store = PostgresStore(url, clock=clock, outbox=outbox, pool_max=4)
            await store.open()
            opened.append(store)
            await store.upgrade()
            return store

        query = _pg_query(url)

    store = await make_store()
    try:
        yield StoreHarness(
            request.param,
            store,
            make_store,
            query,
            location=path if request.param == "sqlite" else url,
        )
    finally:
        for each in reversed(opened):
            await each.close()
