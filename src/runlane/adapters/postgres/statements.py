"""The PostgreSQL store's named statements (`sql/queries.sql`, `sql/alerts.sql` and the shared ones) and its
migrations, loaded once at import."""

from __future__ import annotations

from runlane.adapters.sql.migrations import load_migrations
from runlane.adapters.sql.queries import load_queries, with_shared

_PACKAGE = "runlane.adapters.postgres"

Q = with_shared(load_queries(_PACKAGE), "pyformat")
Q.update(load_queries(_PACKAGE, "sql/alerts.sql"))  # the Incidents role (migration 0009)
MIGRATIONS = load_migrations(_PACKAGE)
CURRENT_SCHEMA_VERSION = MIGRATIONS[-1].version
