"""Raw HTTP behaviour of the fake: watch semantics, injected faults, auth and RBAC answers."""

from __future__ import annotations

import http.client
import json
import threading
from typing import Any

import pytest

from runlane.testing.kube import KubeFake
from tests.kube_fake.conftest import job_body
from tests.kube_fake.http import Raw

JOBS = "/apis/batch/v1/namespaces/default/jobs"


def test_watch_without_rv_replays_state_and_timeout_ends_it(kube_fake: KubeFake) -> None:
    kube_fake.state.create("jobs", job_body("a", image="fake/hang"))
    kube_fake.state.wait_for(
        lambda s: (s.get("jobs", "a") or {}).get("status", {}).get("ready") == 1
    )
    kube_fake.state.wait_idle()  # else a late status write is a MODIFIED event in the stream
    status, events = Raw(kube_fake.url).watch_lines(f"{JOBS}?watch=true&timeoutSeconds=1")
    assert status == 200
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a")]
    assert events[0]["object"]["kind"] == "Job"
    assert events[0]["object"]["apiVersion"] == "batch/v1"


def test_bookmarks_and_label_transitions(kube_fake_factory: Any) -> None:
    kube = kube_fake_factory(bookmark_interval=0.2)
    rv = kube.state.resource_version
    kube.state.create("configmaps", {"metadata": {"name": "c", "labels": {"sel": "yes"}}})
    kube.state.mutate("configmaps", "c", lambda o: o["metadata"]["labels"].update(sel="no"))
    kube.state.mutate("configmaps", "c", lambda o: o["metadata"]["labels"].update(sel="yes"))
    path = (
        f"/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}&labelSelector=sel%3Dyes"
        "&allowWatchBookmarks=true&timeoutSeconds=1"
    )
    _, events = Raw(kube.url).watch_lines(path)
    kinds = [e["type"] for e in events]
    # leaving the selector is a DELETED, coming back an ADDED (as the watch cache does)
    assert kinds[:3] == ["ADDED", "DELETED", "ADDED"]
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks
    assert set(bookmarks[0]["object"]) == {"kind", "apiVersion", "metadata"}
    assert int(bookmarks[-1]["object"]["metadata"]["resourceVersion"]) >= int(
        events[2]["object"]["metadata"]["resourceVersion"]
    )


def test_expired_resource_version_in_stream_and_as_http(kube_fake: KubeFake) -> None:
    raw = Raw(kube_fake.url)
    kube_fake.state.create("jobs", job_body("x"))
    kube_fake.state.compact()
    status, events = raw.watch_lines(f"{JOBS}?watch=true&resourceVersion=1001")
    assert status == 200
    assert events[-1]["type"] == "ERROR"
    err = events[-1]["object"]
    assert (err["kind"], err["code"], err["reason"]) == ("Status", 410, "Expired")
    assert err["message"].startswith("too old resource version: 1001 (")
    kube_fake.state.set_expired_mode("http")
    status, body = raw.watch_lines(f"{JOBS}?watch=true&resourceVersion=1001")
    assert status == 410
    assert body[0]["reason"] == "Expired"


def test_expire_and_end_open_watches(kube_fake: KubeFake) -> None:
    raw = Raw(kube_fake.url)
    results: dict[str, Any] = {}

    def watch(key: str) -> None:
        results[key] = raw.watch_lines(
            f"{JOBS}?watch=true&resourceVersion={kube_fake.state.resource_version}"
        )

    threads = [threading.Thread(target=watch, args=(k,)) for k in ("one", "two")]
    for t in threads:
        t.start()
    kube_fake.state.wait_for(lambda s: s.open_watches == 2)
    assert kube_fake.state.expire_watches() == 2
    for t in threads:
        t.join(5)
    for key in ("one", "two"):
        status, events = results[key]
        assert status == 200
        assert events[-1]["type"] == "ERROR"
        assert events[-1]["object"]["code"] == 410

    # The server forgets an ended watch after its last chunk is sent, so the first two may still
    # count for a moment after their clients have read it: wait until they do not, or
    # "one open" below could mean one of them, and end_watches would end it, not the third.
    kube_fake.state.wait_for(lambda s: s.open_watches == 0)
    t = threading.Thread(target=watch, args=("three",))
    t.start()
    kube_fake.state.wait_for(lambda s: s.open_watches == 1)
    kube_fake.state.end_watches()
    t.join(5)
    assert results["three"] == (200, [])


def test_aborted_watch_drops_the_connection(kube_fake: KubeFake) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", kube_fake.port, timeout=5)
    conn.request("GET", f"{JOBS}?watch=true")
    resp = conn.getresponse()
    kube_fake.state.wait_for(lambda s: s.open_watches == 1)
    kube_fake.state.end_watches(abort=True)
    with pytest.raises(http.client.IncompleteRead):
        resp.read()
    conn.close()


def test_injected_errors_with_retry_after(kube_fake: KubeFake) -> None:
    raw = Raw(kube_fake.url)
    kube_fake.state.fail_next(2, 429, retry_after=3, method="POST")
    for _ in range(2):
        status, headers, body = raw.request("POST", JOBS, job_body("r"))
        assert status == 429
        assert headers["retry-after"] == "3"
        assert body["reason"] == "TooManyRequests"
        assert body["details"]["retryAfterSeconds"] == 3
    kube_fake.state.fail_next(1, 503)
    status, _, body = raw.request("GET", JOBS)
    assert status == 503
    assert body["reason"] == "ServiceUnavailable"
    kube_fake.state.fail_next(1, 500, path="/pods")
    assert raw.request("GET", JOBS)[0] == 200
    assert raw.request("GET", "/api/v1/namespaces/default/pods")[0] == 500
    assert raw.request("POST", JOBS, job_body("r"))[0] == 201


def test_lost_create_response_then_409(kube_fake: KubeFake) -> None:
    raw = Raw(kube_fake.url)
    kube_fake.state.drop_create_response()
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        raw.request("POST", JOBS, job_body("lost"))
    assert kube_fake.state.get("jobs", "lost") is not None  # it was created all the same
    status, _, body = raw.request("POST", JOBS, job_body("lost"))
    assert status == 409
    assert body["reason"] == "AlreadyExists"


def test_restart_jumps_resource_version_and_expires_history(kube_fake: KubeFake) -> None:
    raw = Raw(kube_fake.url)
    _, _, listed = raw.request("GET", JOBS)
    old_rv = int(listed["metadata"]["resourceVersion"])
    kube_fake.state.create("jobs", job_body("before"))
    kube_fake.state.restart(jump=5000)
    _, _, listed = raw.request("GET", JOBS)
    assert int(listed["metadata"]["resourceVersion"]) >= old_rv + 5000
    _status, events = raw.watch_lines(f"{JOBS}?watch=true&resourceVersion={old_rv}")
    assert events[-1]["type"] == "ERROR"
    assert events[-1]["object"]["code"] == 410


def test_auth_rbac_and_ssar(kube_fake_factory: Any) -> None:
    kube = kube_fake_factory(allow=["get,list,watch jobs.batch"])
    raw = Raw(kube.url)
    assert raw.request("GET", JOBS, headers={"Authorization": "Bearer wrong"})[0] == 401
    assert (
        raw.request("GET", JOBS, headers={"Authorization": "Bearer runlane-fake-token"})[0] == 200
    )
    status, _, body = raw.request("POST", JOBS, job_body("no"))
    assert status == 403
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'jobs.batch is forbidden: User "runlane-fake" cannot create resource "jobs" in API group '
        '"batch" in the namespace "default"',
        "reason": "Forbidden",
        "details": {"group": "batch", "kind": "jobs"},
        "code": 403,
    }
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "namespace": "default",
                "verb": "watch",
                "group": "batch",
                "resource": "jobs",
            }
        },
    }
    status, _, body = raw.request(
        "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review
    )
    assert status == 201
    assert body["status"]["allowed"] is True
    review["spec"]["resourceAttributes"]["verb"] = "delete"  # type: ignore[index]
    _, _, body = raw.request(
        "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review
    )
    assert body["status"]["allowed"] is False


def test_discovery_documents(kube_fake: KubeFake) -> None:
    raw = Raw(kube_fake.url)
    _, _, batch = raw.request("GET", "/apis/batch/v1")
    assert {"jobs", "jobs/status"} <= {r["name"] for r in batch["resources"]}
    _, _, core = raw.request("GET", "/api/v1")
    assert {"pods", "pods/log", "configmaps", "events"} <= {r["name"] for r in core["resources"]}
    _, _, groups = raw.request("GET", "/apis")
    assert {g["name"] for g in groups["groups"]} == {"batch", "authorization.k8s.io"}
    assert raw.request("GET", "/apis/nope/v1")[0] == 404
    _, _, version = raw.request("GET", "/version")
    assert json.dumps(version).count("gitVersion") == 1
