"""A run whose log file could not be written whole (a full disk, a log file that cannot be
created): `runlane logs`, `logs --follow` and `run --wait` print what the file has, say on stderr
where it stops, and print the tail saved with the run. Real processes, a real launcher, SQLite."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.cli_process import cli_env, runlane
from tests.integration.conftest import CATALOG, PY
from tests.support.waiting import eventually_sync

# The launcher's own file size limit (RLIMIT_FSIZE) stands in for a full disk: a write past it
# fails with EFBIG, so the log file stops at exactly this many bytes, mid-line. No mount, no root.
# It bounds the launcher's database files too, which stay far below it.
FILE_LIMIT = 1024 * 1024
LINES = 100_000  # 12 bytes each ("line 000042\n"): 1.2 MB, past the limit
CHATTY = f"""  chatty:
    command: [{PY}, -c, "for i in range({LINES}): print(f'line {{i:06d}}')"]
"""
# Says `ready`, leaves a file named by its run id in the directory it is given (its output is on
# its way to the log), and sleeps until something ends it.
NAP = (
    "import os, sys, time; print('ready', flush=True); "
    "open(os.path.join(sys.argv[1], os.environ['RUN_ID']), 'w').close(); time.sleep(60)"
)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    naps = f"""  nap:
    command: [{PY}, -c, "{NAP}", {tmp_path}]
  short-nap:
    command: [{PY}, -c, "{NAP}", {tmp_path}]
    deadline: 3s
"""
    return cli_env(
        tmp_path,
        CATALOG + CHATTY + naps,
        RUNLANE_CLAIM_INTERVAL="100ms",
        RUNLANE_HEARTBEAT_INTERVAL="1s",
        RUNLANE_SHUTDOWN_GRACE="2s",
    )


def _limit_file_size() -> None:  # in the launcher's process, before exec
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))


@contextmanager
def serving(env: dict[str, str], tmp_path: Path, *, limited: bool) -> Iterator[None]:
    with (tmp_path / "serve.log").open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runlane", "serve"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_limit_file_size if limited else None,  # for the launcher alone
        )
        try:
            yield
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


@pytest.fixture
def disk_full_launcher(env: dict[str, str], tmp_path: Path) -> Iterator[None]:
    with serving(env, tmp_path, limited=True):
        yield


def marker(where: str, error: str) -> str:
    saved = "its last lines as saved with the run follow"
    return f"[runlane: {where}: writing it failed ({error}); {saved}]"


def test_a_log_file_cut_short_by_a_full_disk_ends_with_a_marker_and_the_saved_tail(
    env: dict[str, str], disk_full_launcher: None
) -> None:
    waited = runlane("run", "chatty", "--wait", env=env)
    assert waited.returncode == 0, waited.stdout[-2000:] + waited.stderr
    [row] = json.loads(runlane("runs", "--job", "chatty", "--json", env=env).stdout)
    assert row["status"] == "success"
    log_file = Path(env["RUNLANE_LOG_DIR"]) / f"{row['id']}.1.log"
    text = log_file.read_text()
    assert len(text) == FILE_LIMIT
    assert not text.endswith("\n")  # the disk filled up mid-line: the file ends cut off
    tail = row["log_tail"]
    assert tail.splitlines() == [f"line {i:06d}" for i in range(LINES - 100, LINES)]
    note = (
        f"the log file {log_file} is incomplete: writing it failed (File too large); "
        "the tail here is complete"
    )
    assert row["note"] == note
    stopped = marker(f"the log file stopped at {FILE_LIMIT} bytes", "File too large")

    # `run --wait`: the file, its cut line ended, the tail, and the note with the success line.
    header, printed = waited.stdout.split("\n", 1)
    assert header == f"queued chatty as run {row['id']}; waiting for it to finish"
    assert printed == f"{text}\n{tail}run {row['id']} (attempt 1) ended success (exit): {note}\n"
    assert stopped in waited.stderr.splitlines()

    # `logs`, and `logs --follow` of the ended run: the same, the marker alone on stderr.
    for follow in ((), ("--follow",)):
        logs = runlane("logs", row["id"], *follow, env=env)
        assert logs.returncode == 0, logs.stderr
        assert logs.stdout == f"{text}\n{tail}", follow
        assert logs.stderr == stopped + "\n", follow


def test_a_log_file_that_was_never_written_never_prints_nothing(
    env: dict[str, str], tmp_path: Path
) -> None:
    # A directory where the log file goes: creating the file fails (EISDIR) on the first byte.
    queued = runlane("run", "hello", "--json", env=env)
    run_id = json.loads(queued.stdout)["id"]
    log_file = Path(env["RUNLANE_LOG_DIR"]) / f"{run_id}.1.log"
    log_file.mkdir(parents=True)
    with serving(env, tmp_path, limited=False):
        followed = runlane("logs", run_id, "--follow", env=env)
    row = json.loads(runlane("runs", "show", run_id, "--json", env=env).stdout)
    assert (row["status"], row["end_reason"]) == ("success", "exit")
    tail = row["log_tail"]
    assert tail.startswith(f"hello {run_id} cli")
    assert "writing it failed (Is a directory)" in row["note"]
    none = marker("there is no log file", "Is a directory")

    assert followed.returncode == 0, followed.stderr
    assert followed.stdout == tail
    assert followed.stderr.splitlines()[-1] == none  # after a no-launcher warning, maybe
    logs = runlane("logs", run_id, env=env)
    assert (logs.returncode, logs.stdout, logs.stderr) == (0, tail, none + "\n")

    # An empty file (the disk was full from the first byte), and no file at all (since deleted).
    log_file.rmdir()
    log_file.touch()
    empty = runlane("logs", run_id, env=env)
    stopped = marker("the log file stopped at 0 bytes", "Is a directory")
    assert (empty.returncode, empty.stdout, empty.stderr) == (0, tail, stopped + "\n")
    log_file.unlink()
    gone = runlane("logs", run_id, env=env)
    assert (gone.returncode, gone.stdout, gone.stderr) == (0, tail, none + "\n")


def test_a_run_ended_by_its_deadline_a_cancel_or_a_shutdown_still_shows_its_saved_tail(
    env: dict[str, str], tmp_path: Path
) -> None:
    # What ends a run adds its own note (a shutdown's); the note that the log file is incomplete
    # must stay beside it, or logs prints nothing for a run whose tail was saved.
    def queue(job: str) -> str:
        run_id: str = json.loads(runlane("run", job, "--json", env=env).stdout)["id"]
        (Path(env["RUNLANE_LOG_DIR"]) / f"{run_id}.1.log").mkdir(parents=True)  # EISDIR
        return run_id

    def row(run_id: str) -> dict[str, Any]:
        shown: dict[str, Any] = json.loads(
            runlane("runs", "show", run_id, "--json", env=env).stdout
        )
        return shown

    timed, cancelled, shut = queue("short-nap"), queue("nap"), queue("nap")
    with serving(env, tmp_path, limited=False):
        for run_id in (timed, cancelled, shut):
            eventually_sync(
                (tmp_path / run_id).exists, f"output from run {run_id}", within=30, poll=0.1
            )
        assert runlane("cancel", cancelled, env=env).returncode == 0
        eventually_sync(
            lambda: row(cancelled)["status"] == "cancelled", "cancelled run", within=30, poll=0.1
        )
        eventually_sync(
            lambda: row(timed)["status"] == "timeout", "timed-out run", within=30, poll=0.1
        )
    # The launcher has stopped: the run it was still supervising ended with it.
    incomplete = (
        "the log file {} is incomplete: writing it failed (Is a directory); "
        "the tail here is complete"
    )
    ended = {
        timed: ("timeout", "deadline", ""),
        cancelled: ("cancelled", "cancelled", ""),
        shut: ("failure", "launcher_shutdown", "the launcher shut down before the run finished; "),
    }
    none = marker("there is no log file", "Is a directory")
    for run_id, (status, end_reason, first) in ended.items():
        got = row(run_id)
        log_file = Path(env["RUNLANE_LOG_DIR"]) / f"{run_id}.1.log"
        assert (got["status"], got["end_reason"]) == (status, end_reason)
        assert got["note"] == first + incomplete.format(log_file)
        logs = runlane("logs", run_id, env=env)
        assert (logs.returncode, logs.stdout, logs.stderr) == (0, "ready\n", none + "\n")
