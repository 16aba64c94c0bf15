"""Fixtures for the fidelity tests of the local Kubernetes API server (`runlane.testing.kube`).

Other suites reuse them the same way: import `kube_fake` / `kube_fake_factory` in their conftest.
"""

from __future__ import annotations

import os
import shutil

import pytest

from runlane.testing.kube.pytest_plugin import kube_fake, kube_fake_factory

__all__ = ["kube_fake", "kube_fake_factory", "kubectl_path"]


@pytest.fixture
def kubectl_path() -> str:
    """kubectl, or skip; in CI (CI=true) a missing kubectl fails instead, since ./dev installs it."""
    path = shutil.which("kubectl")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("kubectl is missing in CI: ./dev test installs Debian's kubernetes-client")
        pytest.skip("kubectl not installed")
    return path


def job_body(name: str, image: str = "fake/succeed", **spec: object) -> dict[str, object]:
    """A minimal batch/v1 Job as a runlane executor would send it."""
    container: dict[str, object] = {"name": "main", "image": image}
    env = spec.pop("env", None)
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in dict(env).items()]  # type: ignore[call-overload]
    command = spec.pop("command", None)
    if command:
        container["command"] = command
    labels = spec.pop("labels", None) or {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            **spec,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }
