"""The cost of a Prometheus scrape over a large run log (issue 18 §5's figure).

Seeds a scratch PostgreSQL database with `--rows` run_log rows (1,000,000 by default, the same
log bench/api_runs.py seeds), then adds what a busy moment has on top: `--queued` queued runs,
`--running` running ones, unpublished outbox rows and three launchers' heartbeats. Then it
measures a scrape `--scrapes` times per round:

- in process: `Exporter.scrape()` of a launcher's exporter (its counters primed on a catalog of
  50 jobs) with the gauge cache off, so every scrape runs the run log's queries;
- through HTTP: `GET /metrics` of `runlane web` in its own process, with a token (its gauge
  cache left as it is: a scrape comes every 15-30 s, far apart from the cache's 2 s, so each
  of these scrapes still reads the database).

Prints the median and p99 of each per round, then the medians of the rounds.

    .venv/bin/python bench/metrics_scrape.py                       # 1,000,000 rows, 3 rounds
    .venv/bin/python bench/metrics_scrape.py --rows 2000 --scrapes 5 --repeat 1   # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
from _common import median, percentile, scratch_database
from api_runs import operator_token, seed, web_server
from prometheus_client import generate_latest

from runlane.adapters.postgres import PostgresStore
from runlane.catalog.loader import load_catalog
from runlane.service.metrics import Exporter, LauncherMetrics

JOBS = 50

EXTRA_SQL = """
INSERT INTO run_log (id, job, status, trigger, dedupe_key, executor, overlap, queued_at,
                     started_at, lease_owner, lease_expires_at)
SELECT gen_random_uuid(), 'job_' || lpad((g % {jobs})::text, 2, '0'),
       CASE WHEN g <= {running} THEN 'running' ELSE 'queued' END, 'schedule',
       'extra-' || g, CASE WHEN g % 5 = 0 THEN 'pod' ELSE 'inline' END, 'allow',
       now() - make_interval(secs => g), CASE WHEN g <= {running} THEN now() END,
       CASE WHEN g <= {running} THEN 'L' || (g % 3) END,
       CASE WHEN g <= {running} THEN now() + interval '30 seconds' END
FROM generate_series(1, {running} + {queued}) AS g;
INSERT INTO outbox (topic, payload, created_at, published_at)
SELECT 'job_runs', '{{}}'::jsonb, now() - make_interval(secs => g),
       CASE WHEN g > 500 THEN now() END
FROM generate_series(1, 5000) AS g;
INSERT INTO launcher_heartbeat (launcher_id, host, pid, version, started_at, beat_at)
SELECT 'L' || g, 'host', g, 'bench', now() - interval '1 hour', now() - make_interval(secs => g)
FROM generate_series(0, 2) AS g;
ANALYZE run_log;
ANALYZE outbox;
"""


def catalog_text() -> str:
    jobs = "\n".join(
        f'  job_{i:02d}:\n    command: ["true"]\n    schedules: [{{cron: "{i} * * * *"}}]'
        for i in range(JOBS)
    )
    return (
        "version: 1\ndefaults: {executor: inline, overlap: allow, max_attempts: 2, deadline: 5m}\n"
        f"jobs:\n{jobs}\n"
    )


async def in_process(url: str, workdir: Path, scrapes: int) -> tuple[list[float], list[float], int]:
    """Scrape times (seconds) of a launcher's exporter with the gauge cache off, the part of
    each spent reading the run log's gauges, and the text's size."""
    (workdir / "catalog.yaml").write_text(catalog_text())
    metrics = LauncherMetrics()
    metrics.prime(load_catalog(workdir / "catalog.yaml"), ("inline", "pod"), "bench")
    store = PostgresStore(url)
    await store.open()
    try:
        exporter = Exporter(store, metrics, cache_seconds=0.0)
        size = len(await exporter.scrape())  # the pool's first connection is not the figure
        times, reads = [], []
        for _ in range(scrapes):
            t0 = time.perf_counter()
            await exporter.refresh()  # what `scrape` does first ...
            t1 = time.perf_counter()
            generate_latest(exporter.registry)  # ... and then
            times.append(time.perf_counter() - t0)
            reads.append(t1 - t0)
        return times, reads, size
    finally:
        await store.close()


def over_http(base: str, token: str, scrapes: int) -> list[float]:
    times = []
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as client:
        client.get("/metrics").raise_for_status()
        for _ in range(scrapes):
            time.sleep(2.1)  # past the exporter's gauge cache: each scrape reads the database
            t0 = time.perf_counter()
            client.get("/metrics").raise_for_status()
            times.append(time.perf_counter() - t0)
    return times


@contextlib.contextmanager
def database(args: argparse.Namespace, workdir: Path) -> Iterator[str]:
    with scratch_database("postgres", workdir) as url:
        store = PostgresStore(url)

        async def upgrade() -> None:
            await store.open()
            await store.upgrade()
            await store.close()

        asyncio.run(upgrade())
        took = seed(url, args.rows)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                EXTRA_SQL.format(jobs=JOBS, running=args.running, queued=args.queued).encode()
            )
            total = conn.execute(b"SELECT count(*) FROM run_log").fetchone()
        print(f"seeded {total[0] if total else 0:,} run_log rows in {took:.1f} s")
        yield url


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--queued", type=int, default=2_000)
    ap.add_argument("--running", type=int, default=50)
    ap.add_argument("--scrapes", type=int, default=30, help="per mode and round")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-http", action="store_true", help="only the in-process scrape")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, database(args, Path(tmp)) as url:
        rounds: dict[str, list[float]] = {"in process": [], "gauge reads": [], "http": []}
        for n in range(1, args.repeat + 1):
            times, reads, size = asyncio.run(in_process(url, Path(tmp), args.scrapes))
            rounds["in process"].append(median(times))
            rounds["gauge reads"].append(median(reads))
            print(
                f"round {n} in process: median {median(times) * 1000:.2f} ms, "
                f"p99 {percentile(times, 99) * 1000:.2f} ms ({size:,} bytes); of which the "
                f"gauges' queries: median {median(reads) * 1000:.2f} ms"
            )
        if not args.no_http:
            token = asyncio.run(operator_token(url))
            with web_server(url, Path(tmp)) as (base, _pid):
                for n in range(1, args.repeat + 1):
                    times = over_http(base, token, args.scrapes)
                    rounds["http"].append(median(times))
                    print(
                        f"round {n} http: median {median(times) * 1000:.2f} ms, "
                        f"p99 {percentile(times, 99) * 1000:.2f} ms"
                    )
        for mode, medians in rounds.items():
            if medians:
                print(f"{mode}: median of {len(medians)} rounds {median(medians) * 1000:.2f} ms")


if __name__ == "__main__":
    main()
