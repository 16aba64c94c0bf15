"""Slurm runs end to end through `runlane serve` (the wiring, the run log, the CLI) on the real
one-node Slurm: a launcher killed with SIGKILL mid-run and another one reattaching (the run
recorded once, the job submitted once), `runlane logs --follow` following the job's output file
across the takeover, and `runlane doctor` reporting the cluster."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runlane.adapters.slurm.commands import job_name
from tests.acceptance.test_cli import runlane
from tests.support.slurm import SlurmCluster
from tests.support.waiting import eventually_sync

pytestmark = pytest.mark.timeout(120)

PY = sys.executable
CATALOG = f"""\
version: 1
global: {{kill_grace: 1s, start_timeout: 1m}}
defaults: {{executor: slurm, overlap: allow, deadline: 5m}}
profiles:
  hpc:
    slurm: {{partition: debug, cpus: 1, memory: 100M}}
jobs:
  gated:
    profile: hpc
    command: [{PY}, -u, -c, "import os, pathlib, time\\nopen(os.environ['STARTS'], 'a').write('started\\\\n')\\nprint('line one', os.environ['RUNLANE_PARAM_WEEK'])\\ngate = pathlib.Path(os.environ['GATE'])\\nwhile not gate.exists(): time.sleep(0.05)\\nprint('last line')"]
    params: {{week: int}}
"""


@pytest.fixture
def env(slurm: SlurmCluster, tmp_path: Path) -> dict[str, str]:
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    e = dict(os.environ)
    e.update(
        slurm.env,
        RUNLANE_DATABASE_URL=f"sqlite:///{tmp_path / 'runlane.db'}",
        RUNLANE_CATALOG=str(tmp_path / "catalog.yaml"),
        RUNLANE_LOG_DIR=str(tmp_path / "logs"),
        RUNLANE_CLAIM_INTERVAL="100ms",
        RUNLANE_HEARTBEAT_INTERVAL="1s",
        RUNLANE_LEASE_TTL="3s",
        RUNLANE_LEASE_RENEW_INTERVAL="500ms",
        RUNLANE_SLURM_POLL_INTERVAL="0.2",
        RUNLANE_LOG_LEVEL="warning",
        STARTS=str(tmp_path / "starts"),
        GATE=str(tmp_path / "gate"),
    )
    assert runlane("db", "upgrade", env=e).returncode == 0
    return e


@pytest.fixture
def launchers(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def serve(env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    with log.open("w") as out:
        return subprocess.Popen(
            [PY, "-m", "runlane", "serve"], env=env, stdout=out, stderr=subprocess.STDOUT, text=True
        )


def shown(run_id: str, env: dict[str, str]) -> dict[str, object]:
    answer = runlane("runs", "show", run_id, "--json", env=env)
    assert answer.returncode == 0, answer.stderr
    run: dict[str, object] = json.loads(answer.stdout)
    return run


def row(env: dict[str, str], run_id: str) -> sqlite3.Row:
    """The run's row, read straight from the run log (cheaper to poll than a CLI process)."""
    path = env["RUNLANE_DATABASE_URL"].removeprefix("sqlite:///")
    with contextlib.closing(sqlite3.connect(path, timeout=5)) as db:
        db.row_factory = sqlite3.Row
        found: sqlite3.Row = db.execute("SELECT * FROM run_log WHERE id = ?", (run_id,)).fetchone()
    return found


def test_a_launcher_killed_mid_run_is_replaced_and_the_run_recorded_once(
    env: dict[str, str],
    slurm: SlurmCluster,
    tmp_path: Path,
    launchers: list[subprocess.Popen[str]],
) -> None:
    first = serve(env, tmp_path / "first.log")
    launchers.append(first)
    queued = runlane("run", "gated", "-p", "week=7", "--json", env=env)
    assert queued.returncode == 0, queued.stderr
    run_id = json.loads(queued.stdout)["id"]
    follow_out = tmp_path / "follow.out"
    with follow_out.open("w") as out:
        follower = subprocess.Popen(
            [PY, "-m", "runlane", "logs", run_id, "--follow"], env=env, stdout=out, text=True
        )
    try:
        eventually_sync(
            lambda: "line one 7" in follow_out.read_text(), "the job's first line", within=30
        )
        running = shown(run_id, env)
        assert running["status"] == "running"
        assert running["executor"] == "slurm"
        job_id = running["external_id"]
        os.kill(first.pid, signal.SIGKILL)  # no shutdown, no lease release
        first.wait(timeout=10)
        second = serve(env, tmp_path / "second.log")
        launchers.append(second)
        eventually_sync(
            lambda: (
                "Reattached" in (tmp_path / "second.log").read_text()
                or shown(run_id, env).get("lease_owner") not in (None, running.get("lease_owner"))
            ),
            "the second launcher took the run over",
            within=30,
        )
        (tmp_path / "gate").write_text("open")
        eventually_sync(
            lambda: row(env, run_id)["status"] == "success", "the run succeeded", within=30
        )
        assert follower.wait(timeout=30) == 0
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    ended = shown(run_id, env)
    assert (ended["attempt"], ended["external_id"], ended["exit_code"]) == (1, job_id, 0)
    assert (tmp_path / "starts").read_text() == "started\n"  # the command ran once
    name = job_name("gated", run_id, 1)
    jobs = slurm.tool("squeue", f"--name={name}", "-h", "-t", "all", "-o", "%i", check=True)
    assert jobs.split() == [job_id]  # one Slurm job for the attempt
    listed = json.loads(runlane("runs", "--job", "gated", "--json", env=env).stdout)
    rows = listed["runs"] if isinstance(listed, dict) else listed
    assert [r["id"] for r in rows] == [run_id]
    followed = follow_out.read_text()
    assert "line one 7" in followed
    assert "last line" in followed
    assert "last line" in runlane("logs", run_id, env=env).stdout


def test_doctor_reports_the_cluster_and_the_partitions_the_catalog_names(
    env: dict[str, str], tmp_path: Path
) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(CATALOG.replace("partition: debug", "partition: nosuch"))
    report = runlane("doctor", env=env)
    text = report.stdout + report.stderr
    assert "Traceback" not in text
    assert "scontrol ping" in text, text
    assert "nosuch" in text, text
    catalog.write_text(CATALOG)
    healthy = runlane("doctor", env=env)
    assert "partition debug" in healthy.stdout + healthy.stderr
