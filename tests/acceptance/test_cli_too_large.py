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


def check_catalog_with(
    env: dict[str, str], line: str
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """`runlane catalog check` of a catalog whose line 2 is `line` and that is valid otherwise:
    the file, and the check that must have failed."""
    catalog = Path(env["RUNLANE_CATALOG"])
    catalog.write_text(
        f"version: 1\n{line}\njobs:\n  a: {{command: [echo, hi], executor: inline}}\n"
    )
    proc = runlane("catalog", "check", env=env)
    assert proc.returncode == 1
    return catalog, proc


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
    catalog, proc = check_catalog_with(env, line)
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


# Python reads and writes whole numbers of at most 4300 digits (sys.get_int_max_str_digits):
# past that, its own advice ("use sys.set_int_max_str_digits()") is no answer for a person.
HUGE = "1" * 5000


@pytest.mark.parametrize(
    ("line", "value", "message"),
    [
        (
            f"defaults: {{max_attempts: {HUGE}}}",
            HUGE,
            "defaults.max_attempts: must be at most 1000, got a number of 5000 digits",
        ),
        (
            f"defaults: {{deadline: -{HUGE}}}",
            f"-{HUGE}",
            "defaults.deadline: a duration cannot be negative, got a negative number of 5000 digits",
        ),
        (
            f"global: {{max_concurrent_pods: 0x{HUGE}}}",  # reads (base 16), yet prints nowhere
            f"0x{HUGE}",
            "global.max_concurrent_pods: must be at most 10000, "
            "got a number of more than 4300 digits",
        ),
    ],
)
def test_catalog_check_reports_a_number_of_thousands_of_digits_in_one_line(
    env: dict[str, str], line: str, value: str, message: str
) -> None:
    catalog, proc = check_catalog_with(env, line)
    column = line.index(value) + 1
    assert proc.stderr.splitlines() == [
        f"{catalog}:2:{column}: {message}",
        f"error: {catalog}: 1 error",
    ]


def test_job_fields_of_thousands_of_digits_are_one_line_each(env: dict[str, str]) -> None:
    catalog = Path(env["RUNLANE_CATALOG"])
    catalog.write_text(
        "version: 1\njobs:\n  a:\n    command: [echo, hi]\n"
        f"    max_attempts: {HUGE}\n    env: {{X: {HUGE}}}\n"
    )
    proc = runlane("catalog", "check", env=env)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        f"{catalog}:5:19: jobs.a.max_attempts: must be at most 1000, got a number of 5000 digits",
        # No bound of its own (a string, when quoted): the number is too large to read at all.
        f"{catalog}:6:14: jobs.a.env.X: the number is too large (5000 digits; at most 4300)",
        f"error: {catalog}: 2 errors",
    ]


def test_run_refuses_an_int_param_of_thousands_of_digits(env: dict[str, str]) -> None:
    Path(env["RUNLANE_CATALOG"]).write_text(
        "version: 1\njobs:\n  a: {command: [echo, hi], executor: inline, params: {n: int}}\n"
    )
    assert runlane("db", "upgrade", env=env).returncode == 0
    for value in (HUGE, f"-{HUGE}"):
        proc = runlane("run", "a", "-p", f"n={value}", env=env)
        assert proc.returncode == 2  # bad params
        assert proc.stderr.splitlines() == [
            "error: job 'a': param 'n' must be an int of at most 4300 digits, got one of 5000"
        ]


def test_run_refuses_a_float_param_beyond_any_float(env: dict[str, str]) -> None:
    Path(env["RUNLANE_CATALOG"]).write_text(
        "version: 1\njobs:\n  a: {command: [echo, hi], executor: inline, params: {f: float}}\n"
    )
    assert runlane("db", "upgrade", env=env).returncode == 0
    proc = runlane("run", "a", "-p", f"f={HUGE}", env=env)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "error: job 'a': param 'f' must be a float of at most 1.798e+308 either way, "
        "got a number too large (5000 characters)"
    ]


def test_config_refuses_a_concurrency_of_thousands_of_digits(env: dict[str, str]) -> None:
    env["RUNLANE_CONCURRENCY"] = HUGE
    proc = runlane("config", env=env)
    assert proc.returncode != 0
    assert proc.stderr.splitlines() == [
        f"error: RUNLANE_CONCURRENCY='{HUGE[:59]}…: must be at most 10000"
    ]
