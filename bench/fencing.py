"""The cost of fencing on PostgreSQL: the finish write with the lease check (token, generation,
unexpired lease) against the same write keyed on the id alone. Median of several rounds.

    .venv/bin/python bench/fencing.py --runs 2000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import psycopg
from _common import median, scratch_database

from runlane.adapters.postgres.store import Q
from runlane.core.runs import NewRun, Trigger
from runlane.service.wiring import store_from_url

# The same statement with the fence taken out of the WHERE clause: only the lease check differs.
FENCE = (
    "AND (r.status = 'running') IS TRUE AND r.lease_token = %(token)s::uuid\n"
    "  AND r.lease_generation = %(gen)s AND (r.lease_expires_at > n.now) IS TRUE\n"
)
assert FENCE in Q["finish"], "the finish statement changed: update FENCE"
UNFENCED = Q["finish"].replace(FENCE, "\n")


async def one_round(url: str, n: int) -> tuple[float, float]:
    store = store_from_url(url)
    await store.open()
    await store.upgrade()
    import uuid

    try:
        for _ in range(2 * n):
            rid = str(uuid.uuid4())
            await store.accept(
                NewRun(
                    id=rid,
                    job="noop",
                    trigger=Trigger.CLI,
                    dedupe_key=rid,
                    executor="inline",
                    overlap="allow",
                )
            )
        claimed = []
        while len(claimed) < 2 * n:
            claimed += await store.claim(
                "bench", limit=256, lease_ttl=600, executors=["inline"], executor_caps={}
            )
        fenced, plain = claimed[:n], claimed[n:]
        # Both variants on one plain connection, interleaved row by row so drift (cache, WAL,
        # a noisy neighbour) hits both alike; only the WHERE clause differs.
        params = {
            "status": "success",
            "end_reason": "exit",
            "exit_code": 0,
            "error_code": None,
            "log_tail": None,
            "note": None,
            "external_id": None,
            "now": None,
            "ago": 0.0,
        }
        t_fenced = t_plain = 0.0
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            for f, p in zip(fenced, plain, strict=True):
                t0 = time.perf_counter()
                cur = await conn.execute(
                    Q["finish"],
                    {**params, "id": f.run.id, "token": f.lease.token, "gen": f.lease.generation},
                )
                t1 = time.perf_counter()
                assert cur.rowcount == 1
                cur = await conn.execute(
                    UNFENCED, {**params, "id": p.run.id, "token": None, "gen": None}
                )
                t2 = time.perf_counter()
                assert cur.rowcount == 1
                t_fenced += t1 - t0
                t_plain += t2 - t1
        t_fenced, t_plain = t_fenced / n, t_plain / n
        return t_fenced * 1000, t_plain * 1000
    finally:
        await store.close()


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    fenced, plain = [], []
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp, scratch_database("postgres", Path(tmp)) as url:
            f, p = asyncio.run(one_round(url, args.runs))
        fenced.append(f)
        plain.append(p)
        print(f"[#{i + 1}] finish fenced={f:.3f} ms  unfenced={p:.3f} ms", flush=True)
    print(
        f"[median of {args.repeat}] finish fenced={median(fenced):.3f} ms unfenced={median(plain):.3f} ms "
        f"cost of fencing={median(fenced) - median(plain):+.3f} ms per write"
    )


if __name__ == "__main__":
    main()
