"""Pod-run defects from an audit of the pod executor: a takeover that adopts a Job whose params
ConfigMap the dead launcher never made, and a Job delete that did not go through (cancel, start
timeout) reported as done while the Job runs on."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from runlane.adapters.kubernetes.manifests import build_job_plan
from runlane.adapters.kubernetes.names import job_name, params_config_map_name
from runlane.core.runs import RunStatus
from runlane.testing.kube import KubeFake, run_server
from tests.integration.test_pod_executor import (
    NS,
    finish,
    make_executor,
    outcome_of,
    spec,
    until,
)


@pytest.fixture
def kube() -> Iterator[KubeFake]:
    with run_server() as fake:
        yield fake


async def test_a_takeover_makes_the_params_config_map_the_dead_launcher_never_made(
    kube: KubeFake,
) -> None:
    # A launcher created the Job of a run with large params and died before creating its
    # ConfigMap (it is made after the Job, to be owned by it). The launcher that takes the run
    # over reattaches to the Job: its pod must not wait for the volume until the start timeout.
    s = spec(env={"RUNLANE_PARAMS": json.dumps({"blob": "x" * 100_000})})
    plan = build_job_plan(s, namespace=NS, launcher_env={})
    assert plan.params is not None
    created = kube.state.create("jobs", plan.job)
    ex = make_executor(kube, start_timeout=2.0)
    try:
        execution = await ex.reattach(s)
        assert execution is not None
        _, outcome = await outcome_of(ex, execution, within=10)
    finally:
        await ex.aclose()
    assert outcome.status == RunStatus.SUCCESS, (outcome.end_reason, outcome.note)
    cm = kube.state.get("configmaps", params_config_map_name(plan.name))
    assert cm is not None
    assert cm["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]


async def test_a_refused_config_map_create_on_takeover_keeps_a_running_job(
    kube: KubeFake,
) -> None:
    # The run's Job runs with its ConfigMap in place; the launcher that takes it over tries
    # the create again and is refused for another reason than 409 (a namespace at its
    # ConfigMap quota answers 403 before it looks at the name). The healthy Job must not be
    # deleted for that: the reattach goes on and the run ends as its pod does.
    s = spec("fake/hang", env={"RUNLANE_PARAMS": json.dumps({"blob": "x" * 100_000})})
    name = job_name("demo", s.run_id, 1)
    first = make_executor(kube)
    try:
        execution = await first.start(s)
        await until(first.events(execution), "running")
    finally:
        await first.aclose()  # the launcher goes away; its Job and ConfigMap run on
    second = make_executor(kube)
    try:
        kube.state.fail_next(1, 403, method="POST", path="configmaps")
        execution = await second.reattach(s)
        assert execution is not None
        assert kube.state.get("jobs", name) is not None, "a healthy running Job was deleted"
        await until(second.events(execution), "running")
    finally:
        await second.aclose()


async def test_a_cancel_whose_delete_failed_is_not_reported_while_the_job_runs(
    kube: KubeFake,
) -> None:
    # The delete is refused once (the same as the API away through the delete's retries): the
    # run must not end `cancelled` ("the Job was deleted on request") with its pod running on.
    ex = make_executor(kube, cancel_wait=0.3)
    try:
        s = spec("fake/hang")
        name = job_name("demo", s.run_id, 1)
        execution = await ex.start(s)
        events = ex.events(execution)
        await until(events, "running")
        kube.state.fail_next(1, 403, method="DELETE")
        await ex.cancel(execution, grace=0)
        outcome = await finish(events, within=10)
        assert outcome.status == RunStatus.CANCELLED
        assert kube.state.get("jobs", name) is None, "cancelled, but the Job runs on"
    finally:
        await ex.aclose()


async def test_a_start_timeout_whose_delete_failed_does_not_end_the_run_beside_its_job(
    kube: KubeFake,
) -> None:
    # A start timeout ends the run (retryable: the next attempt makes a new Job); if the Job
    # were left behind, it could start when the image comes and run beside the retry.
    ex = make_executor(kube, start_timeout=0.3)
    ex.delete_retry_seconds = 0.2
    try:
        s = spec("fake/image-pull-backoff")
        name = job_name("demo", s.run_id, 1)
        execution = await ex.start(s)
        kube.state.fail_next(1, 403, method="DELETE")
        _, outcome = await outcome_of(ex, execution, within=10)
        assert outcome.end_reason == "start_timeout"
        assert kube.state.get("jobs", name) is None, "ended, but its Job is still there"
    finally:
        await ex.aclose()
