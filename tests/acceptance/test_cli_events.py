"""`runlane emit` as a person uses it, against what the listeners' jobs allow: a paused job's
event runs are recorded skipped, and an emit refused for one listener writes nothing at all
(real processes, SQLite)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.acceptance.cli_process import cli_env, runlane

PAUSABLE = """
version: 1
defaults: {executor: inline, overlap: allow, deadline: 1m}
jobs:
  ev: {command: ["true"], on_event: [{key: k.p}]}
  other: {command: ["true"], on_event: [{key: k.p}]}
"""


def emit_outcome(env: dict[str, str], key: str) -> dict[str, tuple[bool, str, str | None]]:
    proc = runlane("emit", key, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    return {
        r["job"]: (r["started"], r["status"], r["end_reason"])
        for r in json.loads(proc.stdout)["runs"]
    }


def test_a_paused_or_snoozed_jobs_event_runs_are_recorded_skipped(tmp_path: Path) -> None:
    env = cli_env(tmp_path, PAUSABLE)
    assert runlane("pause", "ev", env=env).returncode == 0
    text = runlane("emit", "k.p", env=env)
    assert text.returncode == 0, text.stderr
    assert "skipped ev run" in text.stdout
    assert "(paused)" in text.stdout
    assert "started other run" in text.stdout
    assert emit_outcome(env, "k.p") == {
        "ev": (False, "skipped", "paused"),
        "other": (True, "queued", None),
    }
    assert runlane("pause", "ev", "--until", "2h", env=env).returncode == 0  # a snooze
    assert emit_outcome(env, "k.p")["ev"] == (False, "skipped", "paused")
    assert runlane("resume", "ev", env=env).returncode == 0
    assert emit_outcome(env, "k.p")["ev"] == (True, "queued", None)
    runs = json.loads(runlane("runs", "--job", "ev", "--json", env=env).stdout)
    assert sorted((r["status"], r["end_reason"]) for r in runs) == [
        ("queued", None),
        *[("skipped", "paused")] * 3,
    ]


TWO_LISTENERS = """
version: 1
defaults: {executor: inline, overlap: allow, deadline: 1m}
jobs:
  a: {command: ["true"], on_event: [{key: k}]}
  p: {command: ["true"], executor: pod, on_event: [{key: k}]}
"""


def written(tmp_path: Path) -> dict[str, int]:
    with sqlite3.connect(tmp_path / "runlane.db") as conn:
        return {
            table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("run_log", "events", "event_runs")
        }


def test_an_emit_refused_for_one_listener_writes_nothing(tmp_path: Path) -> None:
    """`a` would be accepted, `p` (a pod job, no cluster, RUNLANE_POD_FALLBACK=refuse) is
    refused: the emit is refused as a whole, before the event or `a`'s run is written, and the
    same emit given again once it can be accepted starts both."""
    env = cli_env(tmp_path, TWO_LISTENERS, HOME=str(tmp_path))
    for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        env.pop(name, None)  # no cluster: `p` would fall back to inline, or be refused
    refused = runlane("emit", "k", "--id", "x1", env={**env, "RUNLANE_POD_FALLBACK": "refuse"})
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: job 'p' runs as a Kubernetes pod")
    assert written(tmp_path) == {"run_log": 0, "events": 0, "event_runs": 0}
    accepted = runlane("emit", "k", "--id", "x1", "--json", env=env)
    assert accepted.returncode == 0, accepted.stderr
    out = json.loads(accepted.stdout)
    assert out["event"]["new"] is True
    assert sorted((r["job"], r["started"]) for r in out["runs"]) == [("a", True), ("p", True)]
    assert written(tmp_path) == {"run_log": 2, "events": 1, "event_runs": 2}
