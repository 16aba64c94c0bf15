"""The SQLite store's named statements (`sql/queries.sql`, `sql/alerts.sql` and the shared ones), its connection
PRAGMAs and its migrations, loaded once at import."""

from __future__ import annotations

from runlane.adapters.sql.migrations import load_migrations
from runlane.adapters.sql.queries import load_queries, with_shared

_PACKAGE = "runlane.adapters.sqlite"
Q = with_shared(load_queries(_PACKAGE), "named")
Q.update(load_queries(_PACKAGE, "sql/alerts.sql"))  # the Incidents role (migration 0009)
# `finish` for a batch: only what the launcher reads back (the whole row is ~35 conversions),
# and whether someone asked to cancel the run (then its retry is not written).
Q["finish_brief"] = Q["finish"].replace(
    "RETURNING *", "RETURNING status, end_reason, cancel_requested_at"
)
if Q["finish_brief"] == Q["finish"]:  # pragma: no cover - caught by any finish test
    raise RuntimeError("the SQLite finish query no longer ends in RETURNING *")
MIGRATIONS = load_migrations(_PACKAGE)
CURRENT_SCHEMA_VERSION = MIGRATIONS[-1].version
# Run on every new connection, in this order.
CONNECTION_PRAGMAS = (
    "pragma_journal_wal",
    "pragma_synchronous_normal",
    "pragma_busy_timeout",
    "pragma_foreign_keys_off",
)
