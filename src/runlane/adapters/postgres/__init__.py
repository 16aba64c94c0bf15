"""The PostgreSQL adapter: the run log, leases and wake-ups on PostgreSQL."""

from __future__ import annotations

from runlane.adapters.postgres.statements import CURRENT_SCHEMA_VERSION
from runlane.adapters.postgres.store import PostgresStore

__all__ = ["CURRENT_SCHEMA_VERSION", "PostgresStore"]
