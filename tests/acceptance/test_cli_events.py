"""`runlane emit` as a person uses it, against what the listeners' jobs allow: a paused job's
event runs are recorded skipped, and an emit refused for one listener writes nothing at all
(real processes, SQLite)."""

from __future__ import annotations

import json
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
        ("queued", None), *[("skipped", "paused")] * 3
    ]
