"""pytest fixtures for the local Kubernetes API server.

Use them from a conftest.py:

    from runlane.testing.kube.pytest_plugin import kube_fake, kube_fake_factory  # noqa: F401

`kube_fake` is a started `KubeFake` with default settings; `kube_fake_factory(**kwargs)` starts more
(legacy conditions, an RBAC allow list, `run_local=True`, timings…), all stopped after the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from runlane.testing.kube.fake import KubeFake


@pytest.fixture
def kube_fake_factory() -> Iterator[Callable[..., KubeFake]]:
    started: list[KubeFake] = []

    def make(**kwargs: Any) -> KubeFake:
        fake = KubeFake(**kwargs).start()
        started.append(fake)
        return fake

    yield make
    for fake in started:
        fake.stop()


@pytest.fixture
def kube_fake(kube_fake_factory: Callable[..., KubeFake]) -> KubeFake:
    """A running fake API server: `.url`, `.kubeconfig_path`, `.state`."""
    return kube_fake_factory()
