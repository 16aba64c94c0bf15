"""Opening stores: URL forms, and one clear error (never a driver traceback) when it fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import psycopg.errors
import pytest

from runlane.adapters.postgres import PostgresStore
from runlane.adapters.sqlite import SqliteStore
from runlane.errors import ConfigError, DatabaseConflict, DatabaseUnavailable
from runlane.service.wiring import mask_url, store_from_url


@pytest.mark.parametrize(
    ("url", "dialect", "path"),
    [
        ("sqlite:///relative/runs.db", "sqlite", "relative/runs.db"),
        ("sqlite:////abs/runs.db", "sqlite", "/abs/runs.db"),
        ("runs.db", "sqlite", "runs.db"),
        ("/var/lib/runlane/runs.sqlite", "sqlite", "/var/lib/runlane/runs.sqlite"),
        ("postgresql://u:pw@db:5432/runlane", "postgresql", None),
        ("postgres://u@db/runlane", "postgresql", None),
    ],
)
def test_store_from_url_accepts_the_documented_forms(
    url: str, dialect: str, path: str | None
) -> None:
    store = store_from_url(url)
    assert store.dialect == dialect
    if path is not None:
        assert isinstance(store, SqliteStore)
        assert store.path == path


@pytest.mark.parametrize("url", ["mysql://db/x", "runs.txt", "", "sqlite://"])
def test_store_from_url_rejects_anything_else(url: str) -> None:
    with pytest.raises(ConfigError, match="postgresql://"):
        store_from_url(url)


def test_mask_url_hides_the_password() -> None:
    assert mask_url("postgresql://u:s3cret@db:5433/x?sslmode=require") == (
        "postgresql://u:***@db:5433/x?sslmode=require"
    )
    assert mask_url("postgresql://u@db/x") == "postgresql://u@db/x"
    assert "s3cret" not in mask_url("host=db password=s3cret dbname=x")


async def test_sqlite_bad_path_is_database_unavailable(tmp_path: Path) -> None:
    path = str(tmp_path / "missing-dir" / "runs.db")
    store = SqliteStore(path)
    with pytest.raises(DatabaseUnavailable, match="missing-dir"):
        await store.open()


async def test_postgres_unreachable_is_one_clear_line_without_the_password() -> None:
    # Port 1 on localhost: nothing listens there, so the connection is refused at once.
    store = PostgresStore("postgresql://runlane:s3cret@127.0.0.1:1/runlane?connect_timeout=2")
    with pytest.raises(DatabaseUnavailable) as err:
        await store.open()
    message = str(err.value)
    assert message.startswith("cannot reach PostgreSQL at 127.0.0.1:1/runlane: ")
    assert "s3cret" not in message
    assert "\n" not in message
    assert err.value.__cause__ is None


@pytest.mark.postgres
async def test_postgres_connection_lost_during_set_up_is_one_clear_line(
    pg_scratch_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server goes away between accepting the connection and the store's session set-up
    (a restart, a flapping network): the same one-line error as an unreachable server, and the
    half-made connection is closed, not leaked."""
    made: list[psycopg.AsyncConnection[Any]] = []

    async def drop_then_configure(conn: psycopg.AsyncConnection[Any]) -> None:
        made.append(conn)
        async with await psycopg.AsyncConnection.connect(pg_scratch_url, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        await conn.execute("SET TIME ZONE 'UTC'")  # what _configure does: the server is gone

    monkeypatch.setattr(PostgresStore, "_configure", staticmethod(drop_then_configure))
    store = PostgresStore(pg_scratch_url)
    with pytest.raises(DatabaseUnavailable) as err:
        await store.open()
    assert str(err.value).startswith("cannot reach PostgreSQL at ")
    assert "\n" not in str(err.value)
    assert len(made) == 1
    assert made[0].closed


async def test_a_statement_postgresql_aborted_to_break_a_conflict_is_a_conflict_not_an_outage(
    pg_scratch_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deadlock or serialization failure (SQLSTATE class 40) aborts one statement of a live
    database: it is `DatabaseConflict` (run it again), never `DatabaseUnavailable`, which makes
    a launcher journal its outcomes and hold off recovering others' runs."""
    store = PostgresStore(pg_scratch_url)
    await store.open()
    try:
        await store.upgrade()
        # The scratch database is the session's: earlier tests on this worker may have left
        # queued runs in it, so the count is compared with itself, not with zero.
        queued = await store.count_queued()
        for error in (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure):

            async def aborted(*_args: Any, error: type[Exception] = error) -> Any:
                raise error("aborted to break a conflict")

            monkeypatch.setattr(psycopg.AsyncCursor, "execute", aborted)
            with pytest.raises(DatabaseConflict, match="PostgreSQL aborted the statement"):
                await store.count_queued()
            monkeypatch.undo()
        assert await store.count_queued() == queued  # the database was up all along
    finally:
        await store.close()
