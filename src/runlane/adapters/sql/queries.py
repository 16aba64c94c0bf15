"""The named-statement loader: a dialect's `sql/queries.sql` (`-- name: x` blocks) as
{name: sql}, plus the statements both dialects write identically (`adapters/sql/shared.sql`)."""

from __future__ import annotations

import re
from importlib import resources
from typing import Literal

_NAME_LINE = re.compile(r"^--\s*name:\s*([A-Za-z_][A-Za-z0-9_]*)\s*$")
_NAMED_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_][A-Za-z0-9_]*)")
_SHARED_PACKAGE = "runlane.adapters.sql"

ParamStyle = Literal["named", "pyformat"]  # sqlite3's `:x`; psycopg's `%(x)s`


def load_queries(package: str, filename: str = "sql/queries.sql") -> dict[str, str]:
    """Parse `-- name: x` blocks of a dialect's query file into {name: sql}.

    Whole-line comments are dropped: they cost bytes on every call and psycopg would read a `%`
    in them as a placeholder.
    """
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    queries: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []

    def flush() -> None:
        if name is not None:
            body = "\n".join(lines).strip().rstrip(";").strip()
            if not body:
                raise ValueError(f"{package}/{filename}: query {name!r} is empty")
            queries[name] = body

    for line in text.splitlines():
        match = _NAME_LINE.match(line.strip())
        if match:
            flush()
            name = match.group(1)
            if name in queries:
                raise ValueError(f"{package}/{filename}: query {name!r} is defined twice")
            lines = []
        elif name is not None and not line.lstrip().startswith("--"):
            lines.append(line)
    flush()
    return queries


def with_shared(queries: dict[str, str], paramstyle: ParamStyle) -> dict[str, str]:
    """`queries` plus the shared statements (`shared.sql`, written with `:name` parameters),
    in the dialect's parameter style. A name defined in both is an error: one text each."""
    shared = load_queries(_SHARED_PACKAGE, "shared.sql")
    merged = dict(queries)
    for name, sql in shared.items():
        if name in merged:
            raise ValueError(f"query {name!r} is both shared and the dialect's own")
        if "::" in sql or "%" in sql:  # a cast or a literal %: not dialect-neutral text
            raise ValueError(f"shared query {name!r} is not the same text in both dialects")
        merged[name] = sql if paramstyle == "named" else _NAMED_PARAM.sub(r"%(\1)s", sql)
    return merged
