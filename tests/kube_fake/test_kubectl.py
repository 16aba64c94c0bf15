"""Fidelity: `kubectl` (Debian's kubernetes-client, or any on PATH) against the fake.

kubectl cannot download OpenAPI schemas from the fake, so writes use `--validate=false`.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from runlane.testing.kube import KubeFake
from tests.kube_fake.conftest import job_body


class Kubectl:
    def __init__(self, path: str, kube: KubeFake) -> None:
        self.argv = [path, "--kubeconfig", str(kube.kubeconfig_path), "--request-timeout=10s"]

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*self.argv, *args], capture_output=True, text=True, timeout=30, check=False
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
        return done

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*self.argv, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )


@pytest.fixture
def kubectl(kubectl_path: str, kube_fake: KubeFake) -> Kubectl:
    return Kubectl(kubectl_path, kube_fake)


def _manifest(tmp_path: Path, body: dict[str, Any]) -> str:
    path = tmp_path / f"{body['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(body))
    return str(path)


def test_create_get_list_logs_delete(kubectl: Kubectl, kube_fake: KubeFake, tmp_path: Path) -> None:
    out = kubectl(
        "create",
        "--validate=false",
        "-f",
        _manifest(tmp_path, job_body("kj", env={"FAKE_OUTPUT": "a\nb\nc\n"}, labels={"team": "t"})),
    )
    assert out.stdout.strip() == "job.batch/kj created"
    kubectl("create", "--validate=false", "-f", _manifest(tmp_path, job_body("other")))
    kube_fake.state.wait_for(lambda s: s.job_finished("kj") and s.job_finished("other"))

    assert kubectl("get", "jobs", "-l", "team=t", "-o", "name").stdout.split() == ["job.batch/kj"]
    assert kubectl("get", "jobs", "-l", "team notin (t)", "-o", "name").stdout.split() == [
        "job.batch/other"
    ]
    table = kubectl("get", "jobs").stdout
    assert "kj" in table
    assert "Complete" in table
    job = json.loads(kubectl("get", "job", "kj", "-o", "json").stdout)
    assert [c["type"] for c in job["status"]["conditions"]] == ["SuccessCriteriaMet", "Complete"]

    pods = json.loads(kubectl("get", "pods", "-l", "job-name=kj", "-o", "json").stdout)["items"]
    assert len(pods) == 1
    assert pods[0]["status"]["phase"] == "Succeeded"
    pod = pods[0]["metadata"]["name"]
    assert kubectl("logs", pod).stdout == "a\nb\nc\n"
    assert kubectl("logs", "job/kj", "--tail=1").stdout == "c\n"
    assert kubectl("logs", pod, "--limit-bytes=2").stdout == "a\n"

    missing = kubectl("get", "job", "nope", check=False)
    assert missing.returncode != 0
    assert 'jobs.batch "nope" not found' in missing.stderr
    dup = kubectl(
        "create", "--validate=false", "-f", _manifest(tmp_path, job_body("kj")), check=False
    )
    assert 'jobs.batch "kj" already exists' in dup.stderr

    assert 'job.batch "kj" deleted' in kubectl("delete", "job", "kj", "--cascade=background").stdout
    kube_fake.state.wait_for(lambda s: not s.pods_of("kj"))
    assert kubectl("get", "pods", "-l", "job-name=kj", "-o", "name").stdout.strip() == ""
    # orphan keeps the pod, without its owner reference
    kubectl("delete", "job", "other", "--cascade=orphan")
    kube_fake.state.wait_for(lambda s: s.get("jobs", "other") is None)
    left = kube_fake.state.pods_of("other")
    assert len(left) == 1
    assert "ownerReferences" not in left[0]["metadata"]


def test_watch_sees_added_modified_deleted(kubectl: Kubectl, kube_fake: KubeFake) -> None:
    proc = kubectl.popen("get", "jobs", "--watch", "--output-watch-events", "-o", "json")
    try:
        kube_fake.state.wait_for(lambda s: s.open_watches >= 1)
        kube_fake.state.create("jobs", job_body("watched"))
        kube_fake.state.wait_for(lambda s: s.job_finished("watched"))
        kube_fake.state.delete("jobs", "watched")
        kube_fake.state.wait_for(lambda s: s.get("jobs", "watched") is None)
        kube_fake.state.end_watches()
        out, _ = proc.communicate(timeout=15)
    finally:
        proc.kill()
    decoder = json.JSONDecoder()
    events, pos = [], 0
    text = out.strip()
    while pos < len(text):
        ev, end = decoder.raw_decode(text, pos)
        events.append(ev)
        pos = end
        while pos < len(text) and text[pos].isspace():
            pos += 1
    kinds = [e["type"] for e in events]
    assert kinds[0] == "ADDED"
    assert "MODIFIED" in kinds
    assert kinds[-1] == "DELETED"
    assert {e["object"]["metadata"]["name"] for e in events} == {"watched"}


def test_raw_watch_from_expired_resource_version(kubectl: Kubectl, kube_fake: KubeFake) -> None:
    kube_fake.state.create("jobs", job_body("x"))
    kube_fake.state.compact()
    out = kubectl(
        "get",
        "--raw",
        "/apis/batch/v1/namespaces/default/jobs?watch=true&resourceVersion=1",
        check=False,
    )
    event = json.loads(out.stdout.splitlines()[0])
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410
    assert event["object"]["reason"] == "Expired"


def test_discovery_and_version(kubectl: Kubectl) -> None:
    resources = kubectl("api-resources", "-o", "name").stdout.split()
    assert {"jobs.batch", "pods", "configmaps", "events", "namespaces"} <= set(resources)
    version = json.loads(kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["major"] == "1"
    assert kubectl("auth", "can-i", "create", "jobs.batch").stdout.strip() == "yes"
