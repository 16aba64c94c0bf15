"""The test suites' PostgreSQL: where it is, scratch databases, and emptying one between tests.

The server comes from `RUNLANE_TEST_POSTGRES_URL` (default: the local `test` database). An
unreachable server skips PostgreSQL tests locally and fails them in CI.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

PG_URL = os.environ.get("RUNLANE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

# Put before every scratch database's name (several engineers sharing one server keep theirs
# apart, and can drop what a killed run left behind by that prefix).
DB_PREFIX = os.environ.get("RUNLANE_TEST_DB_PREFIX", "")

# Kept by `truncate_all`: which migrations the database has (emptying it would re-run them).
MIGRATIONS_TABLE = "schema_migrations"


def postgres_unreachable(reason: str) -> None:
    """Skip locally; in CI a missing PostgreSQL service is a failure, not a skip."""
    message = f"PostgreSQL at {PG_URL} is unreachable: {reason}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def require_postgres() -> None:
    """The test server answers; otherwise skip locally, fail in CI (`postgres_unreachable`)."""
    try:
        with psycopg.connect(PG_URL, connect_timeout=3):
            pass
    except psycopg.Error as exc:
        postgres_unreachable((str(exc).strip() or repr(exc)).splitlines()[0])


@contextlib.contextmanager
def scratch_database(prefix: str) -> Iterator[str]:
    """A new, empty database named `[RUNLANE_TEST_DB_PREFIX]<prefix>_<random>` on the test server; its URL (which
    `store_from_url` takes too). Dropped at the end (connections still open are cut)."""
    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        postgres_unreachable(str(exc).strip().splitlines()[0])
        raise  # unreachable: skip/fail raise
    name = f"{DB_PREFIX}{prefix}_{secrets.token_hex(4)}"
    with admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urlunsplit(urlsplit(PG_URL)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def truncate_all(url: str) -> None:
    """Empty every table of the database at `url` but the migrations table, in one statement.
    The tables are the database's own (whatever the applied schema made), never a list kept by
    hand: a table a migration adds is emptied without anyone remembering to."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                " AND tablename <> %s ORDER BY tablename",
                (MIGRATIONS_TABLE,),
            )
        ]
        if tables:
            conn.execute(
                sql.SQL("TRUNCATE {}").format(sql.SQL(", ").join(map(sql.Identifier, tables)))
            )
