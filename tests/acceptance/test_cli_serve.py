"""`runlane serve` with and without HTTP, and `runlane web`, as real processes on SQLite: the
probes answer, a job queued through the CLI runs, `--no-http` binds nothing, an address in use
is one line, and SIGTERM stops cleanly."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.acceptance.cli_process import cli_env, runlane
from tests.integration.conftest import CATALOG
from tests.support.waiting import eventually_sync


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def answers(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=2)
    except httpx.TransportError:
        return None


@contextmanager
def started(tmp_path: Path, *args: str, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """`runlane ARGS` in the background, its stderr to a file; killed at the end if still up."""
    with (tmp_path / "stderr.txt").open("w") as errors:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runlane", *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            text=True,
        )
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


def stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=30)


def test_serve_with_http_answers_runs_a_job_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    env = cli_env(tmp_path, CATALOG, RUNLANE_LOG_LEVEL="info")
    with started(tmp_path, "serve", "--http-addr", f"127.0.0.1:{port}", env=env) as proc:
        live = eventually_sync(
            lambda: answers(f"http://127.0.0.1:{port}/healthz"), "serve answers /healthz"
        )
        assert live.json() == {"status": "ok"}
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200
        queued = runlane("run", "hello", "--wait", "--json", env=env)
        assert queued.returncode == 0, queued.stderr
        assert json.loads(queued.stdout)["status"] == "success"
        assert stop(proc) == 0
    logged = (tmp_path / "stderr.txt").read_text()
    assert f"serving http://127.0.0.1:{port}" in logged
    assert logged.count("serving http://") == 1
    assert "launcher.stopped" in logged
    assert answers(f"http://127.0.0.1:{port}/healthz") is None


def test_serve_no_http_binds_nothing(tmp_path: Path) -> None:
    port = free_port()
    env = cli_env(tmp_path, CATALOG, RUNLANE_HTTP_ADDR=f"127.0.0.1:{port}")
    with started(tmp_path, "serve", "--no-http", env=env) as proc:
        ran = runlane("run", "hello", "--wait", "--json", env=env)  # the launcher serves
        assert json.loads(ran.stdout)["status"] == "success"
        assert answers(f"http://127.0.0.1:{port}/healthz") is None
        assert stop(proc) == 0
    assert "serving http://" not in (tmp_path / "stderr.txt").read_text()


def test_an_address_in_use_is_one_line_and_no_launcher_starts(tmp_path: Path) -> None:
    env = cli_env(tmp_path, CATALOG)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for command in ("serve", "web"):
            refused = runlane(command, "--http-addr", f"127.0.0.1:{port}", env=env)
            assert refused.returncode != 0
            assert refused.stderr.strip() == (
                f"error: cannot listen on 127.0.0.1:{port}: address already in use "
                "(RUNLANE_HTTP_ADDR / --http-addr)"
            )
    launchers = runlane("status", "--json", env=env)
    assert json.loads(launchers.stdout)["launchers"] == []
    bad = runlane("serve", "--http-addr", "8080", env=env)
    assert bad.returncode == 2  # a bad flag (cli.md's exit codes), as RUNLANE_HTTP_ADDR's is 1
    assert bad.stderr.startswith("error: --http-addr='8080': expected HOST:PORT")
    # An app that cannot start (no database at that path) is one line too, not uvicorn's log.
    typo = tmp_path / "typo.db"
    missing = runlane(
        "web",
        "--http-addr",
        "127.0.0.1:0",
        env={**env, "RUNLANE_DATABASE_URL": f"sqlite:///{typo}"},
    )
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"error: no database at {typo} — run `runlane db upgrade`"


def test_web_answers_readyz_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    env = cli_env(
        tmp_path, CATALOG, RUNLANE_LOG_LEVEL="info", RUNLANE_HTTP_ADDR=f"127.0.0.1:{port}"
    )
    with started(tmp_path, "web", env=env) as proc:
        ready = eventually_sync(
            lambda: answers(f"http://127.0.0.1:{port}/readyz"), "web answers /readyz"
        )
        assert (ready.status_code, ready.json()["status"]) == (200, "ready")
        assert stop(proc) == 0
    logged = (tmp_path / "stderr.txt").read_text()
    assert f"serving http://127.0.0.1:{port}" in logged
    assert "launcher.start" not in logged  # web runs no launcher
    assert "Traceback" not in logged


def test_serve_runs_on_the_event_loop_runlane_event_loop_names(tmp_path: Path) -> None:
    # uvloop by default (`auto`, installed with runlane), asyncio's own when asked: the launcher
    # says which in its start line, and runs a job to its end on either.
    pytest.importorskip("uvloop")
    for choice, expected in (("auto", "uvloop"), ("asyncio", "asyncio"), ("uvloop", "uvloop")):
        work = tmp_path / choice
        work.mkdir()
        env = cli_env(work, CATALOG, RUNLANE_LOG_LEVEL="info", RUNLANE_EVENT_LOOP=choice)
        with started(work, "serve", "--no-http", env=env) as proc:
            queued = runlane("run", "hello", "--wait", "--json", env=env)
            assert queued.returncode == 0, queued.stderr
            assert json.loads(queued.stdout)["status"] == "success"
            assert stop(proc) == 0
        logged = (work / "stderr.txt").read_text()
        assert f"event_loop={expected}" in logged, logged
        # ... and how it spawns inline runs (RUNLANE_INLINE_SPAWN's default on Linux)
        assert "inline=spawners+idle-loop" in logged, logged
        assert "launcher.stopped" in logged
    bad = runlane("serve", env={**env, "RUNLANE_EVENT_LOOP": "tokio"})
    assert bad.returncode != 0
    assert "RUNLANE_EVENT_LOOP='tokio'" in bad.stderr
    assert "Traceback" not in bad.stderr
