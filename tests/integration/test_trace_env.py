"""A run's trace context is its own: an inline run gets the TRACEPARENT stored on it, or none,
never the one the launcher's own process inherited (that would put every untraced run into
one unrelated trace). SQLite and PostgreSQL."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from runlane.catalog import load_catalog
from runlane.core.runs import RunStatus, Trigger
from runlane.ports import Store
from runlane.service.accept import RunRequest
from runlane.service.config import Settings

from .conftest import run_to_end

PY = sys.executable
PRINTER = (
    "import json, os; print(json.dumps({k: os.environ.get(k) for k in "
    "('TRACEPARENT', 'TRACESTATE')}))"
)
LAUNCHERS = "00-11111111111111111111111111111111-2222222222222222-01"
CALLERS = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def printer_catalog(tmp_path: Path) -> Path:
    path = tmp_path / "trace-catalog.yaml"
    path.write_text(
        "version: 1\n"
        "defaults: {executor: inline, overlap: allow, deadline: 1m, max_attempts: 1}\n"
        "jobs:\n"
        f"  printer:\n    command: [{PY}, -c, {json.dumps(PRINTER)}]\n"
    )
    return path


async def test_an_untraced_run_never_inherits_the_launchers_trace(
    store: Store, settings: Settings, printer_catalog: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The launcher itself was started inside a trace (a traced shell, CI, a run of runlane).
    monkeypatch.setenv("TRACEPARENT", LAUNCHERS)
    monkeypatch.setenv("TRACESTATE", "vendor=launcher")
    requests = [
        RunRequest(job="printer", trigger=Trigger.CLI),
        RunRequest(job="printer", trigger=Trigger.CLI, traceparent=CALLERS),
    ]
    untraced, traced = await run_to_end(store, load_catalog(printer_catalog), settings, requests)
    seen = []
    for run_id in (untraced, traced):
        run = await store.get_run(run_id)
        assert run.status is RunStatus.SUCCESS, (run.error_code, run.note, run.log_tail)
        seen.append(json.loads((run.log_tail or "").strip()))
    assert seen[0] == {"TRACEPARENT": None, "TRACESTATE": None}
    # The launcher's tracestate belongs to the launcher's trace, not to the caller's.
    assert seen[1] == {"TRACEPARENT": CALLERS, "TRACESTATE": None}


async def test_spilled_params_are_never_the_launchers_own(
    store: Store, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A launcher started inside a run (of another runlane) has that run's params in its
    # environment; a run whose params go to a file must read its own.
    monkeypatch.setenv("RUNLANE_PARAMS", json.dumps({"s": "the launcher's"}))
    monkeypatch.setenv("RUNLANE_PARAM_S", "the launcher's")
    path = tmp_path / "params-catalog.yaml"
    reader = (
        "import json, os; from runlane.sdk import params_from_env; "
        "print(json.dumps({'len': len(params_from_env()['s']), "
        "'env': os.environ.get('RUNLANE_PARAM_S', '-')[:20]}))"
    )
    path.write_text(
        "version: 1\n"
        "defaults: {executor: inline, overlap: allow, deadline: 1m, max_attempts: 1}\n"
        f"jobs:\n  reader:\n    command: [{PY}, -c, {json.dumps(reader)}]\n"
        "    params: {s: str}\n"
    )
    request = RunRequest(job="reader", trigger=Trigger.CLI, params={"s": "x" * 120_000})
    [run_id] = await run_to_end(store, load_catalog(path), settings, [request])
    run = await store.get_run(run_id)
    assert run.status is RunStatus.SUCCESS, (run.error_code, run.note, run.log_tail)
    # Its own value, from the params file; the large RUNLANE_PARAM_S went to a file too.
    assert json.loads((run.log_tail or "").strip()) == {"len": 120_000, "env": "-"}
