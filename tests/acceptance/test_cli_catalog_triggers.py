"""`runlane catalog check` against catalogs whose triggers could not work as written: a job
that listens for one event key twice, a job with required params that a schedule, an event or
a chain step would start (none of them passes params). Reported as `FILE:LINE:COL: message`, exit 1, like every
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
    assert check(tmp_path, LISTENS_TWICE) == (
        1,
        [
            "catalog.yaml:6:36: job 'ev' listens for event key 'k.dup' twice (on_event[0] and "
            "on_event[1]), so each such event would start it twice: keep one",
            "error: catalog.yaml: 1 error",
        ],
    )


REQUIRED_PARAMS = """\
version: 1
defaults: {executor: inline}
jobs:
  scheduled: {command: ["true"], params: {week: int}, schedules: [{cron: "0 * * * *"}]}
  listening: {command: ["true"], params: {week: int}, on_event: [{key: k}]}
  stepped: {command: ["true"], params: {week: int, team: str, note: str?}}
  by-hand: {command: ["true"], params: {week: int}}
chains:
  c: {steps: {stepped: {}}}
"""


def test_a_job_with_required_params_that_a_trigger_starts_is_a_catalog_error(
    tmp_path: Path,
) -> None:
    """Each trigger is named where it is written, with the params and the fix; a job with
    required params that only a person starts is fine."""
    assert check(tmp_path, REQUIRED_PARAMS) == (
        1,
        [
            "catalog.yaml:4:55: job 'scheduled' has required param 'week' (int), but its schedules start "
            "it with no params: make it optional (week: int?)",
            "catalog.yaml:5:55: job 'listening' has required param 'week' (int), but its on_event "
            "listeners start it with no params (event data is not params): make it optional "
            "(week: int?)",
            "catalog.yaml:9:15: step 'stepped' of chain 'c' runs job 'stepped', which has required params "
            "'week' (int), 'team' (str), but a chain step starts it with no params: make them "
            "optional (week: int?, team: str?)",
            "error: catalog.yaml: 3 errors",
        ],
    )
    fixed = REQUIRED_PARAMS.replace("week: int", "week: int?").replace("team: str,", "team: str?,")
    assert check(tmp_path, fixed) == (0, [])
