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
