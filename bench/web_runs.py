"""The web UI's runs page over a large run log, next to the API's run list it is built on.

Seeds a scratch PostgreSQL database as `bench/api_runs.py` does (`--rows`, 1,000,000 by
default), starts `runlane web` in its own process, logs a browser in through the login form
(its session cookie), and for each filter of api_runs (none, job, status, requested_by,
trigger) measures the first page and a page 10,000 rows deep: `GET /runs?…` (the HTML page,
`operations.list_runs_page` rendered) and `GET /api/v1/runs?…&limit=50` (its JSON), `--requests`
requests each from `--clients` concurrent clients. Prints p50/p99 per case, page and API side
by side, and the median of the rounds.

    .venv/bin/python bench/web_runs.py                                  # 1,000,000 rows
    .venv/bin/python bench/web_runs.py --rows 2000 --requests 20 --repeat 1   # smoke
    .venv/bin/python bench/web_runs.py --url postgresql://…/seeded --no-seed  # reuse a seed
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
from pathlib import Path
from typing import Any

import httpx
from _common import median
from api_runs import DEEP, FILTERS, PAGE, database, measure, operator_token, prepare, web_server

CSRF = re.compile(r'name="csrf_token" value="([^"]*)"')


async def logged_in(client: httpx.AsyncClient, secret: str) -> None:
    """Log the client in through the form, as a browser does (the cookie stays in its jar)."""
    form = await client.get("/login")
    found = CSRF.search(form.text)
    if found is None:
        raise SystemExit(f"GET /login: no form ({form.status_code})")
    answer = await client.post("/login", data={"token": secret, "csrf_token": found.group(1)})
    if answer.status_code != 303:
        raise SystemExit(f"POST /login: {answer.status_code} {answer.text[:300]}")


async def deep_cursor(client: httpx.AsyncClient, flt: dict[str, str]) -> str | None:
    """The cursor after row DEEP of `flt`, walked through the API's pages."""
    cursor: str | None = None
    for _ in range(DEEP // PAGE):
        params = {**flt, "limit": PAGE, **({"cursor": cursor} if cursor else {})}
        body = (await client.get("/api/v1/runs", params=params)).json()
        cursor = body["next_cursor"]
        if cursor is None:
            return None
    return cursor


async def bench(url: str, args: argparse.Namespace) -> None:
    secret = await operator_token(url)
    with tempfile.TemporaryDirectory() as tmp, web_server(url, Path(tmp)) as (base, _pid):
        limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
        async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:
            await logged_in(client, secret)

            async def get(path: str, params: dict[str, Any]) -> None:
                resp = await client.get(path, params=params)
                if resp.status_code != 200:
                    raise SystemExit(f"GET {path} {params}: {resp.status_code} {resp.text[:300]}")

            cases: dict[str, dict[str, Any]] = {}
            for name, flt in FILTERS.items():
                cases[f"{name} first"] = dict(flt)
                cursor = await deep_cursor(client, flt) if args.rows > DEEP else None
                if cursor is not None:
                    cases[f"{name} deep"] = {**flt, "cursor": cursor}
            sides = {"page": ("/runs", {}), "api": ("/api/v1/runs", {"limit": PAGE})}
            figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
            for params in cases.values():  # warm: each shape planned, the pools full
                for path, extra in sides.values():
                    kw = {"path": path, "params": {**params, **extra}}
                    await measure(get, kw, args.clients, args.clients)
            for rnd in range(1, args.repeat + 1):
                for name, params in cases.items():
                    for side, (path, extra) in sides.items():
                        kw = {"path": path, "params": {**params, **extra}}
                        p50, p99 = await measure(get, kw, args.requests, args.clients)
                        figures.setdefault((name, side), []).append((p50, p99))
                        print(f"round {rnd} {name:<20} {side:<4} p50={p50:.2f} ms p99={p99:.2f} ms")
    print(f"\n{args.rows:,} rows, {args.clients} clients back to back: medians of {args.repeat}")
    for name in cases:
        line = f"  {name:<20}"
        for side in sides:
            rounds = figures[(name, side)]
            p50, p99 = median([r[0] for r in rounds]), median([r[1] for r in rounds])
            line += f"  {side} p50={p50:.2f} p99={p99:.2f} ms"
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--requests", type=int, default=100, help="per case, side and round")
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--url", help="a database to use instead of a scratch one (kept)")
    ap.add_argument("--no-seed", action="store_true", help="with --url: it is seeded already")
    args = ap.parse_args()
    with database(args) as url:
        asyncio.run(prepare(url, args))
        asyncio.run(bench(url, args))


if __name__ == "__main__":
    main()
