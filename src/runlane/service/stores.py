"""Choosing the run-log store from a database URL (`sqlite:///…` or `postgresql://…`)."""

from __future__ import annotations

import os

from runlane.core.secrets import mask_secrets
from runlane.core.secrets import mask_url as _mask_url
from runlane.errors import ConfigError
from runlane.ports import Clock, Store

ACCEPTED_FORMS = (
    "sqlite:///relative/path.db, sqlite:////absolute/path.db, a path ending in .db or .sqlite, "
    "or postgresql://user:password@host:port/dbname"
)


def mask_url(url: str) -> str:
    """The URL with its password replaced by `***`, safe for logs and messages."""
    return _mask_url(url)


def sqlite_path(url: str) -> str | None:
    """The file path a SQLite URL or bare path names, or None when it is not a SQLite URL."""
    if url.startswith("sqlite:///"):
        # sqlite:///rel.db → "rel.db"; sqlite:////abs.db → "/abs.db" (the SQLAlchemy convention).
        path = url[len("sqlite:///") :]
        return path or None
    if "://" not in url and url.endswith((".db", ".sqlite", ".sqlite3")):
        return url
    return None


def absolute_url(url: str) -> str:
    """`url` with a relative SQLite path made absolute (against the working directory now), so
    a process that runs elsewhere (a run that changes directory) names the same file."""
    path = sqlite_path(url.strip())
    if path is None or path == ":memory:" or path.startswith("file:") or os.path.isabs(path):  # noqa: PTH117
        return url
    return "sqlite:///" + os.path.abspath(path)  # noqa: PTH100


def check_postgres_url(url: str) -> None:
    """`ConfigError` (secrets masked, one line) unless libpq can parse the connection string.
    Whatever libpq takes is accepted: several hosts, any port text (the connection reports it)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(url)
    except psycopg.Error as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        reason = mask_secrets(reason.replace(url, mask_url(url)), url)
        raise ConfigError(f"invalid database URL {mask_url(url)!r}: {reason}") from None


def store_from_url(
    url: str,
    *,
    clock: Clock | None = None,
    application_name: str = "runlane",
    create: bool = True,
    db_timeout: float | None = None,
) -> Store:
    """A (not yet opened) store for `url`; `ConfigError` naming the accepted forms otherwise.

    `create=False`: a SQLite file that does not exist is not created; opening the store fails
    with "no database at PATH" instead (every command but `runlane db upgrade`).

    `db_timeout` (the launcher's RUNLANE_DB_TIMEOUT): on PostgreSQL, the bound on each call,
    past which it fails as `DatabaseUnavailable`; SQLite, a local file, needs none."""
    url = url.strip()
    path = sqlite_path(url)
    if path is not None:
        from runlane.adapters.sqlite import SqliteStore

        return SqliteStore(path, clock=clock, create=create)
    if url.startswith(("postgresql://", "postgres://")):
        from runlane.adapters.postgres import PostgresStore

        check_postgres_url(url)
        return PostgresStore(
            url, clock=clock, application_name=application_name, timeout=db_timeout
        )
    raise ConfigError(f"unsupported database URL {mask_url(url)!r}: use {ACCEPTED_FORMS}")
