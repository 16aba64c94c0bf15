"""What serving HTTP beside the launcher costs it: throughput and idle pickup with HTTP on and
off, in alternating rounds on PostgreSQL, and the resident memory of an idle `runlane web`.

- Throughput: bench/throughput.py's measurement (a `runlane serve` process, 2,000 runs of
  `true` queued first, timed by the database), with `RUNLANE_HTTP_ADDR` off or on a free
  loopback port; with HTTP on, a client asks `/readyz` every second meanwhile, as a readiness
  probe does.
- Pickup: bench/latency.py's measurement (an idle launcher in this process, runs accepted by
  another), with the HTTP server in the same event loop when on, as `runlane serve` runs it.
- Memory: `runlane web` started on a scratch database, asked `/healthz`, `/readyz`, the
  OpenAPI document, the jobs and a page of runs (with a viewer's token) a few times, then its
  RSS read.

Rounds alternate (off, on, then on, off, ...) so a drift of the machine falls on both. Prints
one line per round and the medians.

    PYTHONPATH=src .venv/bin/python bench/http_overhead.py --repeat 3
    PYTHONPATH=src .venv/bin/python bench/http_overhead.py --quick   # tests/integration/test_bench_smoke.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import latency
import structlog
import throughput
from _common import CATALOG, median, percentile, rss_mib, runlane_cmd, scratch_database

from runlane.api.app import create_app
from runlane.api.server import bind_socket, serve_http
from runlane.service.config import Settings


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def prober(port: int | None) -> Iterator[list[int]]:
    """A readiness probe: GET /readyz every second on `port` (None: nothing) until the block
    ends; the statuses it got."""
    statuses: list[int] = []
    done = threading.Event()

    def probe() -> None:
        with httpx.Client(timeout=5) as client:
            while not done.wait(1.0):
                try:
                    statuses.append(client.get(f"http://127.0.0.1:{port}/readyz").status_code)
                except httpx.TransportError:
                    statuses.append(0)  # not up yet, or gone

    thread = threading.Thread(target=probe, daemon=True) if port is not None else None
    if thread is not None:
        thread.start()
    try:
        yield statuses
    finally:
        done.set()
        if thread is not None:
            thread.join(10)


def throughput_round(http: bool, runs: int, concurrency: int) -> tuple[float, float, list[int]]:
    """runs/s and launcher+PostgreSQL CPU ms per run of one `runlane serve`, HTTP on or off."""
    port = free_port() if http else None
    os.environ["RUNLANE_HTTP_ADDR"] = f"127.0.0.1:{port}" if http else "off"
    try:
        with prober(port) as statuses:
            result = throughput.one("postgres", runs, concurrency)
    finally:
        os.environ["RUNLANE_HTTP_ADDR"] = "off"
    return result["runs_per_s"], result["cpu_ms_per_run"], statuses


async def pickup_with(http: bool, url: str, work: Path, samples: int) -> list[float]:
    """Pickup latencies (ms) of an idle in-process launcher, the HTTP server beside it when on."""
    if not http:
        return (await latency.measure(url, work, samples))[0]
    settings = Settings(
        database_url=url, catalog_path=str(work / "catalog.yaml"), log_dir=str(work / "logs")
    )
    sock = bind_socket("127.0.0.1", 0)
    stop, started = asyncio.Event(), asyncio.Event()
    server = asyncio.create_task(
        serve_http(create_app(settings), "127.0.0.1", 0, stop=stop, started=started, sock=sock)
    )
    await asyncio.wait_for(started.wait(), 30)
    try:
        return (await latency.measure(url, work, samples))[0]
    finally:
        stop.set()
        await asyncio.wait_for(server, 30)


def pickup_round(http: bool, samples: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "catalog.yaml").write_text(CATALOG)
        with scratch_database("postgres", work) as url:
            subprocess.run(
                [*runlane_cmd(), "db", "upgrade"],
                env=dict(os.environ, RUNLANE_DATABASE_URL=url),
                check=True,
                capture_output=True,
            )
            lat = asyncio.run(pickup_with(http, url, work, samples))
    return percentile(lat, 50), percentile(lat, 99)


def web_rss(requests: int) -> float:
    """RSS (MiB) of an idle `runlane web` after start and `requests` rounds of requests."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "catalog.yaml").write_text(CATALOG)
        with scratch_database("postgres", work) as url:
            port = free_port()
            env = dict(
                os.environ,
                RUNLANE_DATABASE_URL=url,
                RUNLANE_CATALOG=str(work / "catalog.yaml"),
                RUNLANE_HTTP_ADDR=f"127.0.0.1:{port}",
                RUNLANE_LOG_LEVEL="warning",
            )
            subprocess.run(
                [*runlane_cmd(), "db", "upgrade"], env=env, check=True, capture_output=True
            )
            made = subprocess.run(
                [*runlane_cmd(), "token", "create", "bench", "--role", "viewer", "--json"],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
            bearer = {"Authorization": f"Bearer {json.loads(made.stdout)['secret']}"}
            proc = subprocess.Popen([*runlane_cmd(), "web"], env=env, stderr=subprocess.PIPE)
            try:
                base = f"http://127.0.0.1:{port}"
                deadline = time.monotonic() + 60
                with httpx.Client(base_url=base, timeout=5, headers=bearer) as client:
                    while True:
                        try:
                            client.get("/healthz")
                            break
                        except httpx.TransportError:
                            if time.monotonic() > deadline or proc.poll() is not None:
                                raise SystemExit("runlane web did not answer") from None
                            time.sleep(0.05)
                    for _ in range(requests):
                        for path in (
                            "/healthz",
                            "/readyz",
                            "/api/v1/openapi.json",
                            "/api/v1/jobs",
                            "/api/v1/runs?limit=50",
                        ):
                            client.get(path).raise_for_status()
                time.sleep(1.0)  # idle again
                return rss_mib(proc.pid)
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(30)


def main() -> None:
    # The in-process launcher logs as `runlane serve` does under the benches: warnings only.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, once: checks it works")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.samples, args.repeat = 50, 10, 1
    figures: dict[str, dict[str, list[float]]] = {"off": {}, "on": {}}
    for i in range(args.repeat):
        order = ("off", "on") if i % 2 == 0 else ("on", "off")
        for mode in order:
            http = mode == "on"
            rate, cpu, statuses = throughput_round(http, args.runs, args.concurrency)
            p50, p99 = pickup_round(http, args.samples)
            ok = sum(1 for s in statuses if s == 200)
            answered = sum(1 for s in statuses if s != 0)  # 0: before `serve` listened, or after
            for key, value in (
                ("runs_per_s", rate),
                ("cpu_ms_per_run", cpu),
                ("p50", p50),
                ("p99", p99),
            ):
                figures[mode].setdefault(key, []).append(value)
            probes = f" probes: {ok} of {answered} answered 200" if http else ""
            print(
                f"[http {mode} #{i + 1}] runs_per_s={rate:.1f} cpu_ms_per_run={cpu:.3f} "
                f"pickup p50={p50:.2f} ms p99={p99:.2f} ms{probes}",
                flush=True,
            )
    for mode in ("off", "on"):
        f = figures[mode]
        print(
            f"[http {mode} median of {args.repeat}] runs_per_s={median(f['runs_per_s']):.1f} "
            f"cpu_ms_per_run={median(f['cpu_ms_per_run']):.3f} "
            f"pickup p50={median(f['p50']):.2f} ms p99={median(f['p99']):.2f} ms"
        )
    rss = [web_rss(3 if args.quick else 20) for _ in range(args.repeat)]
    print(
        f"[runlane web] idle RSS median of {len(rss)}={median(rss):.1f} MiB "
        + " ".join(f"{r:.1f}" for r in rss)
    )


if __name__ == "__main__":
    main()
