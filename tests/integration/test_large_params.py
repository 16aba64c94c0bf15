"""Params larger than the environment can carry (the kernel refuses one variable over 128 KiB
with E2BIG) reach an inline run through files, as they reach a pod through a ConfigMap: the run
starts, the SDK reads them, and the files are gone when it ends. SQLite and PostgreSQL."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from runlane.catalog import load_catalog
from runlane.core.runs import RunStatus, Trigger
from runlane.ports import RunFilter, Store
from runlane.service.accept import RunRequest
from runlane.service.config import Settings

from .conftest import run_to_end

PY = sys.executable
READER = (
    "import json, os, stat; from runlane.sdk import params_from_env; p = params_from_env(); "
    "f = os.environ.get('RUNLANE_PARAMS_FILE'); "
    "print(json.dumps({'a': len(p['a']), 'b': len(p['b']), 'inline': 'RUNLANE_PARAMS' in os.environ, "
    "'file': f, 'mode': oct(stat.S_IMODE(os.stat(f).st_mode)) if f else None, "
    "'single_a': 'RUNLANE_PARAM_A' in os.environ}))"
)
CATALOG = f"""
version: 1
defaults: {{executor: inline, overlap: allow, deadline: 1m, max_attempts: 2}}
jobs:
  big:
    command: [{PY}, -c, {json.dumps(READER)}]
    params: {{a: str, b: str}}
  fat-env:
    command: [{PY}, -c, "print('never')"]
    env: {{HUGE: "{"z" * 70_000}"}}
"""


@pytest.fixture
def catalog_file(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG)
    return path


async def _run(
    store: Store, settings: Settings, catalog_file: Path, job: str, **params: str
) -> str:
    request = RunRequest(job=job, trigger=Trigger.CLI, params=params)
    [run_id] = await run_to_end(store, load_catalog(catalog_file), settings, [request])
    return run_id


async def test_params_over_the_env_budget_travel_in_files(
    store: Store, settings: Settings, catalog_file: Path
) -> None:
    run_id = await _run(store, settings, catalog_file, "big", a="x" * 200_000, b="y" * 150_000)
    run = await store.get_run(run_id)
    assert run.status is RunStatus.SUCCESS, (run.error_code, run.note, run.log_tail)
    seen = json.loads((run.log_tail or "").strip())
    assert seen["a"] == 200_000
    assert seen["b"] == 150_000
    assert seen["inline"] is False  # RUNLANE_PARAMS moved to the file
    assert seen["single_a"] is False  # so did the largest single param
    assert seen["mode"] == "0o600"
    params_dir = Path(seen["file"]).parent
    assert params_dir.parent == Path(settings.log_dir)
    assert not params_dir.exists()  # removed when the run ended


async def test_small_params_stay_in_the_environment(
    store: Store, settings: Settings, catalog_file: Path
) -> None:
    run_id = await _run(store, settings, catalog_file, "big", a="x", b="yy")
    run = await store.get_run(run_id)
    assert run.status is RunStatus.SUCCESS
    seen = json.loads((run.log_tail or "").strip())
    assert (seen["a"], seen["b"], seen["inline"], seen["file"]) == (1, 2, True, None)


async def test_an_environment_too_large_without_params_fails_once_with_a_reason(
    store: Store, settings: Settings, catalog_file: Path
) -> None:
    run_id = await _run(store, settings, catalog_file, "fat-env")
    run = await store.get_run(run_id)
    assert run.status is RunStatus.FAILURE
    assert run.error_code == "env_too_large"
    assert run.note is not None
    assert "budget" in run.note
    rows = await store.list_runs(RunFilter(job="fat-env", limit=10))
    assert [r.id for r in rows] == [run_id]  # permanent: not retried
