"""Run `runlane` with every statement the process sends to PostgreSQL counted.

`python bench/_statement_count.py OUT.json serve` is `python -m runlane serve`, except that each
`AsyncCursor.execute` / `executemany` (what `AsyncConnection.execute` calls too) is counted by
its statement's first line, and the counts are written to OUT.json when the process exits. Used
by `bench/throughput.py --statements`: the launcher's own side of how many statements a run
costs (pg_stat_statements needs a server restart to load, which a shared server cannot have).
"""

from __future__ import annotations

import atexit
import collections
import json
import runpy
import sys
from typing import Any

import psycopg

counts: collections.Counter[str] = collections.Counter()


def _key(query: Any) -> str:
    text = query.decode() if isinstance(query, bytes) else str(query)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return first[:70]


_execute = psycopg.AsyncCursor.execute
_executemany = psycopg.AsyncCursor.executemany


async def _counted_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
    counts[_key(query)] += 1
    return await _execute(self, query, *args, **kwargs)


async def _counted_executemany(self: Any, query: Any, params_seq: Any, **kwargs: Any) -> Any:
    params = list(params_seq)
    counts[_key(query)] += len(params)
    counts["(executemany calls)"] += 1
    return await _executemany(self, query, params, **kwargs)


def _dump(path: str) -> None:
    with open(path, "w") as out:
        json.dump(dict(counts.most_common()), out, indent=1)


def main() -> None:
    path = sys.argv[1]
    psycopg.AsyncCursor.execute = _counted_execute  # type: ignore[method-assign]
    psycopg.AsyncCursor.executemany = _counted_executemany  # type: ignore[method-assign]
    atexit.register(_dump, path)
    sys.argv = ["runlane", *sys.argv[2:]]
    runpy.run_module("runlane", run_name="__main__")


if __name__ == "__main__":
    main()
