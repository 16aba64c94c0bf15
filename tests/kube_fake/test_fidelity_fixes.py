"""Fidelity fixes found by a black-box bug hunt, checked through the HTTP API.

1. The kubelet retries a missing ConfigMap/Secret volume (with backoff, one aggregated FailedMount
   event) and starts the container once the volume exists.
2. A watch from a resourceVersion newer than the server's current one (the server lost its state)
   fails with 504 "Too large resource version" instead of an empty stream forever.
"""

from __future__ import annotations

import time
from typing import Any

from runlane.testing.kube import KubeFake
from tests.kube_fake.conftest import job_body
from tests.kube_fake.http import Raw

JOBS = "/apis/batch/v1/namespaces/default/jobs"
CMS = "/api/v1/namespaces/default/configmaps"
PODS = "/api/v1/namespaces/default/pods"


def _job_mounting(name: str, config_map: str, *, secret: str | None = None) -> dict[str, Any]:
    body = job_body(name)
    spec = body["spec"]["template"]["spec"]  # type: ignore[index]
    spec["volumes"] = [{"name": "params", "configMap": {"name": config_map}}]
    mounts = [{"name": "params", "mountPath": "/etc/params"}]
    if secret is not None:
        spec["volumes"].append({"name": "creds", "secret": {"secretName": secret}})
        mounts.append({"name": "creds", "mountPath": "/etc/creds"})
    spec["containers"][0]["volumeMounts"] = mounts
    return body


def _pod(raw: Raw, job: str) -> dict[str, Any]:
    status, _, body = raw.request("GET", f"{PODS}?labelSelector=batch.kubernetes.io/job-name={job}")
    assert status == 200
    assert len(body["items"]) == 1
    pod: dict[str, Any] = body["items"][0]
    return pod


def _events(raw: Raw, pod: str, reason: str) -> list[dict[str, Any]]:
    status, _, body = raw.request("GET", f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name={pod}")
    assert status == 200
    return [e for e in body["items"] if e["reason"] == reason]


def _until(predicate: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_config_map_created_after_the_job_is_mounted_on_retry(kube_fake: KubeFake) -> None:
    raw = Raw(kube_fake.url)
    status, _, _ = raw.request("POST", JOBS, _job_mounting("late", "late-params"))
    assert status == 201
    _until(lambda: len(kube_fake.state.pods_of("late")) == 1 and _events(raw, _pod(raw, "late")["metadata"]["name"],
                                                                        "FailedMount"))
    pod = _pod(raw, "late")
    assert pod["status"]["phase"] == "Pending"
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    time.sleep(1.0)  # like runlane's executor: the ConfigMap follows the Job (it is owned by it)
    status, _, _ = raw.request("POST", CMS, {"metadata": {"name": "late-params"}, "data": {"params.json": "{}"}})
    assert status == 201
    _until(lambda: kube_fake.state.job_condition("late") == "Complete", timeout=15)
    pod = _pod(raw, "late")
    assert pod["status"]["phase"] == "Succeeded"
    name = pod["metadata"]["name"]
    failed = _events(raw, name, "FailedMount")
    assert len(failed) == 1  # repeats aggregate into one event's count
    assert failed[0]["type"] == "Warning"
    assert failed[0]["message"] == 'MountVolume.SetUp failed for volume "params" : configmap "late-params" not found'
    assert _events(raw, name, "Started")


def test_a_volume_that_never_appears_keeps_the_pod_pending_with_repeated_failed_mounts(kube_fake: KubeFake) -> None:
    raw = Raw(kube_fake.url)
    status, _, _ = raw.request("POST", JOBS, _job_mounting("never", "absent", secret="absent-creds"))
    assert status == 201
    kube_fake.state.wait_for(lambda s: len(s.pods_of("never")) == 1 and bool(
        s.events_for(s.pods_of("never")[0]["metadata"]["name"])))
    for _ in range(6):  # well past the backoff cap, on the cluster clock
        kube_fake.state.advance(10)
        kube_fake.state.wait_idle()
    pod = _pod(raw, "never")
    assert pod["status"]["phase"] == "Pending"
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    failed = _events(raw, pod["metadata"]["name"], "FailedMount")
    assert len(failed) == 1
    assert failed[0]["count"] >= 5
    assert failed[0]["lastTimestamp"] > failed[0]["firstTimestamp"]
    assert not _events(raw, pod["metadata"]["name"], "Started")

    # The ConfigMap arrives; the next missing volume (the Secret) is reported in its own event.
    raw.request("POST", CMS, {"metadata": {"name": "absent"}, "data": {"params.json": "{}"}})
    kube_fake.state.advance(10)
    kube_fake.state.wait_for(lambda s: any('secret "absent-creds" not found' in e["message"]
                                           for e in s.events_for(pod["metadata"]["name"])))
    raw.request("POST", "/api/v1/namespaces/default/secrets", {"metadata": {"name": "absent-creds"},
                                                               "data": {"token": "eA=="}})
    kube_fake.state.advance(10)
    kube_fake.state.wait_for(lambda s: s.job_condition("never") == "Complete")


def test_deleting_a_job_whose_pod_waits_for_a_volume_stops_the_retries(kube_fake: KubeFake) -> None:
    raw = Raw(kube_fake.url)
    raw.request("POST", JOBS, _job_mounting("gone", "nothing"))
    kube_fake.state.wait_for(lambda s: len(s.pods_of("gone")) == 1 and bool(
        s.events_for(s.pods_of("gone")[0]["metadata"]["name"])))
    status, _, _ = raw.request("DELETE", f"{JOBS}/gone", {"propagationPolicy": "Foreground"})
    assert status == 200
    kube_fake.state.wait_for(lambda s: s.get("jobs", "gone") is None and not s.pods_of("gone"))
    kube_fake.state.advance(30)
    kube_fake.state.wait_idle()
    assert not kube_fake.state.pods_of("gone")
