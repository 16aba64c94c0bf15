"""Fidelity: the official `kubernetes` Python client (nobody here wrote it) against the fake."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from runlane.testing.kube import KubeFake
from tests.kube_fake.conftest import job_body

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, config, watch  # noqa: E402


@pytest.fixture
def apis(kube_fake: KubeFake) -> tuple[Any, Any]:
    api_client = config.new_client_from_config(str(kube_fake.kubeconfig_path))
    yield client.BatchV1Api(api_client), client.CoreV1Api(api_client)
    api_client.close()


def test_create_get_list_with_selectors_and_delete(
    kube_fake: KubeFake, apis: tuple[Any, Any]
) -> None:
    batch, core = apis
    created = batch.create_namespaced_job(
        "default", job_body("a", labels={"team": "x", "tier": "1"})
    )
    batch.create_namespaced_job("default", job_body("b", labels={"team": "y"}))
    batch.create_namespaced_job("default", job_body("c"))
    assert created.metadata.uid
    assert created.metadata.creation_timestamp
    assert int(created.metadata.resource_version) > 0
    # the controller-uid selector and the standard template labels are defaulted
    assert created.spec.selector.match_labels == {
        "batch.kubernetes.io/controller-uid": created.metadata.uid
    }
    assert created.spec.template.metadata.labels["batch.kubernetes.io/job-name"] == "a"

    def names(selector: str) -> list[str]:
        return [
            j.metadata.name
            for j in batch.list_namespaced_job("default", label_selector=selector).items
        ]

    assert names("team=x") == ["a"]
    assert names("team!=x") == ["b", "c"]
    assert names("team in (x,y)") == ["a", "b"]
    assert names("team notin (x)") == ["b", "c"]
    assert names("team") == ["a", "b"]
    assert names("!team") == ["c"]
    assert names("team=x,tier=1") == ["a"]

    kube_fake.state.wait_for(lambda s: all(s.job_finished(n) for n in "abc"))
    got = batch.read_namespaced_job_status("a", "default")
    assert [(c.type, c.status, c.reason) for c in got.status.conditions] == [
        ("SuccessCriteriaMet", "True", "CompletionsReached"),
        ("Complete", "True", "CompletionsReached"),
    ]
    assert got.status.succeeded == 1
    assert got.status.start_time
    assert got.status.completion_time

    pods = core.list_namespaced_pod("default", label_selector="job-name=a").items
    assert len(pods) == 1
    pod = pods[0]
    assert pod.metadata.name.startswith("a-")
    assert len(pod.metadata.name) == len("a-") + 5
    owner = pod.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.uid, owner.controller) == (
        "Job",
        "a",
        created.metadata.uid,
        True,
    )

    status = batch.delete_namespaced_job("a", "default", propagation_policy="Background")
    assert status["status"] == "Success"
    kube_fake.state.wait_for(lambda s: not s.pods_of("a"))
    with pytest.raises(client.ApiException) as err:
        batch.read_namespaced_job("a", "default")
    assert err.value.status == 404
    assert json.loads(err.value.body)["reason"] == "NotFound"


def test_error_bodies(apis: tuple[Any, Any]) -> None:
    batch, _ = apis
    batch.create_namespaced_job("default", job_body("dup"))
    with pytest.raises(client.ApiException) as err:
        batch.create_namespaced_job("default", job_body("dup"))
    assert err.value.status == 409
    assert json.loads(err.value.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'jobs.batch "dup" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "dup", "group": "batch", "kind": "jobs"},
        "code": 409,
    }
    with pytest.raises(client.ApiException) as err:
        batch.create_namespaced_job("default", job_body("Bad_Name"))
    body = json.loads(err.value.body)
    assert err.value.status == 422
    assert body["reason"] == "Invalid"
    assert body["message"].startswith('Job.batch "Bad_Name" is invalid: ')
    assert body["details"]["causes"][0]["field"] == "metadata.name"
    with pytest.raises(client.ApiException) as err:
        batch.create_namespaced_job("default", job_body("x" * 64))
    assert err.value.status == 422
    assert "must be no more than 63 characters" in err.value.body
    with pytest.raises(client.ApiException) as err:
        batch.create_namespaced_job("nowhere", job_body("n"))
    assert err.value.status == 404
    assert '"namespaces \\"nowhere\\" not found"' in err.value.body


def test_watch_events_bookmarks_resume_and_expiry(
    kube_fake: KubeFake, apis: tuple[Any, Any]
) -> None:
    batch, _ = apis
    listed = batch.list_namespaced_job("default")
    start_rv = listed.metadata.resource_version
    batch.create_namespaced_job("default", job_body("w1", image="fake/exit:2"))
    kube_fake.state.wait_for(lambda s: s.job_finished("w1"))
    batch.delete_namespaced_job("w1", "default", propagation_policy="Background")

    seen: list[tuple[str, list[str]]] = []
    last_rv = start_rv
    w = watch.Watch()
    for ev in w.stream(
        batch.list_namespaced_job,
        "default",
        resource_version=start_rv,
        allow_watch_bookmarks=True,
        timeout_seconds=1,
    ):
        conds = (
            [c.type for c in (ev["object"].status.conditions or [])]
            if ev["type"] != "BOOKMARK"
            else []
        )
        seen.append((ev["type"], conds))
        last_rv = ev["raw_object"]["metadata"]["resourceVersion"]
        if ev["type"] == "DELETED":
            kube_fake.state.send_bookmarks()
        if ev["type"] == "BOOKMARK":
            w.stop()
    kinds = [k for k, _ in seen]
    assert kinds[0] == "ADDED"
    assert "DELETED" in kinds
    assert kinds[-1] == "BOOKMARK"
    assert ("MODIFIED", ["FailureTarget"]) in seen
    assert ("MODIFIED", ["FailureTarget", "Failed"]) in seen
    assert int(last_rv) >= int(start_rv)

    # resuming from the bookmark's resourceVersion gets only later events
    batch.create_namespaced_job("default", job_body("w2", image="fake/hang"))
    first = next(
        iter(
            watch.Watch().stream(
                batch.list_namespaced_job, "default", resource_version=last_rv, timeout_seconds=1
            )
        )
    )
    assert (first["type"], first["object"].metadata.name) == ("ADDED", "w2")

    # an expired resourceVersion: the client gets 410 (it retries once, then raises)
    kube_fake.state.compact()
    with pytest.raises(client.ApiException) as err:
        for _ in watch.Watch().stream(
            batch.list_namespaced_job, "default", resource_version=start_rv, timeout_seconds=1
        ):
            pass
    assert err.value.status == 410


def test_watch_receives_live_events_from_another_thread(
    kube_fake: KubeFake, apis: tuple[Any, Any]
) -> None:
    batch, _ = apis
    rv = batch.list_namespaced_job("default").metadata.resource_version
    timer = threading.Timer(0.2, lambda: kube_fake.state.create("jobs", job_body("live")))
    timer.start()
    w = watch.Watch()
    types = []
    for ev in w.stream(
        batch.list_namespaced_job, "default", resource_version=rv, timeout_seconds=5
    ):
        types.append(ev["type"])
        if any(c.type == "Complete" for c in ev["object"].status.conditions or []):
            w.stop()
    timer.join()
    assert types[0] == "ADDED"
    assert types[-1] == "MODIFIED"


def test_logs_events_and_ssar(kube_fake_factory: Any) -> None:
    kube = kube_fake_factory(
        allow=["create,get,list,watch,delete jobs.batch", "get,list,watch pods", "get pods/log"]
    )
    api_client = config.new_client_from_config(str(kube.kubeconfig_path))
    try:
        batch, core = client.BatchV1Api(api_client), client.CoreV1Api(api_client)
        batch.create_namespaced_job("default", job_body("l", env={"FAKE_OUTPUT": "1\n2\n3\n4\n"}))
        kube.state.wait_for(lambda s: s.job_finished("l"))
        pod = (
            core.list_namespaced_pod("default", label_selector="batch.kubernetes.io/job-name=l")
            .items[0]
            .metadata.name
        )
        assert core.read_namespaced_pod_log(pod, "default", tail_lines=2) == "3\n4\n"
        assert core.read_namespaced_pod_log(pod, "default", limit_bytes=3) == "1\n2"
        # events are not in the allow list: 403 with the apiserver's message
        with pytest.raises(client.ApiException) as err:
            core.list_namespaced_event("default", field_selector=f"involvedObject.name={pod}")
        assert err.value.status == 403
        assert json.loads(err.value.body)["message"] == (
            'events is forbidden: User "runlane-fake" cannot list resource "events" in API group "" '
            'in the namespace "default"'
        )
        kube.state.set_allow(None)
        events = core.list_namespaced_event(
            "default", field_selector=f"involvedObject.name={pod}"
        ).items
        assert {"Scheduled", "Pulled", "Created", "Started"} <= {e.reason for e in events}
        kube.state.set_allow(["create jobs.batch", "get pods/log"])

        authz = client.AuthorizationV1Api(api_client)

        def allowed(verb: str, resource: str, group: str = "", sub: str = "") -> bool:
            review = client.V1SelfSubjectAccessReview(
                spec=client.V1SelfSubjectAccessReviewSpec(
                    resource_attributes=client.V1ResourceAttributes(
                        namespace="default",
                        verb=verb,
                        group=group,
                        resource=resource,
                        subresource=sub or None,
                    )
                )
            )
            return bool(authz.create_self_subject_access_review(review).status.allowed)

        assert allowed("create", "jobs", "batch")
        assert not allowed("delete", "jobs", "batch")
        assert allowed("get", "pods", sub="log")
        assert not allowed("watch", "pods")
    finally:
        api_client.close()
