"""The runs page's CPU against the API's run list, in process: what each costs the server.

The app (`runlane.api.app.create_app`, UI included) is driven in this process through ASGI
calls made by hand (no sockets, no HTTP client: only the server's own work is counted), over a
PostgreSQL database seeded as `bench/api_runs.py` seeds it (PostgreSQL's own CPU is another
process's and is not counted). `GET /runs?…` with a session cookie (logged in through the form)
and `Accept-Encoding: gzip` as a browser sends it, against `GET /api/v1/runs?…&limit=50` with a
bearer token; for each filter, `--requests` requests per side and round after a warm-up,
one after the other, page and API in turn (so the machine's drift falls on both alike).
Prints the process CPU per request (ms, the median request) per round and the medians. `--profile` runs cProfile
over `--requests` of each side (no filter; interleaved too, a profiler per side) and prints
the functions whose own time differs most, then each side's top functions.

    .venv/bin/python bench/web_runs_cpu.py --url postgresql://…/seeded --no-seed
    .venv/bin/python bench/web_runs_cpu.py --url postgresql://…/seeded --no-seed --profile
    .venv/bin/python bench/web_runs_cpu.py --rows 2000 --requests 20 --repeat 1   # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import re
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
from _common import CATALOG, median
from api_runs import FILTERS, PAGE, database, operator_token, prepare

from runlane.api.app import create_app
from runlane.service.config import Settings

CSRF = re.compile(r'name="csrf_token" value="([^"]*)"')
CASES = ("none", "job", "status", "requested_by")
Call = Callable[[], Awaitable[int]]


def asgi_get(
    app: Any, path: str, query: dict[str, str], headers: list[tuple[bytes, bytes]]
) -> Call:
    """A GET of `path?query` sent straight to the ASGI app; the call returns the body's size
    (raises on a status other than 200)."""
    scope_base = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": urlencode(query).encode(),
        "root_path": "",
        "headers": [(b"host", b"bench"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }
    never = asyncio.Event()

    async def call() -> int:
        sent = False
        status = 0
        size = 0

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await never.wait()  # the client never goes away
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status, size
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                size += len(message.get("body", b""))

        await app({**scope_base, "state": {}}, receive, send)
        if status != 200:
            raise SystemExit(f"GET {path} {query}: {status}")
        return size

    return call


async def session_cookie(app: Any, secret: str) -> str:
    """Log in through the form (httpx over ASGI, once) and return the session cookie."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        form = await client.get("/login")
        found = CSRF.search(form.text)
        if found is None:
            raise SystemExit(f"GET /login: no form ({form.status_code})")
        answer = await client.post("/login", data={"token": secret, "csrf_token": found.group(1)})
        if answer.status_code != 303:
            raise SystemExit(f"POST /login: {answer.status_code} {answer.text[:300]}")
        value = client.cookies.get("runlane_session")
        if value is None:
            raise SystemExit("POST /login set no session cookie")
        return value


async def cpu_ms(calls: dict[str, Call], n: int) -> dict[str, float]:
    """Process CPU (ms) of each of `calls`: the median of `n` calls each, interleaved (one of
    each in turn), so that the machine's drift falls on every side alike; the median rather
    than the mean, so that a call the machine's other work slowed does not move it."""
    spent: dict[str, list[float]] = {side: [] for side in calls}
    clock = time.process_time
    for _ in range(n):
        for side, call in calls.items():
            t0 = clock()
            await call()
            spent[side].append(clock() - t0)
    return {side: median(times) * 1000 for side, times in spent.items()}


async def profiled(calls: dict[str, Call], n: int) -> dict[str, pstats.Stats]:
    """cProfile of `n` calls of each of `calls`, interleaved (one of each in turn, a profiler
    each), so that the machine's drift over the minutes falls on every side alike."""
    profilers = {side: cProfile.Profile() for side in calls}
    for _ in range(n):
        for side, call in calls.items():
            profilers[side].enable()
            await call()
            profilers[side].disable()
    return {side: pstats.Stats(p) for side, p in profilers.items()}


def own_times(stats: pstats.Stats) -> dict[str, float]:
    out: dict[str, float] = {}
    for (file, line, name), (_cc, _nc, tt, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        out[f"{Path(file).name}:{line}({name})"] = tt
    return out


def print_top(title: str, stats: pstats.Stats, n: int, count: int) -> None:
    buf = io.StringIO()
    stats.stream = buf  # type: ignore[attr-defined]
    stats.sort_stats("tottime").print_stats(count)
    print(f"\n== {title}: top {count} by own time, {n} requests")
    print("\n".join(buf.getvalue().splitlines()[4:]))


async def bench(url: str, args: argparse.Namespace) -> None:
    secret = await operator_token(url)
    with tempfile.TemporaryDirectory() as tmp:
        catalog = Path(tmp) / "catalog.yaml"
        catalog.write_text(CATALOG)
        settings = Settings(database_url=url, catalog_path=str(catalog), log_dir=tmp)
        app = create_app(settings)
        async with app.router.lifespan_context(app):
            cookie = await session_cookie(app, secret)
            page_headers = [
                (b"cookie", f"runlane_session={cookie}".encode()),
                (b"accept-encoding", b"gzip, deflate, br, zstd"),
                (b"accept", b"text/html"),
            ]
            api_headers = [(b"authorization", f"Bearer {secret}".encode())]
            sides: dict[str, dict[str, Call]] = {"page": {}, "api": {}, "api basic": {}}
            for name in CASES:
                flt = FILTERS[name]
                sides["page"][name] = asgi_get(app, "/runs", flt, page_headers)
                sides["api"][name] = asgi_get(
                    app, "/api/v1/runs", {**flt, "limit": str(PAGE)}, api_headers
                )
                sides["api basic"][name] = asgi_get(
                    app, "/api/v1/runs", {**flt, "limit": str(PAGE), "view": "basic"}, api_headers
                )
            for side in sides.values():  # warm: each shape planned, the caches filled
                for call in side.values():
                    for _ in range(args.warm):
                        await call()
            sizes = {s: await calls["none"]() for s, calls in sides.items()}
            print(
                f"bytes sent, no filter: page {sizes['page']:,} (gzip), api {sizes['api']:,},"
                f" api basic {sizes['api basic']:,}"
            )
            if args.profile:
                await profile(sides, args)
                return
            figures: dict[tuple[str, str], list[float]] = {}
            for rnd in range(1, args.repeat + 1):
                for name in CASES:
                    got = await cpu_ms(
                        {s: calls[name] for s, calls in sides.items()}, args.requests
                    )
                    for side, ms in got.items():
                        figures.setdefault((name, side), []).append(ms)
                    print(
                        f"round {rnd} {name:<13} page {got['page']:.3f}  api {got['api']:.3f}"
                        f"  api basic {got['api basic']:.3f} ms CPU/request"
                    )
    print(f"\nCPU per request (ms), medians of {args.repeat} rounds of {args.requests}:")
    for name in CASES:
        page, api = median(figures[(name, "page")]), median(figures[(name, "api")])
        basic = median(figures[(name, "api basic")])
        print(
            f"  {name:<13} page {page:.3f}  api {api:.3f}  difference {page - api:+.3f}"
            f"  (api basic {basic:.3f})"
        )


async def profile(sides: dict[str, dict[str, Call]], args: argparse.Namespace) -> None:
    stats = await profiled({side: calls["none"] for side, calls in sides.items()}, args.requests)
    page, api = own_times(stats["page"]), own_times(stats["api"])
    diff = {k: page.get(k, 0.0) - api.get(k, 0.0) for k in page.keys() | api.keys()}
    n = args.requests
    total = {s: sum(own_times(st).values()) / n * 1000 for s, st in stats.items()}
    print(f"\nprofiled own time per request: page {total['page']:.3f} ms, api {total['api']:.3f}")
    print(f"== where the page spends more than the API (ms per request, of {n})")
    for key, d in sorted(diff.items(), key=lambda kv: -abs(kv[1]))[: args.top]:
        print(f"  {d / n * 1000:+.4f}  page {page.get(key, 0) / n * 1000:.4f}  {key}")
    for side, st in stats.items():
        print_top(side, st, n, args.top)
    for side, st in stats.items():
        buf = io.StringIO()
        st.stream = buf  # type: ignore[attr-defined]
        st.sort_stats("cumulative").print_stats(args.top)
        print(f"\n== {side}: top {args.top} by cumulative time")
        print("\n".join(buf.getvalue().splitlines()[4:]))


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
    ap.add_argument("--requests", type=int, default=300, help="per case, side and round")
    ap.add_argument("--warm", type=int, default=20, help="requests per case and side first")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="cProfile instead of the rounds")
    ap.add_argument("--top", type=int, default=25, help="--profile: lines of each listing")
    ap.add_argument("--url", help="a database to use instead of a scratch one (kept)")
    ap.add_argument("--no-seed", action="store_true", help="with --url: it is seeded already")
    args = ap.parse_args()
    with database(args) as url:
        asyncio.run(prepare(url, args))
        asyncio.run(bench(url, args))


if __name__ == "__main__":
    main()
