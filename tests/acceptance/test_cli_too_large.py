"""Values too large to use, as a person mistypes them: `runlane catalog check` and `runlane config`
refuse them in one plain line with a non-zero exit, never a traceback, and `runlane run` never
gets as far as an OverflowError. Real processes on SQLite."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

RUNLANE = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "runlane"
LIMIT = "a duration cannot be longer than 36500d (100 years)"


def runlane(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(RUNLANE), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert "Error:" not in proc.stderr, proc.stderr  # no `OverflowError: …` either
    return proc


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    e = dict(os.environ)
    e.update(
        RUNLANE_DATABASE_URL=f"sqlite:///{tmp_path / 's.db'}",
        RUNLANE_CATALOG=str(tmp_path / "catalog.yaml"),
        RUNLANE_LOG_DIR=str(tmp_path / "logs"),
        RUNLANE_LOG_LEVEL="warning",
    )
    return e


@pytest.mark.parametrize(
    ("line", "where", "field"),
    [
        ("global: {manual_queue_ttl: 99999999d}", "2:28", "global.manual_queue_ttl"),
        ("global: {max_deadline: 99999999d}", "2:24", "global.max_deadline"),
        ("defaults: {deadline: 99999999d}", "2:22", "defaults.deadline"),
    ],
)
def test_catalog_check_reports_a_too_long_duration_in_one_line(
    env: dict[str, str], line: str, where: str, field: str
) -> None:
    catalog = Path(env["RUNLANE_CATALOG"])
    catalog.write_text(
        f"version: 1\n{line}\njobs:\n  a: {{command: [echo, hi], executor: inline}}\n"
    )
    proc = runlane("catalog", "check", env=env)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"{catalog}:{where}: {field}: {LIMIT}, got '99999999d'",
        f"error: {catalog}: 1 error",
    ]
    # `run` reads the catalog the same way: the same line, not a crash when the run is written.
    assert runlane("db", "upgrade", env=env).returncode == 0
    run = runlane("run", "a", env=env)
    assert run.returncode == 1
    assert f"{catalog}:{where}: {field}: {LIMIT}" in run.stderr


def test_config_refuses_a_lease_ttl_of_100000000_days(env: dict[str, str]) -> None:
    env["RUNLANE_LEASE_TTL"] = "100000000d"
    proc = runlane("config", env=env)
    assert proc.returncode != 0
    assert proc.stderr.splitlines() == [
        f"error: RUNLANE_LEASE_TTL='100000000d': {LIMIT}, got '100000000d'"
    ]


def test_config_refuses_a_concurrency_beyond_its_limit(env: dict[str, str]) -> None:
    env["RUNLANE_CONCURRENCY"] = "99999999999999999999"
    proc = runlane("config", env=env)
    assert proc.returncode != 0
    assert proc.stderr.splitlines() == [
        "error: RUNLANE_CONCURRENCY='99999999999999999999': must be at most 10000"
    ]
