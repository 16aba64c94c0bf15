"""A log directory the launcher cannot use: `runlane serve` refuses to start in one line that
names the directory, the setting it comes from (RUNLANE_LOG_DIR, or its default) and why; and
`run --wait`, which only reads log files, is not stopped by one. Real processes, SQLite.

The tests run as root, whom permissions do not stop: a directory under a regular file cannot be
made by anyone (ENOTDIR), and sysfs takes no files."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.cli_process import cli_env, runlane
from tests.integration.conftest import CATALOG


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return cli_env(
        tmp_path,
        CATALOG,
        RUNLANE_CLAIM_INTERVAL="100ms",
        RUNLANE_HEARTBEAT_INTERVAL="1s",
        RUNLANE_SHUTDOWN_GRACE="2s",
    )


def refused(proc: subprocess.CompletedProcess[str]) -> str:
    """The one line a launcher that did not start printed."""
    assert proc.returncode == 1, proc.stderr
    [line] = proc.stderr.splitlines()
    return line


def test_serve_names_the_setting_the_directory_and_the_reason(
    env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "file.txt").write_text("not a directory\n")
    env["RUNLANE_LOG_DIR"] = str(tmp_path / "file.txt" / "logs")
    assert refused(runlane("serve", env=env)) == (
        f"error: RUNLANE_LOG_DIR='{tmp_path}/file.txt/logs': cannot create the log directory: "
        f"{tmp_path}/file.txt is not a directory"
    )


def test_serve_names_the_default_when_the_setting_is_not_set(
    env: dict[str, str], tmp_path: Path
) -> None:
    here = tmp_path / "here"
    here.mkdir()
    (here / ".runlane").write_text("")  # a file where the default's parent goes
    del env["RUNLANE_LOG_DIR"]
    assert refused(runlane("serve", env=env, cwd=here)) == (
        "error: RUNLANE_LOG_DIR (default .runlane/logs): cannot create the log directory "
        f"{here}/.runlane/logs: {here}/.runlane is not a directory"
    )


def test_serve_refuses_a_log_directory_it_cannot_write_in(env: dict[str, str]) -> None:
    try:
        with tempfile.TemporaryFile(dir="/sys"):
            pytest.skip("/sys takes files here")
    except OSError as exc:
        reason = exc.strerror
    env["RUNLANE_LOG_DIR"] = "/sys"
    assert refused(runlane("serve", env=env)) == (
        f"error: RUNLANE_LOG_DIR='/sys': cannot write in the log directory: {reason}"
    )


@contextlib.contextmanager
def serving(env: dict[str, str], tmp_path: Path) -> Iterator[None]:
    with (tmp_path / "serve.log").open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runlane", "serve"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def test_run_wait_only_reads_the_log_directory_and_is_not_stopped_by_an_unusable_one(
    env: dict[str, str], tmp_path: Path
) -> None:
    # The launcher writes the log files; `run --wait` reads them where the launcher's heartbeat
    # says, so its own RUNLANE_LOG_DIR being unusable is no error.
    (tmp_path / "file.txt").write_text("not a directory\n")
    cli = dict(env, RUNLANE_LOG_DIR=str(tmp_path / "file.txt" / "logs"))
    with serving(env, tmp_path):
        waited = runlane("run", "hello", "--wait", env=cli)
    assert waited.returncode == 0, waited.stderr
    assert "\nhello " in waited.stdout
    assert "file.txt" not in waited.stdout + waited.stderr
