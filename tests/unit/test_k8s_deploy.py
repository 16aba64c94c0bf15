"""deploy/: render each kustomization with `kubectl kustomize` and validate every object offline
against the Kubernetes schemas; the Role grants exactly what the pod executor checks for."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from runlane.adapters.kubernetes.rbac import PERMISSIONS
from runlane.catalog import load_catalog

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S_VERSION = "1.31"
KUSTOMIZATIONS = ["base", "overlays/example", "migrate"]


def render(folder: str) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        if os.environ.get("CI") == "true":
            pytest.fail("kubectl is required in CI (Debian package kubernetes-client)")
        pytest.skip("kubectl not installed (Debian package kubernetes-client)")
    out = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / folder)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.mark.parametrize("folder", KUSTOMIZATIONS)
def test_renders_and_validates(folder: str) -> None:
    objects = render(folder)
    assert objects
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}


def test_launcher_deployment() -> None:
    objects = by_kind(render("base"))
    assert set(objects) >= {
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "ConfigMap",
    }
    dep = objects["Deployment"]
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]
    (c,) = pod["containers"]
    assert c["resources"]["requests"] == {"cpu": "50m", "memory": "128Mi"}
    assert {"readinessProbe", "livenessProbe"} <= set(c)
    http_port = {"name": "http", "containerPort": 8080}
    assert http_port in c["ports"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["RUNLANE_HTTP_ADDR"] == ":8080"  # the pod's address, where the kubelet probes
    probes = {
        name: c[name]["httpGet"] for name in ("startupProbe", "readinessProbe", "livenessProbe")
    }
    assert probes == {
        "startupProbe": {"path": "/readyz", "port": "http"},
        "readinessProbe": {"path": "/readyz", "port": "http"},
        "livenessProbe": {"path": "/healthz", "port": "http"},
    }
    assert c["args"] == ["serve"]  # migrations are not run at start-up
    catalog_map = objects["ConfigMap"]["metadata"]["name"]
    assert {"name": "catalog", "configMap": {"name": catalog_map}} in pod["volumes"]
    binding = objects["RoleBinding"]
    assert binding["roleRef"]["name"] == objects["Role"]["metadata"]["name"]
    assert binding["subjects"][0]["name"] == objects["ServiceAccount"]["metadata"]["name"]
    svc = objects["Service"]
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]


def test_role_grants_exactly_what_the_executor_checks() -> None:
    role = by_kind(render("base"))["Role"]
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    wanted = {
        (p.group, f"{p.resource}/{p.subresource}" if p.subresource else p.resource, p.verb)
        for p in PERMISSIONS
    }
    assert granted == wanted


def test_overlay_pins_images_and_namespace() -> None:
    objects = render("overlays/example")
    for obj in objects:
        if obj["kind"] != "Namespace":
            assert obj["metadata"]["namespace"] == "runlane"
    dep = by_kind(objects)["Deployment"]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "registry.example.com/platform/runlane:0.1.0"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["RUNLANE_JOB_IMAGE"] == "registry.example.com/platform/jobs:2026.05"


def test_migrations_are_a_job_of_their_own() -> None:
    job = by_kind(render("migrate"))["Job"]
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["db", "upgrade"]


@pytest.mark.parametrize("path", ["base/catalog.yaml", "overlays/example/catalog.yaml"])
def test_shipped_catalogs_load(path: str) -> None:
    catalog = load_catalog(DEPLOY / path)
    assert catalog.jobs


def test_dockerfile_runs_the_launcher() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["runlane"]' in text
    assert "USER 10001" in text
