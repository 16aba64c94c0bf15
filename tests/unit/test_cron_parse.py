"""Cron parsing: fields, aliases, names, ranges, steps, the day-of-month/day-of-week rule, errors."""

from __future__ import annotations

import re
from datetime import date, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runlane.core.cron import parse_cron


def test_five_fields_parse_to_sets_with_second_zero() -> None:
    c = parse_cron("45 21 * * *")
    assert c.seconds == frozenset({0})
    assert c.minutes == frozenset({45})
    assert c.hours == frozenset({21})
    assert c.days_of_month == frozenset(range(1, 32))
    assert c.months == frozenset(range(1, 13))
    assert c.days_of_week == frozenset(range(7))
    assert not c.dom_restricted
    assert not c.dow_restricted
    assert not c.hour_is_wildcard
    assert c.hour_field == "21"
    assert not c.has_seconds
    assert c.expr == "45 21 * * *"


def test_six_fields_lead_with_seconds() -> None:
    c = parse_cron("*/20 0 12 * * *")
    assert c.has_seconds
    assert c.seconds == frozenset({0, 20, 40})
    assert c.minutes == frozenset({0})
    assert c.hours == frozenset({12})


@pytest.mark.parametrize(
    ("alias", "minutes", "hours", "doms", "months", "dows"),
    [
        ("@yearly", {0}, {0}, {1}, {1}, set(range(7))),
        ("@annually", {0}, {0}, {1}, {1}, set(range(7))),
        ("@monthly", {0}, {0}, {1}, set(range(1, 13)), set(range(7))),
        ("@weekly", {0}, {0}, set(range(1, 32)), set(range(1, 13)), {0}),
        ("@daily", {0}, {0}, set(range(1, 32)), set(range(1, 13)), set(range(7))),
        ("@midnight", {0}, {0}, set(range(1, 32)), set(range(1, 13)), set(range(7))),
        ("@hourly", {0}, set(range(24)), set(range(1, 32)), set(range(1, 13)), set(range(7))),
    ],
)
def test_aliases(
    alias: str,
    minutes: set[int],
    hours: set[int],
    doms: set[int],
    months: set[int],
    dows: set[int],
) -> None:
    c = parse_cron(alias.upper() if alias == "@daily" else alias)
    assert (c.minutes, c.hours, c.days_of_month, c.months, c.days_of_week) == (
        minutes,
        hours,
        doms,
        months,
        dows,
    )


def test_hourly_alias_has_wildcard_hour() -> None:
    assert parse_cron("@hourly").hour_is_wildcard
    assert parse_cron("0 * * * *").hour_is_wildcard
    assert not parse_cron("0 */2 * * *").hour_is_wildcard
    assert parse_cron("0 */2 * * *").hour_field == "*/2"


def test_lists_ranges_and_steps() -> None:
    assert parse_cron("1,5,10-12 * * * *").minutes == {1, 5, 10, 11, 12}
    assert parse_cron("*/15 * * * *").minutes == {0, 15, 30, 45}
    assert parse_cron("1-10/2 * * * *").minutes == {1, 3, 5, 7, 9}
    assert parse_cron("5/20 * * * *").minutes == {5, 25, 45}
    assert parse_cron("0 0 */10 * *").days_of_month == {1, 11, 21, 31}


def test_month_and_day_names_case_insensitive() -> None:
    c = parse_cron("0 16 * jan,Mar-MAY mon-fri")
    assert c.months == {1, 3, 4, 5}
    assert c.days_of_week == {1, 2, 3, 4, 5}
    assert parse_cron("0 16 * * TUE").days_of_week == {2}
    assert parse_cron("0 0 * * sun").days_of_week == {0}


def test_day_of_week_seven_is_sunday() -> None:
    assert parse_cron("0 0 * * 7").days_of_week == {0}
    assert parse_cron("0 0 * * 5-7").days_of_week == {5, 6, 0}
    assert parse_cron("0 0 * * */2").days_of_week == {0, 2, 4, 6}


def test_restricted_flags_follow_the_leading_star() -> None:
    c = parse_cron("0 0 1 * 1")
    assert c.dom_restricted
    assert c.dow_restricted
    c = parse_cron("0 0 */2 * *")
    assert not c.dom_restricted


def test_both_day_fields_restricted_means_either_matches() -> None:
    c = parse_cron("0 9 1 * MON")  # the 1st of the month, and every Monday
    assert c.matches(datetime(2026, 6, 1, 9, 0))  # a Monday and the 1st
    assert c.matches(datetime(2026, 7, 1, 9, 0))  # a Wednesday, the 1st
    assert c.matches(datetime(2026, 7, 6, 9, 0))  # a Monday
    assert not c.matches(datetime(2026, 7, 7, 9, 0))  # a Tuesday, the 7th


def test_only_one_day_field_restricted_means_both_must_match() -> None:
    c = parse_cron("0 9 * * MON")
    assert c.matches(datetime(2026, 7, 6, 9, 0))
    assert not c.matches(datetime(2026, 7, 7, 9, 0))
    c = parse_cron("0 9 15 * *")
    assert c.matches(datetime(2026, 7, 15, 9, 0))
    assert not c.matches(datetime(2026, 7, 16, 9, 0))


def test_matches_checks_time_and_seconds() -> None:
    c = parse_cron("45 21 * * *")
    assert c.matches(datetime(2026, 10, 27, 21, 45))
    assert not c.matches(datetime(2026, 10, 27, 21, 45, 1))
    assert not c.matches(datetime(2026, 10, 27, 21, 46))
    assert c.matches_date(date(2026, 10, 27))
    assert c.matches_time(21, 45)
    assert not c.matches_time(20, 45)
    six = parse_cron("30 * * * * *")
    assert six.matches(datetime(2026, 1, 1, 3, 7, 30))
    assert not six.matches(datetime(2026, 1, 1, 3, 7, 0))


def test_whitespace_is_normalised() -> None:
    assert parse_cron("  0   16 *  *  2 ").days_of_week == {2}


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("", "empty"),
        ("* * * *", "4 field(s)"),
        ("* * * * * * *", "7 field(s)"),
        ("61 * * * *", "minute field '61': 61 is out of range 0-59"),
        ("0 24 * * *", "hour field '24': 24 is out of range 0-23"),
        ("0 0 0 * *", "day-of-month field '0': 0 is out of range 1-31"),
        ("0 0 * 13 *", "month field '13': 13 is out of range 1-12"),
        ("0 0 * * 8", "day-of-week field '8': 8 is out of range 0-7"),
        ("0 0 * FOO *", "month field 'FOO' has a bad value 'FOO'"),
        ("0 0 * * MOO", "day-of-week field 'MOO' has a bad value"),
        ("*/0 * * * *", "minute field '*/0' has a step of 0"),
        ("*/x * * * *", "minute field '*/x' has a bad step 'x'"),
        ("10-5 * * * *", "backwards range '10-5'"),
        ("1,,2 * * * *", "minute field '1,,2' has an empty list item"),
        ("@reboot", "unknown cron alias '@reboot'"),
        ("0 0 31 2 *", "never fires"),
        ("0 0 30 FEB *", "never fires"),
        ("a b c d e", "minute field 'a' has a bad value 'a'"),
        ("0 0 * * ²", "day-of-week field '²' has a bad value"),
        ("60 0 0 * * *", "second field '60'"),
    ],
)
def test_errors_name_the_field(expr: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        parse_cron(expr)


def test_feb_29_is_allowed() -> None:
    assert parse_cron("0 0 29 2 *").days_of_month == {29}


@given(st.text(max_size=40))
def test_random_text_parses_or_raises_value_error(text: str) -> None:
    try:
        c = parse_cron(text)
    except ValueError:
        return
    assert c.minutes
    assert c.hours
    assert c.days_of_week <= frozenset(range(7))


_FIELD = st.one_of(
    st.just("*"),
    st.integers(0, 70).map(str),
    st.tuples(st.integers(0, 40), st.integers(0, 40)).map(lambda t: f"{t[0]}-{t[1]}"),
    st.integers(0, 20).map(lambda n: f"*/{n}"),
    st.sampled_from(["MON", "jan", "SUN-SAT", "1,2,3", "7"]),
)


@given(st.lists(_FIELD, min_size=5, max_size=6))
def test_random_cron_shaped_inputs_never_crash(fields: list[str]) -> None:
    try:
        c = parse_cron(" ".join(fields))
    except ValueError as exc:
        message = str(exc)
    else:
        message = ""
    if message:
        assert "field" in message or "never fires" in message
        return
    assert all(0 <= m <= 59 for m in c.minutes)
    assert all(0 <= h <= 23 for h in c.hours)
    assert all(1 <= d <= 31 for d in c.days_of_month)
    assert all(1 <= m <= 12 for m in c.months)
