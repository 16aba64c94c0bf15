"""`runlane catalog check` against catalogs whose triggers could not work as written: a job
that listens for one event key twice. Reported as `FILE:LINE:COL: message`, exit 1, like every
other catalog error (real processes)."""

from __future__ import annotations

from pathlib import Path

from tests.acceptance.cli_process import cli_env, runlane

LISTENS_TWICE = """\
version: 1
defaults: {executor: inline}
jobs:
  ev:
    command: ["true"]
    on_event: [{key: k.dup}, {key: k.dup, debounce: 1m}]
"""


def check(tmp_path: Path, catalog: str) -> tuple[int, list[str]]:
    """`runlane catalog check catalog.yaml` of `catalog`: its exit code and stderr lines."""
    env = cli_env(tmp_path, catalog)
    proc = runlane("catalog", "check", "catalog.yaml", env=env, cwd=tmp_path)
    return proc.returncode, proc.stderr.splitlines()


def test_a_job_listening_for_one_key_twice_is_a_catalog_error(tmp_path: Path) -> None:
    assert check(tmp_path, LISTENS_TWICE) == (1, [
        "catalog.yaml:6:36: job 'ev' listens for event key 'k.dup' twice (on_event[0] and "
        "on_event[1]), so each such event would start it twice: keep one",
        "error: catalog.yaml: 1 error",
    ])

