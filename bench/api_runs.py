"""The run list's pages over a large run log: latency of `list_runs_page` with 20 clients.

Seeds a scratch PostgreSQL database with `--rows` run_log rows (1,000,000 by default) in one
INSERT ... SELECT generate_series (the run_log indexes are dropped first and rebuilt after, as a
restore would), spread over six months the way a busy catalog fills it: 50 jobs of skewed
popularity, mostly successes, schedule-triggered mostly, manual and CLI runs requested by ten
people. Then, for each filter (none, job, status, requested_by, and trigger, which has no index
of its own), it measures a first page (limit=50) and a page 10,000 rows deep (the cursor is
reached by walking the pages, as a client would), `--requests` requests each from `--clients`
concurrent clients, through the operations layer (`operations.list_runs_page`, what the API's
`GET /api/v1/runs` calls). Prints p50/p99 per case and round, then the medians of the rounds.

    .venv/bin/python bench/api_runs.py                      # 1,000,000 rows, 3 rounds
    .venv/bin/python bench/api_runs.py --rows 2000 --requests 20 --repeat 1   # smoke
    .venv/bin/python bench/api_runs.py --url postgresql://…/seeded --no-seed  # reuse a seed

`--http` also runs the same cases through the real HTTP server: `runlane web` (uvicorn) in its
own process, httpx clients with an operator token made through the operations layer, and then
measures `POST /api/v1/jobs/noop/runs` and an idempotent replay of one (`Idempotency-Key`).
Each HTTP figure comes with the server process's CPU per request (from /proc). `--client raw`
measures the GETs with a light keep-alive socket client instead (`RawClient`: httpx itself
costs ~2 ms of CPU per 50-run page on the same cores), `--client both` with each in turn.

    .venv/bin/python bench/api_runs.py --http               # both
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import psycopg
from _common import CATALOG, cpu_seconds, median, percentile, runlane_cmd, scratch_database

from runlane.adapters.postgres import PostgresStore
from runlane.service.config import Settings
from runlane.service.operations import list_runs_page
from runlane.service.runtime import Runtime

DEEP = 10_000  # rows before the deep page
PAGE = 50
USERS = 10

# Rows spread over six months, newest first by g; statuses, triggers and requesters drawn from
# fixed shares (setseed: the same log every time). `power(random(), 2.5)` skews the jobs: job_00
# has about 18 % of the runs, job_49 about 0.4 %.
SEED_SQL = """
INSERT INTO run_log (id, job, status, trigger, requested_by, params, dedupe_key, executor,
                     overlap, attempt, max_attempts, deadline_seconds, kill_grace_seconds,
                     queued_at, started_at, finished_at, exit_code, end_reason, log_tail)
SELECT gen_random_uuid(), job, status, trigger,
       CASE WHEN trigger IN ('manual', 'cli')
            THEN 'user' || lpad(floor(r_user * {users})::int::text, 2, '0') END,
       '{{}}'::jsonb, 'seed-' || g, 'inline', 'allow', 1, 1, 3600, 30,
       queued_at,
       CASE WHEN status <> 'queued' THEN queued_at + interval '1 second' END,
       CASE WHEN status NOT IN ('queued', 'running') THEN queued_at + interval '30 seconds' END,
       CASE WHEN status = 'success' THEN 0 WHEN status = 'failure' THEN 1 END,
       CASE WHEN status NOT IN ('queued', 'running') THEN 'exit' END,
       CASE WHEN status NOT IN ('queued', 'running') AND {tail_lines} > 0
            THEN repeat(md5(g::text) || ' a line of the run''s output, as it printed it' || chr(10),
                        {tail_lines}) END
FROM (
    SELECT g, r_user,
           'job_' || lpad(floor(power(r_job, 2.5) * 50)::int::text, 2, '0') AS job,
           CASE WHEN g <= 20 THEN 'queued' WHEN g <= 40 THEN 'running'
                WHEN r_status < 0.90 THEN 'success' WHEN r_status < 0.96 THEN 'failure'
                WHEN r_status < 0.97 THEN 'timeout' WHEN r_status < 0.98 THEN 'cancelled'
                ELSE 'skipped' END AS status,
           CASE WHEN r_trigger < 0.70 THEN 'schedule' WHEN r_trigger < 0.80 THEN 'manual'
                WHEN r_trigger < 0.85 THEN 'cli' WHEN r_trigger < 0.93 THEN 'chain'
                WHEN r_trigger < 0.98 THEN 'event' ELSE 'retry' END AS trigger,
           now() - make_interval(secs => g::float8 * {span} / {rows} + r_jitter * 60) AS queued_at
    FROM (SELECT g, random() AS r_job, random() AS r_status, random() AS r_trigger,
                 random() AS r_user, random() AS r_jitter
          FROM generate_series(1, {rows}) AS g) AS draws
) AS runs
"""
SPAN_SECONDS = 183 * 86400

FILTERS: dict[str, dict[str, str]] = {
    "none": {},
    "job": {"job": "job_05"},
    "status": {"status": "failure"},
    "requested_by": {"requested_by": "user07"},
    "trigger": {"trigger": "manual"},
    # The worst cases without an index of their own: a rare job (0.8 % of the runs) and one
    # that has no run yet (a new job, a typo), which walks every row of the log to say so.
    "rare job": {"job": "job_49"},
    "no such job": {"job": "job_new"},
}


# One line of a seeded run's saved log tail (`--tail-bytes`): 32 + 45 + 1 bytes.
TAIL_LINE_BYTES = 78


def seed(url: str, rows: int, tail_bytes: int = 0) -> float:
    """Fill run_log with `rows` rows; the seconds it took (indexes rebuilt included). With
    `tail_bytes`, every finished run has a saved log tail of about that size (a finished
    inline run keeps its last 100 lines / 64 KiB), as a real run log has; without, none."""
    t0 = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'run_log' "
            "AND indexname NOT IN ('run_log_pkey', 'run_log_dedupe_key_key')"
        ).fetchall()
        for name, _ in indexes:
            conn.execute(f'DROP INDEX "{name}"')
        conn.execute("SELECT setseed(0.42)")
        lines = tail_bytes // TAIL_LINE_BYTES
        sql = SEED_SQL.format(rows=rows, span=SPAN_SECONDS, users=USERS, tail_lines=lines)
        conn.execute(sql.encode())
        conn.execute("SET maintenance_work_mem = '256MB'")
        for _, definition in indexes:
            conn.execute(definition.encode())
        conn.execute("VACUUM (ANALYZE) run_log")
    return time.perf_counter() - t0


async def deep_cursor(
    call: Callable[..., Awaitable[tuple[list[str], str | None]]], flt: dict[str, str]
) -> str | None:
    """The cursor of the page after row DEEP of `flt`, reached by walking the pages."""
    cursor: str | None = None
    for _ in range(DEEP // PAGE):
        _, cursor = await call(limit=PAGE, cursor=cursor, **flt)
        if cursor is None:
            return None
    return cursor


async def measure(
    call: Callable[..., Awaitable[Any]],
    kwargs: dict[str, Any],
    requests: int,
    clients: int,
    rate: float = 0.0,
) -> tuple[float, float]:
    """p50 and p99 (ms) of `requests` calls from `clients` clients, each sending its next
    request when the last is answered and, with `rate` (requests per second of each client),
    not before its next 1/rate s slot. Back to back (rate 0) the figure is a throughput bound:
    20 clients each waiting on its last answer see 20 / (pages per second) at the median."""
    latencies: list[float] = []
    left = requests

    async def client(offset: float) -> None:
        nonlocal left
        interval = 1 / rate if rate > 0 else 0.0
        next_at = time.perf_counter() + offset * interval
        while left > 0:
            left -= 1
            if interval:
                await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
                next_at += interval
            t0 = time.perf_counter()
            await call(**kwargs)
            latencies.append((time.perf_counter() - t0) * 1000)

    await asyncio.gather(*(client(i / clients) for i in range(clients)))
    return percentile(latencies, 50), percentile(latencies, 99)


async def run_cases(
    call: Callable[..., Awaitable[tuple[list[str], str | None]]],
    args: argparse.Namespace,
    server_cpu: Callable[[], float] | None = None,
) -> dict[str, list[tuple[float, ...]]]:
    """Every filter's first and deep page, `args.repeat` rounds of `args.requests` each; with
    `server_cpu` (the server's CPU seconds so far), each figure also holds the server's CPU
    per request in ms."""
    clients = args.clients
    cases: dict[str, dict[str, Any]] = {}
    for name, flt in FILTERS.items():
        cases[f"{name} first"] = {"limit": PAGE, **flt}
        cursor = await deep_cursor(call, flt) if args.rows > DEEP else None
        if cursor is not None:
            cases[f"{name} deep"] = {"limit": PAGE, "cursor": cursor, **flt}
        elif args.rows > DEEP:
            print(f"  ({name}: fewer than {DEEP} rows match; no deep page)")
    for kwargs in cases.values():  # warm: each shape planned, the pool full
        await measure(call, kwargs, clients, clients, args.rate)
    figures: dict[str, list[tuple[float, ...]]] = {name: [] for name in cases}
    for rnd in range(1, args.repeat + 1):
        for name, kwargs in cases.items():
            cpu0 = server_cpu() if server_cpu else 0.0
            p50, p99 = await measure(call, kwargs, args.requests, clients, args.rate)
            if server_cpu:
                cpu = (server_cpu() - cpu0) / args.requests * 1000
                figures[name].append((p50, p99, cpu))
                extra = f" server CPU {cpu:.2f} ms/request"
            else:
                figures[name].append((p50, p99))
                extra = ""
            print(f"round {rnd} {name:<20} p50={p50:.2f} ms p99={p99:.2f} ms{extra}", flush=True)
    return figures


def report(title: str, figures: dict[str, list[tuple[float, ...]]]) -> None:
    print(f"\n{title}: medians of {len(next(iter(figures.values())))} rounds")
    for name, rounds in figures.items():
        p50 = median([r[0] for r in rounds])
        p99 = median([r[1] for r in rounds])
        cpu = (
            f" server CPU {median([r[2] for r in rounds]):.2f} ms/request"
            if len(rounds[0]) > 2
            else ""
        )
        print(f"  {name:<20} p50={p50:.2f} ms p99={p99:.2f} ms{cpu}")


async def operations_mode(url: str, args: argparse.Namespace) -> None:
    store = PostgresStore(url, pool_max=args.pool)
    await store.open()
    rt = Runtime(settings=Settings(database_url=url), store=store, catalog=None)
    try:

        async def call(**kwargs: Any) -> tuple[list[str], str | None]:
            page = await list_runs_page(rt, **kwargs)
            return [r.id for r in page.items], page.next_cursor

        figures = await run_cases(call, args)
        pace = f"{args.rate:g}/s each" if args.rate else "back to back"
        title = f"operations.list_runs_page, {args.clients} clients ({pace}), pool {args.pool}"
        report(title, figures)
    finally:
        await store.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def operator_token(url: str) -> str:
    """A fresh operator token's secret, made through the operations layer (as `runlane token
    create` does)."""
    from runlane.core.access import Role
    from runlane.service.operations import Requester, create_token

    store = PostgresStore(url)
    await store.open()
    rt = Runtime(settings=Settings(database_url=url), store=store, catalog=None)
    try:
        name = f"bench-{uuid.uuid4().hex[:8]}"
        made = await create_token(rt, name, role=Role.OPERATOR, requester=Requester(name="bench"))
        return made.secret
    finally:
        await store.close()


@contextlib.contextmanager
def web_server(url: str, workdir: Path) -> Iterator[tuple[str, int]]:
    """`runlane web` in its own process (its own CPU, as in production) on a free port; its
    base URL, once `/healthz` answers, and its pid."""
    catalog = workdir / "catalog.yaml"
    catalog.write_text(CATALOG)
    port = free_port()
    env = {
        **os.environ,
        "RUNLANE_DATABASE_URL": url,
        "RUNLANE_CATALOG": str(catalog),
        "RUNLANE_HTTP_ADDR": f"127.0.0.1:{port}",
    }
    proc = subprocess.Popen(
        [*runlane_cmd(), "web"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(workdir / "web.log").open("wb"),
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"runlane web exited: {(workdir / 'web.log').read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit("runlane web did not answer /healthz in 30 s")
            time.sleep(0.1)  # a benchmark's start-up poll, not a test's synchronisation
        yield base, proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class RawClient:
    """A light HTTP/1.1 client for the run-list GETs: `size` keep-alive connections over
    asyncio streams, each request written by hand and its answer read by Content-Length, its
    JSON body parsed with `json.loads` (as a client must, to read `next_cursor`). It measures
    what the server and the network cost without httpx's own ~2 ms of CPU per 50-run page on
    the same two cores; httpx stays the default, the figure a typical Python client sees."""

    def __init__(self, base: str, secret: str, size: int) -> None:
        host, port = base.removeprefix("http://").rsplit(":", 1)
        self.host, self.port, self.size = host, int(port), size
        self.head = f"Host: {host}:{port}\r\nAuthorization: Bearer {secret}\r\n\r\n".encode()
        self.idle: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
            asyncio.Queue()
        )

    async def open(self) -> None:
        for _ in range(self.size):
            self.idle.put_nowait(await asyncio.open_connection(self.host, self.port))

    async def close(self) -> None:
        while not self.idle.empty():
            _, writer = self.idle.get_nowait()
            writer.close()

    async def get_json(self, target: str) -> tuple[int, Any]:
        reader, writer = await self.idle.get()
        try:
            writer.write(f"GET {target} HTTP/1.1\r\n".encode() + self.head)
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ", 2)[1])
            length = next(
                int(line.split(":", 1)[1])
                for line in lines[1:]
                if line.lower().startswith("content-length:")
            )
            body = await reader.readexactly(length)
        finally:
            self.idle.put_nowait((reader, writer))
        return status, json.loads(body)


async def raw_cases(
    base: str, secret: str, pid: int, args: argparse.Namespace
) -> dict[str, list[tuple[float, ...]]]:
    """The run-list cases again, with `RawClient` instead of httpx."""
    raw = RawClient(base, secret, args.clients)
    await raw.open()
    try:

        async def call(**kwargs: Any) -> tuple[list[str], str | None]:
            params = {k: v for k, v in kwargs.items() if v is not None}
            status, body = await raw.get_json(f"/api/v1/runs?{urlencode(params)}")
            if status != 200:
                raise SystemExit(f"GET /api/v1/runs {kwargs}: {status} {body}")
            return [r["id"] for r in body["items"]], body["next_cursor"]

        return await run_cases(call, args, lambda: cpu_seconds(pid))
    finally:
        await raw.close()


async def http_mode(url: str, args: argparse.Namespace) -> None:
    """The same cases through `runlane web` (uvicorn) with httpx clients and an operator
    token; then `POST /api/v1/jobs/noop/runs` and an idempotent replay of one."""
    secret = await operator_token(url)
    with tempfile.TemporaryDirectory() as tmp, web_server(url, Path(tmp)) as (base, pid):
        if args.client in ("raw", "both"):
            raw = await raw_cases(base, secret, pid, args)
            pace = f"{args.rate:g}/s each" if args.rate else "back to back"
            report(
                f"HTTP (runlane web, raw keep-alive client), {args.clients} clients ({pace})", raw
            )
            if args.client == "raw":
                return
        limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
        headers = {"Authorization": f"Bearer {secret}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, limits=limits) as client:

            async def call(**kwargs: Any) -> tuple[list[str], str | None]:
                params = {k: v for k, v in kwargs.items() if v is not None}
                resp = await client.get("/api/v1/runs", params=params)
                if resp.status_code != 200:
                    raise SystemExit(f"GET /api/v1/runs {kwargs}: {resp.status_code} {resp.text}")
                body = resp.json()
                return [r["id"] for r in body["items"]], body["next_cursor"]

            figures = await run_cases(call, args, lambda: cpu_seconds(pid))

            async def post(key: str | None = None) -> None:
                extra = {} if key is None else {"Idempotency-Key": key}
                resp = await client.post("/api/v1/jobs/noop/runs", json={}, headers=extra)
                if resp.status_code not in (200, 201):
                    raise SystemExit(f"POST /api/v1/jobs/noop/runs: {resp.status_code} {resp.text}")

            replay_key = f"bench-{uuid.uuid4().hex}"
            await post(replay_key)  # the first use; every later one replays it
            writes: dict[str, Callable[..., Awaitable[Any]]] = {
                "POST runs": post,
                "POST replay": lambda: post(replay_key),
            }
            for fn in writes.values():
                await measure(fn, {}, args.clients, args.clients, args.rate)  # warm
            for rnd in range(1, args.repeat + 1):
                for name, fn in writes.items():
                    cpu0 = cpu_seconds(pid)
                    p50, p99 = await measure(fn, {}, args.requests, args.clients, args.rate)
                    cpu = (cpu_seconds(pid) - cpu0) / args.requests * 1000
                    figures.setdefault(name, []).append((p50, p99, cpu))
                    print(f"round {rnd} {name:<20} p50={p50:.2f} ms p99={p99:.2f} ms", flush=True)
        pace = f"{args.rate:g}/s each" if args.rate else "back to back"
        report(f"HTTP (runlane web, httpx), {args.clients} clients ({pace})", figures)


@contextlib.contextmanager
def database(args: argparse.Namespace) -> Iterator[str]:
    if args.url:
        yield args.url
        return
    with tempfile.TemporaryDirectory() as tmp, scratch_database("postgres", Path(tmp)) as url:
        yield url


async def prepare(url: str, args: argparse.Namespace) -> None:
    store = PostgresStore(url)
    await store.open()
    try:
        await store.upgrade()
    finally:
        await store.close()
    if not args.no_seed:
        tail = getattr(args, "tail_bytes", 0)
        took = seed(url, args.rows, tail)
        print(
            f"seeded {args.rows:,} rows (log tails of {tail:,} bytes) in {took:.1f} s", flush=True
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument(
        "--tail-bytes",
        type=int,
        default=0,
        help="a saved log tail of about this size per finished run",
    )
    ap.add_argument("--requests", type=int, default=200, help="per case and round")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="requests per second of each client (default 0: back to back, a throughput bound)",
    )
    ap.add_argument("--pool", type=int, default=8, help="the store's pool (the API's: 8)")
    ap.add_argument("--url", help="a database to use instead of a scratch one (kept)")
    ap.add_argument("--no-seed", action="store_true", help="with --url: it is seeded already")
    ap.add_argument("--http", action="store_true", help="through `runlane web` (uvicorn) too")
    ap.add_argument("--http-only", action="store_true", help="only through `runlane web`")
    ap.add_argument(
        "--client",
        choices=("httpx", "raw", "both"),
        default="httpx",
        help="--http's clients: httpx (default), a raw keep-alive socket client (RawClient; "
        "no POST cases), or both in turn on one server",
    )
    args = ap.parse_args()
    with database(args) as url:
        asyncio.run(prepare(url, args))
        if not args.http_only:
            asyncio.run(operations_mode(url, args))
        if args.http or args.http_only:
            asyncio.run(http_mode(url, args))


if __name__ == "__main__":
    main()
