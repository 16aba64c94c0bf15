"""The pod executor at scale, against the local Kubernetes API server in its own process.

    .venv/bin/python bench/pod_scale.py                          # 1,000 concurrent runs, median of 3
    .venv/bin/python bench/pod_scale.py --runs 250 500 1000      # the curve, median of 3 each
    .venv/bin/python bench/pod_scale.py --runs 50 --repeats 1    # CI smoke: it still works
    .venv/bin/python bench/pod_scale.py --launcher               # through the launcher instead

Figures:
- API requests per run, by outcome (success, exit-code failure, start timeout, cancel), counted
  by the API server: every request a burst of `--per-kind` runs cost from a cold executor (RBAC
  review set, the shared watch's lists and watches included), divided by the runs. What does
  not grow with runs (one review set per namespace per cache period, one list + one watch per
  kind) shrinks per run as the burst grows; the scale figures show it at N.
- N concurrent pod runs (`fake/hang` until the cluster clock passes their deadline) started at
  once from a cold executor: time to create all N Jobs, beside the client's own bound (N/qps)
  and beside a plain HTTP client creating N Jobs into a fresh API server with the same
  concurrency (what the local API server itself accepts on this machine right now, measured in
  the same minutes); requests the API server saw per run and RBAC review sets during the burst;
  launcher memory (RSS of this process: executor, shared watch cache, HTTP client; the API
  server runs in another process) with all N running; time to see all N end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import logging
import re
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx
import psycopg
import structlog
from _common import scratch_database
from lightkube.config.kubeconfig import KubeConfig

from runlane.adapters.kubernetes.api import DEFAULT_MAX_IN_FLIGHT, KubeApi, jobs_path, pods_path
from runlane.adapters.kubernetes.executor import PodExecutor
from runlane.adapters.kubernetes.manifests import MANAGED_SELECTOR, build_job_plan
from runlane.adapters.kubernetes.rbac import PERMISSIONS
from runlane.catalog import load_catalog
from runlane.core.runs import RunStatus, Trigger
from runlane.ports import Execution, ExecutionSpec
from runlane.service.accept import RunRequest, accept_run
from runlane.service.config import Settings
from runlane.service.launcher import Launcher
from runlane.service.wiring import store_from_url

NS = "default"


def rss_mib(field: str = "VmRSS") -> float:
    """This process's resident memory now (VmRSS), or its peak (VmHWM) since `reset_peak_rss`."""
    text = Path("/proc/self/status").read_text()
    match = re.search(rf"{field}:\s+(\d+) kB", text)
    return int(match.group(1)) / 1024 if match else float("nan")


def reset_peak_rss() -> None:
    """VmHWM starts again from the current RSS (Linux: `5` into clear_refs)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


@contextmanager
def fake_server() -> Iterator[tuple[str, Path]]:
    tmp = Path(tempfile.mkdtemp(prefix="pod-scale-"))
    kubeconfig = tmp / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "runlane.testing.kube",
            "--port",
            "0",
            "--kubeconfig",
            str(kubeconfig),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.split()[3].rstrip(";")
        yield url, kubeconfig
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def admin(url: str, action: str, **params: Any) -> dict[str, Any]:
    resp = httpx.post(
        f"{url}/fake/{action}",
        params=params,
        timeout=60,
        headers={"Authorization": "Bearer runlane-fake-token"},
    )
    resp.raise_for_status()
    data: dict[str, Any] = resp.json()
    return data


def spec(image: str, deadline: float = 60.0) -> ExecutionSpec:
    rid = str(uuid.uuid4())
    return ExecutionSpec(
        run_id=rid,
        job="bench",
        attempt=1,
        trigger="manual",
        command=["work"],
        params={},
        env={"RUN_ID": rid, "RUNLANE_PARAMS": "{}", "FAKE_OUTPUT": "bench output\n"},
        deadline_seconds=deadline,
        kill_grace_seconds=1.0,
        profile={"image": image},
    )


def executor(
    kubeconfig: Path, *, qps: float, start_timeout: float = 600.0, in_flight: int
) -> PodExecutor:
    config = KubeConfig.from_file(kubeconfig).get()
    assert config is not None
    return PodExecutor(
        api_client=KubeApi.from_config(
            config, qps=qps, burst=int(max(qps, 1) * 2), max_in_flight=in_flight
        ),
        environ={"KUBERNETES_NAMESPACE": NS},
        launcher_env={},
        start_timeout=start_timeout,
    )


async def drive(
    ex: PodExecutor,
    execution: Execution,
    running: asyncio.Event | None = None,
    cancel: bool = False,
) -> RunStatus:
    async for event in ex.events(execution):
        if event.kind == "running":
            if running is not None:
                running.set()
            if cancel:
                await ex.cancel(execution, grace=0)
        if event.kind == "finished":
            assert event.outcome is not None
            return event.outcome.status
    raise RuntimeError("no outcome")


def classify(record: dict[str, Any]) -> str:
    """`POST jobs`, `GET jobs/log`, `LIST pods`, `WATCH jobs`, `POST selfsubjectaccessreviews`."""
    path, query, method = record["path"], record["query"], record["method"]
    if path.startswith("/fake/"):
        return ""
    parts = [p for p in path.split("/") if p]
    if "namespaces" in parts:
        rest = parts[parts.index("namespaces") + 2 :]
        resource = "/".join([rest[0], *rest[2:]])
        collection = len(rest) == 1
    else:
        resource, collection = parts[-1], False
    if "watch=true" in query:
        return f"WATCH {resource}"
    if method == "GET" and collection and resource in ("jobs", "pods"):
        return f"LIST {resource}"
    return f"{method} {resource}"


def server_requests(url: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = admin(url, "requests")["requests"]
    return [r for r in records if not r["path"].startswith("/fake/")]


async def requests_per_run(
    url: str, kubeconfig: Path, per_kind: int, in_flight: int
) -> dict[str, Counter[str]]:
    """Every request each outcome's burst cost, from a cold executor, per run."""
    out: dict[str, Counter[str]] = {}
    for label, image, cancel in (
        ("success", "fake/succeed", False),
        ("failure (exit 1)", "fake/exit:1", False),
        ("start timeout (image pull)", "fake/image-pull-backoff", False),
        ("cancel", "fake/hang", True),
    ):
        before = len(server_requests(url))
        ex = executor(kubeconfig, qps=200, start_timeout=0.5, in_flight=in_flight)
        try:
            executions = await asyncio.gather(*(ex.start(spec(image)) for _ in range(per_kind)))
            await asyncio.gather(*(drive(ex, e, cancel=cancel) for e in executions))
        finally:
            await ex.aclose()
        counts = Counter(c for r in server_requests(url)[before:] if (c := classify(r)))
        out[label] = Counter({k: v / per_kind for k, v in counts.items()})
    return out


async def plain_creates(url: str, runs: int, concurrency: int) -> float:
    """Seconds for a plain HTTP client (no executor) to create `runs` Jobs, `concurrency` at a
    time, while two watches (Jobs and pods, the launcher's selector) read every event as the
    launcher's would: what the API server itself accepts on this machine right now."""
    bodies = [
        json.dumps(
            build_job_plan(
                spec("fake/hang", deadline=30),
                namespace=NS,
                launcher_env={},
                ttl_seconds=86400,
                scratch=False,
            ).job
        )
        for _ in range(runs)
    ]
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=concurrency + 2)
    async with httpx.AsyncClient(
        base_url=url,
        headers={"Authorization": "Bearer runlane-fake-token", "Content-Type": "application/json"},
        limits=limits,
        timeout=httpx.Timeout(60, read=None),
    ) as client:
        opened = [asyncio.Event(), asyncio.Event()]

        async def watch(path: str, ready: asyncio.Event) -> None:
            params = {"watch": "true", "labelSelector": MANAGED_SELECTOR}
            async with client.stream("GET", path, params=params) as resp:
                ready.set()
                async for _line in resp.aiter_lines():
                    pass

        async def worker() -> None:
            while bodies:
                resp = await client.post(jobs_path(NS), content=bodies.pop())
                resp.raise_for_status()

        watches = [
            asyncio.create_task(watch(jobs_path(NS), opened[0])),
            asyncio.create_task(watch(pods_path(NS), opened[1])),
        ]
        await asyncio.gather(*(o.wait() for o in opened))
        t0 = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.monotonic() - t0
        for task in watches:
            task.cancel()
        await asyncio.gather(*watches, return_exceptions=True)
        return elapsed


async def scale(
    url: str, kubeconfig: Path, runs: int, qps: float, in_flight: int
) -> dict[str, float]:
    ex = executor(kubeconfig, qps=qps, in_flight=in_flight)
    specs = [spec("fake/hang", deadline=30) for _ in range(runs)]
    base = rss_mib()
    before = len(server_requests(url))
    cpu0 = time.process_time()
    t0 = time.monotonic()
    executions = await asyncio.gather(*(ex.start(s) for s in specs))
    started = time.monotonic() - t0
    start_cpu = time.process_time() - cpu0
    burst = Counter(classify(r) for r in server_requests(url)[before:])
    flags = [asyncio.Event() for _ in executions]
    tasks = [asyncio.create_task(drive(ex, e, f)) for e, f in zip(executions, flags, strict=True)]
    await asyncio.gather(*(f.wait() for f in flags))
    all_running = time.monotonic() - t0
    rss = rss_mib()
    watches = ex.watches[NS].stats.watches  # watch connections opened (the client's count)
    t1 = time.monotonic()
    admin(url, "advance", seconds=60)
    statuses = await asyncio.gather(*tasks)
    ended = time.monotonic() - t1
    assert set(statuses) == {RunStatus.TIMEOUT}, Counter(statuses)
    watch = ex.watches[NS]
    await ex.aclose()
    return {
        "start_s": started,
        "start_cpu_ms_per_run": start_cpu * 1000 / runs,
        "requests_per_run": sum(burst.values()) / runs,
        "review_sets": burst["POST selfsubjectaccessreviews"] / len(PERMISSIONS),
        "all_running_s": all_running,
        "all_ended_s": ended,
        "rss_mib": rss,
        "rss_growth_mib": rss - base,
        "watch_connections": watches,
        "lists": watch.stats.lists,
    }


LAUNCHER_CATALOG = """
version: 1
global: {{max_deadline: 1h, kill_grace: 1s, start_timeout: 10m, max_concurrent_pods: {runs}}}
defaults: {{executor: pod, overlap: allow, max_attempts: 1, deadline: 10m}}
profiles:
  hang: {{image: fake/hang}}
jobs:
  hang:
    profile: hang
    command: [sleep, "1000"]
"""


async def through_launcher(
    kubeconfig: Path,
    database_url: str,
    workdir: Path,
    runs: int,
    qps: float,
    in_flight: int,
    *,
    profile: cProfile.Profile | None = None,
    trace_memory: int = 0,
) -> dict[str, float]:
    """N queued pod runs on PostgreSQL, then a launcher (concurrency N) started on them: the
    claims, the Job creates, the fenced write of each run's Job name. With `profile`, the
    launcher's burst (from its start until every Job name is recorded) runs under it; with
    `trace_memory`, the top allocation sites still held once all are recorded are printed."""
    catalog_path = workdir / "pods.yaml"
    catalog_path.write_text(LAUNCHER_CATALOG.format(runs=runs))
    catalog = load_catalog(catalog_path)
    settings = Settings(
        database_url=database_url,
        catalog_path=str(catalog_path),
        log_dir=str(workdir / "logs"),
        concurrency=runs,
        claim_interval=0.5,
        launcher_id=f"bench-{uuid.uuid4().hex[:6]}",
    )
    store = store_from_url(database_url)
    await store.open()
    await store.upgrade()
    for _ in range(runs):
        request = RunRequest(job="hang", trigger=Trigger.MANUAL)
        await accept_run(store, catalog, request, available_executors=("pod",))
    ex = executor(kubeconfig, qps=qps, in_flight=in_flight)
    launcher = Launcher(store=store, catalog=catalog, executors={"pod": ex}, settings=settings)
    recorded = "SELECT count(*) FROM run_log WHERE external_id IS NOT NULL"
    rss_start = rss_mib()
    anon_start = rss_mib("RssAnon")
    reset_peak_rss()
    if trace_memory:
        tracemalloc.start(8)
    cpu0 = time.process_time()
    t0 = time.monotonic()
    if profile is not None:
        profile.enable()
    task = asyncio.create_task(launcher.run())
    try:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as db:
            fullest: tuple[int, tracemalloc.Snapshot] | None = None  # (traced bytes, then)
            while True:  # the launcher records a run's Job name right after creating the Job
                row = await (await db.execute(recorded)).fetchone()
                if row is not None and row[0] >= runs:
                    break
                if trace_memory:
                    traced = tracemalloc.get_traced_memory()[0]
                    if fullest is None or traced > fullest[0] * 1.05:
                        fullest = (traced, tracemalloc.take_snapshot())
                await asyncio.sleep(0.05)
        if profile is not None:
            profile.disable()
        elapsed = time.monotonic() - t0
        cpu = time.process_time() - cpu0
        rss = rss_mib()
        peak = rss_mib("VmHWM")
        anon, file = rss_mib("RssAnon"), rss_mib("RssFile")
        # Then until the launcher's watch has caught up: every run's pod in its cache, Running.
        # The CPU to there is like for like whether the watch kept up during the burst or
        # listed everything at its end.
        async with asyncio.timeout(300):
            await ex.watches[NS].wait_stats(lambda _: watch_caught_up(ex, runs))
        caught_up = time.monotonic() - t0
        cpu_caught_up = time.process_time() - cpu0
        if trace_memory:
            if fullest is not None:
                print(f"  during the burst, at its fullest look ({fullest[0] / 2**20:.1f} MiB):")
                print_memory(fullest[1], trace_memory, runs)
            print("  once every Job name is recorded:")
            print_memory(tracemalloc.take_snapshot(), trace_memory, runs)
            tracemalloc.stop()
    finally:
        launcher.stop()
        await task
        await ex.aclose()
        await store.close()
    return {
        "recorded_s": elapsed,
        "cpu_ms_per_run": cpu * 1000 / runs,
        "rss_mib": rss,
        "peak_rss_mib": peak,
        "rss_at_start_mib": rss_start,
        "caught_up_s": caught_up,
        "cpu_ms_per_run_caught_up": cpu_caught_up * 1000 / runs,
        "anon_growth_mib": anon - anon_start,
        "rss_file_mib": file,
    }


def watch_caught_up(ex: PodExecutor, runs: int) -> bool:
    """The executor's shared watch holds `runs` Jobs and as many pods, every pod Running."""
    watch = ex.watches.get(NS)
    if watch is None or watch.counts() != {"jobs": runs, "pods": runs}:
        return False
    pods = watch._state["pods"].entries.values()  # the bench reads the cache it measures
    return all((e.obj.get("status") or {}).get("phase") == "Running" for e in pods)


def print_memory(snapshot: tracemalloc.Snapshot, top: int, runs: int) -> None:
    """What the launcher holds in `snapshot`: by line, then by module."""
    here = str(Path(__file__).resolve().parent)
    snapshot = snapshot.filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    current, peak = tracemalloc.get_traced_memory()
    held = sum(stat.size for stat in snapshot.statistics("filename"))
    print(
        f"  tracemalloc: {held / 2**20:.1f} MiB held ({held / runs / 1024:.1f} KiB per run); "
        f"now {current / 2**20:.1f}, peak so far {peak / 2**20:.1f} MiB"
    )
    for stat in snapshot.statistics("lineno")[:top]:
        frame = stat.traceback[0]
        name = frame.filename.replace(here, "bench").split("site-packages/")[-1]
        name = name.split("/src/")[-1]
        print(
            f"    {stat.size / 2**20:7.2f} MiB {stat.count:8d} blocks "
            f"{stat.size / runs:8.0f} B/run  {name}:{frame.lineno}"
        )
    by_module: Counter[str] = Counter()
    for stat in snapshot.statistics("filename"):
        name = stat.traceback[0].filename.split("site-packages/")[-1].split("/src/")[-1]
        by_module[name] += stat.size
    print("  by module:")
    for name, size in by_module.most_common(top):
        print(f"    {size / 2**20:7.2f} MiB {size / runs:8.0f} B/run  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, nargs="+", default=[1000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--per-kind", type=int, default=20, help="runs per outcome for requests/run"
    )
    parser.add_argument("--qps", type=float, default=200.0, help="client-side rate limit")
    parser.add_argument(
        "--in-flight",
        type=int,
        default=DEFAULT_MAX_IN_FLIGHT,
        help="requests the client keeps on the wire at once (KubeApi max_in_flight)",
    )
    parser.add_argument(
        "--launcher",
        action="store_true",
        help="instead: N queued runs through the real launcher on PostgreSQL "
        "(RUNLANE_TEST_POSTGRES_URL's server)",
    )
    parser.add_argument(
        "--cprofile",
        metavar="FILE",
        help="with --launcher: the burst (launcher start until every Job name is recorded) "
        "under cProfile, written to FILE (FILE.<runs>.<repeat> with several repeats)",
    )
    parser.add_argument(
        "--tracemalloc",
        metavar="TOP",
        type=int,
        default=0,
        help="with --launcher: trace allocations during the burst and print the TOP sites "
        "still held once every Job name is recorded (slows the launcher: not for timings)",
    )
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if args.launcher:
        launcher_figures(args)
        return

    with fake_server() as (url, kubeconfig):
        per_run = asyncio.run(requests_per_run(url, kubeconfig, args.per_kind, args.in_flight))
    print(
        f"API requests per run, each outcome a burst of {args.per_kind} runs from a cold executor "
        "(every request the API server saw, divided by the runs)"
    )
    for label, counts in per_run.items():
        shown = ", ".join(f"{k} {v:.3g}" for k, v in sorted(counts.items()))
        print(f"  {label:28} total {sum(counts.values()):.3g}: {shown}")

    for runs in args.runs:
        samples = []
        for i in range(args.repeats):
            # Alternating in the same minutes: the API server's own ceiling, then the executor;
            # a fresh server (and process memory) each time.
            with fake_server() as (url, _):
                plain = asyncio.run(plain_creates(url, runs, args.in_flight))
            with fake_server() as (url, kubeconfig):
                sample = asyncio.run(scale(url, kubeconfig, runs, args.qps, args.in_flight))
            sample["plain_client_s"] = plain
            samples.append(sample)
            print(
                f"  {runs} runs, repeat {i + 1}: "
                + json.dumps({k: round(v, 3) for k, v in sample.items()})
            )
        med = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
        bound = runs / args.qps
        print(
            f"{runs} concurrent pod runs, median of {args.repeats} (client rate limit "
            f"{args.qps:g} qps, burst {int(args.qps * 2)}, {args.in_flight} requests in flight):"
        )
        print(
            f"  time to create all Jobs         {med['start_s']:.2f} s = {med['start_s'] / bound:.2f}x "
            f"the rate limit's {bound:.2f} s; a plain client into the same API server "
            f"{med['plain_client_s']:.2f} s ({runs / med['plain_client_s']:.0f} creates/s)"
        )
        print(
            f"  requests per run in the burst   {med['requests_per_run']:.3f} "
            f"(RBAC review sets {med['review_sets']:g}); launcher CPU "
            f"{med['start_cpu_ms_per_run']:.2f} ms per start"
        )
        print(
            f"  launcher RSS with all running   {med['rss_mib']:.1f} MiB (growth {med['rss_growth_mib']:.1f} MiB)"
        )
        print(
            f"  watch connections for all runs  {med['watch_connections']:.0f} (lists {med['lists']:.0f})"
        )
        print(f"  time until all seen running     {med['all_running_s']:.2f} s")
        print(
            f"  time until all outcomes         {med['all_ended_s']:.2f} s after the deadline passed"
        )


def launcher_figures(args: argparse.Namespace) -> None:
    for runs in args.runs:
        samples = []
        for i in range(args.repeats):
            profile = cProfile.Profile() if args.cprofile else None
            with (
                tempfile.TemporaryDirectory() as tmp,
                scratch_database("postgres", Path(tmp)) as database_url,
                fake_server() as (_, kubeconfig),
            ):
                sample = asyncio.run(
                    through_launcher(
                        kubeconfig,
                        database_url,
                        Path(tmp),
                        runs,
                        args.qps,
                        args.in_flight,
                        profile=profile,
                        trace_memory=args.tracemalloc,
                    )
                )
            if profile is not None:
                out = args.cprofile if args.repeats == 1 else f"{args.cprofile}.{runs}.{i + 1}"
                profile.dump_stats(out)
                print(f"  cProfile of the burst written to {out}")
            samples.append(sample)
            print(
                f"  launcher, {runs} runs, repeat {i + 1}: "
                + json.dumps({k: round(v, 3) for k, v in sample.items()})
            )
        med = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
        print(
            f"{runs} queued pod runs through the launcher (PostgreSQL), median of {args.repeats}: "
            f"all Jobs created and recorded {med['recorded_s']:.2f} s after it started, "
            f"{med['cpu_ms_per_run']:.2f} ms launcher CPU per run ({med['cpu_ms_per_run_caught_up']:.2f} "
            f"until its watch had every pod Running, {med['caught_up_s']:.2f} s), "
            f"RSS {med['rss_mib']:.1f} MiB "
            f"(peak {med['peak_rss_mib']:.1f}; {med['rss_at_start_mib']:.1f} with the runs queued, "
            "before the launcher started)"
        )
        if args.repeats > 1:
            print(
                "  (repeats run in one process: a later one's RSS includes what earlier ones "
                "left allocated; for memory, run --repeats 1 per process)"
            )


if __name__ == "__main__":
    main()
