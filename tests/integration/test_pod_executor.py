"""The pod executor against the local Kubernetes API server (runlane.testing.kube): outcomes for
every failure reason, idempotent start, cancel, reattach, and the faults of issue 5 (410 at
connect and mid-stream, dropped watch, lost create response then 409, Job deleted by someone
else, resourceVersion jump, 429 storms)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from lightkube.config.kubeconfig import KubeConfig

from runlane.adapters.kubernetes.api import KubeApi, jobs_path
from runlane.adapters.kubernetes.executor import PodExecutor
from runlane.adapters.kubernetes.names import job_name
from runlane.adapters.kubernetes.rbac import rbac_report
from runlane.adapters.kubernetes.watch import NamespaceWatch, WatchStats
from runlane.core.runs import Outcome, RunStatus
from runlane.errors import PermanentExecutorError, TemporaryExecutorError
from runlane.ports import Execution, ExecutionEvent, ExecutionSpec
from runlane.testing.kube import KubeFake, KubeState, Timing, run_server
from tests.support.waiting import eventually

NS = "default"


@pytest.fixture
def kube() -> Iterator[KubeFake]:
    with run_server() as fake:
        yield fake


def api_for(kube: KubeFake, **kw: Any) -> KubeApi:
    config = KubeConfig.from_file(kube.kubeconfig_path).get()
    assert config is not None
    return KubeApi.from_config(config, **kw)


def make_executor(kube: KubeFake, **kw: Any) -> PodExecutor:
    api_kw = {k: kw.pop(k) for k in ("qps", "burst", "throttle_retries") if k in kw}
    return PodExecutor(
        api_client=api_for(kube, **api_kw),
        environ={"KUBERNETES_NAMESPACE": NS},
        launcher_env={"JOB_IMAGE": "fake/succeed"},
        start_timeout=kw.pop("start_timeout", 30.0),
        **kw,
    )


@pytest.fixture
async def executor(kube: KubeFake) -> AsyncIterator[PodExecutor]:
    ex = make_executor(kube)
    yield ex
    await ex.aclose()


def spec(
    image: str = "fake/succeed",
    *,
    run_id: str | None = None,
    attempt: int = 1,
    deadline: float = 600.0,
    env: dict[str, str] | None = None,
    job: str = "demo",
    **profile: Any,
) -> ExecutionSpec:
    rid = run_id or str(uuid.uuid4())
    return ExecutionSpec(
        run_id=rid,
        job=job,
        attempt=attempt,
        trigger="manual",
        command=["work", "--now"],
        params={},
        env={"RUN_ID": rid, "RUN_TRIGGER": "manual", "RUNLANE_PARAMS": "{}", **(env or {})},
        deadline_seconds=deadline,
        kill_grace_seconds=1.0,
        profile={"image": image, **profile},
    )


async def outcome_of(
    ex: PodExecutor, execution: Execution, within: float = 20.0
) -> tuple[list[str], Outcome]:
    kinds: list[str] = []
    async with asyncio.timeout(within):
        async for event in ex.events(execution):
            kinds.append(event.kind)
            if event.kind == "finished":
                assert event.outcome is not None
                return kinds, event.outcome
    raise AssertionError("events ended without a finished event")


async def until(events: AsyncIterator[ExecutionEvent], kind: str, within: float = 20.0) -> None:
    async with asyncio.timeout(within):
        async for event in events:
            if event.kind == kind:
                return
            assert event.kind != "finished", event.outcome
    raise AssertionError(f"no {kind} event")


async def finish(events: AsyncIterator[ExecutionEvent], within: float = 20.0) -> Outcome:
    async with asyncio.timeout(within):
        async for event in events:
            if event.kind == "finished":
                assert event.outcome is not None
                return event.outcome
    raise AssertionError("no finished event")


async def stats_reach(
    watch: NamespaceWatch, predicate: Callable[[WatchStats], bool], within: float = 10.0
) -> None:
    async with asyncio.timeout(within):
        await watch.wait_stats(predicate)


async def fake_reaches(
    kube: KubeFake, predicate: Callable[[KubeState], bool], within: float = 10.0
) -> None:
    await asyncio.to_thread(kube.state.wait_for, predicate, within)


# ---------------------------------------------------------------------- outcomes


async def test_success_costs_one_create(kube: KubeFake, executor: PodExecutor) -> None:
    s = spec()
    await executor.ensure_allowed(NS)  # the RBAC review happens once per namespace, not per run
    kube.state.clear_requests()
    execution = await executor.start(s)
    assert execution.external_id == f"{NS}/{job_name('demo', s.run_id, 1)}"
    kinds, outcome = await outcome_of(executor, execution)
    assert outcome.status == RunStatus.SUCCESS
    assert outcome.exit_code == 0
    assert kinds[-1] == "finished"
    # The shared watch's list + watch are per namespace; what this run cost on its own:
    per_run = [
        r
        for r in kube.state.requests
        if "watch=true" not in r.query
        and not (r.method == "GET" and r.path.endswith(("/jobs", "/pods")))
    ]
    assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in per_run] == [("POST", "jobs")]


@pytest.mark.parametrize(
    ("image", "status", "error_code", "exit_code"),
    [
        ("fake/exit:3", RunStatus.FAILURE, "exit_code", 3),
        ("fake/oom", RunStatus.FAILURE, "oom_killed", 137),
        ("fake/evicted", RunStatus.FAILURE, "evicted", None),
        ("fake/start-error", RunStatus.FAILURE, "start_error", 128),
    ],
)
async def test_failures_are_classified(
    kube: KubeFake,
    executor: PodExecutor,
    image: str,
    status: RunStatus,
    error_code: str,
    exit_code: int | None,
) -> None:
    execution = await executor.start(spec(image, env={"FAKE_OUTPUT": "line one\nwhy it broke\n"}))
    _, outcome = await outcome_of(executor, execution)
    assert outcome.status == status
    assert outcome.error_code == error_code
    if exit_code is not None:
        assert outcome.exit_code == exit_code
    assert outcome.note
    if image == "fake/exit:3":
        assert outcome.log_tail is not None
        assert "why it broke" in outcome.log_tail


async def test_legacy_conditions_work_too() -> None:
    with run_server(conditions="legacy") as fake:
        ex = make_executor(fake)
        try:
            _, ok = await outcome_of(ex, await ex.start(spec()))
            _, bad = await outcome_of(ex, await ex.start(spec("fake/exit:2")))
        finally:
            await ex.aclose()
    assert ok.status == RunStatus.SUCCESS
    assert bad.exit_code == 2


async def test_image_expansion_from_launcher_env(kube: KubeFake, executor: PodExecutor) -> None:
    s = spec("${JOB_IMAGE}")
    _, outcome = await outcome_of(executor, await executor.start(s))
    assert outcome.status == RunStatus.SUCCESS
    job = kube.state.get("jobs", job_name("demo", s.run_id, 1))
    assert job is not None
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "fake/succeed"


async def test_deadline_is_a_timeout(kube: KubeFake, executor: PodExecutor) -> None:
    execution = await executor.start(spec("fake/hang", deadline=5))
    events = executor.events(execution)
    await until(events, "running")
    kube.state.advance(10)  # the cluster clock passes activeDeadlineSeconds
    outcome = await finish(events)
    assert outcome.status == RunStatus.TIMEOUT
    assert outcome.error_code == "deadline"


async def test_pending_past_start_timeout_is_diagnosed_then_deleted(kube: KubeFake) -> None:
    ex = make_executor(kube, start_timeout=0.5)
    try:
        s = spec("fake/image-pull-backoff")
        _, outcome = await outcome_of(ex, await ex.start(s))
    finally:
        await ex.aclose()
    assert outcome.status == RunStatus.FAILURE
    assert outcome.end_reason == "start_timeout"
    assert outcome.error_code == "image_pull"
    assert outcome.note is not None
    assert "ImagePullBackOff" in outcome.note
    assert "pod events:" in outcome.note
    name = job_name("demo", s.run_id, 1)
    deletes = [r for r in kube.state.requests if r.method == "DELETE" and r.path.endswith(name)]
    assert len(deletes) == 1
    kube.state.wait_for(lambda st: st.get("jobs", name) is None)


async def test_unschedulable_times_out_with_the_scheduler_message(kube: KubeFake) -> None:
    ex = make_executor(kube, start_timeout=0.3)
    try:
        _, outcome = await outcome_of(ex, await ex.start(spec("fake/unschedulable")))
    finally:
        await ex.aclose()
    assert outcome.end_reason == "start_timeout"
    assert outcome.error_code == "unschedulable"


async def test_invalid_image_fails_at_once(kube: KubeFake) -> None:
    ex = make_executor(kube, start_timeout=600)
    try:
        s = spec("fake/invalid-image")
        _, outcome = await outcome_of(ex, await ex.start(s), within=10)
    finally:
        await ex.aclose()
    assert outcome.status == RunStatus.FAILURE
    assert outcome.error_code == "invalid_image"
    assert outcome.end_reason == "start_failed"
    assert outcome.retryable is False
    kube.state.wait_for(lambda st: st.get("jobs", job_name("demo", s.run_id, 1)) is None)


async def test_missing_secret_is_a_config_error(kube: KubeFake) -> None:
    ex = make_executor(kube, start_timeout=0.3)
    try:
        _, outcome = await outcome_of(ex, await ex.start(spec(secrets=["nope"])))
    finally:
        await ex.aclose()
    assert outcome.error_code == "config_error"


# ---------------------------------------------------------------------- start, adopt, reattach


async def test_start_twice_makes_one_job(kube: KubeFake, executor: PodExecutor) -> None:
    s = spec("fake/hang")
    first = await executor.start(s)
    other = make_executor(kube)  # another launcher with the same run and attempt
    try:
        second = await other.start(s)
        assert second.external_id == first.external_id
    finally:
        await other.aclose()
    assert len(kube.state.list("jobs", NS)) == 1
    await executor.cancel(first, grace=0)
    _, outcome = await outcome_of(executor, first)
    assert outcome.status == RunStatus.CANCELLED


async def test_lost_create_response_then_retry_adopts(
    kube: KubeFake, executor: PodExecutor
) -> None:
    s = spec()
    kube.state.drop_create_response(1)
    with pytest.raises(TemporaryExecutorError):
        await executor.start(s)
    execution = await executor.start(s)  # what the launcher does after the release
    _, outcome = await outcome_of(executor, execution)
    assert outcome.status == RunStatus.SUCCESS
    assert len(kube.state.list("jobs", NS)) == 1
    assert [
        r.status for r in kube.state.requests if r.method == "POST" and r.path.endswith("/jobs")
    ][-1] == 409


async def test_name_collision(kube: KubeFake, executor: PodExecutor) -> None:
    s = spec()
    name = job_name("demo", s.run_id, 1)
    kube.state.create(
        "jobs",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "labels": {"app": "someone-else"}},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "fake/hang"}],
                    }
                }
            },
        },
    )
    with pytest.raises(PermanentExecutorError) as err:
        await executor.start(s)
    assert err.value.code == "name_collision"
    other_attempt = spec(run_id=s.run_id, attempt=2)
    _, outcome = await outcome_of(executor, await executor.start(other_attempt))
    assert outcome.status == RunStatus.SUCCESS


async def test_reattach_after_launcher_restart(kube: KubeFake) -> None:
    s = spec("fake/hang", deadline=5)
    first = make_executor(kube)
    execution = await first.start(s)
    await until(first.events(execution), "running")
    await first.aclose()  # launcher shutdown: the Job keeps running
    name = job_name("demo", s.run_id, 1)
    assert kube.state.get("jobs", name) is not None
    second = make_executor(kube)
    try:
        again = await second.reattach(s)
        assert again is not None
        events = second.events(again)
        await until(events, "running")
        kube.state.advance(10)
        outcome = await finish(events)
        assert outcome.status == RunStatus.TIMEOUT
        with pytest.raises(PermanentExecutorError) as gone:  # nothing to find: not an inline
            await second.reattach(spec())  # process that died with its launcher
        assert gone.value.code == "deleted_externally"
    finally:
        await second.aclose()


# ---------------------------------------------------------------------- cancel, deletion


async def test_cancel_deletes_and_ends_cancelled_once_the_pod_is_gone(
    kube: KubeFake, executor: PodExecutor
) -> None:
    s = spec("fake/hang", env={"FAKE_OUTPUT": "working\n"})
    execution = await executor.start(s)
    events = executor.events(execution)
    await until(events, "running")
    await executor.cancel(execution, grace=0)
    outcome = await finish(events)
    assert outcome.status == RunStatus.CANCELLED
    name = job_name("demo", s.run_id, 1)
    assert kube.state.get("jobs", name) is None
    assert kube.state.pods_of(name, NS) == []
    # One delete answered; a transport retry (a kept-alive connection the server had closed)
    # may add an unanswered attempt, which is the client's business, not a second delete.
    deletes = [r for r in kube.state.requests if r.method == "DELETE"]
    assert [r.status for r in deletes if r.status > 0] == [200], deletes


async def test_job_deleted_by_someone_else(kube: KubeFake, executor: PodExecutor) -> None:
    s = spec("fake/hang")
    execution = await executor.start(s)
    events = executor.events(execution)
    await until(events, "running")
    kube.state.delete("jobs", job_name("demo", s.run_id, 1), NS)
    outcome = await finish(events)
    assert outcome.status == RunStatus.FAILURE
    assert outcome.error_code == "deleted_externally"


# ---------------------------------------------------------------------- params


async def test_large_params_travel_in_an_owned_config_map() -> None:
    # The ConfigMap is created right after the Job (it needs the Job's uid to be owned by it);
    # like a real cluster, scheduling the pod takes longer than that.
    with run_server(timing=Timing(schedule=0.5)) as kube:
        executor = make_executor(kube)
        try:
            await _large_params(kube, executor)
        finally:
            await executor.aclose()


async def _large_params(kube: KubeFake, executor: PodExecutor) -> None:
    big = json.dumps({"blob": "x" * 100_000})
    s = spec(env={"RUNLANE_PARAMS": big})
    execution = await executor.start(s)
    name = job_name("demo", s.run_id, 1)
    cm = kube.state.get("configmaps", f"{name}-params")
    job = kube.state.get("jobs", name)
    assert cm is not None
    assert job is not None
    assert cm["data"]["params.json"] == big
    assert cm["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    _, outcome = await outcome_of(executor, execution)
    assert outcome.status == RunStatus.SUCCESS
    kube.state.delete("jobs", name, NS)
    kube.state.wait_for(lambda st: st.get("configmaps", f"{name}-params") is None)


# ---------------------------------------------------------------------- the shared watch and faults


async def test_one_shared_watch_for_many_runs(kube: KubeFake, executor: PodExecutor) -> None:
    executions = await asyncio.gather(
        *(executor.start(spec("fake/hang", deadline=5)) for _ in range(20))
    )
    streams = [executor.events(e) for e in executions]
    await asyncio.gather(*(until(s, "running") for s in streams))
    watch = executor.watches[NS]
    # One list + watch per kind (jobs, pods) for the namespace, whatever the number of runs.
    assert kube.state.open_watches <= 2, watch.stats
    assert watch.stats.lists == 2, watch.stats
    assert watch.stats.watches <= 4, watch.stats
    kube.state.advance(10)
    outcomes = await asyncio.gather(*(finish(s) for s in streams))
    assert {o.status for o in outcomes} == {RunStatus.TIMEOUT}


async def test_410_mid_stream_relists(kube: KubeFake, executor: PodExecutor) -> None:
    execution = await executor.start(spec("fake/hang", deadline=5))
    events = executor.events(execution)
    await until(events, "running")
    watch = executor.watches[NS]
    lists = watch.stats.lists
    kube.state.expire_watches()
    await stats_reach(watch, lambda st: st.gone >= 1 and st.lists > lists)
    kube.state.advance(10)
    assert (await finish(events)).status == RunStatus.TIMEOUT


async def test_410_at_connect_relists(kube: KubeFake, executor: PodExecutor) -> None:
    kube.state.set_expired_mode("http")
    execution = await executor.start(spec("fake/hang", deadline=5))
    events = executor.events(execution)
    await until(events, "running")
    watch = executor.watches[NS]
    # Connections drop and history is compacted: the reconnect from the last version seen is
    # answered with HTTP 410 (not an in-stream ERROR), and the watch lists again.
    kube.state.restart(jump=10)
    await stats_reach(watch, lambda st: st.gone >= 1 and st.watches > 1)
    await fake_reaches(kube, lambda st: st.open_watches == 2)
    kube.state.advance(10)
    assert (await finish(events)).status == RunStatus.TIMEOUT


async def test_dropped_watch_is_not_an_end(kube: KubeFake, executor: PodExecutor) -> None:
    execution = await executor.start(spec("fake/hang", deadline=5))
    events = executor.events(execution)
    await until(events, "running")
    watch = executor.watches[NS]
    await fake_reaches(kube, lambda st: st.open_watches == 2)  # both watches are connected
    before = watch.stats.watches
    kube.state.end_watches(abort=True)
    await stats_reach(watch, lambda st: st.watches >= before + 2)  # both kinds reconnected
    await fake_reaches(kube, lambda st: st.open_watches == 2)
    await fake_reaches(kube, lambda st: st.open_watches == 2)
    before = watch.stats.watches
    kube.state.end_watches(abort=False)  # a clean end (the server's timeout) is not an end either
    await stats_reach(watch, lambda st: st.watches >= before + 2)
    kube.state.advance(10)
    assert (await finish(events)).status == RunStatus.TIMEOUT


async def test_resource_version_jump_after_api_server_restart(
    kube: KubeFake, executor: PodExecutor
) -> None:
    execution = await executor.start(spec("fake/hang", deadline=5))
    events = executor.events(execution)
    await until(events, "running")
    watch = executor.watches[NS]
    lists = watch.stats.lists
    kube.state.restart(jump=5000)
    await stats_reach(watch, lambda st: st.lists > lists)
    await fake_reaches(kube, lambda st: st.open_watches == 2)
    kube.state.advance(10)
    assert (await finish(events)).status == RunStatus.TIMEOUT


async def test_429_storm_on_create_honours_retry_after(
    kube: KubeFake, executor: PodExecutor
) -> None:
    await executor.ensure_allowed(NS)
    kube.state.fail_next(2, 429, retry_after=1, method="POST")
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    execution = await executor.start(spec())
    assert loop.time() - t0 >= 2.0  # two Retry-After waits
    _, outcome = await outcome_of(executor, execution)
    assert outcome.status == RunStatus.SUCCESS


async def test_429_storm_past_the_retries_releases_the_run(kube: KubeFake) -> None:
    ex = make_executor(kube, throttle_retries=1)
    try:
        await ex.ensure_allowed(NS)
        kube.state.fail_next(5, 429, retry_after=1, method="POST")
        with pytest.raises(TemporaryExecutorError) as err:
            await ex.start(spec())
        assert err.value.code == "api_throttled"
        assert err.value.retry_after >= 1
    finally:
        await ex.aclose()


async def test_5xx_on_create_is_temporary(kube: KubeFake, executor: PodExecutor) -> None:
    await executor.ensure_allowed(NS)
    kube.state.fail_next(1, 503, method="POST")
    with pytest.raises(TemporaryExecutorError):
        await executor.start(spec())


async def test_watch_survives_5xx_and_429_on_list(kube: KubeFake, executor: PodExecutor) -> None:
    execution = await executor.start(spec("fake/hang", deadline=5))
    events = executor.events(execution)
    await until(events, "running")
    watch = executor.watches[NS]
    kube.state.fail_next(3, 429, retry_after=0, method="GET")
    kube.state.expire_watches()
    await stats_reach(watch, lambda st: st.gone >= 1 and st.watches > 1)
    await fake_reaches(kube, lambda st: st.open_watches == 2)
    kube.state.advance(10)
    assert (await finish(events)).status == RunStatus.TIMEOUT


# ---------------------------------------------------------------------- RBAC


async def test_rbac_refuses_pod_runs_without_job_verbs() -> None:
    allow = [
        "create,get,list,watch jobs.batch",
        "get,list,watch pods",
        "get pods/log",
        "create selfsubjectaccessreviews.authorization.k8s.io",
    ]
    with run_server(allow=allow) as fake:
        ex = make_executor(fake)
        try:
            with pytest.raises(PermanentExecutorError) as err:
                await ex.start(spec())
            assert err.value.code == "forbidden"
            assert "delete jobs.batch" in str(err.value)
            report = await rbac_report(NS, api=ex.api)
        finally:
            await ex.aclose()
    table = {(resource, verb): ok for resource, verb, ok in report}
    assert table[("jobs.batch", "create")] is True
    assert table[("jobs.batch", "delete")] is False
    assert table[("pods/log", "get")] is True
    assert table[("configmaps", "create")] is False


async def test_rbac_report_all_allowed(kube: KubeFake) -> None:
    report = await rbac_report(
        environ={"KUBECONFIG": str(kube.kubeconfig_path), "KUBERNETES_NAMESPACE": NS}
    )
    assert report
    assert all(ok for _, _, ok in report)


async def test_logs_of_a_running_pod(kube: KubeFake, executor: PodExecutor) -> None:
    s = spec("fake/hang", env={"FAKE_OUTPUT": "hello from the pod\n"})
    execution = await executor.start(s)
    events = executor.events(execution)
    await until(events, "running")
    text = await executor.logs(execution)
    assert "hello from the pod" in text
    await executor.cancel(execution, grace=0)
    assert (await finish(events)).status == RunStatus.CANCELLED


async def test_finished_jobs_and_pods_share_their_keys_in_the_cache(
    kube: KubeFake, executor: PodExecutor
) -> None:
    # The cache keeps every runlane Job and pod until the cluster deletes it (a day, by the
    # Jobs' TTL): a finished one's keys and short texts are shared with the others', not
    # copies of its own (watch._compact), and its content is what the API server says.
    specs = [spec(), spec()]
    for s in specs:
        _, outcome = await outcome_of(executor, await executor.start(s))
        assert outcome.status == RunStatus.SUCCESS
    watch = executor.watches[NS]
    names = [job_name(s.job, s.run_id, s.attempt) for s in specs]

    def final_pods() -> list[dict[str, Any]]:
        pods = [p for n in names for p in watch.pods_of(n)]
        return pods if [p["status"].get("phase") for p in pods] == ["Succeeded"] * 2 else []

    await eventually(final_pods, "both runs' pods Succeeded in the watch's cache")

    def assert_shared() -> None:
        jobs = [watch.job(n) for n in names]
        assert all(j is not None for j in jobs)
        first, second = (j["status"]["conditions"][0] for j in jobs if j is not None)
        assert first == second | {k: first[k] for k in first if "Time" in k}
        for key_one, key_two in zip(first, second, strict=True):
            assert key_one is key_two  # one string for the key of every cached condition
        assert first["status"] is second["status"]  # "True", shared as well
        pods = final_pods()
        assert pods[0]["status"]["phase"] is pods[1]["status"]["phase"]

    assert_shared()
    for n in names:  # what the cache holds of a Job is what the API server says
        job = await executor.api.request("GET", jobs_path(NS, n))
        cached = watch.job(n)
        assert cached is not None
        assert cached["status"] == job["status"]
    lists = watch.stats.lists
    kube.state.expire_watches()  # a relist stores the listed objects the same way
    await stats_reach(watch, lambda st: st.lists > lists)
    assert_shared()


async def test_a_run_no_longer_followed_holds_nothing_in_the_executor(
    kube: KubeFake, executor: PodExecutor
) -> None:
    # A supervision that ends before reading the events (a lease lost while the Job's name was
    # being saved) must not leave the run's entry and watch subscription behind for the
    # launcher's life, nor a tombstone once the Job is deleted.
    s = spec("fake/hang", deadline=5)
    execution = await executor.start(s)
    watch = executor.watches[NS]
    name = job_name(s.job, s.run_id, s.attempt)
    assert name in watch._subscribers and executor._runs  # noqa: PT018 - followed once started
    executor.stop_following(execution)
    assert name not in watch._subscribers
    assert not executor._runs
    kube.state.delete("jobs", name, NS)
    await eventually(lambda: watch.job(name) is None, "the Job's deletion in the cache")
    assert watch.tombstone(name) is None
