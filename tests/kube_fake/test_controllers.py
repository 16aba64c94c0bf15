"""The fake's controllers and kubelet: pod status shapes per image script, Job conditions, deadlines,
TTL, suspension, garbage collection, local processes."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from runlane.testing.kube import KubeFake
from tests.kube_fake.conftest import job_body
from tests.kube_fake.http import Raw


def _conds(obj: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [
        (c["type"], c["status"], c.get("reason", "")) for c in obj["status"].get("conditions") or []
    ]


def _only_pod(kube: KubeFake, job: str) -> dict[str, Any]:
    pods = kube.state.pods_of(job)
    assert len(pods) == 1
    return pods[0]


@pytest.mark.parametrize(
    ("image", "phase", "terminated"),
    [
        ("fake/succeed", "Succeeded", ("Completed", 0)),
        ("busybox:1.36", "Succeeded", ("Completed", 0)),
        ("fake/exit:3", "Failed", ("Error", 3)),
        ("fake/oom", "Failed", ("OOMKilled", 137)),
        ("fake/start-error", "Failed", ("StartError", 128)),
        ("fake/evicted", "Failed", ("Error", 137)),
    ],
)
def test_finishing_scripts(
    kube_fake: KubeFake, image: str, phase: str, terminated: tuple[str, int]
) -> None:
    kube_fake.state.create("jobs", job_body("s", image=image))
    kube_fake.state.wait_for(lambda s: s.job_finished("s"))
    pod = _only_pod(kube_fake, "s")
    assert pod["status"]["phase"] == phase
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (state["reason"], state["exitCode"]) == terminated
    assert "batch.kubernetes.io/job-tracking" not in (pod["metadata"].get("finalizers") or [])
    job = kube_fake.state.get("jobs", "s")
    assert job is not None
    if phase == "Succeeded":
        assert _conds(job)[-1] == ("Complete", "True", "CompletionsReached")
        assert job["status"]["succeeded"] == 1
        assert "completionTime" in job["status"]
    else:
        assert _conds(job) == [
            ("FailureTarget", "True", "BackoffLimitExceeded"),
            ("Failed", "True", "BackoffLimitExceeded"),
        ]
        assert job["status"]["failed"] == 1
        assert "completionTime" not in job["status"]
    if image == "fake/evicted":
        assert pod["status"]["reason"] == "Evicted"
        assert pod["status"]["conditions"][0]["type"] == "DisruptionTarget"


@pytest.mark.parametrize(
    ("image", "reason", "event"),
    [
        ("fake/image-pull-backoff", "ImagePullBackOff", "BackOff"),
        ("fake/err-image-pull", "ErrImagePull", "Failed"),
        ("fake/invalid-image", "InvalidImageName", "InspectFailed"),
        ("Not:A:Valid/Ref", "InvalidImageName", "InspectFailed"),
        ("fake/config-error", "CreateContainerConfigError", "Failed"),
    ],
)
def test_waiting_scripts(kube_fake: KubeFake, image: str, reason: str, event: str) -> None:
    kube_fake.state.create("jobs", job_body("w", image=image))
    kube_fake.state.wait_for(
        lambda s: (
            bool(s.pods_of("w")) and bool(s.pods_of("w")[0]["status"].get("containerStatuses"))
        )
    )
    kube_fake.state.wait_idle()
    pod = _only_pod(kube_fake, "w")
    assert pod["status"]["phase"] == "Pending"
    waiting = pod["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == reason
    assert waiting["message"]
    assert event in {e["reason"] for e in kube_fake.state.events_for(pod["metadata"]["name"])}
    assert not kube_fake.state.job_finished("w")
    # pods/log answers 400 while the container waits
    status, _, body = Raw(kube_fake.url).request(
        "GET", f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}/log"
    )
    assert status == 400
    assert "is waiting to start" in body["message"]


def test_unschedulable_and_missing_secret(kube_fake: KubeFake) -> None:
    kube_fake.state.create("jobs", job_body("u", image="fake/unschedulable"))
    body = job_body("m")
    body["spec"]["template"]["spec"]["containers"][0]["envFrom"] = [
        {"secretRef": {"name": "creds"}}
    ]  # type: ignore[index]
    kube_fake.state.create("jobs", body)
    kube_fake.state.wait_for(
        lambda s: (
            bool(s.pods_of("u"))
            and bool(s.pods_of("u")[0]["status"].get("conditions"))
            and bool(s.pods_of("m"))
            and bool(s.pods_of("m")[0]["status"].get("containerStatuses"))
        )
    )
    kube_fake.state.wait_idle()
    pod = _only_pod(kube_fake, "u")
    assert pod["status"]["conditions"] == [
        {
            **pod["status"]["conditions"][0],
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
        }
    ]
    assert "nodeName" not in pod["spec"]
    assert [e["reason"] for e in kube_fake.state.events_for(pod["metadata"]["name"])] == [
        "FailedScheduling"
    ]
    waiting = _only_pod(kube_fake, "m")["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting == {
        "reason": "CreateContainerConfigError",
        "message": 'secret "creds" not found',
    }


def test_legacy_condition_sequence(kube_fake_factory: Any) -> None:
    kube = kube_fake_factory(conditions="legacy")
    kube.state.create("jobs", job_body("ok"))
    kube.state.create("jobs", job_body("bad", image="fake/exit:1"))
    kube.state.wait_for(lambda s: s.job_finished("ok") and s.job_finished("bad"))
    assert _conds(kube.state.get("jobs", "ok")) == [("Complete", "True", "CompletionsReached")]
    assert _conds(kube.state.get("jobs", "bad")) == [("Failed", "True", "BackoffLimitExceeded")]
    assert "terminating" not in kube.state.get("jobs", "ok")["status"]


def test_active_deadline_counts_pending_time(kube_fake: KubeFake) -> None:
    kube_fake.state.create(
        "jobs", job_body("d", image="fake/image-pull-backoff", activeDeadlineSeconds=30)
    )
    kube_fake.state.create("jobs", job_body("h", image="fake/hang", activeDeadlineSeconds=30))
    kube_fake.state.wait_for(lambda s: len(s.pods_of("d")) == 1 and len(s.pods_of("h")) == 1)
    kube_fake.state.wait_idle()
    assert not kube_fake.state.job_finished("d")
    kube_fake.state.advance(31)
    kube_fake.state.wait_for(lambda s: s.job_finished("d") and s.job_finished("h"))
    for name in ("d", "h"):
        job = kube_fake.state.get("jobs", name)
        assert _conds(job) == [
            ("FailureTarget", "True", "DeadlineExceeded"),
            ("Failed", "True", "DeadlineExceeded"),
        ]
        assert (
            job["status"]["conditions"][0]["message"]
            == "Job was active longer than specified deadline"
        )
        assert job["status"]["failed"] == 1
    kube_fake.state.wait_for(lambda s: not s.pods_of("d") and not s.pods_of("h"))


def test_explain_job_says_what_the_cluster_holds_for_it(kube_fake: KubeFake) -> None:
    state = kube_fake.state
    assert "Job: none" in state.explain_job("x")
    state.create(
        "jobs",
        job_body(
            "x",
            image="local",
            command=[sys.executable, "-c", "import signal; signal.pause()"],
            activeDeadlineSeconds=30,
        ),
    )
    state.wait_for(
        lambda s: bool(s.pods_of("x")) and s.pods_of("x")[0]["status"].get("phase") == "Running"
    )
    running = state.explain_job("x")
    assert "activeDeadlineSeconds 30, active=1" in running
    assert "phase Running, containers [main running]" in running
    assert "kubelet: stage running, [main pid " in running
    assert "events of x: SuccessfulCreate" in running
    assert "controller thread alive" in running
    state.advance(31)
    state.wait_for(lambda s: s.job_finished("x") and not s.pods_of("x"))
    ended = state.explain_job("x")
    assert "Failed=True(DeadlineExceeded)" in ended
    assert "pods: none" in ended
    assert "events of x: SuccessfulCreate, DeadlineExceeded" in ended
    assert "Killing" in ended  # the deleted pod's events outlive it


def test_retries_up_to_backoff_limit(kube_fake: KubeFake) -> None:
    kube_fake.state.create("jobs", job_body("r", image="fake/exit:1", backoffLimit=2))
    kube_fake.state.wait_for(lambda s: s.job_finished("r"))
    job = kube_fake.state.get("jobs", "r")
    assert job["status"]["failed"] == 3
    assert len(kube_fake.state.pods_of("r")) == 3


def test_ttl_after_finished_deletes_job_and_pods(kube_fake: KubeFake) -> None:
    kube_fake.state.create("jobs", job_body("t", ttlSecondsAfterFinished=60))
    kube_fake.state.wait_for(lambda s: s.job_finished("t"))
    kube_fake.state.wait_idle()
    assert kube_fake.state.get("jobs", "t") is not None
    kube_fake.state.advance(61)
    kube_fake.state.wait_for(lambda s: s.get("jobs", "t") is None and not s.pods_of("t"))


def test_suspended_job_waits_without_pods_then_resumes(kube_fake: KubeFake) -> None:
    kube_fake.state.create("jobs", job_body("q", suspend=True))
    kube_fake.state.wait_for(lambda s: bool(s.get("jobs", "q")["status"].get("conditions")))
    kube_fake.state.wait_idle()
    job = kube_fake.state.get("jobs", "q")
    assert _conds(job) == [("Suspended", "True", "JobSuspended")]
    assert "startTime" not in job["status"]
    assert kube_fake.state.pods_of("q") == []
    status, _, patched = Raw(kube_fake.url).request(
        "PATCH",
        "/apis/batch/v1/namespaces/default/jobs/q",
        {"spec": {"suspend": False}},
        {"Content-Type": "application/merge-patch+json"},
    )
    assert status == 200
    assert patched["spec"]["suspend"] is False
    kube_fake.state.wait_for(lambda s: s.job_finished("q"))
    assert _conds(kube_fake.state.get("jobs", "q"))[0] == ("Suspended", "False", "JobResumed")


def test_delete_propagation_policies_and_preconditions(kube_fake: KubeFake) -> None:
    raw = Raw(kube_fake.url)
    state = kube_fake.state
    for name in ("bg", "fg", "or"):
        job = state.create("jobs", job_body(name, image="fake/hang"))
        state.create(
            "configmaps",
            {
                "metadata": {
                    "name": f"{name}-params",
                    "ownerReferences": [
                        {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "name": name,
                            "uid": job["metadata"]["uid"],
                        }
                    ],
                },
                "data": {"k": "v"},
            },
        )
    state.wait_for(
        lambda s: all(
            s.pods_of(n) and s.pods_of(n)[0]["status"].get("phase") == "Running"
            for n in ("bg", "fg", "or")
        )
    )
    # a wrong UID precondition is a 409 Conflict and deletes nothing
    status, _, body = raw.request(
        "DELETE",
        "/apis/batch/v1/namespaces/default/jobs/bg",
        {"propagationPolicy": "Background", "preconditions": {"uid": "nope"}},
    )
    assert status == 409
    assert body["reason"] == "Conflict"
    assert body["message"].startswith(
        'Operation cannot be fulfilled on jobs.batch "bg": Precondition failed: UID'
    )
    uid = state.get("jobs", "bg")["metadata"]["uid"]
    status, _, body = raw.request(
        "DELETE",
        "/apis/batch/v1/namespaces/default/jobs/bg",
        {"propagationPolicy": "Background", "preconditions": {"uid": uid}},
    )
    assert status == 200
    assert body["status"] == "Success"
    state.wait_for(lambda s: not s.pods_of("bg") and s.get("configmaps", "bg-params") is None)

    status, _, body = raw.request(
        "DELETE", "/apis/batch/v1/namespaces/default/jobs/fg", {"propagationPolicy": "Foreground"}
    )
    assert status == 200
    assert body["metadata"]["deletionTimestamp"]
    assert "foregroundDeletion" in body["metadata"]["finalizers"]
    state.wait_for(lambda s: s.get("jobs", "fg") is None and not s.pods_of("fg"))

    # no policy: batch/v1 Jobs orphan their pods, with the apiserver's warning
    status, headers, _ = raw.request("DELETE", "/apis/batch/v1/namespaces/default/jobs/or")
    assert status == 200
    assert "child pods are preserved by default" in headers["warning"]
    state.wait_for(lambda s: s.get("jobs", "or") is None)
    state.wait_idle()
    assert len(state.pods_of("or")) == 1
    assert state.get("configmaps", "or-params") is not None
    assert "ownerReferences" not in state.pods_of("or")[0]["metadata"]


def test_local_process_is_the_pod(kube_fake_factory: Any) -> None:
    kube = kube_fake_factory()
    kube.state.create(
        "configmaps", {"metadata": {"name": "payload"}, "data": {"params.json": '{"x": 1}'}}
    )
    body = job_body(
        "loc",
        image="local",
        env={"GREETING": "hello"},
        command=[
            sys.executable,
            "-c",
            "import os, pathlib, sys; print(os.environ['GREETING']); "
            "print(pathlib.Path(os.environ['KUBE_FAKE_ROOT'], 'etc/params/params.json').read_text()); "
            "sys.stdout.flush(); sys.exit(4)",
        ],
    )
    spec = body["spec"]["template"]["spec"]  # type: ignore[index]
    spec["volumes"] = [{"name": "p", "configMap": {"name": "payload"}}]
    spec["containers"][0]["volumeMounts"] = [{"name": "p", "mountPath": "/etc/params"}]
    kube.state.create("jobs", body)
    kube.state.wait_for(lambda s: s.job_finished("loc"), timeout=20)
    pod = _only_pod(kube, "loc")
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["reason"], term["exitCode"]) == ("Error", 4)
    assert kube.state.logs(pod["metadata"]["name"]) == 'hello\n{"x": 1}\n'


def test_follow_streams_a_running_local_log(kube_fake: KubeFake) -> None:
    kube_fake.state.create(
        "jobs",
        job_body(
            "f",
            image="local",
            command=[
                sys.executable,
                "-u",
                "-c",
                "import sys; print('one'); sys.stdin.read() if False else None; print('two')",
            ],
        ),
    )
    kube_fake.state.wait_for(
        lambda s: (
            bool(s.pods_of("f"))
            and bool(s.pods_of("f")[0]["status"].get("containerStatuses"))
            and "waiting" not in s.pods_of("f")[0]["status"]["containerStatuses"][0]["state"]
        ),
        20,
    )
    pod = _only_pod(kube_fake, "f")["metadata"]["name"]
    status, _, text = Raw(kube_fake.url).request(
        "GET", f"/api/v1/namespaces/default/pods/{pod}/log?follow=true"
    )
    assert status == 200
    assert text == "one\ntwo\n"
