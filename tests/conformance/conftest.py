"""Store conformance fixtures: every contract test runs against SQLite and PostgreSQL.

PostgreSQL is the session's scratch database (`pg_scratch_url`, tests/conftest.py): every table
but the migrations' is truncated between tests. An unreachable server skips the PostgreSQL cases
locally and fails them in CI.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from runlane.adapters.postgres import PostgresStore
from runlane.adapters.sqlite import SqliteStore
from runlane.ports import Clock, Store
from tests.support.postgres import truncate_all


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
        truncate_all(url)

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
