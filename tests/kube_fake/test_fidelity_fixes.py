"""Fidelity fixes found by a black-box bug hunt, checked through the HTTP API.

1. The kubelet retries a missing ConfigMap/Secret volume (with backoff, one aggregated FailedMount
   event) and starts the container once the volume exists.
2. A watch from a resourceVersion newer than the server's current one (the server lost its state)
   fails with 504 "Too large resource version" instead of an empty stream forever.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from runlane.testing.kube import KubeFake
from tests.kube_fake.conftest import job_body
from tests.kube_fake.http import Raw
from tests.support.waiting import eventually_sync

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
    status, _, body = raw.request(
        "GET", f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.name={pod}"
    )
    assert status == 200
    return [e for e in body["items"] if e["reason"] == reason]


def test_a_config_map_created_after_the_job_is_mounted_on_retry(kube_fake: KubeFake) -> None:
    raw = Raw(kube_fake.url)
    status, _, _ = raw.request("POST", JOBS, _job_mounting("late", "late-params"))
    assert status == 201
    eventually_sync(
        lambda: (
            len(kube_fake.state.pods_of("late")) == 1
            and _events(raw, _pod(raw, "late")["metadata"]["name"], "FailedMount")
        ),
        "a FailedMount event on the pod of `late`",
        within=15,
        poll=0.05,
    )
    pod = _pod(raw, "late")
    assert pod["status"]["phase"] == "Pending"
    assert (
        pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    )
    # Like runlane's executor, the ConfigMap follows the Job (it is owned by it), a while later:
    # cluster time passes (no sleep) and the mount is retried, failing again.
    kube_fake.state.advance(1.0)
    eventually_sync(
        lambda: _events(raw, pod["metadata"]["name"], "FailedMount")[0]["count"] >= 2,
        "the mount retried",
        within=15,
        poll=0.05,
    )
    status, _, _ = raw.request(
        "POST", CMS, {"metadata": {"name": "late-params"}, "data": {"params.json": "{}"}}
    )
    assert status == 201
    eventually_sync(
        lambda: kube_fake.state.job_condition("late") == "Complete",
        "`late` Complete",
        within=15,
        poll=0.05,
    )
    pod = _pod(raw, "late")
    assert pod["status"]["phase"] == "Succeeded"
    name = pod["metadata"]["name"]
    failed = _events(raw, name, "FailedMount")
    assert len(failed) == 1  # repeats aggregate into one event's count
    assert failed[0]["type"] == "Warning"
    assert (
        failed[0]["message"]
        == 'MountVolume.SetUp failed for volume "params" : configmap "late-params" not found'
    )
    assert _events(raw, name, "Started")


def test_a_volume_that_never_appears_keeps_the_pod_pending_with_repeated_failed_mounts(
    kube_fake: KubeFake,
) -> None:
    raw = Raw(kube_fake.url)
    status, _, _ = raw.request(
        "POST", JOBS, _job_mounting("never", "absent", secret="absent-creds")
    )
    assert status == 201
    kube_fake.state.wait_for(
        lambda s: (
            len(s.pods_of("never")) == 1
            and bool(s.events_for(s.pods_of("never")[0]["metadata"]["name"]))
        )
    )
    for _ in range(6):  # well past the backoff cap, on the cluster clock
        kube_fake.state.advance(10)
        kube_fake.state.wait_idle()
    pod = _pod(raw, "never")
    assert pod["status"]["phase"] == "Pending"
    assert (
        pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
    )
    failed = _events(raw, pod["metadata"]["name"], "FailedMount")
    assert len(failed) == 1
    assert failed[0]["count"] >= 5
    assert failed[0]["lastTimestamp"] > failed[0]["firstTimestamp"]
    assert not _events(raw, pod["metadata"]["name"], "Started")

    # The ConfigMap arrives; the next missing volume (the Secret) is reported in its own event.
    raw.request("POST", CMS, {"metadata": {"name": "absent"}, "data": {"params.json": "{}"}})
    kube_fake.state.advance(10)
    kube_fake.state.wait_for(
        lambda s: any(
            'secret "absent-creds" not found' in e["message"]
            for e in s.events_for(pod["metadata"]["name"])
        )
    )
    raw.request(
        "POST",
        "/api/v1/namespaces/default/secrets",
        {"metadata": {"name": "absent-creds"}, "data": {"token": "eA=="}},
    )
    kube_fake.state.advance(10)
    kube_fake.state.wait_for(lambda s: s.job_condition("never") == "Complete")


def test_deleting_a_job_whose_pod_waits_for_a_volume_stops_the_retries(kube_fake: KubeFake) -> None:
    raw = Raw(kube_fake.url)
    raw.request("POST", JOBS, _job_mounting("gone", "nothing"))
    kube_fake.state.wait_for(
        lambda s: (
            len(s.pods_of("gone")) == 1
            and bool(s.events_for(s.pods_of("gone")[0]["metadata"]["name"]))
        )
    )
    status, _, _ = raw.request("DELETE", f"{JOBS}/gone", {"propagationPolicy": "Foreground"})
    assert status == 200
    kube_fake.state.wait_for(lambda s: s.get("jobs", "gone") is None and not s.pods_of("gone"))
    kube_fake.state.advance(30)
    kube_fake.state.wait_idle()
    assert not kube_fake.state.pods_of("gone")


# ---------------------------------------------------------------------- 2. too large resource version

TOO_LARGE_CAUSES = [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]


def test_a_watch_from_a_future_resource_version_fails_with_504_too_large(
    kube_fake: KubeFake,
) -> None:
    kube_fake.server.too_large_wait = 0.3
    raw = Raw(kube_fake.url)
    current = kube_fake.state.resource_version
    future = current + 5000
    started = time.monotonic()
    status, events = raw.watch_lines(
        f"{JOBS}?watch=true&resourceVersion={future}&allowWatchBookmarks=true"
    )
    assert (
        time.monotonic() - started >= 0.25
    )  # it waited for the version first, like the watch cache
    assert status == 504
    assert events == [
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"Timeout: Too large resource version: {future}, current: {current}",
            "reason": "Timeout",
            "details": {"causes": TOO_LARGE_CAUSES, "retryAfterSeconds": 1},
            "code": 504,
        }
    ]
    # A list "not older than" that version fails the same way; "0" (any) and "" (latest) do not.
    status, _, body = raw.request(
        "GET", f"{JOBS}?resourceVersion={future}&resourceVersionMatch=NotOlderThan"
    )
    assert (status, body["reason"], body["details"]["causes"]) == (504, "Timeout", TOO_LARGE_CAUSES)
    assert raw.request("GET", f"{JOBS}?resourceVersion=0")[0] == 200
    assert raw.request("GET", JOBS)[0] == 200


def test_a_watch_from_a_version_reached_while_it_waits_streams_normally(
    kube_fake: KubeFake,
) -> None:
    kube_fake.server.too_large_wait = 5.0
    raw = Raw(kube_fake.url)
    future = kube_fake.state.resource_version + 1
    threading.Timer(
        0.3, lambda: kube_fake.state.create("configmaps", {"metadata": {"name": "a"}})
    ).start()
    threading.Timer(
        0.6, lambda: kube_fake.state.create("configmaps", {"metadata": {"name": "b"}})
    ).start()
    status, events = raw.watch_lines(f"{CMS}?watch=true&resourceVersion={future}&timeoutSeconds=2")
    assert status == 200
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "b")]


def test_a_restart_that_loses_state_sends_the_resource_version_backwards(
    kube_fake: KubeFake,
) -> None:
    kube_fake.server.too_large_wait = 0.2
    raw = Raw(kube_fake.url)
    raw.request("POST", JOBS, job_body("before"))
    kube_fake.state.wait_for(lambda s: s.job_finished("before"))
    old = kube_fake.state.resource_version
    assert old > 1000
    assert raw.request("POST", "/fake/restart?loseState=1")[0] == 200
    assert kube_fake.state.resource_version == 1000
    status, _, body = raw.request("GET", JOBS)
    assert (status, body["items"], body["metadata"]["resourceVersion"]) == (200, [], "1000")
    assert kube_fake.state.get("namespaces", "default", namespace="") is not None
    status, events = raw.watch_lines(f"{JOBS}?watch=true&resourceVersion={old}")
    assert status == 504
    assert events[0]["message"] == f"Timeout: Too large resource version: {old}, current: 1000"
    # The cluster keeps working from its new, lower versions.
    raw.request("POST", JOBS, job_body("after"))
    kube_fake.state.wait_for(lambda s: s.job_finished("after"))
    assert kube_fake.state.resource_version < old


def test_the_official_client_sees_the_too_large_error(kube_fake: KubeFake) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    kube_fake.server.too_large_wait = 0.2
    api_client = kubernetes.config.new_client_from_config(str(kube_fake.kubeconfig_path))
    try:
        batch = kubernetes.client.BatchV1Api(api_client)
        future = str(kube_fake.state.resource_version + 100)
        with pytest.raises(kubernetes.client.ApiException) as info:
            for _ in kubernetes.watch.Watch().stream(
                batch.list_namespaced_job, "default", resource_version=future, timeout_seconds=2
            ):
                pass
        assert info.value.status == 504
        body = json.loads(info.value.body)
        assert body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
    finally:
        api_client.close()
