"""PostgreSQL's CPU for a run's claim and finish, at the store: the launcher's two statements per
run without the launcher, the spawns or the machine's noise around them.

Each round queues `--runs` runs (not timed), then claims them in batches of `--batch` and saves
their outcomes in batches (`claim` + `finish_many`, the launcher's statements), and reads the
database's CPU over that part only (its backends, WAL writer, checkpointer and background
writer, as bench/throughput.py counts them). `--facts-triggers on,off` runs rounds in turns with
run_log's facts triggers enabled and disabled on the same database (migration 0013 disables them
on the database bus; `on` is what every run cost before it), and prints the medians of each.

    .venv/bin/python bench/claim_finish_pg.py --runs 3200 --repeat 6 --facts-triggers on,off
    .venv/bin/python bench/claim_finish_pg.py --runs 50 --repeat 1      # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from _common import median, postgres_cpu_delta, postgres_cpu_seconds, scratch_database
from psycopg import sql

from runlane.adapters.postgres import PostgresStore
from runlane.core.records import FinishRequest
from runlane.core.runs import EndReason, NewRun, Outcome, RunStatus, Trigger

DONE = Outcome(RunStatus.SUCCESS, EndReason.EXIT, exit_code=0)
TRIGGERS = ("run_log_fact_insert", "run_log_fact_update")


def set_triggers(url: str, on: bool) -> None:
    verb = sql.SQL("ENABLE" if on else "DISABLE")
    with psycopg.connect(url, autocommit=True) as conn:
        for name in TRIGGERS:
            conn.execute(
                sql.SQL("ALTER TABLE run_log {} TRIGGER {}").format(verb, sql.Identifier(name))
            )


async def one_round(store: PostgresStore, database: str, runs: int, batch: int) -> float:
    """Queue `runs`, then claim and finish them all; PostgreSQL's CPU ms per run for the
    second part."""
    for _ in range(runs):
        await store.accept(
            NewRun(
                id=str(uuid.uuid4()),
                job="noop",
                trigger=Trigger.MANUAL,
                dedupe_key=str(uuid.uuid4()),
                executor="inline",
                overlap="allow",
            )
        )
    before = postgres_cpu_seconds(database)
    done = 0
    while done < runs:
        claims = await store.claim(
            "bench", limit=batch, lease_ttl=30.0, executors=["inline"], executor_caps={}
        )
        if not claims:
            raise SystemExit(f"only {done} of {runs} runs were claimed")
        await store.finish_many([FinishRequest(c.lease, DONE) for c in claims])
        done += len(claims)
    return postgres_cpu_delta(before, postgres_cpu_seconds(database)) / runs * 1000


async def measure(url: str, runs: int, batch: int, repeat: int, modes: list[str]) -> None:
    database = url.rsplit("/", 1)[1]
    store = PostgresStore(url)
    await store.open()
    try:
        await store.upgrade()
        figures: dict[str, list[float]] = {mode: [] for mode in modes}
        for i in range(repeat):
            for mode in modes[i % len(modes) :] + modes[: i % len(modes)]:
                if mode != "as-is":
                    set_triggers(url, mode == "on")
                started = time.perf_counter()
                ms = await one_round(store, database, runs, batch)
                figures[mode].append(ms)
                print(
                    f"[facts triggers {mode} #{i + 1}] pg_cpu_ms_per_run={ms:.4f} "
                    f"({time.perf_counter() - started:.1f} s)",
                    flush=True,
                )
        for mode in modes:
            print(
                f"[facts triggers {mode} median of {repeat}] "
                f"pg_cpu_ms_per_run={median(figures[mode]):.4f}"
            )
    finally:
        await store.close()


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=3200)
    ap.add_argument("--batch", type=int, default=64, help="runs per claim and per finish")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--facts-triggers",
        default="as-is",
        help="on, off or as-is (as the schema leaves them); several, comma-separated, in turns",
    )
    args = ap.parse_args()
    modes = [m.strip() for m in args.facts_triggers.split(",") if m.strip()]
    if not modes or any(m not in ("on", "off", "as-is") for m in modes):
        raise SystemExit(f"--facts-triggers: on, off or as-is, not {args.facts_triggers!r}")
    with tempfile.TemporaryDirectory() as tmp, scratch_database("postgres", Path(tmp)) as url:
        asyncio.run(measure(url, args.runs, args.batch, args.repeat, modes))


if __name__ == "__main__":
    main()
