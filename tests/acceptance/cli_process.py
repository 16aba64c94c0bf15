"""The `runlane` command as a person runs it, for the acceptance tests: a real process, and an
environment of its own (SQLite in the test's directory, its catalog, its log directory)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def runlane(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`python -m runlane ARGS`; whatever it exits with, it never prints a traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "runlane", *args],
        env=env, capture_output=True, text=True, timeout=60, check=False,
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
