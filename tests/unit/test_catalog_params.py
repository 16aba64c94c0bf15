"""Param allowlists: the type syntax, and coercing CLI strings and JSON values against it."""

from __future__ import annotations

import re

import pytest

from runlane.catalog import (
    MAX_PARAMS_BYTES,
    ParamSpec,
    ResolvedJob,
    coerce_params,
    parse_catalog_text,
)
from runlane.errors import ParamError, PayloadTooLarge

CATALOG = parse_catalog_text(
    """
version: 1
jobs:
  lineup:
    command: [echo]
    params:
      week: int
      dry_run: bool?
      budget: float?
      note: str?
      mode: choice[fast,full]?
  plain: {command: [echo]}
  short: {command: [echo], params: {c: str?}}
"""
)
LINEUP = CATALOG.resolve("lineup")
PLAIN = CATALOG.resolve("plain")


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("int", ParamSpec("int")),
        ("int?", ParamSpec("int", optional=True)),
        (" float ? ", ParamSpec("float", optional=True)),
        ("bool", ParamSpec("bool")),
        ("str?", ParamSpec("str", optional=True)),
        ("choice[a,b,c]", ParamSpec("choice", choices=("a", "b", "c"))),
        ("choice[ a , b ]?", ParamSpec("choice", optional=True, choices=("a", "b"))),
    ],
)
def test_param_spec_syntax(text: str, spec: ParamSpec) -> None:
    assert ParamSpec.parse(text) == spec
    assert ParamSpec.parse(str(spec)) == spec


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("integer", "unknown param type 'integer'"),
        ("int??", "unknown param type"),
        ("choice[]", "empty choice"),
        ("choice[a,a]", "lists a choice twice"),
        (3, "must be a string"),
    ],
)
def test_bad_param_spec(text: object, fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        ParamSpec.parse(text)


def test_from_strings_parses_every_type() -> None:
    got = coerce_params(
        LINEUP.params,
        {
            "week": "-3",
            "dry_run": "YES",
            "budget": "2.5e1",
            "note": " keep spaces ",
            "mode": "full",
        },
        job_name=LINEUP.name,
        from_strings=True,
    )
    assert got == {
        "week": -3,
        "dry_run": True,
        "budget": 25.0,
        "note": " keep spaces ",
        "mode": "full",
    }
    assert type(got["budget"]) is float


@pytest.mark.parametrize(
    ("word", "value"),
    [("true", True), ("False", False), ("yes", True), ("NO", False), ("1", True), ("0", False)],
)
def test_bool_words(word: str, value: bool) -> None:
    assert (
        coerce_params(
            LINEUP.params, {"week": "1", "dry_run": word}, job_name=LINEUP.name, from_strings=True
        )["dry_run"]
        is value
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"week": "abc"}, "job 'lineup': param 'week' must be an int, got 'abc'"),
        ({"week": "1_000"}, "param 'week' must be an int, got '1_000'"),
        ({"week": "3.0"}, "param 'week' must be an int"),
        (
            {"week": "1", "dry_run": "maybe"},
            "param 'dry_run' must be a bool (true/false, yes/no, 1/0), got 'maybe'",
        ),
        ({"week": "1", "budget": "nan"}, "param 'budget' must be a float, got 'nan'"),
        ({"week": "1", "budget": "1e999"}, "param 'budget' must be a float"),
        ({"week": "1", "mode": "slow"}, "param 'mode' must be one of fast, full, got 'slow'"),
        ({}, "job 'lineup': missing required param 'week' (int)"),
        (
            {"wek": "1"},
            "unknown param 'wek' (did you mean 'week'?); allowed: week (int), dry_run (bool?)",
        ),
    ],
)
def test_from_strings_errors(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ParamError) as info:
        coerce_params(LINEUP.params, raw, job_name=LINEUP.name, from_strings=True)
    assert message in str(info.value)


def test_a_one_letter_param_in_the_wrong_case_gets_a_hint() -> None:
    with pytest.raises(ParamError) as info:
        coerce_params(
            CATALOG.resolve("short").params, {"C": "1"}, job_name="short", from_strings=True
        )
    assert "unknown param 'C' (did you mean 'c'?)" in str(info.value)


def test_all_problems_are_reported_together() -> None:
    with pytest.raises(ParamError) as info:
        coerce_params(
            LINEUP.params, {"wek": "1", "mode": "x"}, job_name=LINEUP.name, from_strings=True
        )
    text = str(info.value)
    assert "unknown param 'wek'" in text
    assert "param 'mode' must be one of fast, full" in text
    assert "missing required param 'week'" in text
    assert text.startswith("job 'lineup': ")


def test_a_job_without_params_refuses_any() -> None:
    assert coerce_params(PLAIN.params, {}, job_name=PLAIN.name, from_strings=True) == {}
    with pytest.raises(ParamError, match="unknown param 'x': this job takes no params"):
        coerce_params(PLAIN.params, {"x": "1"}, job_name=PLAIN.name, from_strings=True)


def test_json_values_must_have_the_json_type() -> None:
    got = coerce_params(
        LINEUP.params,
        {"week": 3, "dry_run": False, "budget": 2, "note": "n", "mode": "fast"},
        job_name=LINEUP.name,
        from_strings=False,
    )
    assert got == {"week": 3, "dry_run": False, "budget": 2.0, "note": "n", "mode": "fast"}
    assert type(got["budget"]) is float


def test_json_integral_float_is_an_int() -> None:
    assert coerce_params(
        LINEUP.params, {"week": 4.0}, job_name=LINEUP.name, from_strings=False
    ) == {"week": 4}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"week": True}, "param 'week' must be an int, got True"),
        ({"week": "3"}, "param 'week' must be an int, got '3'"),
        ({"week": 3.5}, "param 'week' must be an int, got 3.5"),
        ({"week": 1, "dry_run": "true"}, "param 'dry_run' must be a bool, got 'true'"),
        ({"week": 1, "dry_run": 1}, "param 'dry_run' must be a bool, got 1"),
        ({"week": 1, "budget": True}, "param 'budget' must be a float, got True"),
        ({"week": 1, "note": 5}, "param 'note' must be a string, got 5"),
        ({"week": 1, "mode": ["fast"]}, "param 'mode' must be one of fast, full, got ['fast']"),
        ({"week": None}, "missing required param 'week'"),
    ],
)
def test_json_errors(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ParamError) as info:
        coerce_params(LINEUP.params, raw, job_name=LINEUP.name, from_strings=False)
    assert message in str(info.value)


def test_a_whole_number_longer_than_python_reads_is_refused_in_one_line() -> None:
    # Python reads and writes at most 4300 digits (sys.get_int_max_str_digits): its own advice
    # (`use sys.set_int_max_str_digits()`) is no answer for a person starting a run.
    for raw, from_strings, got in [
        ("1" * 5000, True, "got one of 5000"),
        ("-" + "1" * 5000, True, "got one of 5000"),
        (10**5000, False, "got a longer one"),
    ]:
        with pytest.raises(ParamError) as info:
            coerce_params(
                LINEUP.params, {"week": raw}, job_name=LINEUP.name, from_strings=from_strings
            )
        assert str(info.value) == (
            f"job 'lineup': param 'week' must be an int of at most 4300 digits, {got}"
        )
    assert coerce_params(
        LINEUP.params, {"week": "9" * 4300}, job_name=LINEUP.name, from_strings=True
    ) == {"week": 10**4300 - 1}
    with pytest.raises(ParamError) as info:  # as a float: beyond any, not an OverflowError
        coerce_params(
            LINEUP.params, {"week": 1, "budget": 10**5000}, job_name=LINEUP.name, from_strings=False
        )
    assert "param 'budget' must be a float, got a number of more than 4300 digits" in str(
        info.value
    )


def test_json_null_leaves_an_optional_param_out() -> None:
    assert coerce_params(
        LINEUP.params, {"week": 1, "note": None}, job_name=LINEUP.name, from_strings=False
    ) == {"week": 1}


def test_params_larger_than_the_limit_are_refused_with_the_size() -> None:
    big = "x" * MAX_PARAMS_BYTES
    with pytest.raises(PayloadTooLarge) as info:
        coerce_params(
            LINEUP.params, {"week": "1", "note": big}, job_name=LINEUP.name, from_strings=True
        )
    size = len(f'{{"note":"{big}","week":1}}'.encode())
    assert f"params are {size} bytes" in str(info.value)
    assert "1 MiB" in str(info.value)


def test_params_just_under_the_limit_pass() -> None:
    overhead = len('{"note":"","week":1}')
    got = coerce_params(
        LINEUP.params,
        {"week": 1, "note": "x" * (MAX_PARAMS_BYTES - overhead)},
        job_name=LINEUP.name,
        from_strings=False,
    )
    assert len(got["note"]) == MAX_PARAMS_BYTES - overhead


def test_resolved_job_params_are_read_only() -> None:
    assert isinstance(LINEUP, ResolvedJob)
    with pytest.raises(TypeError):
        LINEUP.params["x"] = ParamSpec("int")  # type: ignore[index]
