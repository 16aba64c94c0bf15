"""Fidelity: lightkube (the executor's client, written elsewhere) sync and async against the fake."""

from __future__ import annotations

from typing import Any

import pytest

from runlane.testing.kube import KubeFake
from tests.kube_fake.conftest import job_body

lightkube = pytest.importorskip("lightkube")
from lightkube import ApiError, AsyncClient, Client, KubeConfig  # noqa: E402
from lightkube.codecs import from_dict  # noqa: E402
from lightkube.resources.batch_v1 import Job  # noqa: E402
from lightkube.resources.core_v1 import Pod  # noqa: E402
from lightkube.types import CascadeType  # noqa: E402


def _client(kube: KubeFake) -> Client:
    return Client(config=KubeConfig.from_file(str(kube.kubeconfig_path)), namespace="default")


def test_sync_crud_selectors_watch_and_cascade(kube_fake: KubeFake) -> None:
    client = _client(kube_fake)
    job: Any = from_dict(job_body("lk", labels={"app": "runlane"}))
    created = client.create(job)
    assert created.metadata.uid
    with pytest.raises(ApiError) as err:
        client.create(job)
    assert err.value.status.code == 409
    assert err.value.status.reason == "AlreadyExists"
    kube_fake.state.wait_for(lambda s: s.job_finished("lk"))
    got = client.get(Job, "lk")
    assert [c.type for c in got.status.conditions] == ["SuccessCriteriaMet", "Complete"]
    assert [j.metadata.name for j in client.list(Job, labels={"app": "runlane"})] == ["lk"]
    assert [p.metadata.labels["job-name"] for p in client.list(Pod, labels={"job-name": "lk"})] == [
        "lk"
    ]

    rv = created.metadata.resourceVersion
    types = []
    for kind, obj in client.watch(Job, resource_version=rv, server_timeout=1):
        types.append((kind, obj.metadata.name))
        if kind == "MODIFIED" and any(c.type == "Complete" for c in obj.status.conditions or []):
            break
    assert types[0] == ("MODIFIED", "lk")

    client.delete(Job, "lk", cascade=CascadeType.BACKGROUND)
    kube_fake.state.wait_for(lambda s: not s.pods_of("lk") and s.get("jobs", "lk") is None)
    with pytest.raises(ApiError) as err:
        client.get(Job, "lk")
    assert err.value.status.code == 404
    client.close()


async def test_async_client_watch_and_410(kube_fake: KubeFake) -> None:
    client = AsyncClient(
        config=KubeConfig.from_file(str(kube_fake.kubeconfig_path)), namespace="default"
    )
    try:
        await client.create(from_dict(job_body("alk", image="fake/oom")))
        kube_fake.state.wait_for(lambda s: s.job_finished("alk"))
        pods = [p async for p in client.list(Pod, labels={"job-name": "alk"})]
        pod = pods[0]
        term = pod.status.containerStatuses[0].state.terminated
        assert (term.reason, term.exitCode) == ("OOMKilled", 137)
        kube_fake.state.compact()
        with pytest.raises(ApiError) as err:
            async for _ in client.watch(Job, resource_version="1", server_timeout=1):
                pass
        assert err.value.status.code == 410
    finally:
        await client.close()
