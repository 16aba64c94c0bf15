"""A run's params file is named by an absolute path, even when the launcher's log directory is
relative (the default `.runlane/logs`): a job that changes directory before reading its params
reads them all the same, large or small. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from runlane.adapters.local.executor import InlineExecutor
from runlane.catalog import load_catalog
from runlane.core.runs import RunStatus, Trigger
from runlane.ports import Store
from runlane.service.accept import RunRequest
from runlane.service.config import Settings

from .conftest import run_to_end

PY = sys.executable
# Changes directory first, then reads its params: a relative RUNLANE_PARAMS_FILE would miss.
CHDIR_READER = (
    "import json, os, sys; os.chdir(sys.argv[1]); from runlane.sdk import params_from_env; "
    "s = params_from_env()['s']; "
    "print(json.dumps({'len': len(s), 'head': s[:3], 'file': os.environ.get('RUNLANE_PARAMS_FILE')}))"
)


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    path = tmp_path / "elsewhere"
    path.mkdir()
    return path


@pytest.fixture
def chdir_catalog(tmp_path: Path, elsewhere: Path) -> Path:
    path = tmp_path / "chdir-catalog.yaml"
    path.write_text(
        "version: 1\n"
        "defaults: {executor: inline, overlap: allow, deadline: 1m, max_attempts: 1}\n"
        "jobs:\n"
        "  chdirjob:\n"
        f"    command: [{PY}, -c, {json.dumps(CHDIR_READER)}, {elsewhere}]\n"
        "    params: {s: str}\n"
    )
    return path


@pytest.fixture
def relative_log_settings(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """The launcher runs in `tmp_path/home` with the default, relative log directory."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.chdir(home)
    return replace(settings, log_dir=".runlane/logs")


@pytest.mark.parametrize("size", [5, 120_000], ids=["small", "large"])
async def test_a_job_that_changes_directory_reads_its_params(
    store: Store,
    relative_log_settings: Settings,
    chdir_catalog: Path,
    tmp_path: Path,
    size: int,
) -> None:
    value = "abc" + "x" * (size - 3)
    request = RunRequest(job="chdirjob", trigger=Trigger.CLI, params={"s": value})
    [run_id] = await run_to_end(
        store, load_catalog(chdir_catalog), relative_log_settings, [request]
    )
    run = await store.get_run(run_id)
    assert run.status is RunStatus.SUCCESS, (run.error_code, run.note, run.log_tail)
    seen = json.loads((run.log_tail or "").strip())
    assert (seen["len"], seen["head"]) == (size, "abc")
    if size > 64 * 1024:  # spilled to a file next to the run's log, named absolutely
        params_file = Path(seen["file"])
        assert params_file.is_absolute()
        assert params_file.parent.parent == tmp_path / "home" / ".runlane" / "logs"
    else:
        assert seen["file"] is None


def test_a_relative_log_directory_gives_absolute_log_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    executor = InlineExecutor("logs", pdeathsig="none")
    try:
        assert executor.log_dir == tmp_path / "logs"
        assert executor.log_path("r1", 1) == tmp_path / "logs" / "r1.1.log"
    finally:
        executor.close()
