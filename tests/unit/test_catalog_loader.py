"""The catalog loader: every check reports FILE:LINE:COL, all problems at once, never a traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runlane.catalog import load_catalog, parse_catalog_text, starter_catalog_text
from runlane.errors import CatalogError

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "catalogs"
ERROR_FIXTURES = sorted((FIXTURES / "errors").glob("*.yaml"))
EXPECT = re.compile(r"^# expect: (\d+):(\d+): (.+)$")


def _problems(text: str, filename: str = "catalog.yaml") -> list[str]:
    with pytest.raises(CatalogError) as info:
        parse_catalog_text(text, filename)
    return info.value.problems


def test_there_is_a_fixture_for_every_error_kind() -> None:
    assert len(ERROR_FIXTURES) >= 15


@pytest.mark.parametrize("path", ERROR_FIXTURES, ids=lambda p: p.stem)
def test_error_fixture(path: Path) -> None:
    """Each fixture lists its problems as `# expect: LINE:COL: fragment` comments at the top."""
    expected = [
        (int(m[1]), int(m[2]), m[3])
        for line in path.read_text().splitlines()
        if (m := EXPECT.match(line))
    ]
    assert expected, f"{path.name} has no # expect: lines"
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    problems = info.value.problems
    name = str(path)
    assert info.value.message == f"{name}: {len(problems)} error{'s' if len(problems) != 1 else ''}"
    assert len(problems) == len(expected), "\n".join(problems)
    for line, col, fragment in expected:
        prefix = f"{name}:{line}:{col}: "
        matching = [p for p in problems if p.startswith(prefix) and fragment in p]
        assert matching, f"no problem {prefix}…{fragment}… in:\n" + "\n".join(problems)


def test_problems_are_sorted_by_position() -> None:
    path = FIXTURES / "many_errors.yaml"
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    positions = [tuple(int(n) for n in p.split(":")[1:3]) for p in info.value.problems]
    assert positions == sorted(positions)


def test_many_errors_are_all_reported_with_their_positions() -> None:
    with pytest.raises(CatalogError) as info:
        load_catalog(FIXTURES / "many_errors.yaml")
    got = [p.removeprefix(str(FIXTURES / "many_errors.yaml") + ":") for p in info.value.problems]
    assert got == [
        "1:10: unsupported catalog version 3; this runlane reads version 1",
        "3:17: global.max_deadline: expected a duration such as 30s, 10m, 2h or 1d, got 'soon'",
        "5:20: unknown field 'servceAccount' in profiles.core (did you mean 'serviceAccount'?)",
        "8:14: jobs.a.command: command must be an argv list, e.g. [python, -m, app]; "
        "runlane never runs a shell",
        "9:14: job 'a' uses unknown profile 'cor' (did you mean 'core'?)",
        "11:5: `fan_out` is reserved for a later version of runlane",
        "13:21: jobs.b.command[1]: every argv item must be a string (quote it), got 1",
        "14:24: jobs.b.schedules[0].cron: the minute field '61': 61 is out of range 0-59",
        "14:42: jobs.b.schedules[0].tz: unknown time zone 'Mars/Olympus'; use an IANA name such "
        "as UTC or America/Chicago",
        "15:19: jobs.b.max_attempts: must be at least 1, got 0",
        "16:3: duplicate key 'b' (first at line 12)",
        "17:3: job name 'Bad_Name' is not allowed: use lowercase letters, digits, '.', '_' and "
        "'-', starting with a letter or digit, at most 63 characters",
        "17:38: jobs.Bad_Name.executor: expected 'inline', 'pod' or 'slurm', got 'docker'",
        "20:45: chain 'c' uses unknown season 'regulr': none are defined under global.seasons",
        "22:19: chain 'c' has a dependency cycle: a → b → a",
        "23:37: step 'b' of chain 'c' waits for unknown step 'zz' (known: a, b, q)",
        "23:45: chains.c.steps.b.after[1].on: expected 'success' or 'finish', got 'maybe'",
        "24:16: step 'q' of chain 'c' runs unknown job 'nope' (known: Bad_Name, a, b)",
        "24:30: chains.c.steps.q.latest: latest must be a time of day as HH:MM (24-hour), "
        "got '25:00'",
    ]
    assert info.value.message.endswith(": 19 errors")
    # max_deadline itself is invalid, so job a's 3h deadline cannot be compared with it.
    assert not any("above global.max_deadline" in p for p in info.value.problems)


def test_missing_file_is_one_plain_problem(tmp_path: Path) -> None:
    with pytest.raises(CatalogError) as info:
        load_catalog(tmp_path / "catalog.yaml")
    name = str(tmp_path / "catalog.yaml")
    assert info.value.problems == [f"{name}: file not found"]
    assert str(info.value) == f"{name}: file not found"


def test_a_directory_is_a_plain_problem(tmp_path: Path) -> None:
    with pytest.raises(CatalogError) as info:
        load_catalog(tmp_path)
    assert info.value.problems[0].startswith(f"{tmp_path}: cannot read")


def test_non_utf8_file_is_reported_with_position(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_bytes(b"version: 1\njobs:\n  a: {command: [ech\xff]}\n")
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    assert info.value.problems == [f"{path}:3:20: the file is not UTF-8 text"]


def test_filename_appears_in_every_problem() -> None:
    problems = _problems("version: 1\njobs:\n  a: {}\n", filename="base/catalog.yaml")
    assert problems == ["base/catalog.yaml:3:6: missing required field 'command' in jobs.a"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "catalog.yaml:1:1: the catalog is empty; it needs at least `version: 1`"),
        ("# just a comment\n", "catalog.yaml:1:1: the catalog is empty"),
        ("---\n", "catalog.yaml:1:1: the catalog is empty"),
        ("# only a comment\n---\n...\n", "catalog.yaml:1:1: the catalog is empty"),
        ("~\n", "catalog.yaml:1:1: the catalog is empty"),
        ("- 1\n- 2\n", "catalog.yaml:1:1: the catalog must be a mapping"),
        ("version: 1\njobs: [a, b]\n", "catalog.yaml:2:7: jobs: expected a mapping of job names"),
        ("version: true\n", "catalog.yaml:1:10: version must be the number 1, got true"),
        ("version: 1\n---\nversion: 1\n", "catalog.yaml:2:1: YAML syntax error"),
        ("version: 1\nx: !!python/object:os.system {}\n", "catalog.yaml:2:4: unsupported YAML tag"),
        ("version: 1\nx: 2026-13-45\n", "catalog.yaml:2:4: x: cannot read this value"),
        (
            "version: 1\nglobal:\n  seasons: {s: {start: 2026-02-30, end: 2026-03-01}}\n",
            "catalog.yaml:3:24: global.seasons.s.start: cannot read this value: day is out of range",
        ),
        ("version: 1\na: &a [*a]\n", "recursive alias"),
        (
            "version: 1\njobs:\n  a: {command: [echo], params: [week]}\n",
            "jobs.a.params: expected a mapping",
        ),
        ("version: 1\n? [a]\n: b\n", "catalog.yaml:2:3: mapping keys must be plain names"),
    ],
)
def test_malformed_documents_are_plain_problems(text: str, problem: str) -> None:
    problems = _problems(text)
    assert any(p.startswith(problem) or problem in p for p in problems), problems


def test_alias_bomb_is_refused_quickly() -> None:
    lines = ["version: 1", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    problems = _problems("\n".join(lines) + "\n")
    assert problems == ["catalog.yaml:1:1: aliases expand the document far beyond any real catalog"]


def test_a_huge_catalog_without_aliases_is_called_too_large_not_an_alias_bomb() -> None:
    jobs = "".join(f"  j{i}: {{command: [a, b, c, d, e]}}\n" for i in range(30_000))
    problems = _problems("version: 1\njobs:\n" + jobs)
    assert len(problems) == 1, problems[:3]
    assert problems[0].startswith("catalog.yaml:1:1: the catalog is too large: more than 200,000")


def test_deeply_nested_document_is_a_plain_problem() -> None:
    text = "version: 1\nx: " + "[" * 5000 + "]" * 5000 + "\n"
    problems = _problems(text)
    assert len(problems) == 1


def _long_chain(steps: int, *, closed: bool) -> str:
    """A chain of `steps` steps listed from the last to run to the first (each runs after the
    one listed below it); `closed`: the first also runs after the last, a cycle."""
    lines = ["version: 1", "jobs:", "  j: {command: [echo]}", "chains:", "  c:", "    steps:"]
    for i in range(steps - 1):
        lines.append(f"      s{i}: {{job: j, after: [{{step: s{i + 1}}}]}}")
    last = "{job: j, after: [{step: s0}]}" if closed else "{job: j}"
    lines.append(f"      s{steps - 1}: {last}")
    return "\n".join(lines) + "\n"


def test_a_long_chain_listed_last_step_first_loads() -> None:
    """The cycle check walks the steps without recursion: a chain of thousands of steps is a
    good catalog (not "nested too deeply"), and a cycle through all of them is still found."""
    catalog = parse_catalog_text(_long_chain(3000, closed=False))
    assert len(catalog.chains["c"].steps) == 3000
    problems = _problems(_long_chain(3000, closed=True))
    assert len(problems) == 1, problems[:3]
    assert "chain 'c' has a dependency cycle: s0 → s2999 → s2998" in problems[0]


def test_yaml_1_1_pitfalls_are_avoided() -> None:
    catalog = parse_catalog_text(
        """
version: 1
jobs:
  a: {command: [echo]}
  b: {command: [echo]}
chains:
  c:
    steps:
      a: {}
      b: {after: [{step: a, on: finish}], latest: 19:15}
"""
    )
    step = catalog.chains["c"].steps["b"]
    assert step.after[0].on == "finish"  # `on:` is a key, not YAML 1.1's boolean true
    assert step.latest == "19:15"  # not base-60 1155
    assert step.latest_time is not None
    assert (step.latest_time.hour, step.latest_time.minute) == (19, 15)


def test_flow_mapping_optional_params_parse() -> None:
    catalog = parse_catalog_text(
        "version: 1\njobs:\n  a: {command: [echo], params: {week: int?, dry_run: bool?}}\n"
    )
    params = catalog.resolve("a").params
    assert str(params["week"]) == "int?"
    assert params["dry_run"].optional


def test_merge_keys_work_and_own_keys_win() -> None:
    catalog = parse_catalog_text(
        """
version: 1
jobs:
  base: &base {command: [echo, base], max_attempts: 2, alert: info}
  child:
    <<: *base
    command: [echo, child]
"""
    )
    child = catalog.resolve("child")
    assert child.command == ("echo", "child")
    assert child.max_attempts == 2
    assert child.alert == "info"


def test_empty_sections_are_allowed() -> None:
    catalog = parse_catalog_text("version: 1\nglobal:\nprofiles:\ndefaults:\njobs:\nchains:\n")
    assert catalog.job_names() == []


def test_seed_catalog_from_the_adr_loads() -> None:
    catalog = load_catalog(FIXTURES / "valid" / "adr_seed.yaml")
    assert catalog.global_.max_concurrent_pods == 2
    assert catalog.profiles["worker"].service_account == "fantasy-browser-worker"
    chain = catalog.chains["tuesday-weekly"]
    assert chain.schedule is not None
    assert chain.schedule.seasons == ["regular", "playoffs"]
    assert chain.max_duration == 8 * 3600
    assert chain.steps["lineup-optimizer"].latest == "19:15"
    assert chain.steps["sync-league"].job == "sync-league"


def test_example_catalog_loads_clean_and_uses_every_field() -> None:
    catalog = load_catalog(ROOT / "examples" / "catalog.yaml")
    worker = catalog.profiles["worker"]
    assert [v.name for v in worker.volumes] == ["espn-session-state", "cache", "creds"]
    assert worker.volumes[0].pvc == "espn-session-state"
    assert worker.volumes[0].effective_mount_path == "/mnt/espn-session-state"
    assert worker.volumes[1].config_map == "worker-cache"
    assert worker.volumes[1].read_only
    assert worker.node_selector == {"kubernetes.io/arch": "amd64"}
    assert worker.scratch == "2Gi"
    assert catalog.profiles["core"].scratch is None
    assert catalog.profiles["core"].resources.requests == {"cpu": "100m", "memory": "256Mi"}
    assert set(catalog.global_.seasons) == {"regular", "playoffs"}
    steps = catalog.chains["tuesday-weekly"].steps
    assert steps["metrics"].job == "metrics-extractor"
    assert {d.on for d in steps["lineup-optimizer"].after} == {"finish"}
    assert steps["lineup-optimizer"].latest == "19:15"
    assert catalog.resolve("report-cluster").executor == "slurm"


def test_starter_catalog_loads_clean_with_inline_jobs() -> None:
    catalog = parse_catalog_text(starter_catalog_text(), "starter.yaml")
    assert len(catalog.job_names()) >= 2
    jobs = [catalog.resolve(n) for n in catalog.job_names()]
    assert all(j.executor == "inline" for j in jobs)
    assert any(j.params for j in jobs)
    assert any(j.schedules for j in jobs)
    assert all(j.command[0] in ("echo", "python3", "sleep", "true") for j in jobs)
    assert all(j.command[:2] != ("sh", "-c") for j in jobs)


# --------------------------------------------------------------------------------------------
# Fuzzing: anything at all yields a Catalog or a CatalogError with well-formed problems.

_PROBLEM = re.compile(r"^catalog\.yaml:\d+:\d+: \S")
SAMPLE = (ROOT / "examples" / "catalog.yaml").read_text()


def _assert_catalog_or_error(text: str) -> None:
    problems: list[str] | None = None
    try:
        parse_catalog_text(text)
    except CatalogError as exc:
        problems = exc.problems
    if problems is not None:
        assert problems
        for problem in problems:
            assert _PROBLEM.match(problem), problem
            assert "\n" not in problem


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_random_text_never_crashes(text: str) -> None:
    _assert_catalog_or_error(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.integers(0, len(SAMPLE)),
            st.integers(0, 12),
            st.text(alphabet=" \n:-[]{},#&*!|>'\"?abc019", max_size=6),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_mutated_sample_never_crashes(edits: list[tuple[int, int, str]]) -> None:
    text = SAMPLE
    for pos, cut, insert in edits:
        text = text[:pos] + insert + text[pos + cut :]
    _assert_catalog_or_error(text)


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
        ),
        max_leaves=12,
    ),
    st.sampled_from(["jobs", "global", "profiles", "defaults", "chains", "version"]),
)
def test_random_structures_in_sections_never_crash(value: object, section: str) -> None:
    import json

    text = f"version: 1\n{section}: {json.dumps(value)}\n"
    _assert_catalog_or_error(text)


def test_a_nul_byte_in_a_command_or_env_is_a_catalog_error() -> None:
    # No process can be given a NUL in an argument or the environment: each run of such a job
    # used to fail at launch (a permanent executor error) after the catalog passed its check.
    text = (
        "version: 1\n"
        "profiles:\n"
        '  p: {env: {PROFILE_VAR: "a\\0b"}}\n'
        "jobs:\n"
        "  a:\n"
        '    command: [echo, "a\\0b"]\n'
        '    env: {GOOD: ok, BAD: "x\\0y", SURROGATE: "\\ud800"}\n'
    )
    assert _problems(text) == [
        "catalog.yaml:3:26: profiles.p.env.PROFILE_VAR: a NUL byte (\\0) cannot be passed to a "
        "process, got 'a\\x00b'",
        "catalog.yaml:6:21: jobs.a.command[1]: a NUL byte (\\0) cannot be passed to a process, "
        "got 'a\\x00b'",
        "catalog.yaml:7:26: jobs.a.env.BAD: a NUL byte (\\0) cannot be passed to a process, "
        "got 'x\\x00y'",
        "catalog.yaml:7:45: jobs.a.env.SURROGATE: a lone surrogate ('\\ud800') cannot be passed "
        "to a process, got '\\ud800'",
    ]
