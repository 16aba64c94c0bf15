"""A dialect's numbered migration files, its reference schema, and the schema-version check."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from runlane.errors import SchemaOutOfDate

_MIGRATION_FILE = re.compile(r"^(\d{4})_[A-Za-z0-9_]+\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    """One migration file: applied once, in version order, in its own transaction."""

    version: int
    name: str
    sql: str


def load_migrations(package: str) -> list[Migration]:
    """The numbered migration files of a dialect, in order (`sql/migrations/0001_initial.sql`)."""
    folder = resources.files(package).joinpath("sql/migrations")
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), entry.name, entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise ValueError(f"{package}: migrations must be numbered 1..n without gaps: {versions}")
    return found


def load_reference_schema(package: str) -> str:
    """`sql/schema.sql`: what the migrations must produce (tests/integration/test_migrations.py)."""
    return resources.files(package).joinpath("sql/schema.sql").read_text(encoding="utf-8")


def check_schema_version(found: int, needed: int) -> None:
    """Raise `SchemaOutOfDate` with what to do unless `found == needed`."""
    if found < needed:
        raise SchemaOutOfDate(
            f"database is at schema version {found}, this runlane needs {needed}: "
            "run `runlane db upgrade`"
        )
    if found > needed:
        raise SchemaOutOfDate(
            f"database is at schema version {found}, this runlane needs {needed}: "
            "it was written by a newer runlane; upgrade runlane"
        )
