"""The PostgreSQL adapter: the run log, leases and wake-ups on PostgreSQL."""

from __future__ import annotations

from runlane.adapters.postgres.store import CURRENT_SCHEMA_VERSION, PostgresStore

__all__ = ["CURRENT_SCHEMA_VERSION", "PostgresStore"]
