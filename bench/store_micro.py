"""Micro-benchmark of the PostgreSQL store's hot path: accept, claim of 16, finish.

Usage: python bench/store_micro.py [--url URL] [--runs N] [--workers W]
Creates a scratch database next to URL's, prints per-operation latency (sequential, one
connection) and a sustained accept→claim→finish figure with W concurrent launchers, then drops it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import time
import uuid

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from runlane.adapters.postgres import PostgresStore
from runlane.core.runs import NewRun, Outcome, RunStatus, Trigger

DONE = Outcome(RunStatus.SUCCESS, "exit", exit_code=0)


def new_run(job: str) -> NewRun:
    return NewRun(
        id=str(uuid.uuid4()),
        job=job,
        trigger=Trigger.MANUAL,
        dedupe_key=str(uuid.uuid4()),
        executor="inline",
        overlap="allow",
        params={"week": 3},
    )


def summary(name: str, samples: list[float], per: int = 1) -> None:
    ms = sorted(s * 1000 for s in samples)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(
        f"{name:<22} n={len(ms):>5}  p50={statistics.median(ms):7.3f} ms  p99={p99:7.3f} ms"
        f"  mean={statistics.fmean(ms):7.3f} ms"
        + (f"  ({statistics.fmean(ms) / per:.3f} ms/run)" if per > 1 else "")
    )


async def sequential(url: str, runs: int) -> None:
    store = PostgresStore(url)
    await store.open()
    try:
        accept_t: list[float] = []
        for _ in range(runs):
            t = time.perf_counter()
            await store.accept(new_run("bench"))
            accept_t.append(time.perf_counter() - t)
        claim_t: list[float] = []
        claimed = []
        while True:
            t = time.perf_counter()
            batch = await store.claim(
                "bench", limit=16, lease_ttl=60, executors=["inline"], executor_caps={}
            )
            if not batch:
                break
            claim_t.append(time.perf_counter() - t)
            claimed.extend(batch)
        finish_t: list[float] = []
        for c in claimed:
            t = time.perf_counter()
            await store.finish(c.lease, DONE)
            finish_t.append(time.perf_counter() - t)
        summary("accept", accept_t)
        summary("claim (limit 16)", claim_t, per=16)
        summary("finish", finish_t)
    finally:
        await store.close()


async def sustained(url: str, runs: int, workers: int) -> None:
    """W launchers, each with its own store: accept, claim up to 16, finish what it got."""
    stores = [PostgresStore(url, pool_max=4) for _ in range(workers)]
    for s in stores:
        await s.open()
    per_worker = runs // workers
    finished = 0

    async def launcher(store: PostgresStore, name: str) -> None:
        nonlocal finished
        for _ in range(per_worker // 16):
            await asyncio.gather(*(store.accept(new_run(name)) for _ in range(16)))
            batch = await store.claim(
                name, limit=16, lease_ttl=60, executors=["inline"], executor_caps={}
            )
            await asyncio.gather(*(store.finish(c.lease, DONE) for c in batch))
            finished += len(batch)

    t = time.perf_counter()
    try:
        await asyncio.gather(*(launcher(s, f"L{i}") for i, s in enumerate(stores)))
    finally:
        for s in stores:
            await s.close()
    elapsed = time.perf_counter() - t
    print(
        f"sustained: {workers} launchers, {finished} runs accepted+claimed+finished in "
        f"{elapsed:.2f}s = {finished / elapsed:,.0f} runs/s"
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--url",
        default=os.environ.get(
            "RUNLANE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
        ),
    )
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    name = f"runlane_bench_{secrets.token_hex(4)}"
    with psycopg.connect(args.url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_conninfo(args.url, dbname=name)
    try:
        store = PostgresStore(url)
        await store.open()
        await store.upgrade()
        await store.close()
        await sequential(url, args.runs)
        await sustained(url, args.runs * 4, args.workers)
    finally:
        with psycopg.connect(args.url, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


if __name__ == "__main__":
    asyncio.run(main())
