"""Pod-run defects found by a black-box hunt against the local API server (runlane.testing.kube):
params near the 1 MiB limit, a Job left behind when its ConfigMap fails, `logs --follow` before
the pod starts, doctor's RBAC and fallback verdicts, a Job deleted while no launcher ran, and a
mistyped KUBECONFIG."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runlane.adapters.kubernetes.executor import PodExecutor
from runlane.adapters.kubernetes.names import job_name, params_config_map_name
from runlane.catalog.params import MAX_PARAMS_BYTES
from runlane.core.runs import Outcome, RunStatus
from runlane.errors import PermanentExecutorError
from runlane.ports import Execution, ExecutionSpec
from runlane.testing.kube import KubeFake, Timing, run_server
from tests.integration.test_pod_executor import make_executor

NS = "default"
PY = sys.executable


@pytest.fixture
def kube() -> Iterator[KubeFake]:
    with run_server(run_local=True, timing=Timing(schedule=0.3)) as fake:
        yield fake


@pytest.fixture
async def executor(kube: KubeFake) -> AsyncIterator[PodExecutor]:
    ex = make_executor(kube)
    yield ex
    await ex.aclose()


def pod_spec(
    params: dict[str, Any], *, image: str = "fake/succeed", command: list[str] | None = None
) -> ExecutionSpec:
    """A spec whose env is what the launcher's build_env makes of `params`."""
    rid = str(uuid.uuid4())
    env = {
        "RUN_ID": rid,
        "RUN_TRIGGER": "manual",
        "RUNLANE_PARAMS": json.dumps(params, separators=(",", ":"), sort_keys=True),
        **{f"RUNLANE_PARAM_{k.upper()}": str(v) for k, v in params.items()},
    }
    return ExecutionSpec(
        run_id=rid,
        job="demo",
        attempt=1,
        trigger="manual",
        command=command or ["work"],
        params=params,
        env=env,
        deadline_seconds=120.0,
        kill_grace_seconds=1.0,
        profile={"image": image},
    )


async def outcome_of(ex: PodExecutor, execution: Execution, within: float = 30.0) -> Outcome:
    async with asyncio.timeout(within):
        async for event in ex.events(execution):
            if event.kind == "finished":
                assert event.outcome is not None
                return event.outcome
    raise AssertionError("events ended without a finished event")


def params_of_size(total: int, **others: str) -> dict[str, Any]:
    """Params whose compact JSON is exactly `total` bytes (ASCII)."""
    base = {"blob": "", **others}
    overhead = len(json.dumps(base, separators=(",", ":"), sort_keys=True).encode())
    return {**base, "blob": "x" * (total - overhead)}


# ---------------------------------------------------------------------- 1. params near 1 MiB


READER = (
    "import json, os; f = os.environ['RUNLANE_PARAMS_FILE']; "
    "p = json.load(open(os.environ['KUBE_FAKE_ROOT'] + f, encoding='utf-8')); "
    "print(json.dumps({k: len(v) for k, v in sorted(p.items())}), "
    "sorted(k for k in os.environ if k.startswith('RUNLANE_PARAM')))"
)


@pytest.mark.parametrize("size", [600 * 1024, 900 * 1024, MAX_PARAMS_BYTES - 64])
async def test_params_up_to_the_limit_run_in_one_config_map(
    kube: KubeFake, executor: PodExecutor, size: int
) -> None:
    params = params_of_size(size, small="s")
    s = pod_spec(params, image="local", command=[PY, "-c", READER])
    execution = await executor.start(s)
    outcome = await outcome_of(executor, execution)
    assert outcome.status == RunStatus.SUCCESS, (outcome.note, outcome.log_tail)
    name = job_name("demo", s.run_id, 1)
    cm = kube.state.get("configmaps", params_config_map_name(name))
    assert cm is not None
    assert cm["data"]["params.json"] == s.env["RUNLANE_PARAMS"]  # params.json always goes
    assert "RUNLANE_PARAM_BLOB" not in cm["data"]  # no second copy of the big value
    assert sum(len(k) + len(v.encode()) for k, v in cm["data"].items()) <= 1024 * 1024
    env = {
        e["name"]
        for e in kube.state.get("jobs", name)["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert "RUNLANE_PARAM_BLOB" not in env
    assert "RUNLANE_PARAM_SMALL" in env
    log = kube.state.logs(kube.state.pods_of(name)[0]["metadata"]["name"])
    lengths = json.loads(log.split(" [", 1)[0])
    assert lengths == {"blob": len(params["blob"]), "small": 1}  # the job reads it from params.json


async def test_non_ascii_params_go_as_utf8_not_escapes(
    kube: KubeFake, executor: PodExecutor
) -> None:
    params = {"text": "é" * 300_000}  # 600 KB as UTF-8, 1.8 MB as \\u escapes
    s = pod_spec(params)
    outcome = await outcome_of(executor, await executor.start(s))
    assert outcome.status == RunStatus.SUCCESS, outcome.note
    cm = kube.state.get("configmaps", params_config_map_name(job_name("demo", s.run_id, 1)))
    assert cm is not None
    assert json.loads(cm["data"]["params.json"]) == params


async def test_a_single_param_that_fits_stays_a_file_too(
    kube: KubeFake, executor: PodExecutor
) -> None:
    params = {"a": "x" * 200_000, "b": "y" * 150_000}
    s = pod_spec(params)
    outcome = await outcome_of(executor, await executor.start(s))
    assert outcome.status == RunStatus.SUCCESS
    cm = kube.state.get("configmaps", params_config_map_name(job_name("demo", s.run_id, 1)))
    assert cm is not None
    assert set(cm["data"]) == {"params.json", "RUNLANE_PARAM_A", "RUNLANE_PARAM_B"}


# ---------------------------------------------------------------------- 2. no Job left behind


async def test_a_failed_config_map_create_deletes_the_job(
    kube: KubeFake, executor: PodExecutor
) -> None:
    await executor.ensure_allowed(NS)
    deletes: list[Any] = []
    request = executor.api.request

    async def spy(method: str, path: str, **kw: Any) -> Any:
        if method == "DELETE":
            deletes.append((path, kw.get("body")))
        return await request(method, path, **kw)

    executor.api.request = spy  # type: ignore[method-assign]
    s = pod_spec({"blob": "x" * 100_000})
    name = job_name("demo", s.run_id, 1)
    kube.state.fail_next(1, 422, method="POST", path="/configmaps")
    with pytest.raises(PermanentExecutorError):
        await executor.start(s)
    assert len(deletes) == 1
    path, body = deletes[0]
    assert path.endswith(f"/jobs/{name}")
    assert body["propagationPolicy"] == "Background"
    assert body["preconditions"]["uid"]
    await asyncio.to_thread(kube.state.wait_for, lambda st: st.get("jobs", name) is None, 10)


# ---------------------------------------------------------------------- 6. Job gone while no launcher ran

POD_CATALOG = f"""
version: 1
global: {{max_deadline: 1h, kill_grace: 1s, start_timeout: 10m}}
defaults: {{executor: pod, overlap: allow, max_attempts: 1, deadline: 1m}}
profiles:
  hang: {{image: fake/hang}}
  pull: {{image: fake/image-pull-backoff}}
  local: {{image: local}}
jobs:
  hang:
    profile: hang
    command: [sleep, "1000"]
  pull:
    profile: pull
    command: [work]
  talker:
    profile: local
    command: [{PY}, -u, -c, "print('hello from the pod')"]
"""


@pytest.fixture
def pod_catalog(tmp_path: Any) -> Any:
    from runlane.catalog import load_catalog

    path = tmp_path / "pods.yaml"
    path.write_text(POD_CATALOG)
    return load_catalog(path)


async def accept_pod(store: Any, catalog: Any, job: str) -> str:
    from runlane.core.runs import Trigger
    from runlane.service.accept import RunRequest, accept_run

    req = RunRequest(job=job, trigger=Trigger.MANUAL)
    result = await accept_run(store, catalog, req, available_executors=("inline", "pod"))
    assert result.run.executor == "pod"
    return result.run.id


@contextlib.asynccontextmanager
async def launcher_with_pods(
    kube: KubeFake, store: Any, catalog: Any, settings: Any, **kw: Any
) -> AsyncIterator[Any]:
    from runlane.adapters.local.executor import InlineExecutor
    from tests.integration.conftest import running_launcher

    pod = make_executor(kube, **kw)
    executors = {"inline": InlineExecutor(settings.log_dir), "pod": pod}
    try:
        async with running_launcher(store, catalog, settings, executors) as events:
            yield events
    finally:
        await pod.aclose()


@pytest.mark.parametrize("seen_started", [True, False])
async def test_a_job_gone_while_no_launcher_ran_is_not_launcher_lost(
    kube: KubeFake, store: Any, pod_catalog: Any, settings: Any, seen_started: bool
) -> None:
    from runlane.service.wiring import store_from_url
    from runlane.testing.clock import FixedClock

    # Two seconds ago (the clock of its store pinned then) it was accepted, and a launcher
    # claimed it for one second, (maybe) started its Job, and died: its lease has expired, and
    # the Job was deleted meanwhile.
    then = FixedClock(datetime.now(UTC) - timedelta(seconds=2))
    dead = store_from_url(settings.database_url, clock=then)
    await dead.open()
    try:
        run_id = await accept_pod(dead, pod_catalog, "hang")
        [claimed] = await dead.claim(
            "dead-launcher", limit=1, lease_ttl=1.0, executors=["pod"], executor_caps={}
        )
        if seen_started:
            await dead.set_external_id(claimed.lease, f"{NS}/{job_name('hang', run_id, 1)}")
    finally:
        await dead.close()
    async with launcher_with_pods(kube, store, pod_catalog, settings) as events:
        await events.wait("finished", run_id)
    run = await store.get_run(run_id)
    assert run.status == RunStatus.FAILURE
    if seen_started:
        assert (run.end_reason, run.error_code) == ("orphaned", "deleted_externally")
        assert "no longer exists" in (run.note or "")
        assert "outcome is unknown" in (run.note or "")
    else:  # it died before its start was recorded: the Job may never have been made
        assert (run.end_reason, run.error_code) == ("launcher_lost", "launcher_lost")


# ---------------------------------------------------------------------- 4, 5, 7. doctor, KUBECONFIG

JOB_VERBS = [
    "create,get,list,watch,delete jobs.batch",
    "create selfsubjectaccessreviews.authorization.k8s.io",
]


async def kube_findings(settings: Any, store: Any) -> list[tuple[str, str]]:
    from runlane.service.doctor import diagnose

    return [
        (f.level, f.message) for f in await diagnose(settings, store) if f.check == "kubernetes"
    ]


@pytest.fixture
def no_cluster(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.kube/config


async def test_doctor_warns_when_only_optional_permissions_are_missing(
    store: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with run_server(allow=JOB_VERBS) as fake:
        monkeypatch.setenv("KUBECONFIG", str(fake.kubeconfig_path))
        monkeypatch.setenv("KUBERNETES_NAMESPACE", NS)
        found = await kube_findings(settings, store)
        ex = make_executor(fake)
        try:  # and the launcher does run pod jobs there
            outcome = await outcome_of(ex, await ex.start(pod_spec({})))
        finally:
            await ex.aclose()
    assert outcome.status == RunStatus.SUCCESS
    assert [level for level, _ in found] == ["warning"]
    message = found[0][1]
    assert "get pods/log" in message
    assert "create configmaps" in message
    assert "refused" not in message
    assert "no log tail" in message


async def test_doctor_says_pod_jobs_are_refused_without_a_cluster_and_refuse(
    store: Any, settings: Any, no_cluster: None
) -> None:
    from dataclasses import replace

    assert await kube_findings(settings, store) == [
        ("ok", "no cluster configured: pod jobs run inline")
    ]
    found = await kube_findings(replace(settings, pod_fallback="refuse"), store)
    assert len(found) == 1
    level, message = found[0]
    assert level == "error"  # as doctor grades pod runs refused for missing job verbs
    assert "RUNLANE_POD_FALLBACK=refuse" in message
    assert "pod jobs are refused" in message
    assert "kubejob" in message  # the catalog's pod job


async def test_a_mistyped_kubeconfig_refuses_pod_jobs_instead_of_running_them_inline(
    store: Any, catalog: Any, settings: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runlane.core.runs import Trigger
    from runlane.errors import RunRefused
    from runlane.service.accept import RunRequest
    from runlane.service.runtime import Runtime
    from runlane.service.wiring import build_executors

    missing = str(tmp_path / "kube" / "confg")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", missing)
    rt = Runtime(settings=settings, store=store, catalog=catalog)
    with pytest.raises(RunRefused) as refused:
        await rt.accept(RunRequest(job="kubejob", trigger=Trigger.CLI))
    assert missing in refused.value.message
    assert (await rt.accept(RunRequest(job="hello", trigger=Trigger.CLI))).run.executor == "inline"
    [(level, message)] = await kube_findings(settings, store)
    assert level == "error"
    assert missing in message
    # A launcher (scheduled runs) gets a pod executor that refuses, never an inline fallback.
    pod = build_executors(settings)["pod"]
    with pytest.raises(PermanentExecutorError) as err:
        await pod.start(pod_spec({}))
    assert err.value.code == "config_error"
    assert missing in str(err.value)


def test_the_default_namespace_warning_is_logged_once(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from structlog.testing import capture_logs

    from runlane.adapters.kubernetes import config

    monkeypatch.setattr(config, "_warned_default_namespace", False)
    with capture_logs() as logs:
        for _ in range(3):
            assert config.resolve_namespace(None, {}, sa_dir=tmp_path) == "default"
    assert [e["event"] for e in logs] == ["kubernetes.namespace_default"]


# ---------------------------------------------------------------------- 3. logs --follow before the pod runs


async def test_logs_follow_right_after_run_waits_for_the_pod(
    kube: KubeFake, store: Any, pod_catalog: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runlane.service.operations.logs import pod_log_lines
    from runlane.service.runtime import Runtime

    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig_path))
    monkeypatch.setenv("KUBERNETES_NAMESPACE", NS)
    run_id = await accept_pod(store, pod_catalog, "talker")
    run = await store.get_run(run_id)  # queued: no Job, no pod yet
    rt = Runtime(settings=settings, store=store, catalog=pod_catalog)
    waits: list[str] = []
    seen: list[str] = []
    async with launcher_with_pods(kube, store, pod_catalog, settings) as events:
        async with asyncio.timeout(30):
            async for line in pod_log_lines(rt, run, follow=True, on_wait=waits.append):
                seen.append(line)
        await events.wait("finished", run_id)
    assert seen == ["hello from the pod"]
    assert len(waits) == 1  # one line saying it waits, not one per look
    assert "waiting for the pod" in waits[0]
    lists = [
        r
        for r in kube.state.requests
        if r.method == "GET"
        and r.path.endswith("/pods")
        and "labelSelector" in r.query
        and "watch" not in r.query
    ]
    assert len(lists) < 20  # a bounded backoff, not a busy loop


async def test_logs_follow_of_a_pod_that_never_starts_ends_with_the_run(
    kube: KubeFake, store: Any, pod_catalog: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runlane.service.operations.logs import pod_log_lines
    from runlane.service.runtime import Runtime

    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig_path))
    monkeypatch.setenv("KUBERNETES_NAMESPACE", NS)
    pull_catalog = pod_catalog.model_copy(
        update={"global_": pod_catalog.global_.model_copy(update={"start_timeout": 2.0})}
    )
    run_id = await accept_pod(store, pull_catalog, "pull")
    rt = Runtime(settings=settings, store=store, catalog=pull_catalog)
    waits: list[str] = []
    seen: list[str] = []
    async with launcher_with_pods(kube, store, pull_catalog, settings, start_timeout=2.0) as events:
        await events.wait("started", run_id)
        run = await store.get_run(run_id)
        async with asyncio.timeout(30):
            async for line in pod_log_lines(rt, run, follow=True, on_wait=waits.append):
                seen.append(line)
        await events.wait("finished", run_id)
    assert seen == []  # nothing on stdout: the container never ran
    assert len(waits) == 2
    assert "ImagePullBackOff" in waits[0] or "ErrImagePull" in waits[0] or "to start" in waits[0]
    assert "ended failure (image_pull)" in waits[1]


async def test_logs_without_follow_keep_failing_at_once(
    kube: KubeFake, store: Any, pod_catalog: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runlane.errors import NotFound
    from runlane.service.operations.logs import pod_log_lines
    from runlane.service.runtime import Runtime

    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig_path))
    monkeypatch.setenv("KUBERNETES_NAMESPACE", NS)
    run_id = await accept_pod(store, pod_catalog, "talker")
    rt = Runtime(settings=settings, store=store, catalog=pod_catalog)
    with pytest.raises(NotFound):
        async for _ in pod_log_lines(rt, await store.get_run(run_id), follow=False):
            pass


async def test_a_launchers_pod_jobs_stay_as_long_as_runlane_pod_job_ttl_says(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What bounds the launcher's watch cache (every finished runlane Job and pod is held until
    # the cluster deletes it) is the operator's to set: ttlSecondsAfterFinished.
    from runlane.adapters.kubernetes.api import jobs_path
    from runlane.errors import ConfigError
    from runlane.service.wiring import build_executors

    with run_server() as fake:
        monkeypatch.setenv("KUBECONFIG", str(fake.kubeconfig_path))
        monkeypatch.setenv("KUBERNETES_NAMESPACE", NS)
        for value, seconds in (("6h", 21_600), ("", 86_400)):
            monkeypatch.setenv("RUNLANE_POD_JOB_TTL", value)
            pod = build_executors(settings)["pod"]
            assert isinstance(pod, PodExecutor)
            spec = pod_spec({})
            try:
                assert (await outcome_of(pod, await pod.start(spec))).status == RunStatus.SUCCESS
                job = await pod.api.request(
                    "GET", jobs_path(NS, job_name(spec.job, spec.run_id, spec.attempt))
                )
            finally:
                await pod.aclose()
            assert job["spec"]["ttlSecondsAfterFinished"] == seconds
        for wrong in ("5m", "31d", "soon"):
            monkeypatch.setenv("RUNLANE_POD_JOB_TTL", wrong)
            with pytest.raises(ConfigError) as refused:
                build_executors(settings)
            assert str(refused.value).startswith(f"RUNLANE_POD_JOB_TTL={wrong!r}: ")
            assert "\n" not in str(refused.value)
