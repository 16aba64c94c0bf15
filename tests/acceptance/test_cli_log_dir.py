"""`runlane logs`, `logs --follow` and `run --wait` started in another directory than the
launcher, with a relative RUNLANE_LOG_DIR (the default is): they read the log file where the
launcher wrote it (its heartbeat's log_dir), live and after the run. Real processes, a real
launcher, SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.cli_process import cli_env, postgres_database, runlane
from tests.integration.conftest import PY
from tests.support.waiting import eventually_sync

LINES = 8000  # 12 bytes each after the gate: 96 KB, more than the 64 KB tail saved with a run
CATALOG = f"""version: 1
defaults: {{executor: inline, overlap: allow, max_attempts: 1, deadline: 1m}}
jobs:
  gated:
    command: [{PY}, -c, "import os, pathlib, time\\nprint('live line', flush=True)\\ngate = pathlib.Path(os.environ['RUNLANE_PARAM_GATE'])\\nwhile not gate.exists(): time.sleep(0.02)\\nfor i in range({LINES}): print(f'line {{i:06d}}')"]
    params: {{gate: str}}
"""
WHOLE = "live line\n" + "".join(f"line {i:06d}\n" for i in range(LINES))


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An absolute database URL: the same database from either directory."""
    if request.param == "postgresql":
        with postgres_database() as url:
            yield url
    else:
        yield f"sqlite:///{tmp_path / 'runlane.db'}"


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """The launcher's working directory and the person's: two different directories."""
    a, b = tmp_path / "launcher-here", tmp_path / "person-here"
    a.mkdir()
    b.mkdir()
    return a, b


@pytest.fixture
def env(tmp_path: Path, database_url: str) -> dict[str, str]:
    return cli_env(
        tmp_path,
        CATALOG,
        RUNLANE_DATABASE_URL=database_url,
        RUNLANE_LOG_DIR="logs",
        RUNLANE_CLAIM_INTERVAL="100ms",
        RUNLANE_HEARTBEAT_INTERVAL="1s",
        RUNLANE_SHUTDOWN_GRACE="2s",
    )


@pytest.fixture
def launcher(env: dict[str, str], dirs: tuple[Path, Path], tmp_path: Path) -> Iterator[None]:
    """`runlane serve` in the launcher's directory, until the test ends."""
    with (tmp_path / "serve.log").open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runlane", "serve"],
            env=env,
            cwd=dirs[0],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    assert "Traceback" not in (tmp_path / "serve.log").read_text()


def output_until(proc: subprocess.Popen[bytes], text: str, seconds: float = 30.0) -> bytes:
    """What `proc` printed on stdout up to and including `text`, read as it comes (bounded)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    seen = b""
    deadline = time.monotonic() + seconds
    while text.encode() not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {text!r} within {seconds:.0f} s; printed {seen!r}"
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 65536)
            assert chunk, f"stdout closed before {text!r}; printed {seen!r}"
            seen += chunk
    return seen


def status_of(run_id: str, env: dict[str, str], cwd: Path) -> str:
    proc = runlane("runs", "show", run_id, "--json", env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    status: str = json.loads(proc.stdout)["status"]
    return status


def queue_gated(gate: Path, env: dict[str, str], cwd: Path) -> str:
    proc = runlane("run", "gated", "-p", f"gate={gate}", "--json", env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    run_id: str = json.loads(proc.stdout)["id"]
    return run_id


@pytest.mark.usefixtures("launcher")
def test_logs_from_another_directory_shows_the_live_output_then_the_whole_file(
    env: dict[str, str], dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = dirs
    gate = tmp_path / "gate"
    run_id = queue_gated(gate, env, b)
    written = a / "logs" / f"{run_id}.1.log"  # where the launcher writes it, not under b
    eventually_sync(
        lambda: written.is_file() and "live line" in written.read_text(), "the live line", within=30
    )
    assert not (b / "logs").exists()

    # The heartbeat says where: the launcher's log directory, made absolute in its directory.
    [beat] = json.loads(runlane("status", "--json", env=env, cwd=b).stdout)["launchers"]
    assert beat["log_dir"] == str(a.resolve() / "logs")

    live = runlane("logs", run_id, env=env, cwd=b)
    assert live.returncode == 0, live.stderr
    assert (live.stdout, live.stderr) == ("live line\n", "")
    assert status_of(run_id, env, b) == "running"  # it was live, not a tail saved at the end

    gate.write_text("open")
    eventually_sync(lambda: status_of(run_id, env, b) == "success", "the run to end", within=30)
    # The launcher still runs: the whole file, not the last 64 KB saved with the run.
    done = runlane("logs", run_id, env=env, cwd=b)
    assert done.returncode == 0, done.stderr
    assert done.stdout == WHOLE


@pytest.mark.usefixtures("launcher")
@pytest.mark.parametrize("command", ["logs --follow", "run --wait"])
def test_following_from_another_directory_prints_the_output_as_it_is_written(
    env: dict[str, str], dirs: tuple[Path, Path], tmp_path: Path, command: str
) -> None:
    b = dirs[1]
    gate = tmp_path / "gate"
    if command == "run --wait":
        args = ["run", "gated", "-p", f"gate={gate}", "--wait"]
    else:
        args = ["logs", queue_gated(gate, env, b), "--follow"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "runlane", *args],
        env=env,
        cwd=b,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        before_gate = output_until(proc, "live line\n")  # while the run waits on its gate
        gate.write_text("open")
        rest, errors = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, errors.decode()
    assert b"Traceback" not in errors
    printed = (before_gate + rest).decode()
    if command == "run --wait":
        first, printed = printed.split("\n", 1)
        assert first.endswith("waiting for it to finish")
        printed, last = printed.rstrip("\n").rsplit("\n", 1)
        printed += "\n"
        assert "ended success" in last
    assert printed == WHOLE
