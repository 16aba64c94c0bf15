"""A claim's time in PostgreSQL when a backlog has built up since run_log was last analyzed.

The case: autovacuum analyzed `run_log` while nothing was queued, then a backlog built up (an
outage, a fan-out, launchers stopped for a deploy). The statistics say no run is queued, and
the planner plans the claim for that. This builds it on a scratch database: `--history`
finished runs, `ANALYZE` (autovacuum off for the table, so nothing analyzes it behind the
bench's back), then `--backlog` queued runs. The finished and queued rows are copies of one
accepted run (`INSERT ... SELECT`, so a backlog of 50,000 takes seconds), each with its own id
and dedupe key.

Then the launcher's claim statement (`claim_fast`, a batch of `--batch`) runs `--repeat` times
on a connection set up as the store sets up its claim connection, each in a transaction rolled
back (so each claims the same runs), first with those statistics, then after `ANALYZE`. Prints
the median time a claim takes (client side: the statement's round trip on the same host), and
how the plan read run_log (which index, how many rows) for the candidates and for the update.
Which plan stale statistics give varies from one build to the next (ANALYZE reads a sample):
run it a few times.

    .venv/bin/python bench/claim_stale_stats.py --history 200000 --backlog 50000 --batch 64
    PYTHONPATH=<other tree>/src .venv/bin/python bench/claim_stale_stats.py   # a tree before
    .venv/bin/python bench/claim_stale_stats.py --quick                     # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
from _common import CATALOG, median, scratch_database
from psycopg import sql

from runlane.adapters.postgres.statements import Q
from runlane.catalog import load_catalog
from runlane.core.runs import Trigger
from runlane.service.accept import RunRequest, accept_run
from runlane.service.wiring import store_from_url


async def accept_one(url: str, catalog_path: Path) -> None:
    """One run through the accept path (the schema is upgraded first)."""
    store = store_from_url(url)
    await store.open()
    try:
        await store.upgrade()
        await accept_run(
            store, load_catalog(catalog_path), RunRequest(job="noop", trigger=Trigger.CLI)
        )
    finally:
        await store.close()


def copies(conn: psycopg.Connection[tuple[object, ...]], n: int, status: str) -> None:
    """`n` copies of the one queued run, each with a new id and dedupe key, as `status`."""
    columns = [
        str(row[0])
        for row in conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'run_log' ORDER BY ordinal_position"
        )
    ]
    now = sql.SQL("clock_timestamp()")
    values = {
        "id": sql.SQL("gen_random_uuid()"),
        "dedupe_key": sql.SQL("gen_random_uuid()::text"),
        "status": sql.Literal(status),
        "queued_at": now,
        "finished_at": now if status != "queued" else sql.Identifier("finished_at"),
    }
    conn.execute(
        sql.SQL(
            "INSERT INTO run_log ({cols}) SELECT {vals} FROM "
            "(SELECT * FROM run_log WHERE status = 'queued' LIMIT 1) one, generate_series(1, {n})"
        ).format(
            cols=sql.SQL(", ").join(sql.Identifier(c) for c in columns),
            vals=sql.SQL(", ").join(values.get(c, sql.Identifier(c)) for c in columns),
            n=sql.Literal(n),
        )
    )


def _nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _nodes(child)


def claim_ms(url: str, batch: int, repeat: int) -> tuple[float, str]:
    """The median time of `claim_fast` for `batch` runs, each try rolled back, and how the plan
    read run_log: the candidates' scan, then the update's lookups (index, or the node)."""
    params = {
        "now": None,
        "executors": ["inline"],
        "capped": [],
        "limit": batch,
        "owner": "bench",
        "ttl": 30.0,
    }
    times = []
    with psycopg.connect(url) as conn:
        conn.execute(Q["claim_session"])
        conn.commit()
        for _ in range(repeat):
            start = time.perf_counter()
            rows = conn.execute(Q["claim_fast"], params).fetchall()
            times.append((time.perf_counter() - start) * 1000)
            conn.rollback()
            if len(rows) != batch:
                raise SystemExit(f"the claim took {len(rows)} runs, not {batch}")
        explained = conn.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + Q["claim_fast"], params
        ).fetchall()[0][0]
        conn.rollback()
    plan = (json.loads(explained) if isinstance(explained, str) else explained)[0]["Plan"]
    reads = []
    for part in ("CTE cand", "CTE upd"):
        sub = next(n for n in _nodes(plan) if n.get("Subplan Name") == part)
        scans = [n for n in _nodes(sub) if n.get("Relation Name") == "run_log"]
        scans = [n for n in scans if n["Node Type"] != "ModifyTable"]
        reads.append(
            "+".join(
                f"{n.get('Index Name', n['Node Type'])} "
                f"({n['Actual Rows'] * n['Actual Loops'] + n.get('Rows Removed by Filter', 0)} rows)"
                for n in scans
            )
        )
    return median(times), f"candidates via {reads[0]}, update via {reads[1]}"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--history", type=int, default=200_000, help="finished runs, analyzed")
    ap.add_argument("--backlog", type=int, default=50_000, help="runs queued after the ANALYZE")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.history, args.backlog, args.batch, args.repeat = 2000, 500, 16, 2
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "catalog.yaml").write_text(CATALOG)
        with scratch_database("postgres", work) as url:
            asyncio.run(accept_one(url, work / "catalog.yaml"))
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("ALTER TABLE run_log SET (autovacuum_enabled = false)")
                copies(conn, args.history, "success")
                conn.execute("VACUUM ANALYZE run_log")  # the queue is one run: "none queued"
                copies(conn, args.backlog - 1, "queued")
            stale, stale_plan = claim_ms(url, args.batch, args.repeat)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("ANALYZE run_log")
            fresh, fresh_plan = claim_ms(url, args.batch, args.repeat)
    print(
        f"[history={args.history} backlog={args.backlog} batch={args.batch}, median of "
        f"{args.repeat}] claim with statistics from before the backlog {stale:.2f} ms "
        f"({stale_plan}); after ANALYZE {fresh:.2f} ms ({fresh_plan})"
    )


if __name__ == "__main__":
    main()
