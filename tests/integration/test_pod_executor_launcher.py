"""Pod runs end to end through the real Launcher and run log, against the local API server,
whose kubelet runs the container command as a local process (real code runs)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from lightkube.config.kubeconfig import KubeConfig

from runlane.adapters.kubernetes.api import KubeApi
from runlane.adapters.kubernetes.executor import PodExecutor
from runlane.adapters.local.executor import InlineExecutor
from runlane.catalog import Catalog, load_catalog
from runlane.core.runs import RunStatus, Trigger
from runlane.ports import Store
from runlane.service.accept import RunRequest, accept_run
from runlane.service.config import Settings
from runlane.service.launcher import Launcher
from runlane.testing.kube import KubeFake, run_server
from tests.integration.conftest import Events
from tests.support.waiting import eventually

PY = sys.executable

CATALOG = f"""
version: 1
global: {{max_deadline: 1h, kill_grace: 1s, start_timeout: 10m}}
defaults: {{executor: pod, overlap: allow, max_attempts: 1, deadline: 1m}}
profiles:
  local: {{image: local}}
  hang: {{image: fake/hang}}
  pull: {{image: fake/image-pull-backoff}}
  scratchy: {{image: local, scratch: 64Mi}}
jobs:
  hello:
    profile: local
    command: [{PY}, -c, "import os; print('hello from', os.environ['RUN_ID'], os.environ['RUNLANE_PARAMS'])"]
    params: {{week: int?}}
  fail:
    profile: local
    command: [{PY}, -c, "import sys; print('boom'); sys.exit(3)"]
    max_attempts: 2
  scratchy:
    profile: scratchy
    command: [{PY}, -c, "print('scratch')"]
  hang:
    profile: hang
    command: [sleep, "1000"]
  pull:
    profile: pull
    command: [work]
  talker:
    profile: local
    command: [{PY}, -u, -c, "import os, pathlib, time\\nprint('line one')\\nprint('line two')\\ngate = pathlib.Path(os.environ['TALKER_GATE'])\\nwhile not gate.exists(): time.sleep(0.02)\\nprint('last line')"]
"""


@pytest.fixture
def kube() -> Iterator[KubeFake]:
    with run_server(run_local=True) as fake:
        yield fake


@pytest.fixture
def pod_catalog(tmp_path: Path) -> Catalog:
    path = tmp_path / "pods.yaml"
    path.write_text(CATALOG)
    return load_catalog(path)


@pytest.fixture
async def launch(
    kube: KubeFake, store: Store, pod_catalog: Catalog, settings: Settings
) -> AsyncIterator[Callable[..., tuple[Launcher, Events, PodExecutor]]]:
    running: list[tuple[Launcher, asyncio.Task[None], PodExecutor]] = []

    def start(**kw: Any) -> tuple[Launcher, Events, PodExecutor]:
        config = KubeConfig.from_file(kube.kubeconfig_path).get()
        assert config is not None
        pod = PodExecutor(
            api_client=KubeApi.from_config(config),
            environ={"KUBERNETES_NAMESPACE": "default"},
            launcher_env={},
            start_timeout=kw.pop("start_timeout", pod_catalog.global_.start_timeout),
        )
        events = Events()
        launcher = Launcher(
            store=store,
            catalog=pod_catalog,
            executors={"inline": InlineExecutor(settings.log_dir), "pod": pod},
            settings=replace(settings, **kw),
            hook=events,
            retry_base_seconds=0.05,
        )
        task = asyncio.create_task(launcher.run(), name=f"launcher-{id(launcher)}")
        running.append((launcher, task, pod))
        return launcher, events, pod

    yield start
    for launcher, task, pod in running:
        launcher.stop()
        async with asyncio.timeout(30):
            await task
        await pod.aclose()


async def accept(store: Store, catalog: Catalog, job: str, **kw: Any) -> str:
    req = RunRequest(job=job, trigger=Trigger.MANUAL, **kw)
    result = await accept_run(store, catalog, req, available_executors=("inline", "pod"))
    assert result.run.executor == "pod"
    return result.run.id


async def test_a_pod_run_executes_real_code(
    launch: Callable[..., Any], store: Store, pod_catalog: Catalog, kube: KubeFake
) -> None:
    _, events, _ = launch()
    run_id = await accept(store, pod_catalog, "hello", params={"week": 7})
    await events.wait("finished", run_id)
    run = await store.get_run(run_id)
    assert run.status == RunStatus.SUCCESS, run
    assert run.exit_code == 0
    assert run.external_id is not None
    assert run.external_id.startswith("default/rl-hello-")
    name = run.external_id.split("/", 1)[1]
    pods = kube.state.pods_of(name)
    assert "hello from " + run_id in kube.state.logs(pods[0]["metadata"]["name"])


async def test_a_profiles_scratch_becomes_an_in_memory_volume_at_slash_scratch(
    launch: Callable[..., Any], store: Store, pod_catalog: Catalog, kube: KubeFake
) -> None:
    """`scratch: 64Mi` in the catalog's profile: the Job the launcher creates mounts an
    in-memory emptyDir with that limit at /scratch; a job without it gets none."""
    _, events, _ = launch()
    scratchy = await accept(store, pod_catalog, "scratchy")
    plain = await accept(store, pod_catalog, "hello")
    for run_id in (scratchy, plain):
        await events.wait("finished", run_id)
    specs = {}
    for run_id in (scratchy, plain):
        run = await store.get_run(run_id)
        assert run.status == RunStatus.SUCCESS, run
        assert run.external_id is not None
        namespace, name = run.external_id.split("/", 1)
        job = kube.state.get("jobs", name, namespace)
        assert job is not None
        specs[run_id] = job["spec"]["template"]["spec"]
    pod = specs[scratchy]
    assert {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}} in pod[
        "volumes"
    ]
    assert {"name": "scratch", "mountPath": "/scratch"} in pod["containers"][0]["volumeMounts"]
    assert all(v["name"] != "scratch" for v in specs[plain].get("volumes", []))


async def test_a_failing_pod_run_keeps_its_log_tail_and_retries(
    launch: Callable[..., Any], store: Store, pod_catalog: Catalog
) -> None:
    _, events, _ = launch()
    run_id = await accept(store, pod_catalog, "fail")
    await events.wait("finished", run_id)
    run = await store.get_run(run_id)
    assert run.status == RunStatus.FAILURE
    assert run.exit_code == 3
    assert run.error_code == "exit_code"
    assert run.log_tail is not None
    assert "boom" in run.log_tail
    retry = await eventually(
        lambda: _retry_of(store, run_id), f"a final retry of {run_id}", within=30, poll=0.1
    )
    assert retry.attempt == 2
    assert retry.external_id != run.external_id  # a new attempt is a new Job


async def _retry_of(store: Store, run_id: str) -> Any:
    """The retry of `run_id` once it has ended, else None."""
    from runlane.ports import RunFilter

    for other in await store.list_runs(RunFilter(job="fail", limit=10)):
        if other.retry_of == run_id and other.status.is_final:
            return other
    return None


async def test_start_timeout_through_the_launcher(
    launch: Callable[..., Any], store: Store, pod_catalog: Catalog
) -> None:
    _, events, _ = launch(start_timeout=0.5)
    run_id = await accept(store, pod_catalog, "pull")
    await events.wait("finished", run_id)
    run = await store.get_run(run_id)
    assert run.status == RunStatus.FAILURE
    assert run.end_reason == "start_timeout"
    assert run.error_code == "image_pull"
    assert run.note is not None
    assert "ImagePullBackOff" in run.note


async def test_cancel_a_pod_run(
    launch: Callable[..., Any], store: Store, pod_catalog: Catalog, kube: KubeFake
) -> None:
    _, events, _ = launch()
    run_id = await accept(store, pod_catalog, "hang")
    await events.wait("started", run_id)
    await store.request_cancel(run_id, by="test")
    await events.wait("finished", run_id)
    run = await store.get_run(run_id)
    assert run.status == RunStatus.CANCELLED
    assert run.external_id is not None
    assert kube.state.get("jobs", run.external_id.split("/", 1)[1]) is None


async def test_pod_runs_are_refused_without_rbac(
    store: Store, pod_catalog: Catalog, settings: Settings
) -> None:
    with run_server(allow=["get,list,watch jobs.batch"]) as fake:
        config = KubeConfig.from_file(fake.kubeconfig_path).get()
        assert config is not None
        pod = PodExecutor(
            api_client=KubeApi.from_config(config), environ={"KUBERNETES_NAMESPACE": "default"}
        )
        events = Events()
        launcher = Launcher(
            store=store,
            catalog=pod_catalog,
            settings=settings,
            hook=events,
            executors={"inline": InlineExecutor(settings.log_dir), "pod": pod},
        )
        task = asyncio.create_task(launcher.run())
        try:
            run_id = await accept(
                store, pod_catalog, "fail"
            )  # max_attempts 2, but a refusal is final
            await events.wait("finished", run_id)
        finally:
            launcher.stop()
            await asyncio.wait_for(task, 30)
            await pod.aclose()
    run = await store.get_run(run_id)
    assert run.status == RunStatus.FAILURE
    assert run.error_code == "forbidden"
    assert run.note is not None
    assert "create jobs.batch" in run.note
    assert fake.state.list("jobs", "default") == []


async def test_logs_follow_streams_a_running_pods_log(
    launch: Callable[..., Any],
    store: Store,
    pod_catalog: Catalog,
    kube: KubeFake,
    settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runlane.service.operations.logs import pod_log_lines
    from runlane.service.runtime import Runtime

    gate = tmp_path / "gate"
    monkeypatch.setenv("TALKER_GATE", str(gate))  # the fake's kubelet runs it with our env
    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig_path))
    monkeypatch.setenv("KUBERNETES_NAMESPACE", "default")
    _, events, _ = launch()
    run_id = await accept(store, pod_catalog, "talker")
    await events.wait("started", run_id)
    run = await store.get_run(run_id)
    rt = Runtime(settings=settings, store=store, catalog=pod_catalog)
    seen: list[str] = []
    async with asyncio.timeout(30):
        async for line in pod_log_lines(rt, run, follow=True):
            seen.append(line)
            if line == "line two":
                gate.write_text("open")  # the run goes on only once we have read its output
    assert seen == ["line one", "line two", "last line"]
    await events.wait("finished", run_id)
    whole = "".join([chunk async for chunk in pod_log_lines(rt, run, follow=False)])
    assert whole.splitlines() == seen


async def test_shutdown_leaves_pod_runs_at_once_for_the_next_launcher(
    launch: Callable[..., Any], store: Store, pod_catalog: Catalog, kube: KubeFake
) -> None:
    launcher, events, _ = launch(shutdown_grace=20.0)
    run_id = await accept(store, pod_catalog, "hang")
    await events.wait("started", run_id)
    task = next(t for t in asyncio.all_tasks() if t.get_name() == f"launcher-{id(launcher)}")
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    launcher.stop()
    async with asyncio.timeout(30):
        await task
    # No grace period spent on a pod: it runs on without the launcher (which never deletes it).
    assert loop.time() - t0 < 10.0
    run = await store.get_run(run_id)
    assert run.status == RunStatus.RUNNING
    assert run.external_id is not None
    # The Job and its pod are there (the fake's controllers make the pod a moment after the
    # Job: wait for them, in a thread, rather than race them).
    await asyncio.to_thread(kube.state.wait_idle)
    assert kube.state.pods_of(run.external_id.split("/", 1)[1])


async def test_a_pod_run_that_ended_while_no_launcher_watched_keeps_its_end_time(
    launch: Callable[..., Any],
    store: Store,
    pod_catalog: Catalog,
    kube: KubeFake,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The launcher stops (a rolling restart) while a pod runs; the pod ends; the next launcher
    # reattaches and records the outcome. The run's finished_at is when its Job completed (the
    # cluster's completionTime, to the second), not when the next launcher came to look.
    from datetime import UTC, datetime

    from runlane.adapters.kubernetes.diagnose import ended_at

    gate = tmp_path / "gate"
    monkeypatch.setenv("TALKER_GATE", str(gate))
    quick = {"lease_ttl": 2.0, "lease_renew_interval": 0.5}  # the next one takes over sooner
    first, events, _ = launch(**quick)
    run_id = await accept(store, pod_catalog, "talker")
    await events.wait("started", run_id)
    task = next(t for t in asyncio.all_tasks() if t.get_name() == f"launcher-{id(first)}")
    first.stop()
    async with asyncio.timeout(30):
        await task
    gate.write_text("open")
    run = await store.get_run(run_id)
    assert run.external_id is not None
    name = run.external_id.split("/", 1)[1]

    def completed() -> datetime | None:
        job = kube.state.get("jobs", name)
        return None if job is None else ended_at(job, [])

    completion = await eventually(completed, f"the Job {name} completed", within=20)
    looked = datetime.now(UTC)
    second, events, _ = launch(**quick)
    # Trusted at any age here; by default only past a few seconds (clock skew, whole seconds).
    second.provider_end_trusted_after = 0.0
    await events.wait("finished", run_id)
    run = await store.get_run(run_id)
    assert run.status == RunStatus.SUCCESS
    assert run.started_at is not None
    assert run.finished_at is not None
    # The end travels as "how long ago" (wall clock to the launcher's monotonic clock to the
    # database's): within milliseconds of the completion time, long before the launcher looked.
    expected = max(run.started_at, completion)
    assert abs((run.finished_at - expected).total_seconds()) < 0.25
    assert run.finished_at < looked
