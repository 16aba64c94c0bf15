"""Fixtures of the Slurm tests: a one-node cluster for the session (tests.support.slurm) and a
Slurm executor on it that polls fast (every test is bounded in seconds)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from runlane.adapters.slurm.executor import SlurmExecutor
from runlane.ports import ExecutionSpec
from tests.conformance.executor.conftest import params_env
from tests.support.slurm import SlurmCluster, slurm_cluster

PY = sys.executable


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmCluster]:
    with slurm_cluster() as cluster:
        yield cluster


def make_executor(cluster: SlurmCluster, log_dir: Path, **kw: Any) -> SlurmExecutor:
    kw.setdefault("poll_interval", 0.2)
    kw.setdefault("cancel_wait", 10.0)
    return SlurmExecutor(log_dir, slurm_env=cluster.env, **kw)


@pytest.fixture
async def executor(slurm: SlurmCluster, tmp_path: Path) -> AsyncIterator[SlurmExecutor]:
    ex = make_executor(slurm, tmp_path / "logs")
    yield ex
    await ex.aclose()


def python_spec(
    code: str,
    *,
    slurm: dict[str, Any] | None = None,
    params: dict[str, Any] | None = None,
    deadline: float = 30.0,
    job: str = "slurm-test",
) -> ExecutionSpec:
    run_id = str(uuid.uuid4())
    return ExecutionSpec(
        run_id=run_id,
        job=job,
        attempt=1,
        trigger="manual",
        command=[PY, "-c", code],
        params=params or {},
        env=params_env(run_id, params or {}),
        deadline_seconds=deadline,
        kill_grace_seconds=0.5,
        profile={"slurm": slurm} if slurm else {},
    )
