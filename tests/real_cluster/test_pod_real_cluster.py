"""The pod executor's scenarios against a real cluster (opt-in; docs/kubernetes.md: kind).

    RUNLANE_REAL_CLUSTER=1 KUBECONFIG=~/.kube/config .venv/bin/python -m pytest tests/real_cluster

Runs only when both are set. Jobs go to `RUNLANE_REAL_CLUSTER_NAMESPACE` (default `default`)
and use `busybox:1.36` (`RUNLANE_REAL_CLUSTER_IMAGE`), which the cluster must be able to pull.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from runlane.adapters.kubernetes.api import jobs_path
from runlane.adapters.kubernetes.executor import PodExecutor
from runlane.adapters.kubernetes.names import job_name
from runlane.adapters.kubernetes.rbac import rbac_report
from runlane.core.runs import Outcome, RunStatus
from runlane.errors import PermanentExecutorError
from runlane.ports import Execution, ExecutionSpec

pytestmark = pytest.mark.skipif(
    not (os.environ.get("KUBECONFIG") and os.environ.get("RUNLANE_REAL_CLUSTER") == "1"),
    reason="real-cluster suite: set KUBECONFIG and RUNLANE_REAL_CLUSTER=1",
)

NS = os.environ.get("RUNLANE_REAL_CLUSTER_NAMESPACE", "default")
IMAGE = os.environ.get("RUNLANE_REAL_CLUSTER_IMAGE", "busybox:1.36")


@pytest.fixture
async def executor() -> AsyncIterator[PodExecutor]:
    ex = PodExecutor(
        environ={**os.environ, "KUBERNETES_NAMESPACE": NS}, start_timeout=60.0, ttl_seconds=600
    )
    yield ex
    await ex.aclose()


def spec(
    command: list[str], *, image: str = IMAGE, deadline: float = 300.0, **kw: Any
) -> ExecutionSpec:
    rid = kw.pop("run_id", None) or str(uuid.uuid4())
    return ExecutionSpec(
        run_id=rid,
        job="real-cluster",
        attempt=kw.pop("attempt", 1),
        trigger="manual",
        command=command,
        params={},
        env={"RUN_ID": rid, "RUNLANE_PARAMS": "{}"},
        deadline_seconds=deadline,
        kill_grace_seconds=2.0,
        profile={"image": image, **kw},
    )


async def outcome(ex: PodExecutor, execution: Execution, within: float = 240.0) -> Outcome:
    async with asyncio.timeout(within):
        async for event in ex.events(execution):
            if event.kind == "finished":
                assert event.outcome is not None
                return event.outcome
    raise AssertionError("no outcome")


async def test_success(executor: PodExecutor) -> None:
    done = await outcome(executor, await executor.start(spec(["sh", "-c", "echo hi"])))
    assert done.status == RunStatus.SUCCESS


async def test_exit_code_and_log_tail(executor: PodExecutor) -> None:
    done = await outcome(executor, await executor.start(spec(["sh", "-c", "echo boom; exit 3"])))
    assert done.status == RunStatus.FAILURE
    assert done.exit_code == 3
    assert done.error_code == "exit_code"
    assert "boom" in (done.log_tail or "")


async def test_deadline(executor: PodExecutor) -> None:
    done = await outcome(executor, await executor.start(spec(["sleep", "600"], deadline=10)))
    assert done.status == RunStatus.TIMEOUT


async def test_invalid_image_fails_at_once(executor: PodExecutor) -> None:
    done = await outcome(
        executor, await executor.start(spec(["true"], image="Bad:Image:")), within=60
    )
    assert done.error_code == "invalid_image"


async def test_image_pull_start_timeout() -> None:
    ex = PodExecutor(environ={**os.environ, "KUBERNETES_NAMESPACE": NS}, start_timeout=20.0)
    try:
        image = "registry.invalid/runlane/does-not-exist:0"
        done = await outcome(ex, await ex.start(spec(["true"], image=image)))
    finally:
        await ex.aclose()
    assert done.end_reason == "start_timeout"
    assert done.error_code == "image_pull"


async def test_cancel(executor: PodExecutor) -> None:
    execution = await executor.start(spec(["sleep", "600"]))
    async with asyncio.timeout(120):
        async for event in executor.events(execution):
            if event.kind == "running":
                await executor.cancel(execution, grace=2)
            if event.kind == "finished":
                assert event.outcome is not None
                assert event.outcome.status == RunStatus.CANCELLED
                return


async def test_start_is_idempotent_and_collisions_refused(executor: PodExecutor) -> None:
    s = spec(["sleep", "5"])
    first = await executor.start(s)
    other = PodExecutor(environ={**os.environ, "KUBERNETES_NAMESPACE": NS})
    try:
        again = await other.start(s)
        assert again.external_id == first.external_id
    finally:
        await other.aclose()
    assert (await outcome(executor, first)).status == RunStatus.SUCCESS
    assert len(await _jobs_named(executor, first.external_id.split("/", 1)[1])) == 1

    foreign = spec(["true"])
    name = job_name(foreign.job, foreign.run_id, 1)
    await executor.api.request(
        "POST",
        jobs_path(NS),
        body={
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "labels": {"app": "not-runlane"}},
            "spec": {
                "ttlSecondsAfterFinished": 60,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": IMAGE, "command": ["true"]}],
                    }
                },
            },
        },
    )
    with pytest.raises(PermanentExecutorError) as err:
        await executor.start(foreign)
    assert err.value.code == "name_collision"


async def _jobs_named(ex: PodExecutor, name: str) -> list[Any]:
    answer = await ex.api.request(
        "GET", jobs_path(NS), params={"fieldSelector": f"metadata.name={name}"}
    )
    return list(answer.get("items") or [])


async def test_rbac_report() -> None:
    report = await rbac_report(NS)
    assert ("jobs.batch", "create", True) in report
