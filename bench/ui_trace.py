"""Where the run page's first paint of a big log goes (issue 16 §5): a Chromium performance trace
of the run page opened in the same tab (from `/runs?job=biglog`, a click on the run's link, as
bench/ui_pages.py `--paints` opens it), and of `/healthz` in the same tab (the floor), each
opening's renderer main thread from navigation start to the log's paint (Element Timing) or to
`/healthz`'s first contentful paint, split by the trace's own events into: HTML parse, each
script's compile and evaluation, stylesheet parse, style recalc, layout, paint/composite, other
tasks, and idle (the main thread waiting: the network, the browser process, the compositor).

    .venv/bin/python bench/ui_trace.py --url postgresql://postgres@127.0.0.1:5432/rl_x
    .venv/bin/python bench/ui_trace.py --openings 7 --keep /tmp/traces   # the JSON traces too

`--url` is a database it may create tables in (its runs are kept); without it a scratch one.
Chromium: /usr/bin/chromium or RUNLANE_TEST_CHROMIUM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
from _common import median, scratch_database
from api_runs import operator_token, prepare
from ui_pages import CHROMIUM_ARGS, FIRST_PAINT, PAINTED, log_in, served

CATEGORIES = [
    "devtools.timeline",
    "disabled-by-default-devtools.timeline",
    "disabled-by-default-devtools.timeline.frame",
    "blink.user_timing",
    "loading",
    "v8.execute",
    "toplevel",
    "blink",
]

# Trace event names → the part of the breakdown they are (their own time, without nested
# events that are parts themselves). Scripts are named by their file.
PARTS = {
    "ParseHTML": "HTML parse",
    "DocumentLoader::CreateParserPostCommit": "HTML parse",
    "HTMLDocumentParser::NotifyScriptLoaded": "HTML parse",
    "Document::FinishedParsing": "HTML parse",
    "Document::recalcStyle": "style recalc",
    "LocalFrameView::performLayout": "layout",
    "Receive mojo message": "IPC in (mojo: the navigation's messages)",
    "ParseAuthorStyleSheet": "stylesheet parse",
    "UpdateLayoutTree": "style recalc",
    "RecalculateStyles": "style recalc",
    "Layout": "layout",
    "PrePaint": "paint/composite",
    "Paint": "paint/composite",
    "PaintImage": "paint/composite",
    "Layerize": "paint/composite",
    "UpdateLayer": "paint/composite",
    "UpdateLayerTree": "paint/composite",
    "CompositeLayers": "paint/composite",
    "Commit": "paint/composite",
    "HitTest": "other task",
    "DocumentLoader::CommitNavigation": "navigation commit",
    "Frame::Detach": "the previous page's teardown",
    "RunTask": "other task",
    "ThreadControllerImpl::RunTask": "other task",
}
SCRIPT_EVENTS = {
    "EvaluateScript",
    "v8.compile",
    "v8.compileModule",
    "v8.evaluateModule",
    "v8.run",
    "FunctionCall",
    "EventDispatch",
    "TimerFire",
    "FireAnimationFrame",
    "V8.GC_SCAVENGER",
    "MinorGC",
    "MajorGC",
}
ORDER = [
    "HTML parse",
    "stylesheet parse",
    "style recalc",
    "layout",
    "paint/composite",
    "navigation commit",
    "the previous page's teardown",
    "IPC in (mojo: the navigation's messages)",
    "other task",
    "idle: before the response",
    "idle: in between",
    "idle: the frame (vsync, raster, draw)",
]


def script_name(event: dict[str, Any]) -> str:
    data = event.get("args", {}).get("data", {}) or {}
    url = data.get("url") or data.get("fileName") or ""
    if event["name"] in ("MinorGC", "MajorGC", "V8.GC_SCAVENGER"):
        return "script: GC"
    if event["name"] == "EventDispatch":
        return f"script: event {data.get('type', '?')}"
    if not url:
        return "script: (no file)"
    return "script: " + url.rsplit("/", 1)[-1].split("?", 1)[0]


def spans(events: Iterable[dict[str, Any]]) -> list[tuple[float, float, str]]:
    """The main thread's complete events (X, or B/E paired) that are parts: (start, end, part),
    in µs of the trace clock."""
    out: list[tuple[float, float, str]] = []
    open_: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        name = e.get("name", "")
        if name not in PARTS and name not in SCRIPT_EVENTS:
            continue
        part = PARTS.get(name) or script_name(e)
        ph = e.get("ph")
        if ph == "X":
            out.append((e["ts"], e["ts"] + e.get("dur", 0), part))
        elif ph == "B":
            open_[name].append(e)
        elif ph == "E" and open_[name]:
            begin = open_[name].pop()
            out.append((begin["ts"], e["ts"], PARTS.get(name) or script_name(begin)))
    return out


def breakdown(spans_: list[tuple[float, float, str]], t0: float, t1: float) -> dict[str, float]:
    """Each part's own milliseconds in [t0, t1]: every instant goes to the innermost event open
    then, and to `idle` when none is."""
    acc: dict[str, float] = defaultdict(float)
    stack: list[tuple[float, str]] = []
    cur = t0

    def advance(to: float) -> None:
        nonlocal cur
        while cur < to:
            while stack and stack[-1][0] <= cur:
                stack.pop()
            if stack:
                nxt = min(to, stack[-1][0])
                acc[stack[-1][1]] += nxt - cur
            else:
                nxt = to
                acc["idle"] += nxt - cur
            cur = nxt

    for start, end, part in sorted(spans_, key=lambda s: (s[0], -(s[1] - s[0]))):
        if end <= t0 or start >= t1:
            continue
        advance(min(max(start, t0), t1))
        while stack and stack[-1][0] <= cur:
            stack.pop()
        stack.append((min(end, t1), part))
    advance(t1)
    return {k: v / 1000 for k, v in acc.items()}


def analyse(trace: dict[str, Any], url_part: str, until_ms: float) -> dict[str, float]:
    """The breakdown of the navigation to a URL containing `url_part`, from its navigationStart
    mark to `until_ms` after it, on the renderer main thread that marked it."""
    events = trace["traceEvents"]
    starts = [
        e
        for e in events
        if e.get("name") == "navigationStart"
        and url_part in ((e.get("args", {}).get("data", {}) or {}).get("documentLoaderURL") or "")
    ]
    if not starts:
        raise SystemExit(f"no navigationStart for {url_part} in the trace")
    start = starts[-1]
    main = [e for e in events if e.get("pid") == start["pid"] and e.get("tid") == start["tid"]]
    t0 = start["ts"]
    t1 = t0 + until_ms * 1000
    parts = spans(main)
    # The main thread's idle time split in three: until the new document commits (the request,
    # the server, the browser process), after the main thread's last commit of a frame before
    # the paint (the compositor's frame: the next vsync, raster, draw, presentation), and between.
    commits = [s for s in parts if s[2] == "navigation commit" and t0 <= s[0] < t1]
    committed = commits[-1][0] if commits else t0
    frames = [
        e["ts"]
        for e in main
        if e.get("name") == "Commit" and e.get("ph") == "X" and committed < e["ts"] < t1
    ]
    framed = frames[-1] + 1 if frames else t1
    got = breakdown(parts, t0, committed)
    got["idle: before the response"] = got.pop("idle", 0.0)
    for window, idle in (
        ((committed, framed), "idle: in between"),
        ((framed, t1), "idle: the frame (vsync, raster, draw)"),
    ):
        more = breakdown(parts, *window)
        more[idle] = more.pop("idle", 0.0)
        for k, v in more.items():
            got[k] = got.get(k, 0.0) + v
    got["total"] = until_ms
    return got


def traced(
    browser: Any, tab: Any, open_: Any, keep: Path | None, label: str
) -> tuple[dict[str, Any], float]:
    """The trace of `open_()` in `tab`, and what it returned (the paint's milliseconds)."""
    browser.start_tracing(page=tab, categories=CATEGORIES)
    try:
        painted = open_()
        time.sleep(0.3)  # the paint's trace events flushed before the trace stops
    finally:
        raw = browser.stop_tracing()
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
        (keep / f"{label}.json").write_bytes(raw)
    return json.loads(raw), painted


def table(rows: list[dict[str, float]], title: str) -> None:
    parts = sorted({k for r in rows for k in r} - {"total"})
    keyed = [p for p in ORDER if p in parts] + sorted(p for p in parts if p not in ORDER)
    print(f"\n{title} (ms, own time on the renderer main thread; median of {len(rows)})")
    for part in ["total", *keyed]:
        values = [r.get(part, 0.0) for r in rows]
        if max(values) < 0.5:
            continue
        listed = ", ".join(f"{v:.1f}" for v in values)
        print(f"  {part:<28} {median(values):6.1f}   ({listed})")


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--url", help="a database to use instead of a scratch one (kept)")
    ap.add_argument("--log-mb", type=int, default=100)
    ap.add_argument("--openings", type=int, default=5, help="traced openings of each page")
    ap.add_argument("--keep", type=Path, help="write each trace's JSON into this folder")
    ap.add_argument("--no-seed", action="store_true", help="with --url: it is seeded already")
    args = ap.parse_args()
    args.rows = 2000
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("RUNLANE_TEST_CHROMIUM", "/usr/bin/chromium")
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        url = args.url or stack.enter_context(scratch_database("postgres", tmp))
        asyncio.run(prepare(url, args))
        secret = asyncio.run(operator_token(url))
        base = stack.enter_context(served(url, tmp, 50, args.log_mb))
        api = stack.enter_context(
            httpx.Client(base_url=base, headers={"Authorization": f"Bearer {secret}"}, timeout=60)
        )
        stop = tmp / "stop-biglog"
        made = api.post(
            "/api/v1/jobs/biglog/runs", json={"params": {"mb": args.log_mb, "stop": str(stop)}}
        )
        run_id = made.json()["id"]
        stack.callback(stop.touch)
        t0 = time.monotonic()
        while "tick 3 " not in api.get(f"/api/v1/runs/{run_id}/logs", params={"tail": "5"}).text:
            if time.monotonic() - t0 > 600:
                raise SystemExit("the big log did not reach its ticks in 600 s")
            time.sleep(0.5)  # a benchmark's poll
        pw = stack.enter_context(sync_playwright())
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        context = browser.new_context()
        log_in(context, base, secret).close()
        tab = context.new_page()
        runs_list = f"{base}/runs?job=biglog"
        link = f'a[href="/runs/{run_id}"]'
        # One untraced opening first: the stylesheets and scripts in the cache, as a person's.
        tab.goto(runs_list, wait_until="domcontentloaded")
        with tab.expect_navigation(wait_until="domcontentloaded"):
            tab.locator(link).first.click()
        tab.evaluate(PAINTED)
        logs: list[dict[str, float]] = []
        floors: list[dict[str, float]] = []

        def open_log() -> float:
            with tab.expect_navigation(wait_until="domcontentloaded"):
                tab.locator(link).first.click()
            return float(tab.evaluate(PAINTED)[0])

        def open_floor() -> float:
            tab.goto(f"{base}/healthz", wait_until="domcontentloaded")
            return float(tab.evaluate(FIRST_PAINT))

        for i in range(args.openings):
            tab.goto(runs_list, wait_until="domcontentloaded")
            trace, painted = traced(browser, tab, open_log, args.keep, f"log-{i}")
            logs.append(analyse(trace, f"/runs/{run_id}", painted))
            tab.goto(runs_list, wait_until="domcontentloaded")
            trace, painted = traced(browser, tab, open_floor, args.keep, f"healthz-{i}")
            floors.append(analyse(trace, "/healthz", painted))
        browser.close()
    print(f"\nload average {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f}")
    table(logs, "run page of the big log, same tab, navigation start to the log's paint")
    table(floors, "/healthz, same tab, navigation start to first contentful paint")


if __name__ == "__main__":
    main()
