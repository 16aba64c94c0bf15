"""The `runlane` command as a person runs it, for the acceptance tests: a real process, and an
environment of its own (SQLite in the test's directory, its catalog, its log directory)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

PG_URL = os.environ.get("RUNLANE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def runlane(
    *args: str, env: dict[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m runlane ARGS` (in `cwd`, else here); whatever it exits with, it never prints
    a traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "runlane", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    return proc


def cli_env(tmp_path: Path, catalog: str | None = None, **settings: str) -> dict[str, str]:
    """This process's environment plus a database, catalog file and log directory under
    `tmp_path` (the catalog written when given), logging at warning, and `settings`
    (RUNLANE_* variables) on top; the database upgraded."""
    if catalog is not None:
        (tmp_path / "catalog.yaml").write_text(catalog)
    env = dict(os.environ)
    env.update(
        RUNLANE_DATABASE_URL=f"sqlite:///{tmp_path / 'runlane.db'}",
        RUNLANE_CATALOG=str(tmp_path / "catalog.yaml"),
        RUNLANE_LOG_DIR=str(tmp_path / "logs"),
        RUNLANE_LOG_LEVEL="warning",
    )
    env.update(settings)
    assert runlane("db", "upgrade", env=env).returncode == 0
    return env


@contextmanager
def postgres_database() -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database on the test server, dropped afterwards. The
    test is skipped when the server does not answer (it fails in CI, which has one)."""
    try:
        admin = psycopg.connect(PG_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL is required in CI: {exc}")
        pytest.skip(f"PostgreSQL not reachable: {exc}")
    name = f"runlane_cli_{uuid.uuid4().hex[:8]}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')  # name is ours, not input
    try:
        yield f"{PG_URL.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
