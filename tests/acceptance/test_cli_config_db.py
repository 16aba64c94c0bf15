"""`runlane config`, `db upgrade`, `status` and `doctor` as a person runs them: secrets masked,
settings checked, no database created by a read, read-only and newer databases refused, dead
launchers shown as what they are."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.acceptance.test_cli import runlane
from tests.integration.conftest import CATALOG, PG_URL

SECRET = "s3cret"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    e = {k: v for k, v in os.environ.items() if not k.startswith("RUNLANE_")}
    e.update(
        RUNLANE_DATABASE_URL=f"sqlite:///{tmp_path / 'runlane.db'}",
        RUNLANE_CATALOG=str(tmp_path / "catalog.yaml"),
        RUNLANE_LOG_DIR=str(tmp_path / "logs"),
        RUNLANE_HEARTBEAT_INTERVAL="1s",
        RUNLANE_HTTP_ADDR="off",  # `serve` here is the launcher's; tests/acceptance/test_cli_serve.py has HTTP
        COLUMNS="200",
    )
    return e


def one_clean_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The single `error:` line of a refused command (no traceback, no secret)."""
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert SECRET not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


# --- 1. secrets in database URLs -------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            f"postgresql://127.0.0.1:5432/x?password={SECRET}",
            "postgresql://127.0.0.1:5432/x?password=***",
        ),
        (
            f"postgresql://h/x?sslmode=require&sslpassword={SECRET}&application_name=a",
            "postgresql://h/x?sslmode=require&sslpassword=***&application_name=a",
        ),
        (
            f"postgresql://alice:{SECRET}@h/x?password={SECRET}",
            "postgresql://alice:***@h/x?password=***",
        ),
        (
            f"host=h dbname=x password={SECRET} sslpassword={SECRET}",
            "host=h dbname=x password=*** sslpassword=***",
        ),
        (f"postgresql://a:{SECRET}@h1:5432,h2:5433/x", "postgresql://a:***@h1:5432,h2:5433/x"),
        (f"postgresql://a:{SECRET}@h:99999/x", "postgresql://a:***@h:99999/x"),
        (f"postgresql://a:{SECRET}@h:abc/x", "postgresql://a:***@h:abc/x"),
        (f"postgresql://alice:{SECRET}@[::1/x", "postgresql://alice:***@[::1/x"),
    ],
)
def test_config_masks_every_secret_of_the_database_url(
    env: dict[str, str], url: str, shown: str
) -> None:
    env["RUNLANE_DATABASE_URL"] = url
    as_json = runlane("config", "--json", env=env)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["database_url"] == shown
    text = runlane("config", env=env)
    assert text.returncode == 0, text.stderr
    assert SECRET not in text.stdout + text.stderr
    assert "Traceback" not in text.stderr


def test_a_malformed_url_is_one_masked_line(env: dict[str, str]) -> None:
    env["RUNLANE_DATABASE_URL"] = f"postgresql://alice:{SECRET}@[::1/x"
    proc = runlane("runs", env=env)
    assert proc.returncode == 1
    line = one_clean_line(proc)
    assert "invalid database URL 'postgresql://alice:***@[::1/x'" in line


@pytest.mark.parametrize("port", ["99999", "abc"])
def test_a_bad_port_is_one_clear_line(env: dict[str, str], port: str) -> None:
    env["RUNLANE_DATABASE_URL"] = f"postgresql://a:{SECRET}@127.0.0.1:{port}/x"
    proc = runlane("runs", env=env)
    assert proc.returncode == 1
    assert "PostgreSQL" in one_clean_line(proc)


# --- 2. every setting checked and shown --------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("RUNLANE_LOG_LEVEL", "bogus", "RUNLANE_LOG_LEVEL='bogus': expected one of debug"),
        ("RUNLANE_LOG_FORMAT", "xml", "RUNLANE_LOG_FORMAT='xml': expected 'console' or 'json'"),
        ("RUNLANE_SPAWN_THREADS", "0", "RUNLANE_SPAWN_THREADS='0': must be at least 1"),
        ("RUNLANE_SPAWN_THREADS", "many", "RUNLANE_SPAWN_THREADS='many': expected a whole number"),
    ],
)
@pytest.mark.parametrize("command", [["config"], ["status"], ["serve"]])
def test_bad_settings_are_refused_like_the_others(
    env: dict[str, str], name: str, value: str, message: str, command: list[str]
) -> None:
    env[name] = value
    proc = runlane(*command, env=env, timeout=30)
    assert proc.returncode != 0
    assert message in one_clean_line(proc)
    # The same shape as a bad duration.
    del env[name]
    env["RUNLANE_LEASE_TTL"] = "abc"
    other = runlane(*command, env=env, timeout=30)
    assert other.returncode == proc.returncode
    assert one_clean_line(other).startswith("error: RUNLANE_LEASE_TTL='abc': ")


def test_config_lists_every_effective_setting(env: dict[str, str]) -> None:
    env.update(RUNLANE_LOG_LEVEL="WARN", RUNLANE_LOG_FORMAT="json", RUNLANE_SPAWN_THREADS="3")
    proc = runlane("config", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["log_level"] == "warning"  # `warn` is an alias
    assert data["log_format"] == "json"
    assert data["spawn_threads"] == 3
    text = runlane("config", env=env).stdout
    for shown in ("RUNLANE_LOG_LEVEL", "RUNLANE_LOG_FORMAT", "RUNLANE_SPAWN_THREADS"):
        assert shown in text
    del env["RUNLANE_LOG_LEVEL"]
    assert json.loads(runlane("config", "--json", env=env).stdout)["log_level"] is None
    assert "info for serve, warning otherwise" in runlane("config", env=env).stdout


# --- 3. a database newer than the code ---------------------------------------------------------


def test_db_upgrade_refuses_a_newer_sqlite_database(env: dict[str, str], tmp_path: Path) -> None:
    assert runlane("db", "upgrade", env=env).returncode == 0
    with sqlite3.connect(tmp_path / "runlane.db") as conn:
        conn.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (999, 'x')")
    status = runlane("db", "status", env=env)
    upgrade = runlane("db", "upgrade", env=env)
    assert status.returncode == upgrade.returncode == 1
    assert "written by a newer runlane" in one_clean_line(upgrade)
    assert one_clean_line(upgrade) == one_clean_line(status)
    assert "up to date" not in upgrade.stdout


@pytest.fixture
def pg_url() -> Iterator[str]:
    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL not reachable: {exc}")
    name = f"runlane_cfg_{uuid.uuid4().hex[:8]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield f"{PG_URL.rsplit('/', 1)[0]}/{name}"
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.postgres
def test_db_upgrade_refuses_a_newer_postgres_database(env: dict[str, str], pg_url: str) -> None:
    env["RUNLANE_DATABASE_URL"] = pg_url
    assert runlane("db", "upgrade", env=env).returncode == 0
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO schema_migrations (version, applied_at) VALUES (999, now())")
    status = runlane("db", "status", env=env)
    upgrade = runlane("db", "upgrade", env=env)
    assert status.returncode == upgrade.returncode == 1
    assert "written by a newer runlane" in one_clean_line(upgrade)
    assert one_clean_line(upgrade) == one_clean_line(status)


# --- 4. no database file made by a read ----------------------------------------------------------


@pytest.mark.parametrize("command", [["status"], ["runs"], ["doctor"], ["db", "status"], ["serve"]])
def test_reads_do_not_create_a_mistyped_sqlite_path(
    env: dict[str, str], tmp_path: Path, command: list[str]
) -> None:
    typo = tmp_path / "typo.db"
    env["RUNLANE_DATABASE_URL"] = f"sqlite:///{typo}"
    proc = runlane(*command, env=env, timeout=30)
    assert proc.returncode == 1
    assert one_clean_line(proc) == f"error: no database at {typo} — run `runlane db upgrade`"
    assert not typo.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["catalog.yaml"]


def test_an_empty_database_url_means_the_default(env: dict[str, str], tmp_path: Path) -> None:
    env["RUNLANE_DATABASE_URL"] = ""
    assert (
        json.loads(runlane("config", "--json", env=env, cwd=tmp_path).stdout)["database_url"]
        == "sqlite:///runlane.db"
    )
    proc = runlane("status", env=env, cwd=tmp_path)
    assert proc.returncode == 1
    assert one_clean_line(proc) == "error: no database at runlane.db — run `runlane db upgrade`"
    assert not (tmp_path / "runlane.db").exists()
    made = runlane("db", "upgrade", env=env, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "runlane.db").exists()
    assert runlane("status", env=env, cwd=tmp_path).returncode == 0


# --- 5. a read-only database --------------------------------------------------------------------


@pytest.fixture
def immutable_db(env: dict[str, str], tmp_path: Path) -> Iterator[Path]:
    """The migrated database, made unwritable (`chattr +i` as root; modes otherwise)."""
    assert runlane("db", "upgrade", env=env).returncode == 0
    db = tmp_path / "runlane.db"
    if os.geteuid() == 0:
        chattr = shutil.which("chattr")
        if chattr is None or subprocess.run([chattr, "+i", str(db)], check=False).returncode:
            pytest.skip("cannot make a read-only file as root without chattr +i")
        try:
            yield db
        finally:
            subprocess.run([chattr, "-i", str(db)], check=False)
        return
    db.chmod(0o444)
    tmp_path.chmod(0o555)
    try:
        yield db
    finally:
        tmp_path.chmod(0o755)
        db.chmod(0o644)


def test_a_read_only_database_is_refused(env: dict[str, str], immutable_db: Path) -> None:
    serve = runlane("serve", env=env, timeout=30)
    assert serve.returncode == 1
    assert "database not writable" in one_clean_line(serve)
    assert "claim_failed" not in serve.stderr

    doctor = runlane("doctor", env=env)
    assert doctor.returncode == 1
    assert re.search(r"error\s+database\s+database not writable", doctor.stdout), doctor.stdout
    findings = json.loads(runlane("doctor", "--json", env=env).stdout)
    assert {"level": "error", "check": "database"}.items() <= next(
        f for f in findings if f["check"] == "database"
    ).items()

    upgrade = runlane("db", "upgrade", env=env)
    assert upgrade.returncode == 1
    assert "database not writable" in one_clean_line(upgrade)


# --- 6. dead launchers ----------------------------------------------------------------------------


def test_status_and_doctor_show_a_dead_launcher_as_stale_without_its_counts(
    env: dict[str, str], tmp_path: Path
) -> None:
    assert runlane("db", "upgrade", env=env).returncode == 0
    with sqlite3.connect(tmp_path / "runlane.db") as conn:
        conn.execute(
            "INSERT INTO launcher_heartbeat (launcher_id, host, pid, version, started_at, beat_at,"
            " queue_depth, running) VALUES ('dead:1', 'h', 1, '0.1.0',"
            " strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-10 minutes'),"
            " strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-5 minutes'), 3, '{\"inline\": 1}')"
        )
    proc = runlane("status", env=env)
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if "dead:1" in ln)
    assert re.search(r"stale: last seen 5m\d*s? ago \(\d{4}-\d\d-\d\dT[\d:.]+Z\)", line), line
    assert "inline" not in line
    assert "running" not in line
    data = json.loads(runlane("status", "--json", env=env).stdout)
    (entry,) = data["launchers"]
    assert entry["stale"] is True
    assert entry["running"] is None
    assert entry["queue_depth"] is None
    assert 295 < entry["last_seen_seconds"] < 400
    assert entry["beat_at"].endswith("Z")

    for doctor in (runlane("doctor", env=env).stdout, runlane("doctor", "--json", env=env).stdout):
        assert "+00:00" not in doctor
        assert re.search(r"launcher dead:1 is stale: last seen 5m\d*s? ago \([\dT:.-]+Z\)", doctor)


# --- 6. a RUNLANE_SLURM that is neither on nor off ------------------------------------------------


@pytest.mark.parametrize("command", [["doctor"], ["serve"]])
def test_a_mistyped_runlane_slurm_is_one_error_not_taken_for_unset(
    env: dict[str, str], command: list[str]
) -> None:
    """`RUNLANE_SLURM=enabled` was read as unset: without slurm.conf, Slurm jobs ran inline."""
    assert runlane("db", "upgrade", env=env).returncode == 0
    env["RUNLANE_SLURM"] = "enabled"
    env["RUNLANE_HTTP_ADDR"] = "off"
    proc = runlane(*command, env=env, timeout=30)
    assert proc.returncode == 1
    assert one_clean_line(proc).startswith("error: RUNLANE_SLURM='enabled': expected on or off")
