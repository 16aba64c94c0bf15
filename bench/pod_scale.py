"""The pod executor at scale, against the local Kubernetes API server in its own process.

    .venv/bin/python bench/pod_scale.py                      # 1,000 concurrent runs, median of 3
    .venv/bin/python bench/pod_scale.py --runs 50 --repeats 1   # CI smoke: it still works

Figures:
- API requests per run, by outcome (success, exit-code failure, start timeout, cancel), counted
  by the API server; the shared watch (one list + one watch per kind and namespace) is shown
  apart because it does not grow with runs;
- N concurrent pod runs (`fake/hang` until the cluster clock passes their deadline): launcher
  memory (RSS of this process: executor, shared watch cache, HTTP client; the API server runs
  in another process) with all N running, watch connections opened, time to start all N and
  to see all N end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx
import structlog
from lightkube.config.kubeconfig import KubeConfig

from runlane.adapters.kubernetes.api import KubeApi
from runlane.adapters.kubernetes.executor import PodExecutor
from runlane.core.runs import RunStatus
from runlane.ports import Execution, ExecutionSpec

NS = "default"


def rss_mib() -> float:
    text = Path("/proc/self/status").read_text()
    match = re.search(r"VmRSS:\s+(\d+) kB", text)
    return int(match.group(1)) / 1024 if match else float("nan")


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


def executor(kubeconfig: Path, *, qps: float, start_timeout: float = 600.0) -> PodExecutor:
    config = KubeConfig.from_file(kubeconfig).get()
    assert config is not None
    return PodExecutor(
        api_client=KubeApi.from_config(config, qps=qps, burst=int(max(qps, 1) * 2)),
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
    path, query, method = record["path"], record["query"], record["method"]
    if path.startswith("/fake/"):
        return ""
    if "watch=true" in query:
        return "shared: watch"
    if method == "GET" and path.endswith(("/jobs", "/pods")):
        return "shared: list"
    if "selfsubjectaccessreviews" in path:
        return "shared: rbac review"
    resource = path.rstrip("/").split("/")
    tail = resource[-1] if resource[-1] in ("jobs", "configmaps", "log", "events") else resource[-2]
    return f"{method} {tail}"


async def requests_per_run(url: str, kubeconfig: Path, per_kind: int) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = {}
    ex = executor(kubeconfig, qps=200, start_timeout=0.5)
    await ex.ensure_allowed(NS)
    try:
        for label, image, cancel in (
            ("success", "fake/succeed", False),
            ("failure (exit 1)", "fake/exit:1", False),
            ("start timeout (image pull)", "fake/image-pull-backoff", False),
            ("cancel", "fake/hang", True),
        ):
            admin(url, "requests")  # warm
            before = len(admin(url, "requests")["requests"])
            executions = [await ex.start(spec(image)) for _ in range(per_kind)]
            await asyncio.gather(*(drive(ex, e, cancel=cancel) for e in executions))
            records = admin(url, "requests")["requests"][before:]
            counts = Counter(c for r in records if (c := classify(r)))
            out[label] = Counter(
                {k: v / per_kind for k, v in counts.items() if not k.startswith("shared")}
            )
            out[label]["(shared, whole phase)"] = sum(
                v for k, v in counts.items() if k.startswith("shared")
            )
    finally:
        await ex.aclose()
    return out


async def scale(url: str, kubeconfig: Path, runs: int, qps: float) -> dict[str, float]:
    ex = executor(kubeconfig, qps=qps)
    base = rss_mib()
    t0 = time.monotonic()
    executions = await asyncio.gather(
        *(ex.start(spec("fake/hang", deadline=30)) for _ in range(runs))
    )
    started = time.monotonic() - t0
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
        "rss_mib": rss,
        "rss_growth_mib": rss - base,
        "start_s": started,
        "all_running_s": all_running,
        "all_ended_s": ended,
        "watch_connections": watches,
        "lists": watch.stats.lists,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--per-kind", type=int, default=20, help="runs per outcome for requests/run"
    )
    parser.add_argument("--qps", type=float, default=200.0, help="client-side rate limit")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

    with fake_server() as (url, kubeconfig):
        per_run = asyncio.run(requests_per_run(url, kubeconfig, args.per_kind))
    print("API requests per run (by the API server's count; shared = per namespace, not per run)")
    for label, counts in per_run.items():
        shown = ", ".join(f"{k} {v:g}" for k, v in sorted(counts.items()))
        print(f"  {label:28} {shown}")

    samples = []
    for i in range(args.repeats):
        with fake_server() as (url, kubeconfig):  # a fresh server (and process memory) each time
            sample = asyncio.run(scale(url, kubeconfig, args.runs, args.qps))
        samples.append(sample)
        print(f"  repeat {i + 1}: " + json.dumps({k: round(v, 2) for k, v in sample.items()}))
    med = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
    print(
        f"{args.runs} concurrent pod runs, median of {args.repeats} (client rate limit {args.qps:g} qps):"
    )
    print(
        f"  launcher RSS with all running   {med['rss_mib']:.1f} MiB (growth {med['rss_growth_mib']:.1f} MiB)"
    )
    print(
        f"  watch connections for all runs     {med['watch_connections']:.0f} (lists {med['lists']:.0f})"
    )
    print(f"  time to create all Jobs         {med['start_s']:.2f} s")
    print(f"  time until all seen running     {med['all_running_s']:.2f} s")
    print(f"  time until all outcomes         {med['all_ended_s']:.2f} s after the deadline passed")


if __name__ == "__main__":
    main()
