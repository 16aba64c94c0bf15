"""The SDK against a database that takes connections and never answers (a hung server, a
black-holed proxy): real job processes are held up for a few seconds at most, warn once with a
reason, keep their exit code, and print nothing about tasks left pending at exit."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SDK_ENV = ("RUN_ID", "RUN_PARENT_ID", "RUN_TRIGGER", "RUNLANE_PARAMS", "RUNLANE_JOB")

# Each process gives up once, after libpq's 3 s connect timeout; the old code waited 30 s per
# process (60 s for this job). Generous, for two shared cores.
BOUND_S = 15.0

WARNING = re.compile(r"run_scope\(\): could not record run [0-9a-f-]{36}: (.*)$", re.MULTILINE)


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A TCP port that accepts every connection and never sends a byte."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept_forever() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # the listening socket was closed: the test is over
                return
            held.append(conn)

    thread = threading.Thread(target=accept_forever, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(); close() alone would not
    server.close()
    thread.join(timeout=5)
    for conn in held:
        conn.close()


JOB = """
import asyncio, json, subprocess, sys
from runlane.sdk import run_scope

out = {}
with run_scope() as outer:  # adopts RUN_ID: writes nothing
    with run_scope("inner") as inner:
        out["inner_recorded"] = inner.recorded
    with run_scope("again") as again:  # the store was given up on: no second wait, no warning
        out["again_recorded"] = again.recorded
    sub = subprocess.run(
        [sys.executable, sys.argv[1]], capture_output=True, text=True, check=False
    )
    out["sub"] = [sub.returncode, sub.stdout.strip(), sub.stderr]
print(json.dumps(out))
sys.exit(3)
"""

SUB = """
import asyncio
from runlane.sdk import run_scope

async def main() -> None:
    async with run_scope("step") as step:
        async with run_scope("deeper") as deeper:
            print(step.recorded, deeper.recorded)

asyncio.run(main())
"""


def one_clear_warning(stderr: str) -> None:
    assert "Task was destroyed" not in stderr, stderr
    assert "Traceback" not in stderr, stderr
    reasons = WARNING.findall(stderr)
    assert len(reasons) == 1, stderr
    assert reasons[0].strip(), stderr
    assert "127.0.0.1" in reasons[0], stderr  # says where it could not connect


def test_a_database_that_never_answers_holds_the_job_up_briefly(
    black_hole: int, tmp_path: Path
) -> None:
    job, sub = tmp_path / "job.py", tmp_path / "sub.py"
    job.write_text(textwrap.dedent(JOB))
    sub.write_text(textwrap.dedent(SUB))
    env = {k: v for k, v in os.environ.items() if k not in SDK_ENV}
    env |= {
        "RUN_ID": "4c167752-0000-4000-8000-000000000000",
        "RUNLANE_JOB": "nightly",
        "RUNLANE_DATABASE_URL": f"postgresql://x@127.0.0.1:{black_hole}/db",
    }
    started = time.monotonic()
    # A session of its own, so a job still stuck at the limit goes with its subprocess.
    with subprocess.Popen(
        [sys.executable, str(job), str(sub)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=4 * BOUND_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            pytest.fail(f"the job was still running after {4 * BOUND_S:g} s: {stderr}")
    elapsed = time.monotonic() - started
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)

    assert done.returncode == 3, done.stderr  # the job's own exit code, untouched
    assert elapsed < BOUND_S, (elapsed, done.stderr)
    out: dict[str, Any] = json.loads(done.stdout)
    assert (out["inner_recorded"], out["again_recorded"]) == (False, False)
    one_clear_warning(done.stderr)

    sub_code, sub_out, sub_err = out["sub"]
    assert (sub_code, sub_out) == (0, "False False")
    one_clear_warning(sub_err)
