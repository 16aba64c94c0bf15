"""Choosing the run-log store from a database URL (`sqlite:///…` or `postgresql://…`)."""

from __future__ import annotations

from runlane.adapters import sqlcommon
from runlane.errors import ConfigError
from runlane.ports import Clock, Store

ACCEPTED_FORMS = (
    "sqlite:///relative/path.db, sqlite:////absolute/path.db, a path ending in .db or .sqlite, "
    "or postgresql://user:password@host:port/dbname"
)


def mask_url(url: str) -> str:
    """The URL with its password replaced by `***`, safe for logs and messages."""
    return sqlcommon.mask_url(url)


def sqlite_path(url: str) -> str | None:
    """The file path a SQLite URL or bare path names, or None when it is not a SQLite URL."""
    if url.startswith("sqlite:///"):
        # sqlite:///rel.db → "rel.db"; sqlite:////abs.db → "/abs.db" (the SQLAlchemy convention).
        path = url[len("sqlite:///") :]
        return path or None
    if "://" not in url and url.endswith((".db", ".sqlite", ".sqlite3")):
        return url
    return None


def store_from_url(
    url: str, *, clock: Clock | None = None, application_name: str = "runlane"
) -> Store:
    """A (not yet opened) store for `url`; `ConfigError` naming the accepted forms otherwise."""
    url = url.strip()
    path = sqlite_path(url)
    if path is not None:
        from runlane.adapters.sqlite import SqliteStore

        return SqliteStore(path, clock=clock)
    if url.startswith(("postgresql://", "postgres://")):
        from runlane.adapters.postgres import PostgresStore

        return PostgresStore(url, clock=clock, application_name=application_name)
    raise ConfigError(f"unsupported database URL {mask_url(url)!r}: use {ACCEPTED_FORMS}")
