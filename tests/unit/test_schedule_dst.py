"""The planner against a brute-force minute-by-minute reference, across the tz database.

Hypothesis draws a zone from every zone in the tz database (with the awkward ones weighted in), a
two-year window and a cron expression; the planner's slots must equal the reference's exactly:
no slot missed, none doubled. Explicit cases pin the rule where people get bitten.
"""

from __future__ import annotations

import zoneinfo
from datetime import UTC, date, datetime, timedelta
from datetime import time as dt_time
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runlane.core.schedule import iter_slots, next_slot, wall_instant
from tests.unit.schedule_reference import reference_slots

ALL_ZONES = sorted(z for z in zoneinfo.available_timezones() if "/" in z or z == "UTC")
AWKWARD = [
    "Australia/Lord_Howe",  # 30-minute DST shift
    "Asia/Kathmandu",  # +05:45
    "Asia/Kolkata",  # +05:30
    "Australia/Adelaide",  # +09:30 / +10:30
    "America/St_Johns",  # -03:30 with DST
    "Asia/Tehran",  # +03:30, DST at midnight until 2022
    "America/Havana",  # transitions at midnight
    "America/Santiago",  # midnight transitions
    "Asia/Beirut",  # midnight transitions
    "Europe/Berlin",
    "America/Chicago",
    "Pacific/Apia",  # skipped a whole day in 2011
    "Antarctica/Troll",  # two-hour DST
    "Europe/Dublin",  # negative DST in the tz source
]

MINUTES = ["0", "30", "15,45", "*/15", "5", "*/7", "0-10/5", "59", "*/30"]
HOURS = ["*", "*/2", "*/3", "0", "1", "2", "3", "23", "1,2,3", "0-3", "2-4/2", "12", "0,12"]
DOMS = ["*", "*", "1", "15", "1-7", "29", "31"]
MONTHS = ["*", "*", "3", "3,4,9,10,11", "*/2", "1-6", "10-12"]
DOWS = ["*", "*", "0", "1-5", "SUN,SAT", "6"]


@st.composite
def cron_exprs(draw: st.DrawFn) -> str:
    parts = [draw(st.sampled_from(choices)) for choices in (MINUTES, HOURS, DOMS, MONTHS, DOWS)]
    return " ".join(parts)


zones = st.one_of(st.sampled_from(AWKWARD), st.sampled_from(ALL_ZONES))


@settings(
    max_examples=10,
    deadline=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(zone=zones, year=st.integers(1976, 2036), expr=cron_exprs())
def test_planner_matches_brute_force_over_two_years(zone: str, year: int, expr: str) -> None:
    after = datetime(year, 1, 1, tzinfo=UTC) - timedelta(seconds=1)
    until = datetime(year + 2, 1, 1, tzinfo=UTC)
    assert list(iter_slots(expr, zone, after, until)) == reference_slots(expr, zone, after, until)


def test_every_zone_fires_a_fixed_daily_schedule_once_per_local_date() -> None:
    """Every zone in the tz database, two years: `30 2 * * *` fires exactly once per local date
    that has any time at or after 02:30, at 02:30 or at the first instant after a gap."""
    after = datetime(2024, 1, 1, tzinfo=UTC)
    until = datetime(2026, 1, 1, tzinfo=UTC)
    for zone in ALL_ZONES:
        tz = ZoneInfo(zone)
        slots = list(iter_slots("30 2 * * *", zone, after, until))
        assert slots == sorted(set(slots)), zone
        days: set[date] = set()
        for slot in slots:
            local = slot.astimezone(tz)
            if (local.hour, local.minute) != (2, 30):
                before = (slot - timedelta(seconds=1)).astimezone(tz)
                assert before.utcoffset() != local.utcoffset(), (zone, slot)  # after a gap
            else:
                assert local.fold == 0, (zone, slot)  # first occurrence only
            days.add(local.date())
        assert len(days) == len(slots), zone
        assert 729 <= len(slots) <= 732, (zone, len(slots))


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def _window(expr: str, zone: str, start: datetime, days: int = 3) -> list[datetime]:
    end = start + timedelta(days=days)
    planned = list(iter_slots(expr, zone, start, end))
    assert planned == reference_slots(expr, zone, start, end)
    return planned


def test_berlin_fall_back_fixed_hour_fires_once_at_first_occurrence() -> None:
    # 2026-10-25 03:00 CEST → 02:00 CET: 02:30 happens twice.
    slots = _window("30 2 * * *", "Europe/Berlin", _utc(2026, 10, 24))
    assert _utc(2026, 10, 25, 0, 30) in slots  # 02:30 CEST
    assert _utc(2026, 10, 25, 1, 30) not in slots  # 02:30 CET, the repeat
    assert len(slots) == 3


def test_berlin_fall_back_every_hour_fires_both_occurrences() -> None:
    slots = _window("30 * * * *", "Europe/Berlin", _utc(2026, 10, 24, 23), days=1)
    assert _utc(2026, 10, 25, 0, 30) in slots
    assert _utc(2026, 10, 25, 1, 30) in slots
    assert len(slots) == 24  # 25 real hours in the local day, window of 24 UTC hours


def test_spring_forward_fixed_hour_fires_at_first_instant_after_the_gap() -> None:
    # 2026-03-08 02:00 CST → 03:00 CDT in Chicago; 02:30 does not exist.
    slots = _window("30 2 * * *", "America/Chicago", _utc(2026, 3, 7))
    assert _utc(2026, 3, 8, 8, 0) in slots  # 03:00 CDT, the first instant after the gap


def test_spring_forward_every_hour_owes_nothing_for_the_gap() -> None:
    slots = _window("30 * * * *", "America/Chicago", _utc(2026, 3, 8, 5), days=1)
    locals_ = [s.astimezone(ZoneInfo("America/Chicago")).hour for s in slots]
    assert 2 not in locals_[:4]
    assert len(slots) == 24


def test_lord_howe_half_hour_shift() -> None:
    zone = "Australia/Lord_Howe"
    # Spring forward 2026-10-04 02:00 → 02:30 (+10:30 → +11).
    spring = _window("15 2 * * *", zone, _utc(2026, 10, 2))
    assert _utc(2026, 10, 3, 15, 30) in spring  # 02:30 +11, right after the gap
    # Fall back 2026-04-05 02:00 → 01:30 (+11 → +10:30): 01:45 repeats.
    fall = _window("45 1 * * *", zone, _utc(2026, 4, 3))
    assert _utc(2026, 4, 4, 14, 45) in fall
    assert _utc(2026, 4, 4, 15, 15) not in fall
    both = _window("*/15 * * * *", zone, _utc(2026, 4, 4, 14), days=1)
    assert _utc(2026, 4, 4, 14, 45) in both
    assert _utc(2026, 4, 4, 15, 15) in both


def test_thirty_and_forty_five_minute_offsets() -> None:
    assert _window("0 9 * * *", "Asia/Kathmandu", _utc(2026, 1, 1), days=1) == [
        _utc(2026, 1, 1, 3, 15)
    ]
    assert _window("0 9 * * *", "Asia/Kolkata", _utc(2026, 1, 1), days=1) == [
        _utc(2026, 1, 1, 3, 30)
    ]
    assert _window("0 9 * * *", "Australia/Eucla", _utc(2026, 1, 1), days=1) == [
        _utc(2026, 1, 1, 0, 15)
    ]


def test_midnight_transitions() -> None:
    # Havana springs forward at 00:00 → 01:00 (2026-03-08) and falls back at 01:00 → 00:00.
    spring = _window("30 0 * * *", "America/Havana", _utc(2026, 3, 7))
    assert _utc(2026, 3, 8, 5, 0) in spring  # 01:00 CDT, first instant after the gap
    fall = _window("30 0 * * *", "America/Havana", _utc(2026, 10, 31))
    assert _utc(2026, 11, 1, 4, 30) in fall
    assert _utc(2026, 11, 1, 5, 30) not in fall
    hourly = _window("30 * * * *", "America/Havana", _utc(2026, 11, 1, 3), days=1)
    assert _utc(2026, 11, 1, 4, 30) in hourly
    assert _utc(2026, 11, 1, 5, 30) in hourly


def test_apia_skipped_day_folds_into_the_next_instant() -> None:
    slots = _window("0 12 * * *", "Pacific/Apia", _utc(2011, 12, 28))
    local_days = [s.astimezone(ZoneInfo("Pacific/Apia")).date() for s in slots]
    assert date(2011, 12, 30) not in local_days  # that date never existed
    assert len(slots) == len(set(slots))


def test_seconds_field_and_aliases() -> None:
    assert list(iter_slots("*/20 * * * * *", "UTC", _utc(2026, 1, 1), _utc(2026, 1, 1, 0, 1))) == [
        _utc(2026, 1, 1, 0, 0, 20),
        _utc(2026, 1, 1, 0, 0, 40),
        _utc(2026, 1, 1, 0, 1, 0),
    ]
    assert next_slot("@daily", "UTC", _utc(2026, 1, 1, 0, 0, 1)) == _utc(2026, 1, 2)
    assert next_slot("@hourly", "Asia/Kathmandu", _utc(2026, 1, 1)) == _utc(2026, 1, 1, 0, 15)


def test_day_of_month_and_week_combine_as_in_cron() -> None:
    # Both restricted: either matches (the 13th, or any Friday).
    slots = list(iter_slots("0 0 13 * 5", "UTC", _utc(2026, 2, 1), _utc(2026, 3, 1)))
    days = [s.day for s in slots]
    assert days == [6, 13, 20, 27]  # Fridays; the 13th is also a Friday in February 2026
    one = list(iter_slots("0 0 13 * *", "UTC", _utc(2026, 2, 1), _utc(2026, 3, 1)))
    assert [s.day for s in one] == [13]


@pytest.mark.parametrize("expr", ["0 0 29 2 *", "0 0 31 */2 *"])
def test_rare_expressions_find_their_next_slot(expr: str) -> None:
    assert next_slot(expr, "UTC", _utc(2026, 3, 1)) is not None


# A chain step's `latest` (a wall time on the chain run's local date) resolves as fixed-hour
# cron slots do: in a spring-forward gap, the first instant after it; repeated, the first.
@pytest.mark.parametrize(
    ("zone", "day", "wall", "expected"),
    [
        ("Europe/Berlin", date(2026, 3, 29), (2, 30), datetime(2026, 3, 29, 1, 0, tzinfo=UTC)),
        ("Europe/Berlin", date(2026, 10, 25), (2, 30), datetime(2026, 10, 25, 0, 30, tzinfo=UTC)),
        ("Europe/Berlin", date(2026, 6, 1), (2, 30), datetime(2026, 6, 1, 0, 30, tzinfo=UTC)),
        ("America/Havana", date(2026, 3, 8), (0, 30), datetime(2026, 3, 8, 5, 0, tzinfo=UTC)),
        (
            "Australia/Lord_Howe",
            date(2026, 10, 4),
            (2, 15),
            datetime(2026, 10, 3, 15, 30, tzinfo=UTC),
        ),
    ],
)
def test_a_wall_time_resolves_as_a_fixed_hour_slot(
    zone: str, day: date, wall: tuple[int, int], expected: datetime
) -> None:
    hour, minute = wall
    got = wall_instant(day, dt_time(hour, minute), zone)
    assert got == expected
    assert got.tzinfo is not None
    # The same instant as the daily cron at that wall time fires on that day (hours < 12: the
    # first slot after noon the day before is that day's).
    noon_before = datetime.combine(day - timedelta(days=1), dt_time(12, 0), tzinfo=ZoneInfo(zone))
    assert next_slot(f"{minute} {hour} * * *", zone, noon_before) == expected
