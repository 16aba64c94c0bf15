"""Too-large values in the catalog: every duration is at most 100 years and the whole numbers
have an upper bound, so a typo such as `99999999d` is a `FILE:LINE:COL` problem at load time
instead of an OverflowError when a run is written or planned."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from runlane.catalog import load_catalog, parse_catalog_text
from runlane.core.durations import MAX_DURATION_SECONDS, format_duration, parse_duration
from runlane.errors import CatalogError

LIMIT = "36500d (100 years)"
JOB = "jobs:\n  a:\n    command: [echo, hi]\n"


def _problems(text: str, filename: str = "catalog.yaml") -> list[str]:
    with pytest.raises(CatalogError) as info:
        parse_catalog_text(text, filename)
    return info.value.problems


# Every duration field of the catalog, written too large, and where the loader must point.
TOO_LONG = [
    ("global: {manual_queue_ttl: 99999999d}\n", "2:28", "global.manual_queue_ttl"),
    ("global: {max_deadline: 99999999d}\n", "2:24", "global.max_deadline"),
    ("global: {start_timeout: 99999999d}\n", "2:25", "global.start_timeout"),
    ("global: {kill_grace: 99999999d}\n", "2:22", "global.kill_grace"),
    ("defaults: {deadline: 99999999d}\n", "2:22", "defaults.deadline"),
    ("defaults: {kill_grace: 99999999d}\n", "2:24", "defaults.kill_grace"),
    (f"{JOB}    deadline: 99999999d\n", "5:15", "jobs.a.deadline"),
    (f"{JOB}    kill_grace: 99999999d\n", "5:17", "jobs.a.kill_grace"),
    (
        f'{JOB}    schedules: [{{cron: "0 * * * *", catch_up: 99999999d}}]\n',
        "5:47",
        "jobs.a.schedules[0].catch_up",
    ),
    (
        f"{JOB}    on_event: [{{key: k, debounce: 99999999d}}]\n",
        "5:35",
        "jobs.a.on_event[0].debounce",
    ),
    (
        f"{JOB}chains:\n  c:\n    max_duration: 99999999d\n    steps: {{a: {{}}}}\n",
        "7:19",
        "chains.c.max_duration",
    ),
    (
        f'{JOB}chains:\n  c:\n    schedule: {{cron: "0 * * * *", catch_up: 99999999d}}\n'
        "    steps: {a: {}}\n",
        "7:45",
        "chains.c.schedule.catch_up",
    ),
]


@pytest.mark.parametrize(("body", "where", "field"), TOO_LONG, ids=[t[2] for t in TOO_LONG])
def test_every_duration_field_refuses_more_than_the_limit(
    body: str, where: str, field: str
) -> None:
    problems = _problems(f"version: 1\n{body}")
    assert problems == [
        f"catalog.yaml:{where}: {field}: a duration cannot be longer than {LIMIT}, got '99999999d'"
    ]


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("99999999999999999999", "99999999999999999999"),  # a bare number of seconds
        ("1.0e+999", "inf"),  # YAML reads it as infinity
        (".inf", "inf"),
        ("9" * 400 + "s", "'" + "9" * 38),  # digits float() turns into infinity
        ("36501d", "'36501d'"),
        ("5215w", "'5215w'"),
    ],
)
def test_huge_and_infinite_numbers_are_too_long(value: str, shown: str) -> None:
    (problem,) = _problems(f"version: 1\nglobal: {{kill_grace: {value}}}\n")
    assert problem.startswith(
        f"catalog.yaml:2:22: global.kill_grace: a duration cannot be longer than {LIMIT}, got {shown}"
    )


def test_nan_is_not_a_duration() -> None:
    assert _problems("version: 1\nglobal: {kill_grace: .nan}\n") == [
        "catalog.yaml:2:22: global.kill_grace: expected a duration such as 30s, 10m, 2h or 1d, got nan"
    ]


def test_a_too_long_deadline_is_not_also_compared_with_max_deadline() -> None:
    problems = _problems(f"version: 1\n{JOB}    deadline: 1.0e+999\n")
    assert problems == [
        f"catalog.yaml:5:15: jobs.a.deadline: a duration cannot be longer than {LIMIT}, got inf"
    ]


def test_the_limits_themselves_are_accepted_and_no_more() -> None:
    at_limit = (
        "version: 1\n"
        "global: {manual_queue_ttl: 36500d, max_deadline: 36500d, start_timeout: 36500d,"
        " kill_grace: 36500d, max_concurrent_pods: 10000}\n"
        "defaults: {deadline: 36500d, max_attempts: 1000}\n"
        f"{JOB}    on_event: [{{key: k, debounce: 36500d}}]\n"
    )
    job = parse_catalog_text(at_limit).resolve("a")
    assert job.deadline_seconds == job.queue_ttl_seconds == MAX_DURATION_SECONDS
    assert job.on_event[0].debounce == MAX_DURATION_SECONDS
    assert job.max_attempts == 1000
    over = (
        at_limit.replace("36500d", "36500d1ms").replace("10000", "10001").replace("1000}", "1001}")
    )
    assert len(_problems(over)) == 8


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (
            "defaults: {max_attempts: 99999999999999999999}\n",
            "catalog.yaml:2:26: defaults.max_attempts: must be at most 1000, "
            "got 99999999999999999999",
        ),
        (
            f"{JOB}    max_attempts: 1001\n",
            "catalog.yaml:5:19: jobs.a.max_attempts: must be at most 1000, got 1001",
        ),
        (
            "global: {max_concurrent_pods: 99999999999999999999}\n",
            "catalog.yaml:2:31: global.max_concurrent_pods: must be at most 10000, "
            "got 99999999999999999999",
        ),
    ],
)
def test_whole_numbers_have_an_upper_bound(body: str, problem: str) -> None:
    assert _problems(f"version: 1\n{body}") == [problem]


def test_too_large_values_are_reported_with_every_other_problem(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(
        "version: 1\n"
        "global: {manual_queue_ttl: 99999999d}\n"
        "jobs:\n"
        "  a:\n"
        "    command: [echo, hi]\n"
        "    deadline: -1s\n"
        "    on_event: [{key: k, debounce: 99999999d}]\n"
    )
    with pytest.raises(CatalogError) as info:
        load_catalog(path)
    problems = info.value.problems
    assert [p.split(": ")[0] for p in problems] == [f"{path}:2:28", f"{path}:6:15", f"{path}:7:35"]
    assert all("\n" not in p for p in problems)
    assert LIMIT in problems[0]
    assert LIMIT in problems[2]


# --- parse_duration itself --------------------------------------------------------------------


def test_parse_duration_enforces_a_maximum_only_when_given_one() -> None:
    assert parse_duration("99999999d") == 99999999 * 86400.0  # `now+…` flags check their range
    assert parse_duration("36500d", maximum=MAX_DURATION_SECONDS) == MAX_DURATION_SECONDS
    with pytest.raises(
        ValueError, match=r"cannot be longer than 36500d \(100 years\), got '36500d1s'"
    ):
        parse_duration("36500d1s", maximum=MAX_DURATION_SECONDS)
    with pytest.raises(ValueError, match=r"cannot be longer than 1h, got 3601"):
        parse_duration(3601, maximum=3600.0)


@pytest.mark.parametrize("number", [math.inf, 10**400, 1e300])
def test_parse_duration_refuses_numbers_beyond_the_maximum_without_overflow(number: float) -> None:
    with pytest.raises(ValueError, match="cannot be longer than"):
        parse_duration(number, maximum=MAX_DURATION_SECONDS)


def test_parse_duration_refuses_nan_even_without_a_maximum() -> None:
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration(math.nan)


def test_format_duration_never_raises_on_non_finite_numbers() -> None:
    assert format_duration(math.inf) == "inf"
    assert format_duration(math.nan) == "nan"
    assert format_duration(MAX_DURATION_SECONDS) == "36500d"


# --- ASCII digits only --------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["\u0663s", "\u0663", "1\u0660m", "\uff11h", "1.\u0665s"])
def test_a_duration_of_digits_that_are_not_ascii_is_refused_as_the_schema_refuses_it(
    value: str,
) -> None:
    # docs/catalog.schema.json's pattern (`\d` in JSON Schema is 0-9) refuses these: the
    # catalog must too, or a catalog an editor marks wrong loads, and means what Python reads.
    assert _problems(f'version: 1\nglobal: {{kill_grace: "{value}"}}\n') == [
        "catalog.yaml:2:22: global.kill_grace: expected a duration such as 30s, 10m, 2h or 1d, "
        f"got {value!r}"
    ]
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration(value)
