"""The web UI's figures (issue 16 §5), measured in Debian's Chromium (Playwright) and with httpx
against `runlane serve` (launcher and HTTP server in one process) on PostgreSQL:

- Jobs page with `--jobs` jobs (5,000): the server's time for `GET /jobs` (httpx on loopback,
  one request at a time, p50/p95 per round), and in the browser the total transfer of the page
  with everything it loads (bytes on the wire, gzip as Chromium asks) and the requests to any
  host other than the server (must be none).
- Runs page on `--rows` run_log rows (1,000,000; seeded as bench/api_runs.py seeds them) against
  the API's `GET /api/v1/runs?limit=50`, the same filters, one request at a time.
- A `--log-mb` MB log (100; its job's `log_max_bytes` is set above it, so the whole log is in
  the file): the time from opening the run page until its last lines are painted (navigation
  start to the paint of the server-rendered tail, Element Timing on the log, which must show
  the log's last line inside the viewport), and, while the run prints a
  line every 100 ms with its wall-clock time in it, how long each new line takes to reach the
  page (a MutationObserver notes when it arrives), p50/p95. The run page is opened in a new
  tab each time (`--repeat`), and then `--paints` times in the same tab, by a click on the
  run's link on `/runs?job=biglog` (how a person opens a run); beside both, the floor of each
  mode: `/healthz`'s first contentful paint in a new tab and in the same tab, and in a new tab the
  first paint of the UI's own 404 page for a run that does not exist (the same header, stylesheet
  and script as the run page, no log): what any page of this UI costs a new tab.

    .venv/bin/python bench/ui_pages.py                       # the figures (several minutes)
    .venv/bin/python bench/ui_pages.py --quick               # smoke: tiny sizes
    .venv/bin/python bench/ui_pages.py --url postgresql://…/seeded --no-seed

Chromium: /usr/bin/chromium or RUNLANE_TEST_CHROMIUM (apt-get install chromium).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from _common import median, percentile, runlane_cmd, scratch_database
from api_runs import free_port, operator_token, prepare

PY = sys.executable
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo")
RUNS_FILTERS: dict[str, dict[str, str]] = {
    "none": {},
    "job": {"job": "job_05"},
    "status": {"status": "failure"},
    "requested_by": {"requested_by": "user07"},
}

# The big log's job: `--log-mb` MB of numbered lines as fast as it can, a line `bulk done`,
# then a line `tick <n> <wall ms>` every 100 ms until the file named by its param exists.
BIGLOG = r"""
import os, sys, time, pathlib
mb = int(os.environ['RUNLANE_PARAM_MB'])
stop = pathlib.Path(os.environ['RUNLANE_PARAM_STOP'])
line = 'x' * 90
out = sys.stdout
for i in range(mb * 1024 * 1024 // 100):
    out.write(f'{i:08d} {line}\n')
out.write('bulk done\n')
out.flush()
n = 0
while not stop.exists():
    n += 1
    print(f'tick {n} {time.time() * 1000:.0f}', flush=True)
    time.sleep(0.1)
"""


def catalog(jobs: int, log_mb: int) -> str:
    """`jobs` jobs named as bench/api_runs.py's seed names its runs (job_00 ... job_49 have
    runs), every fifth with a schedule (a slot on 29 February: shown, never due during the
    bench), zones in turn; and the big log's job."""
    lines = [
        "version: 1",
        "global: {max_deadline: 1h, manual_queue_ttl: 1h, kill_grace: 1s}",
        "defaults: {executor: inline, overlap: allow, max_attempts: 1, deadline: 30m}",
        "jobs:",
    ]
    for i in range(jobs):
        lines.append(f"  job_{i:02d}:")
        lines.append(f"    command: [{PY}, -c, pass]")
        lines.append(f"    description: benchmark job number {i}")
        if i % 5 == 0:
            zone = ZONES[(i // 5) % len(ZONES)]
            lines.append(f'    schedules: [{{cron: "{i % 60} 3 29 2 *", tz: {zone}}}]')
    lines.append("  biglog:")
    lines.append(f"    command: [{PY}, -c, {json.dumps(BIGLOG)}]")
    lines.append("    params: {mb: int, stop: str}")
    lines.append(f"    log_max_bytes: {log_mb + 16}MiB")
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def served(url: str, workdir: Path, jobs: int, log_mb: int) -> Iterator[str]:
    """`runlane serve` (launcher and HTTP) on `url` with the generated catalog; its base URL."""
    (workdir / "catalog.yaml").write_text(catalog(jobs, log_mb))
    port = free_port()
    env = {
        **os.environ,
        "RUNLANE_DATABASE_URL": url,
        "RUNLANE_CATALOG": str(workdir / "catalog.yaml"),
        "RUNLANE_LOG_DIR": str(workdir / "logs"),
        "RUNLANE_HTTP_ADDR": f"127.0.0.1:{port}",
        "RUNLANE_LOG_LEVEL": "warning",
    }
    errors = (workdir / "serve.log").open("wb")
    proc = subprocess.Popen(
        [*runlane_cmd(), "serve"], env=env, stdout=subprocess.DEVNULL, stderr=errors
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise SystemExit(
                    f"runlane serve exited: {(workdir / 'serve.log').read_text()[-2000:]}"
                )
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit("runlane serve did not answer /healthz in 60 s")
            time.sleep(0.1)  # a benchmark's start-up poll, not a test's synchronisation
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        errors.close()


def timed_gets(client: httpx.Client, path: str, params: dict[str, str], n: int) -> list[float]:
    """`n` GETs one after the other; each one's milliseconds (whole body read)."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        resp = client.get(path, params=params)
        out.append((time.perf_counter() - t0) * 1000)
        if resp.status_code != 200:
            raise SystemExit(f"GET {path} {params}: {resp.status_code} {resp.text[:300]}")
    return out


def log_in(context: Any, base: str, token: str) -> Any:
    page = context.new_page()
    page.goto(f"{base}/login")
    page.locator("input[name=token]").fill(token)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"^(?!.*/login)"))
    return page


def jobs_page(
    base: str, context: Any, client: httpx.Client, args: argparse.Namespace
) -> dict[str, str]:
    """Server time of GET /jobs (httpx), then one load in the browser: bytes and hosts."""
    timed_gets(client, "/jobs", {}, 3)  # warm
    p50s, p95s = [], []
    for rnd in range(1, args.repeat + 1):
        ms = timed_gets(client, "/jobs", {}, args.requests)
        p50s.append(percentile(ms, 50))
        p95s.append(percentile(ms, 95))
        print(
            f"round {rnd} GET /jobs ({args.jobs} jobs) p50={p50s[-1]:.1f} ms p95={p95s[-1]:.1f} ms",
            flush=True,
        )
    html = client.get("/jobs", headers={"Accept-Encoding": "identity"})
    page = context.new_page()
    requests: list[Any] = []

    def finished(request: Any) -> None:
        # A def, not `requests.append`: Playwright keeps its wrapper as an attribute of the
        # handler, which a builtin method cannot take (AttributeError at the first event).
        requests.append(request)

    page.on("requestfinished", finished)
    page.goto(f"{base}/jobs", wait_until="load")
    page.wait_for_load_state("networkidle")
    server = urlsplit(base).netloc
    wire = 0
    third_party = []
    for req in requests:
        sizes = req.sizes()
        wire += sizes["responseHeadersSize"] + sizes["responseBodySize"]
        parts = urlsplit(req.url)
        if parts.scheme in ("http", "https") and parts.netloc != server:
            third_party.append(req.url)
    rows = page.locator("tbody tr").count()
    page.close()
    return {
        "jobs server p50": f"{median(p50s):.1f} ms",
        "jobs server p95": f"{median(p95s):.1f} ms",
        "jobs transfer": f"{wire / 1024:.1f} KB in {len(requests)} requests (HTML {len(html.content) / 1024:.0f} KB uncompressed)",
        "jobs third-party requests": str(len(third_party)),
        "jobs rows shown": str(rows),
    }


def runs_page(client: httpx.Client, args: argparse.Namespace) -> dict[str, str]:
    """GET /runs (the page) against GET /api/v1/runs?limit=50, per filter, one at a time."""
    figures: dict[str, str] = {}
    for name, flt in RUNS_FILTERS.items():
        api_params = {"limit": "50", **flt}
        timed_gets(client, "/runs", flt, 3)
        timed_gets(client, "/api/v1/runs", api_params, 3)
        page_p, api_p = [], []
        for _ in range(args.repeat):
            page_ms = timed_gets(client, "/runs", flt, args.requests)
            api_ms = timed_gets(client, "/api/v1/runs", api_params, args.requests)
            page_p.append((percentile(page_ms, 50), percentile(page_ms, 95)))
            api_p.append((percentile(api_ms, 50), percentile(api_ms, 95)))
        line = (
            f"page p50={median([p[0] for p in page_p]):.1f} p95={median([p[1] for p in page_p]):.1f} ms; "
            f"API p50={median([p[0] for p in api_p]):.1f} p95={median([p[1] for p in api_p]):.1f} ms"
        )
        print(f"runs {name:<13} {line}", flush=True)
        figures[f"runs {name}"] = line
    return figures


# Notes when each `tick <n> <wall ms>` line reaches the page (installed before any page script).
OBSERVER = r"""
window.__ticks = new Map();
new MutationObserver(records => {
  const now = Date.now();
  for (const r of records) {
    const nodes = r.type === 'characterData' ? [r.target] : [...r.addedNodes];
    for (const node of nodes) {
      for (const m of (node.textContent || '').matchAll(/tick (\d+) (\d+)/g)) {
        if (!window.__ticks.has(m[1])) window.__ticks.set(m[1], [Number(m[2]), now]);
      }
    }
  }
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


# When the run page's log (`<pre id="log" elementtiming="log-tail">`) was first painted (Element
# Timing, from navigation start), the page's first contentful paint, and whether the log's last
# line is inside the viewport and inside the log's own scroll box.
PAINTED = r"""
() => new Promise(done => {
  const seen = {};
  const finish = () => {
    const pre = document.getElementById('log');
    const text = pre.lastChild;
    const end = text.data.replace(/\s+$/, '').length;  // the last character that is not a newline
    const range = document.createRange();
    range.setStart(text, Math.max(0, end - 1));
    range.setEnd(text, end);
    const line = range.getBoundingClientRect();
    const box = pre.getBoundingClientRect();
    const visible = line.height > 0 && line.top >= Math.max(0, box.top) - 1
      && line.bottom <= Math.min(window.innerHeight, box.bottom) + 1;
    done([seen.log, seen.fcp, visible]);
  };
  const check = () => { if (seen.log !== undefined && seen.fcp !== undefined) finish(); };
  new PerformanceObserver(list => {
    for (const e of list.getEntries()) {
      if (e.identifier === 'log-tail') seen.log = e.renderTime || e.loadTime;
    }
    check();
  }).observe({type: 'element', buffered: true});
  new PerformanceObserver(list => {
    for (const e of list.getEntries()) {
      if (e.name === 'first-contentful-paint') seen.fcp = e.startTime;
    }
    check();
  }).observe({type: 'paint', buffered: true});
})
"""


# A run id that names no run: its page is the UI's 404, styled like every page (the new-tab floor
# of a page of this UI).
MISSING_RUN = "00000000-0000-4000-8000-000000000000"


# When the page's first contentful paint happened (from navigation start): the floor of a
# page that has no log, such as `/healthz` (15 bytes of JSON, no stylesheet, no script).
FIRST_PAINT = r"""
() => new Promise(done => {
  new PerformanceObserver(list => {
    for (const e of list.getEntries()) {
      if (e.name === 'first-contentful-paint') done(e.startTime);
    }
  }).observe({type: 'paint', buffered: true});
})
"""


# Where an opening's time went: the navigation's first byte, its last byte, DOMContentLoaded,
# and the end of the last stylesheet it loaded (from navigation start, ms).
NAVIGATION_PARTS = (
    "() => { const n = performance.getEntriesByType('navigation')[0];"
    " const r = performance.getEntriesByType('resource');"
    " return [n.responseStart, n.responseEnd, n.domContentLoadedEventStart,"
    " Math.max(0, ...r.filter(x => x.initiatorType === 'link').map(x => x.responseEnd))]; }"
)


def parts_text(breakdown: list[list[float]]) -> str:
    """The medians of `NAVIGATION_PARTS` over the openings."""
    return (
        f"first byte {median([b[0] for b in breakdown]):.0f} ms, "
        f"HTML {median([b[1] for b in breakdown]):.0f} ms, "
        f"DOM {median([b[2] for b in breakdown]):.0f} ms, "
        f"stylesheets {median([b[3] for b in breakdown]):.0f} ms"
    )


def same_tab_paints(base: str, context: Any, run_id: str, count: int) -> dict[str, str]:
    """The log's paint when the run is opened as a person opens it, from the runs page in the
    same tab (a click on its link: navigation start to the Element Timing paint of the log),
    and `/healthz`'s first paint in a new tab and in the same tab: the floor of each mode (a
    new tab of Chromium 156 builds its omnibox first, 20-70 ms of CPU that is not ours).
    `count` of each; their medians."""
    runs_list = f"{base}/runs?job=biglog"
    link = f'a[href="/runs/{run_id}"]'
    tab = context.new_page()
    log_paints: list[float] = []
    breakdown: list[list[float]] = []
    shown = 0
    for _ in range(count):
        tab.goto(runs_list, wait_until="domcontentloaded")
        with tab.expect_navigation(wait_until="domcontentloaded"):
            tab.locator(link).first.click()
        paint, _fcp, visible = tab.evaluate(PAINTED)
        log_paints.append(paint)
        shown += bool(visible)
        breakdown.append(tab.evaluate(NAVIGATION_PARTS))
    same_floor: list[float] = []
    for _ in range(count):
        tab.goto(runs_list, wait_until="domcontentloaded")
        tab.goto(f"{base}/healthz", wait_until="domcontentloaded")
        same_floor.append(tab.evaluate(FIRST_PAINT))
    tab.close()
    new_floor: list[float] = []
    styled_floor: list[float] = []
    for _ in range(count):
        fresh = context.new_page()
        fresh.goto(f"{base}/healthz", wait_until="domcontentloaded")
        new_floor.append(fresh.evaluate(FIRST_PAINT))
        fresh.close()
        # The floor of a page of this UI in a new tab: the run page's own frame (header,
        # navigation, the same stylesheet and script), for a run that does not exist (404).
        fresh = context.new_page()
        fresh.goto(f"{base}/runs/{MISSING_RUN}", wait_until="domcontentloaded")
        styled_floor.append(fresh.evaluate(FIRST_PAINT))
        fresh.close()

    def listed(values: list[float]) -> str:
        return ", ".join(f"{v:.0f}" for v in values)

    return {
        "log painted, same tab": (
            f"median {median(log_paints):.0f} ms (of {count}: {listed(log_paints)}; clicked "
            f"from /runs?job=biglog; the last line in the viewport in {shown} of {count})"
        ),
        "same-tab log page, medians": parts_text(breakdown),
        "/healthz painted, new tab": f"median {median(new_floor):.0f} ms ({listed(new_floor)})",
        "404 run page, new tab": (
            f"median {median(styled_floor):.0f} ms ({listed(styled_floor)}; the UI's frame "
            "and stylesheet, no log)"
        ),
        "/healthz painted, same tab": (
            f"median {median(same_floor):.0f} ms ({listed(same_floor)})"
        ),
    }


def big_log(
    base: str,
    context: Any,
    client: httpx.Client,
    api: httpx.Client,
    workdir: Path,
    args: argparse.Namespace,
) -> dict[str, str]:
    stop = workdir / "stop-biglog"
    made = api.post(
        "/api/v1/jobs/biglog/runs", json={"params": {"mb": args.log_mb, "stop": str(stop)}}
    )
    if made.status_code not in (200, 201):
        raise SystemExit(f"POST biglog: {made.status_code} {made.text}")
    run_id = made.json()["id"]
    t0 = time.monotonic()
    while "tick 3 " not in api.get(f"/api/v1/runs/{run_id}/logs", params={"tail": "5"}).text:
        if time.monotonic() - t0 > 600:
            raise SystemExit("the big log did not reach its ticks in 600 s")
        time.sleep(0.5)  # a benchmark's poll
    size = sum(p.stat().st_size for p in (workdir / "logs").rglob(f"{run_id}*"))
    print(f"log of {size / 2**20:.0f} MiB written in {time.monotonic() - t0:.1f} s", flush=True)
    try:
        opened, first_paints, latencies, breakdown = [], [], [], []
        shown = 0  # openings whose log's last line was in the viewport
        for _ in range(args.repeat):
            page = context.new_page()
            page.add_init_script(OBSERVER)
            page.goto(f"{base}/runs/{run_id}", wait_until="domcontentloaded")
            paint, fcp, visible = page.evaluate(PAINTED)
            shown += bool(visible)
            first_seq = page.evaluate(
                "() => Math.max(0, ...[...window.__ticks.keys()].map(Number))"
            )
            if first_seq == 0:
                raise SystemExit(
                    "the run page's first paint shows no tick line (no tail rendered?)"
                )
            opened.append(paint)
            first_paints.append(fcp)
            breakdown.append(page.evaluate(NAVIGATION_PARTS))
            page.wait_for_function(
                f"() => [...window.__ticks.keys()].filter(k => Number(k) > {first_seq}).length >= {args.lines}",
                timeout=args.lines * 1000 + 30_000,
            )
            ticks = page.evaluate("() => [...window.__ticks.entries()]")
            latencies += [seen - wrote for seq, (wrote, seen) in ticks if int(seq) > first_seq]
            page.close()
        same_tab = same_tab_paints(base, context, run_id, args.paints)
        return {
            "log size": f"{size / 2**20:.0f} MiB",
            "log painted, new tab": (
                f"median {median(opened):.0f} ms (of {len(opened)} openings; "
                f"first contentful paint {median(first_paints):.0f} ms; "
                f"the last line in the viewport in {shown} of {len(opened)})"
            ),
            "log page, medians": parts_text(breakdown),
            "log new line to browser": f"p50={percentile(latencies, 50):.0f} ms p95={percentile(latencies, 95):.0f} ms ({len(latencies)} lines)",
            **same_tab,
        }
    finally:
        stop.touch()


def measure(url: str, args: argparse.Namespace) -> dict[str, str]:
    from playwright.sync_api import sync_playwright

    secret = asyncio.run(operator_token(url))
    chromium = os.environ.get("RUNLANE_TEST_CHROMIUM", "/usr/bin/chromium")
    figures: dict[str, str] = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        served(url, Path(tmp), args.jobs, args.log_mb) as base,
        sync_playwright() as pw,
    ):
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        context = browser.new_context()
        log_in(context, base, secret).close()
        cookies = {c["name"]: c["value"] for c in context.cookies()}
        with (
            httpx.Client(base_url=base, cookies=cookies, timeout=60) as client,
            httpx.Client(
                base_url=base, headers={"Authorization": f"Bearer {secret}"}, timeout=60
            ) as api,
        ):
            # Each part's figures printed as soon as it has them: a later part that fails
            # (a database restarted under a loaded machine) loses nothing measured before.
            parts = {
                "jobs": lambda: jobs_page(base, context, client, args),
                "runs": lambda: runs_page(client, args),
                "log": lambda: big_log(base, context, client, api, Path(tmp), args),
            }
            for part_name, part in parts.items():
                if args.only and part_name not in args.only:
                    continue
                got = part()
                for name, value in got.items():
                    print(f"  {name:<26} {value}", flush=True)
                figures |= got
        browser.close()
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument(
        "--tail-bytes",
        type=int,
        default=0,
        help="a saved log tail of about this size per finished run",
    )
    ap.add_argument("--log-mb", type=int, default=100, help="the big log's size")
    ap.add_argument("--requests", type=int, default=100, help="GETs per case and round")
    ap.add_argument("--lines", type=int, default=50, help="new log lines timed per opening")
    ap.add_argument(
        "--paints",
        type=int,
        default=5,
        help="openings of the run page in the same tab, and of /healthz in each mode",
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--url", help="a database to use instead of a scratch one (kept)")
    ap.add_argument("--no-seed", action="store_true", help="with --url: it is seeded already")
    ap.add_argument(
        "--only", action="append", choices=("jobs", "runs", "log"), help="these parts only"
    )
    ap.add_argument("--quick", action="store_true", help="smoke: 50 jobs, 2,000 rows, a 1 MB log")
    args = ap.parse_args()
    if args.quick:
        args.jobs, args.rows, args.log_mb, args.requests, args.lines, args.repeat = (
            50,
            2000,
            1,
            5,
            5,
            1,
        )
        args.paints = 2
    with contextlib.ExitStack() as stack:
        if args.url:
            url = args.url
        else:
            url = stack.enter_context(
                scratch_database(
                    "postgres", Path(stack.enter_context(tempfile.TemporaryDirectory()))
                )
            )
        asyncio.run(prepare(url, args))
        figures = measure(url, args)
    print("\nWeb UI figures")
    for name, value in figures.items():
        print(f"  {name:<26} {value}")


if __name__ == "__main__":
    main()
