"""The launcher's own environment is the base of every run's, less what describes a run: a
launcher started inside a trace or inside a run must not hand that trace or those params to
the runs it starts (the Slurm executor's sbatch environment; the inline executor's is covered
by tests/integration/test_trace_env.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from runlane.adapters.slurm.executor import SlurmExecutor
from runlane.core.envsplit import without_run_context
from runlane.ports import ExecutionSpec

LAUNCHERS = "00-11111111111111111111111111111111-2222222222222222-01"


def test_what_describes_a_run_is_dropped_and_the_rest_kept() -> None:
    environ = {
        "PATH": "/usr/bin",
        "RUNLANE_CATALOG": "catalog.yaml",
        "RUNLANE_DATABASE_URL": "sqlite:///x.db",
        "TRACEPARENT": LAUNCHERS,
        "TRACESTATE": "vendor=launcher",
        "RUN_ID": "r",
        "RUN_TRIGGER": "cli",
        "RUN_PARENT_ID": "p",
        "RUNLANE_JOB": "outer",
        "RUNLANE_ATTEMPT": "1",
        "RUNLANE_PARAMS": "{}",
        "RUNLANE_PARAMS_FILE": "/tmp/params.json",
        "RUNLANE_PARAM_WEEK": "7",
    }
    assert without_run_context(environ) == {
        "PATH": "/usr/bin",
        "RUNLANE_CATALOG": "catalog.yaml",
        "RUNLANE_DATABASE_URL": "sqlite:///x.db",
    }


def test_a_slurm_run_without_a_trace_never_gets_the_launchers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACEPARENT", LAUNCHERS)
    monkeypatch.setenv("RUNLANE_PARAM_OTHER", "the launcher's")
    executor = SlurmExecutor(tmp_path / "logs")
    spec = ExecutionSpec(
        run_id="0b7d8f2e-0000-4000-8000-000000000001",
        job="slurm-test",
        attempt=1,
        trigger="manual",
        command=[sys.executable, "-c", "pass"],
        params={},
        env={"RUN_ID": "0b7d8f2e-0000-4000-8000-000000000001", "RUNLANE_PARAMS": "{}"},
        deadline_seconds=30.0,
        kill_grace_seconds=0.5,
    )
    _, env, _ = executor._submission(spec, "runlane-test")
    assert "TRACEPARENT" not in env
    assert "RUNLANE_PARAM_OTHER" not in env
    assert env["RUNLANE_PARAMS"] == "{}"
