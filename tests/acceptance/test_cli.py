"""The CLI as a person uses it: real processes, a real launcher, SQLite (the embedded default)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.integration.conftest import CATALOG
from tests.support.waiting import eventually_sync


def runlane(
    *args: str, env: dict[str, str], cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runlane", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def wait_for_status(run_id: str, status: str, env: dict[str, str]) -> None:
    """Until `runlane runs show` says the run is in `status` (polled without a pause)."""

    def shown() -> bool:
        answer = runlane("runs", "show", run_id, "--json", env=env).stdout
        return bool(json.loads(answer)["status"] == status)

    eventually_sync(shown, f"run {run_id} {status}", within=20, poll=0)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    e = dict(os.environ)
    e.update(
        RUNLANE_DATABASE_URL=f"sqlite:///{tmp_path / 'runlane.db'}",
        RUNLANE_CATALOG=str(tmp_path / "catalog.yaml"),
        RUNLANE_LOG_DIR=str(tmp_path / "logs"),
        RUNLANE_CLAIM_INTERVAL="100ms",
        RUNLANE_HEARTBEAT_INTERVAL="1s",
        RUNLANE_SHUTDOWN_GRACE="2s",
        RUNLANE_LOG_LEVEL="warning",
    )
    return e


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout, proc.stdout


@pytest.fixture
def launcher(env: dict[str, str], tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    assert runlane("db", "upgrade", env=env).returncode == 0
    with (tmp_path / "serve.log").open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runlane", "serve"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        yield proc
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_catalog_check_ok_and_errors(env: dict[str, str], tmp_path: Path) -> None:
    ok = runlane("catalog", "check", env=env)
    assert ok.returncode == 0, ok.stderr
    assert "ok" in ok.stdout
    assert "12 jobs" in ok.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "version: 1\njobs:\n  a:\n    command: [x]\n    profil: core\n  b:\n    command: [y]\n    deadline: forever\n"
    )
    proc = runlane("catalog", "check", "--catalog", str(bad), env=env)
    no_traceback(proc)
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith(str(bad))]
    assert len(lines) >= 2, proc.stderr
    assert any(":5:5:" in ln and "did you mean" in ln for ln in lines), lines
    assert any(":8:" in ln for ln in lines), lines
    # --json: the same findings as a report
    good = json.loads(runlane("catalog", "check", "--json", env=env).stdout)
    assert (good["valid"], good["jobs"], good["chains"]) == (True, 12, 0)
    assert isinstance(good["schedules"], int)
    report = runlane("catalog", "check", "--catalog", str(bad), "--json", env=env)
    assert report.returncode == 1
    found = json.loads(report.stdout)
    assert found["valid"] is False
    assert sorted(found["errors"]) == sorted(lines)


def test_catalog_schema_is_json(env: dict[str, str]) -> None:
    proc = runlane("catalog", "schema", env=env)
    assert proc.returncode == 0
    schema = json.loads(proc.stdout)
    assert "jobs" in schema["properties"]


def test_init_writes_a_valid_starter(env: dict[str, str], tmp_path: Path) -> None:
    target = tmp_path / "starter"
    proc = runlane("init", str(target), env=env)
    assert proc.returncode == 0, proc.stderr
    check = runlane("catalog", "check", "--catalog", str(target / "catalog.yaml"), env=env)
    assert check.returncode == 0, check.stderr
    again = runlane("init", str(target), env=env)
    assert again.returncode != 0
    assert "already exists" in again.stderr


def test_init_into_a_directory_says_to_change_into_it(env: dict[str, str], tmp_path: Path) -> None:
    # `runlane init DIR` from elsewhere: the next steps it prints must work as typed.
    env = {k: v for k, v in env.items() if k != "RUNLANE_CATALOG"}
    proc = runlane("init", "my jobs", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    steps = proc.stdout.splitlines()[-1]
    assert steps.startswith("next: cd 'my jobs' && runlane catalog check"), steps
    shell = subprocess.run(
        [
            "sh",
            "-c",
            steps.removeprefix("next: ")
            .split(" && runlane db upgrade")[0]
            .replace("runlane", f"{sys.executable} -m runlane"),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shell.returncode == 0, shell.stderr
    here = runlane("init", "--force", env=env, cwd=tmp_path / "my jobs")
    assert here.stdout.splitlines()[-1] == (
        "next: runlane catalog check && runlane db upgrade && runlane serve"
    )
    odd = runlane("init", "[b]x", env=env, cwd=tmp_path)  # printed as typed, not as markup
    assert odd.stdout.splitlines() == [
        "wrote [b]x/catalog.yaml",
        "next: cd '[b]x' && runlane catalog check && runlane db upgrade && runlane serve",
    ]


def test_jobs_table_piped_at_80_columns_keeps_the_pause_state_whole(
    env: dict[str, str], tmp_path: Path
) -> None:
    # The README's catalog: `runlane jobs | grep paused` must find the paused job.
    catalog = tmp_path / "readme.yaml"
    catalog.write_text(
        "version: 1\n"
        "defaults: {executor: inline, overlap: forbid, max_attempts: 1, deadline: 1h}\n"
        "jobs:\n"
        "  lineup-optimizer:\n"
        "    command: [python, -m, app.lineup]\n"
        "    params: {week: int?, dry_run: bool?}\n"
        "    max_attempts: 3\n"
        "  nightly-sync:\n"
        "    command: [python, -m, app.sync]\n"
        '    schedules: [{cron: "45 21 * * *", tz: America/Chicago, catch_up: 1h}]\n'
    )
    env = {**env, "RUNLANE_CATALOG": str(catalog), "COLUMNS": "80"}
    assert runlane("db", "upgrade", env=env).returncode == 0
    assert runlane("pause", "nightly-sync", "--reason", "db move", env=env).returncode == 0
    table = runlane("jobs", env=env)
    assert table.returncode == 0, table.stderr
    rows = {line.split()[0]: line for line in table.stdout.splitlines() if line[:1].isalpha()}
    assert " paused" in rows["nightly-sync"], table.stdout
    assert " active" in rows["lineup-optimizer"], table.stdout
    assert "…" not in table.stdout, table.stdout
    assert max(map(len, table.stdout.splitlines())) <= 80, table.stdout


def test_serve_refuses_a_database_that_is_not_upgraded(env: dict[str, str]) -> None:
    proc = runlane("serve", env=env, timeout=30)
    no_traceback(proc)
    assert proc.returncode != 0
    assert "runlane db upgrade" in proc.stderr


def test_bad_input_is_one_clear_line(env: dict[str, str]) -> None:
    assert runlane("db", "upgrade", env=env).returncode == 0
    unknown = runlane("run", "nope", env=env)
    no_traceback(unknown)
    assert unknown.returncode == 2
    assert "unknown job 'nope'" in unknown.stderr
    typo = runlane("run", "helo", env=env)
    assert "did you mean 'hello'" in typo.stderr
    bad_type = runlane("run", "hello", "-p", "week=seven", env=env)
    no_traceback(bad_type)
    assert bad_type.returncode == 2
    assert "week" in bad_type.stderr
    bad_pair = runlane("run", "hello", "-p", "week", env=env)
    assert bad_pair.returncode == 2
    acts = runlane("run", "careful", env=env)
    assert acts.returncode == 2
    assert "--yes" in acts.stderr
    missing = runlane("runs", "show", "00000000-0000-0000-0000-000000000000", env=env)
    no_traceback(missing)
    assert missing.returncode == 1
    assert "no run" in missing.stderr
    runs = json.loads(runlane("runs", "--json", env=env).stdout)
    assert runs == []  # nothing refused was written


def test_unreachable_database_is_one_line(env: dict[str, str]) -> None:
    env = dict(env, RUNLANE_DATABASE_URL="postgresql://runlane:secret@127.0.0.1:1/nowhere")
    proc = runlane("runs", env=env)
    no_traceback(proc)
    assert proc.returncode != 0
    assert "127.0.0.1" in proc.stderr
    assert "secret" not in proc.stderr


def test_missing_catalog_is_one_line(env: dict[str, str], tmp_path: Path) -> None:
    proc = runlane("jobs", "--catalog", str(tmp_path / "missing.yaml"), env=env)
    no_traceback(proc)
    assert proc.returncode == 1
    assert "not found" in proc.stderr


def test_config_masks_secrets(env: dict[str, str]) -> None:
    env = dict(env, RUNLANE_DATABASE_URL="postgresql://runlane:hunter2@db:5432/runlane")
    proc = runlane("config", "--json", env=env)
    data = json.loads(proc.stdout)
    assert "hunter2" not in proc.stdout
    assert data["database_url"].startswith("postgresql://runlane:")
    bad = runlane("config", env=dict(env, RUNLANE_LEASE_TTL="soon"))
    no_traceback(bad)
    assert bad.returncode != 0
    assert "RUNLANE_LEASE_TTL" in bad.stderr


# About thirty CLI processes in a row beside a launcher: 24 s on a quiet machine, but past the
# suite's 120 s limit in a rehearsal at load 5-8 (each process's start-up is ~1 s of CPU).
@pytest.mark.timeout(300)
def test_end_to_end_with_a_real_launcher(
    env: dict[str, str], launcher: subprocess.Popen[str]
) -> None:
    ok = runlane("run", "hello", "-p", "week=3", "--wait", env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "hello" in ok.stdout
    assert "success" in ok.stdout

    failed = runlane("run", "fail", "--wait", "--json", env=env)
    assert failed.returncode == 1
    row = json.loads(failed.stdout)
    assert row["status"] == "failure"
    assert row["exit_code"] == 3

    runs = json.loads(runlane("runs", "--json", env=env).stdout)
    assert {r["job"] for r in runs} == {"hello", "fail"}
    for key in (
        "id",
        "job",
        "status",
        "attempt",
        "dedupe_key",
        "trigger",
        "end_reason",
        "queued_at",
    ):
        assert key in runs[0]
    assert runs[0]["queued_at"].endswith("Z")
    assert "lease_token" not in runs[0]

    one = json.loads(runlane("runs", "show", row["id"][:8], "--json", env=env).stdout)
    assert one["id"] == row["id"]
    logs = runlane("logs", row["id"], env=env)
    assert "boom" in logs.stdout

    queued = json.loads(runlane("run", "long", "--json", env=env).stdout)
    wait_for_status(queued["id"], "running", env)
    cancel = runlane("cancel", queued["id"], env=env)
    assert cancel.returncode == 0
    final = runlane("run", "hello", "--wait", env=env)  # the launcher is still healthy
    assert final.returncode == 0
    wait_for_status(queued["id"], "cancelled", env)

    assert (
        runlane("pause", "hello", "--until", "2h", "--reason", "maintenance", env=env).returncode
        == 0
    )
    jobs = {j["job"]: j for j in json.loads(runlane("jobs", "--json", env=env).stdout)}
    assert jobs["hello"]["paused"] is True
    assert jobs["hello"]["paused_until"].endswith("Z")
    assert jobs["hello"]["pause_reason"] == "maintenance"
    assert "maintenance" in runlane("jobs", env={**env, "COLUMNS": "200"}).stdout
    # `now+2h`, as every other time flag takes it: the same end, give or take the seconds between
    until_2h = datetime.fromisoformat(jobs["hello"]["paused_until"].replace("Z", "+00:00"))
    assert runlane("pause", "hello", "--until", "now+2h", env=env).returncode == 0
    jobs = {j["job"]: j for j in json.loads(runlane("jobs", "--json", env=env).stdout)}
    again = datetime.fromisoformat(jobs["hello"]["paused_until"].replace("Z", "+00:00"))
    assert timedelta(0) <= again - until_2h < timedelta(minutes=1)
    assert runlane("resume", "hello", env=env).returncode == 0
    jobs = {j["job"]: j for j in json.loads(runlane("jobs", "--json", env=env).stdout)}
    assert jobs["hello"]["paused"] is False

    status = json.loads(runlane("status", "--json", env=env).stdout)
    assert len(status["launchers"]) == 1
    assert status["launchers"][0]["stale"] is False
    # For people: the running counts in words, not a Python dict (`running {}`).
    (line,) = [ln for ln in runlane("status", env=env).stdout.splitlines() if "launcher" in ln]
    assert " running 0 catalog " in line, line

    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=30) == 0
    status = json.loads(runlane("status", "--json", env=env).stdout)
    assert status["launchers"] == []


def test_a_run_that_never_started_says_why_in_wait_and_logs(
    env: dict[str, str], tmp_path: Path
) -> None:
    # A command that does not exist writes no output: the reason is the run's note, and both
    # `run --wait` and `logs` say it rather than ending in silence.
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(catalog.read_text() + "  nocmd:\n    command: [/nonexistent/bin]\n")
    assert runlane("db", "upgrade", env=env).returncode == 0
    with (tmp_path / "serve.log").open("w") as log:
        serve = subprocess.Popen(
            [sys.executable, "-m", "runlane", "serve"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            waited = runlane("run", "nocmd", "--wait", env=env)
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(30)
    no_traceback(waited)
    assert waited.returncode == 1
    assert waited.stdout.splitlines()[-1].endswith(
        "ended failure (start_failed): command '/nonexistent/bin' not found"
    ), waited.stdout
    [row] = json.loads(runlane("runs", "--job", "nocmd", "--json", env=env).stdout)
    logs = runlane("logs", row["id"], env=env)
    no_traceback(logs)
    assert logs.returncode == 0
    assert logs.stdout == ""
    assert logs.stderr.strip() == (
        f"run {row['id']} has no output; it ended failure (start_failed): "
        "command '/nonexistent/bin' not found"
    )


def whole(word: str, line: str) -> bool:
    """`word` appears in `line` as itself, not cut short with an ellipsis or part of another."""
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w…-])", line) is not None


def test_the_runs_table_at_80_columns_keeps_statuses_and_end_reasons_whole(
    env: dict[str, str], launcher: subprocess.Popen[str]
) -> None:
    for job, code in (("hello", 0), ("fail", 1), ("slow", 1)):
        assert runlane("run", job, "--wait", env=env).returncode == code
    started = json.loads(runlane("run", "long", "--json", env=env).stdout)
    wait_for_status(started["id"], "running", env)
    launcher.send_signal(signal.SIGTERM)  # ends `long` failure / launcher_shutdown
    assert launcher.wait(timeout=30) == 0
    runs = json.loads(runlane("runs", "--json", env=env).stdout)
    shown = {(r["status"], r["end_reason"]) for r in runs}
    assert {
        ("success", "exit"),
        ("failure", "exit"),
        ("timeout", "deadline"),
        ("failure", "launcher_shutdown"),
    } <= shown, shown
    proc = runlane("runs", env=dict(env, COLUMNS="80"))  # piped: the width is COLUMNS
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for run in runs:
        [row] = [line for line in lines if run["id"][:6] in line]
        assert whole(run["status"], row), (run["status"], proc.stdout)
        if run["end_reason"]:
            assert whole(run["end_reason"], row), (run["end_reason"], proc.stdout)
    assert max(len(line.rstrip()) for line in lines) <= 80, proc.stdout


def test_demo_runs_to_completion(tmp_path: Path) -> None:
    # 80 columns, piped: the summary table's statuses are whole words all the same.
    env = dict(os.environ, RUNLANE_LOG_LEVEL="error", COLUMNS="80")
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "runlane", "demo"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert time.monotonic() - started < 60
    assert "tour complete" in proc.stdout
    assert "refused" in proc.stdout
    lines = proc.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "every run of the tour" in line)
    end = next(i for i, line in enumerate(lines) if "printed:" in line)
    table = lines[start:end]
    for status in ("success", "failure", "timeout"):
        assert any(whole(status, row) for row in table), (status, proc.stdout)
    assert all(len(row.rstrip()) <= 80 for row in table), proc.stdout
