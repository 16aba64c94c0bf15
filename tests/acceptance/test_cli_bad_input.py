"""Bad input as a person types it: one plain line on stderr saying what and where, exit 2 for bad
flags and params (1 for other failures), never a traceback, and nothing written to the database.
Real processes on SQLite; the values PostgreSQL refuses are also tried there when it is reachable."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import psycopg
import pytest

from runlane.catalog import load_catalog
from runlane.core.runs import AcceptResult, Trigger
from runlane.errors import ParamError
from runlane.ports import RunFilter
from runlane.service.accept import RunRequest, accept_run
from runlane.service.events import BadEvent, emit_event
from runlane.service.wiring import store_from_url

CATALOG = """
version: 1
defaults: {executor: inline, overlap: allow, max_attempts: 1, deadline: 1m}
jobs:
  ok:
    command: [echo, hi]
    schedules: [{cron: "0 * * * *"}]
    on_event: [{key: k}]
  echo:
    command: [echo, hi]
    params: {s: str?}
  single:
    command: [echo, hi]
    overlap: forbid
chains:
  pair:
    steps:
      first: {job: ok}
      second: {job: echo, after: [{step: first, on: success}]}
"""

PG_URL = os.environ.get("RUNLANE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def runlane(*args: str | bytes, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "runlane", *args],
        env=env,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=60,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout, proc.stdout
    return proc


def one_error_line(proc: subprocess.CompletedProcess[str], *fragments: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: "), proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    e = dict(os.environ)
    e.update(
        RUNLANE_DATABASE_URL=f"sqlite:///{tmp_path / 's.db'}",
        RUNLANE_CATALOG=str(tmp_path / "catalog.yaml"),
        RUNLANE_LOG_DIR=str(tmp_path / "logs"),
        RUNLANE_LOG_LEVEL="warning",
    )
    assert runlane("db", "upgrade", env=e).returncode == 0
    return e


def written(tmp_path: Path) -> dict[str, int]:
    with sqlite3.connect(tmp_path / "s.db") as conn:
        return {
            table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("run_log", "events", "job_overrides", "chain_runs")
        }


NOTHING = {"run_log": 0, "events": 0, "job_overrides": 0, "chain_runs": 0}


# ------------------------------------------------------------------ times, durations, ranges

BAD_TIMES: list[tuple[Sequence[str], str]] = [
    (["pause", "ok", "--until", "99999999d"], "--until '99999999d'"),
    (["pause", "ok", "--until", "9999999999999999999999s"], "--until"),
    (["pause", "ok", "--until", "soon"], "--until 'soon'"),
    (["pause", "ok", "--until", "0s"], "longer than zero"),
    (["pause", "ok", "--until", "2020-01-01T00:00Z"], "in the past"),
    (["pause", "ok", "--until", "now-1h"], "--until 'now-1h' is in the past"),
    (["pause", "ok", "--until", "now"], "--until 'now' is in the past"),
    (["pause", "ok", "--until", "now+1x"], "--until 'now+1x'"),
    (["pause", "ok", "--until", ""], "--until is empty"),
    (["pause", "ok", "--until", "9999-12-31T23:59Z"], "between 1970-01-01 and 3000-01-01"),
    (["schedule", "--from", "0001-01-01", "--to", "9999-12-31"], "--from '0001-01-01'"),
    (["schedule", "--from", "9999-12-31T23:59Z"], "--from '9999-12-31T23:59Z'"),
    (["schedule", "--from", "now+99999999d"], "--from 'now+99999999d'"),
    (["schedule", "--from", "bogus"], "--from 'bogus' is not a time"),
    (["schedule", "--to", "now+1x"], "--to 'now+1x'"),
    (["runs", "--since", "now-1h", "--until", "now-2h"], "--until 'now-2h' is not after"),
    (["schedule", "--days", "nan"], "--days nan"),
    (["schedule", "--days", "inf"], "--days inf"),
    (["schedule", "--days", "1e12"], "at most 3660 days"),
    (["schedule", "--days", "-3"], "--days -3: expected a number of days greater than zero"),
    (["schedule", "--days", "0"], "--days 0: expected a number of days greater than zero"),
    (["schedule", "--days", "3661"], "--days 3661: at most 3660 days"),
    (["schedule", "--from", "2026-12-01T00:00Z", "--to", "2026-11-01T00:00Z"], "is not after"),
    (["schedule", "--from", "2026-12-01T00:00Z", "--to", "2026-12-01T00:00Z"], "is not after"),
    (["schedule", "--format", "html"], "--format 'html'"),
    (["explain", "ok", "--at", "0001-01-01"], "--at '0001-01-01'"),
    (["explain", "ok", "--at", "bogus"], "--at 'bogus' is not a time"),
]


@pytest.mark.parametrize(
    ("args", "fragment"), BAD_TIMES, ids=lambda v: " ".join(v) if isinstance(v, list) else None
)
def test_bad_times_and_ranges_are_one_line_and_exit_2(
    env: dict[str, str], tmp_path: Path, args: list[str], fragment: str
) -> None:
    proc = runlane(*args, env=env)
    one_error_line(proc, fragment)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert written(tmp_path) == NOTHING


def test_good_times_still_work(env: dict[str, str], tmp_path: Path) -> None:
    ok = runlane("pause", "ok", "--until", "2h", env=env)
    assert ok.returncode == 0, ok.stderr
    assert "paused ok until" in ok.stdout
    assert runlane("resume", "ok", env=env).returncode == 0
    table = runlane("schedule", "--from", "2027-01-19T00:00Z", "--days", "1", "--json", env=env)
    assert table.returncode == 0, table.stderr
    assert len(json.loads(table.stdout)) == 24
    at = runlane("explain", "ok", "--at", "now-1h", env=env)
    assert at.returncode == 0, at.stderr


# ------------------------------------------------------------------ emit --data


def nested(depth: int) -> str:
    return '{"a":' + "[" * depth + "]" * depth + "}"


BAD_DATA: list[tuple[str, str]] = [
    (nested(50_000), "nested 50001 levels deep; the limit is 64"),
    (nested(64), "nested 65 levels deep"),
    ('{"a": NaN}', "NaN is not allowed"),
    ('{"a": [Infinity]}', "Infinity is not allowed"),
    ('{"a": -Infinity}', "-Infinity is not allowed"),
    ('{"a": "x\\u0000y"}', "event data.a contains U+0000"),
    ('{"a": {"b": ["\\ud800"]}}', "event data.a.b[0] is not valid UTF-8"),
    ('{"\\u0000": 1}', "a key in event data contains U+0000"),
    ("[1]", "must be a JSON object"),
    ("{", "--data is not JSON"),
    # Python's own advice (sys.set_int_max_str_digits) is no use to a person.
    ('{"n": ' + "1" * 5000 + "}", "--data holds a whole number of more than 4300 digits"),
]


@pytest.mark.parametrize(
    ("data", "fragment"), BAD_DATA, ids=lambda v: v[:30] if isinstance(v, str) else None
)
def test_bad_event_data_is_refused_before_anything_is_written(
    env: dict[str, str], tmp_path: Path, data: str, fragment: str
) -> None:
    proc = runlane("emit", "k", "--data", data, env=env)
    one_error_line(proc, fragment)
    assert proc.returncode == 2
    assert written(tmp_path) == NOTHING


def test_good_event_data_still_works(env: dict[str, str], tmp_path: Path) -> None:
    proc = runlane("emit", "k", "--data", nested(60), env=env)
    assert proc.returncode == 0, proc.stderr
    assert written(tmp_path)["events"] == 1


# ------------------------------------------------------------------ bytes that are not UTF-8


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ([b"run", b"echo", b"-p", b"s=\xff\xfe"], "-p 's=\\xff\\xfe' is not valid UTF-8"),
        ([b"pause", b"ok", b"--reason", b"\xff"], "--reason '\\xff' is not valid UTF-8"),
        ([b"emit", b"k.y", b"--id", b"\xff"], "--id '\\xff' is not valid UTF-8"),
        ([b"emit", b"k", b"--data=" + b'{"a": "\xff"}'], "--data"),
        ([b"run", b"\xffjob"], "argument 2 '\\xffjob' is not valid UTF-8"),
    ],
)
def test_arguments_that_are_not_utf8_are_refused(
    env: dict[str, str], tmp_path: Path, args: list[bytes], fragment: str
) -> None:
    proc = runlane(*args, env=env)
    one_error_line(proc, fragment)
    assert proc.returncode == 2
    assert written(tmp_path) == NOTHING


def test_a_user_name_that_is_not_utf8_is_recorded_with_escapes(env: dict[str, str]) -> None:
    """$USER names who asks for a run; its bytes that are not UTF-8 (a Latin-1 login name) are
    recorded as escapes (`\\xe9`), as a refused argument shows them, not a traceback."""
    proc = runlane("run", "echo", "--json", env={**env, "USER": "jos\udce9"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["requested_by"] == "jos\\xe9"


def test_a_chain_run_is_requested_by_the_user_as_a_run_is(env: dict[str, str]) -> None:
    """`$USER` names who asks, for `chain run` as for `run` (docs/architecture.md)."""
    started = runlane("chain", "run", "pair", "--json", env={**env, "USER": "alice"})
    assert started.returncode == 0, started.stderr
    listed = runlane("runs", "--job", "ok", "--json", env=env)
    assert [r["requested_by"] for r in json.loads(listed.stdout)] == ["alice"]


# ------------------------------------------------------------------ files


def test_init_and_docs_generate_report_file_problems_in_one_line(
    tmp_path: Path, env: dict[str, str]
) -> None:
    a_file = tmp_path / "x" / "catalog.yaml"
    a_file.parent.mkdir()
    a_file.write_text("")
    proc = runlane("init", str(a_file), env=env)
    one_error_line(proc, f"{a_file} is not a directory")
    assert proc.returncode == 2

    proc = runlane("init", "/proc/nope", env=env)
    one_error_line(proc, "cannot create directory /proc/nope")
    assert proc.returncode == 1

    (tmp_path / "d" / "catalog.yaml").mkdir(parents=True)
    proc = runlane("init", str(tmp_path / "d"), "--force", env=env)
    one_error_line(proc, "catalog.yaml is a directory")
    assert proc.returncode == 2

    proc = runlane("docs", "generate", str(a_file), env=env)
    one_error_line(proc, f"{a_file} is not a directory")
    assert proc.returncode == 2


# ------------------------------------------------------------------ exit codes, messages, --json


def test_unknown_chain_exits_2_like_an_unknown_job(env: dict[str, str], tmp_path: Path) -> None:
    chain = runlane("chain", "run", "nosuch", env=env)
    one_error_line(chain, "unknown chain 'nosuch'", "pair")
    assert chain.returncode == 2
    job = runlane("run", "nosuch", env=env)
    one_error_line(job, "unknown job 'nosuch'")
    assert job.returncode == 2
    assert written(tmp_path) == NOTHING


def test_missing_catalog_is_said_once(env: dict[str, str], tmp_path: Path) -> None:
    proc = runlane("jobs", "--catalog", str(tmp_path / "missing.yaml"), env=env)
    one_error_line(proc, "missing.yaml: file not found")
    assert proc.returncode == 1


def test_run_id_prefixes_ignore_case_and_say_when_too_short(env: dict[str, str]) -> None:
    queued = runlane("run", "echo", "--json", env=env)
    run_id = json.loads(queued.stdout)["id"]
    for given in (run_id[:8].upper(), run_id.upper(), f"  {run_id[:6]} "):
        shown = runlane("runs", "show", given, "--json", env=env)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["id"] == run_id
    short = runlane("runs", "show", run_id[:2], env=env)
    one_error_line(short, "too short", "at least 6 characters")
    assert short.returncode == 2
    chain = runlane("chain", "show", "12", env=env)
    one_error_line(chain, "chain run id prefix '12' is too short")
    assert chain.returncode == 2


def test_unknown_ids_are_quoted_as_typed(env: dict[str, str]) -> None:
    for args in (
        ["runs", "show", "c5145cXYZ"],
        ["runs", "c5145cXYZ"],
        ["cancel", "c5145cXYZ"],
        ["logs", "c5145cXYZ"],
    ):
        proc = runlane(*args, env=env)
        one_error_line(proc, "no run with id 'c5145cXYZ'")
        assert proc.returncode == 1
    chain = runlane("chain", "show", "ABCDEF12", env=env)
    one_error_line(chain, "no chain run with id 'ABCDEF12'")


def test_runs_id_is_runs_show_id(env: dict[str, str]) -> None:
    run_id = json.loads(runlane("run", "echo", "--json", env=env).stdout)["id"]
    shown = runlane("runs", "show", run_id[:8], env=env)
    assert shown.returncode == 0, shown.stderr
    one = runlane("runs", run_id[:8], env=env)
    assert one.returncode == 0, one.stderr
    assert one.stdout == shown.stdout
    assert run_id in one.stdout
    as_json = runlane("runs", run_id[:8].upper(), "--json", env=env)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == json.loads(
        runlane("runs", "show", run_id, "--json", env=env).stdout
    )
    # The list's filters do not apply to one run: refused, not silently ignored.
    filtered = runlane("runs", run_id[:8], "--job", "echo", env=env)
    one_error_line(filtered, "--job", "show run")
    assert filtered.returncode == 2
    # The list itself is unchanged.
    assert [r["id"] for r in json.loads(runlane("runs", "--json", env=env).stdout)] == [run_id]
    assert "[ID]" in runlane("runs", "--help", env=env).stdout


def test_runs_show_usage_names_runs_show(env: dict[str, str]) -> None:
    helped = runlane("runs", "show", "--help", env=env)
    assert helped.returncode == 0
    assert "Usage: runlane runs show [OPTIONS] " in helped.stdout, helped.stdout
    assert "runlane show" not in helped.stdout
    missing = runlane("runs", "show", env=env)
    assert missing.returncode == 2
    assert "Usage: runlane runs show [OPTIONS] " in missing.stderr, missing.stderr
    assert "runlane show" not in missing.stderr


def test_catalog_check_summary_counts_in_words(env: dict[str, str]) -> None:
    proc = runlane("catalog", "check", env=env)
    assert proc.returncode == 0, proc.stderr
    # 3 jobs, 1 chain, 1 schedule (the `ok` job's cron): singular where there is one.
    assert proc.stdout.strip() == f"{env['RUNLANE_CATALOG']}: ok — 3 jobs, 1 chain, 1 schedule"


def test_catalog_check_takes_the_file_as_an_argument(env: dict[str, str], tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text("version: 1\njobs:\n  solo: {command: [echo]}\n")
    positional = runlane("catalog", "check", str(other), env=env)
    assert positional.returncode == 0, positional.stderr
    assert positional.stdout.strip() == f"{other}: ok — 1 job, 0 chains, 0 schedules"
    flag = runlane("catalog", "check", "--catalog", str(other), env=env)
    assert flag.stdout == positional.stdout
    both = runlane("catalog", "check", str(other), "--catalog", str(other), env=env)
    one_error_line(both, "--catalog", "give one")
    assert both.returncode == 2
    both_json = runlane("catalog", "check", str(other), "--catalog", str(other), "--json", env=env)
    assert both_json.returncode == 2
    assert json.loads(both_json.stdout)["error"] == "invalid_argument"


def test_catalog_check_of_a_missing_file_is_one_line(env: dict[str, str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    for args in (["--catalog", str(missing)], [str(missing)]):
        proc = runlane("catalog", "check", *args, env=env)
        assert one_error_line(proc) == f"error: {missing}: file not found"
        assert proc.returncode == 1
        assert proc.stdout == ""


@pytest.mark.parametrize(
    ("args", "code", "error"),
    [
        (["run", "nosuch", "--json"], 2, "unknown_job"),
        (["run", "echo", "-p", "x=1", "--json"], 2, "param_invalid"),
        (["run", "echo", "-p", "novalue", "--json"], 2, "invalid_argument"),
        (["runs", "show", "abcdef", "--json"], 1, "unknown_run"),
        (["runs", "show", "ab", "--json"], 2, "invalid_argument"),
        (["cancel", "abcdef", "--json"], 1, "unknown_run"),
        (["chain", "run", "nosuch", "--json"], 2, "unknown_chain"),
        (["emit", "k", "--data", "[]", "--json"], 2, "invalid_argument"),
        (["emit", "two words", "--json"], 2, "bad_event"),
        # Data that cannot be recorded is `bad_event`, as the API and MCP say of it.
        (["emit", "k", "--data", '{"a": NaN}', "--json"], 2, "bad_event"),
        (["emit", "k", "--data", nested(64), "--json"], 2, "bad_event"),
        (["schedule", "--days", "0", "--json"], 2, "invalid_argument"),
        (["explain", "nosuch", "--json"], 2, "unknown_job"),
        (["jobs", "--json", "--catalog", "/nonexistent/c.yaml"], 1, "catalog_invalid"),
    ],
)
def test_every_refusal_under_json_prints_an_error_object(
    env: dict[str, str], args: list[str], code: int, error: str
) -> None:
    proc = runlane(*args, env=env)
    assert proc.returncode == code, proc.stderr
    one_error_line(proc)
    data = json.loads(proc.stdout)
    assert data["error"] == error
    assert data["message"] == proc.stderr.strip().removeprefix("error: ")


def test_overlap_refusal_under_json_has_the_same_shape(env: dict[str, str]) -> None:
    first = runlane("run", "single", "--json", env=env)
    assert first.returncode == 0, first.stderr
    second = runlane("run", "single", "--json", env=env)
    assert second.returncode == 3
    one_error_line(second)
    data = json.loads(second.stdout)
    assert data["error"] == "overlap_refused"
    assert data["active_run_id"] == json.loads(first.stdout)["id"]


def test_bad_argument_bytes_under_json_print_an_error_object(env: dict[str, str]) -> None:
    proc = runlane(b"run", b"echo", b"-p", b"s=\xff", b"--json", env=env)
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"] == "invalid_argument"


# ------------------------------------------------------------------ the accept path, both databases


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'accept.db'}"
        return
    try:
        with psycopg.connect(PG_URL, connect_timeout=3):
            pass
    except psycopg.Error as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL is required in CI: {exc}")
        pytest.skip(f"PostgreSQL not reachable: {exc}")
    name = f"runlane_badinput_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # name is ours, not input
    yield f"{PG_URL.rsplit('/', 1)[0]}/{name}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("a\x00b", "param 's' contains U+0000"), ("a\ud800", "param 's' is not valid UTF-8")],
)
async def test_params_the_database_cannot_store_are_refused_at_the_accept_path(
    database_url: str, tmp_path: Path, value: str, fragment: str
) -> None:
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    catalog = load_catalog(tmp_path / "catalog.yaml")
    store = store_from_url(database_url)
    await store.open()
    try:
        await store.upgrade()
        for from_strings in (True, False):
            request = RunRequest(
                job="echo",
                trigger=Trigger.MANUAL,
                params={"s": value},
                params_from_strings=from_strings,
            )
            with pytest.raises(ParamError, match=re.escape(fragment)):
                await accept_run(store, catalog, request)
        assert await store.list_runs(RunFilter()) == []
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"a": "x" * (1024 * 1024)}, "event data is 1048584 bytes as JSON; the limit is 1048576"),
        ({"a": float("nan")}, "event data.a is nan"),
        ({"a": [[[[]]]] * 2, "b": "\x00"}, "event data.b contains U+0000"),
        ({"a": {1: 2}}, "event data.a has a key that is not a string"),
    ],
)
async def test_event_data_is_checked_for_every_trigger(
    database_url: str, tmp_path: Path, data: dict[str, object], fragment: str
) -> None:
    """The API and the SDK emit through `emit_event` too; `--data` cannot be this large (the
    kernel limits one argument to 128 KiB), so the 1 MiB limit is tried here."""
    (tmp_path / "catalog.yaml").write_text(CATALOG)
    catalog = load_catalog(tmp_path / "catalog.yaml")
    store = store_from_url(database_url)
    await store.open()
    try:
        await store.upgrade()

        async def accept(request: RunRequest) -> AcceptResult:
            return await accept_run(store, catalog, request)

        with pytest.raises(BadEvent, match=re.escape(fragment)):
            await emit_event(store, catalog, accept, "k", data)
        assert await store.list_runs(RunFilter()) == []
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ('{"a": NaN}', "NaN is not allowed"),
        ('{"a": "\\u0000"}', "event data.a contains U+0000"),
        ('{"a": "\\ud800"}', "event data.a is not valid UTF-8"),
    ],
)
def test_event_data_postgresql_refuses_is_refused_first(
    database_url: str, env: dict[str, str], data: str, fragment: str
) -> None:
    env = dict(env, RUNLANE_DATABASE_URL=database_url)
    assert runlane("db", "upgrade", env=env).returncode == 0
    proc = runlane("emit", "k", "--data", data, env=env)
    one_error_line(proc, fragment)
    assert proc.returncode == 2
    listed = runlane("runs", "--json", env=env)
    assert json.loads(listed.stdout) == []


def test_runs_filters_by_trigger_requester_and_queued_time(env: dict[str, str]) -> None:
    run = json.loads(runlane("run", "echo", "--json", env=env).stdout)

    def listed(*flags: str) -> list[str]:
        proc = runlane("runs", *flags, "--json", env=env)
        assert proc.returncode == 0, proc.stderr
        return [r["id"] for r in json.loads(proc.stdout)]

    assert listed("--trigger", run["trigger"], "--since", "now-1h") == [run["id"]]
    assert listed("--trigger", "schedule") == []
    assert listed("--until", "now-1h") == []
    assert listed("--requested-by", "nobody-asked") == []
    if run["requested_by"] is not None:
        assert listed("--requested-by", run["requested_by"], "-n", "1") == [run["id"]]
    filtered = runlane("runs", run["id"][:8], "--since", "now-1h", env=env)
    one_error_line(filtered, "--since", "show run")
    assert filtered.returncode == 2
    not_a_time = runlane("runs", "--since", "last week", env=env)
    one_error_line(not_a_time, "--since 'last week' is not a time")
    assert not_a_time.returncode == 2


@pytest.mark.parametrize(
    "args",
    [
        ["chains", "-n", "99999999999999999999"],
        ["chains", "-n", "0"],
        ["chains", "--limit", "-5"],
        ["chains", "-n", "10001"],
        ["runs", "--limit", "0"],
        ["runs", "-n", "99999999999999999999"],
    ],
    ids=" ".join,
)
def test_list_limits_out_of_range_are_one_line_and_exit_2(
    database_url: str, env: dict[str, str], args: list[str]
) -> None:
    """`chains -n` was passed to the database as it was: past a 64-bit integer a traceback
    (OverflowError on SQLite, NumericValueOutOfRange on PostgreSQL), and 0 or less `no chain
    runs yet` while chain runs existed. Both lists take 1 to 10000, as one plain line."""
    env = dict(env, RUNLANE_DATABASE_URL=database_url)
    assert runlane("db", "upgrade", env=env).returncode == 0
    assert runlane("chain", "run", "pair", env=env).returncode == 0
    proc = runlane(*args, env=env)
    one_error_line(
        proc,
        f"{args[1]} {args[2]}" if args[1] == "--limit" else args[2],
        "expected a whole number from 1 to 10000",
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    under_json = runlane(*args, "--json", env=env)
    assert under_json.returncode == 2
    assert json.loads(under_json.stdout)["error"] == "invalid_argument"
    assert len(json.loads(runlane(args[0], args[1], "10000", "--json", env=env).stdout)) == 1


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["runs", "--limit", "0"], "--limit 0: expected a whole number from 1 to 10000"),
        (["runs", "--status", "bogus"], "--status 'bogus': expected one of queued"),
        (["runs", "--trigger", "cron"], "--trigger 'cron': expected one of schedule"),
        (["chains", "-n", "0"], "--limit 0: expected a whole number from 1 to 10000"),
    ],
)
def test_a_bad_list_request_is_refused_before_the_database_is_opened(
    env: dict[str, str], tmp_path: Path, args: list[str], fragment: str
) -> None:
    """Exit 2 and the argument's own message, even where there is no database to open."""
    missing = dict(env, RUNLANE_DATABASE_URL=f"sqlite:///{tmp_path / 'none' / 'missing.db'}")
    proc = runlane(*args, env=missing)
    one_error_line(proc, fragment)
    assert proc.returncode == 2
    assert not (tmp_path / "none").exists()
