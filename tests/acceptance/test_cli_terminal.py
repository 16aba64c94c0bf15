"""A job's output cannot drive the terminal of whoever reads it: `runs show` and, on a
terminal, `logs` and `run --wait` show control characters as escapes (\\x1b); piped, or with
`logs --raw`, `logs` prints the output byte for byte for tools."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .test_cli import runlane

PY = sys.executable
# (\u202e: a right-to-left override, which makes what follows read backwards: Trojan Source)
HOSTILE = r"print('\x1b[2J\x1b[31mRED\x1b]0;pwned\x07 done\rX\x9b\u202eLIVE')"
CATALOG = f"""
version: 1
defaults: {{executor: inline, overlap: allow, deadline: 1m, max_attempts: 1}}
jobs:
  esc:
    command: [{PY}, "{{script}}"]
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "hostile.py").write_text(HOSTILE + "\n")
    (tmp_path / "catalog.yaml").write_text(
        CATALOG.replace("{script}", str(tmp_path / "hostile.py"))
    )
    return {
        **os.environ,
        "RUNLANE_DATABASE_URL": f"sqlite:///{tmp_path / 'runlane.db'}",
        "RUNLANE_CATALOG": str(tmp_path / "catalog.yaml"),
        "RUNLANE_LOG_DIR": str(tmp_path / "logs"),
        "RUNLANE_CLAIM_INTERVAL": "100ms",
        "RUNLANE_LOG_LEVEL": "warning",
        "PYTHONIOENCODING": "utf-8",
    }


@pytest.fixture
def run_id(env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    assert runlane("db", "upgrade", env=env).returncode == 0
    with (tmp_path / "serve.log").open("w") as log:
        serve = subprocess.Popen(
            [PY, "-m", "runlane", "serve"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        try:
            done = runlane("run", "esc", "--wait", "--json", env=env)
            assert done.returncode == 0, done.stdout
            yield json.loads(done.stdout)["id"]
        finally:
            serve.terminate()
            serve.wait(30)


def on_a_terminal(*args: str, env: dict[str, str]) -> str:
    """Run `runlane ARGS` with stdout on a pseudo-terminal; what it wrote there."""
    master, slave = pty.openpty()
    try:
        with subprocess.Popen(
            [PY, "-m", "runlane", *args], env=env, stdout=slave, stderr=subprocess.PIPE
        ) as proc:
            os.close(slave)
            chunks = []
            while True:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the child closed its end
                    break
                if not data:
                    break
                chunks.append(data)
            assert proc.stderr is not None
            problems = proc.stderr.read()
            assert proc.wait(60) == 0, problems
        return b"".join(chunks).decode("utf-8", "replace")
    finally:
        os.close(master)


def test_runs_show_escapes_the_log_tail(env: dict[str, str], run_id: str) -> None:
    shown = runlane("runs", "show", run_id, env=env)
    assert shown.returncode == 0
    assert "\x1b" not in shown.stdout
    assert "\x07" not in shown.stdout
    assert "\\x1b[2J\\x1b[31mRED\\x1b]0;pwned\\x07 done\\x0dX\\x9b\\u202eLIVE" in shown.stdout
    assert "\u202e" not in shown.stdout


def test_logs_on_a_terminal_escapes_and_raw_does_not(env: dict[str, str], run_id: str) -> None:
    seen = on_a_terminal("logs", run_id, env=env)
    assert "\x1b" not in seen
    assert "\\x1b[2J" in seen
    assert "done\\x0dX" in seen
    raw = on_a_terminal("logs", run_id, "--raw", env=env)
    assert "\x1b[2J\x1b[31mRED" in raw


def test_logs_piped_are_byte_for_byte(env: dict[str, str], run_id: str) -> None:
    piped = subprocess.run(
        [PY, "-m", "runlane", "logs", run_id], env=env, capture_output=True, timeout=60, check=True
    )
    assert piped.stdout == "\x1b[2J\x1b[31mRED\x1b]0;pwned\x07 done\rX\x9b\u202eLIVE\n".encode()


def test_run_wait_on_a_terminal_escapes_the_output(env: dict[str, str], run_id: str) -> None:
    seen = on_a_terminal("run", "esc", "--wait", env=env)  # the fixture's launcher is running
    assert "\x1b[2J" not in seen
    assert "\\x1b[2J\\x1b[31mRED" in seen
