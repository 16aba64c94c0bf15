"""The SQLite adapter: the run log in one local file (the embedded default)."""

from __future__ import annotations

from runlane.adapters.sqlite.statements import CURRENT_SCHEMA_VERSION
from runlane.adapters.sqlite.store import SqliteStore

__all__ = ["CURRENT_SCHEMA_VERSION", "SqliteStore"]
