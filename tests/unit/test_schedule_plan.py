"""The planning tick as a pure function of (schedule, last planned slot, now)."""

from __future__ import annotations

import time
from datetime import UTC, date, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runlane.core.schedule import (
    MAX_LOOKBACK,
    Pause,
    ScheduleSpec,
    SeasonWindow,
    iter_slots,
    plan_schedule,
    previous_slot,
    schedule_table,
)


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


HOURLY = ScheduleSpec("job", "sync", "0 * * * *", "UTC", catch_up=3600.0)


def test_first_plan_owes_nothing_from_before_it() -> None:
    assert plan_schedule(HOURLY, None, _utc(2026, 5, 1, 12, 0, 30)).decisions == ()
    plan = plan_schedule(HOURLY, None, _utc(2026, 5, 1, 12))
    assert [(d.slot, d.action) for d in plan.decisions] == [(_utc(2026, 5, 1, 12), "fire")]
    assert plan.planned_through == _utc(2026, 5, 1, 12)


def test_nothing_due_keeps_the_state() -> None:
    plan = plan_schedule(HOURLY, _utc(2026, 5, 1, 12), _utc(2026, 5, 1, 12, 59, 59))
    assert plan.decisions == ()
    assert plan.planned_through is None


def test_three_hours_down_with_one_hour_catch_up() -> None:
    last = _utc(2026, 5, 1, 9)
    now = _utc(2026, 5, 1, 12, 30)
    plan = plan_schedule(HOURLY, last, now)
    assert [(d.slot.hour, d.action) for d in plan.decisions] == [
        (10, "missed"),
        (11, "missed"),
        (12, "fire"),
    ]
    assert plan.planned_through == _utc(2026, 5, 1, 12)
    # Planning again at the same time is a no-op: the state moved past every slot.
    again = plan_schedule(HOURLY, plan.planned_through, now)
    assert again.decisions == ()


def test_zero_catch_up_still_has_an_on_time_grace() -> None:
    spec = ScheduleSpec("job", "tick", "* * * * *", "UTC")
    plan = plan_schedule(spec, _utc(2026, 5, 1, 12), _utc(2026, 5, 1, 12, 1, 30))
    assert [(d.slot.minute, d.action) for d in plan.decisions] == [(1, "fire")]


def test_missed_slots_are_bounded_and_the_rest_counted() -> None:
    spec = ScheduleSpec("job", "tick", "* * * * *", "UTC")
    last = _utc(2026, 5, 1)
    now = last + timedelta(hours=5)  # 300 slots
    plan = plan_schedule(spec, last, now)
    missed = [d for d in plan.decisions if d.action == "missed"]
    assert len(missed) == 100
    fired = [d for d in plan.decisions if d.action == "fire"]
    assert len(fired) == 1 + 1  # within the 60 s grace: 04:59 and 05:00
    assert plan.unrecorded == 300 - 100 - 2
    assert plan.first_unrecorded == _utc(2026, 5, 1, 0, 1)
    assert missed[-1].slot < fired[0].slot  # the latest missed slots are the recorded ones


def test_lookback_is_capped() -> None:
    now = _utc(2026, 5, 1)
    plan = plan_schedule(HOURLY, now - MAX_LOOKBACK - timedelta(days=5), now)
    assert plan.lookback_from == now - MAX_LOOKBACK


def test_paused_slots_are_recorded_as_paused() -> None:
    now = _utc(2026, 5, 1, 12, 0, 10)
    plan = plan_schedule(HOURLY, _utc(2026, 5, 1, 11), now, pause=Pause(None))
    assert [(d.slot, d.action) for d in plan.decisions] == [(_utc(2026, 5, 1, 12), "paused")]
    snoozed = plan_schedule(
        HOURLY, _utc(2026, 5, 1, 11), now, pause=Pause(_utc(2026, 5, 1, 11, 30))
    )
    assert [d.action for d in snoozed.decisions] == ["fire"]


def test_seasons_fire_inside_and_record_nothing_outside() -> None:
    seasons = (SeasonWindow("regular", date(2026, 9, 8), date(2026, 9, 30)),)
    spec = ScheduleSpec("chain", "weekly", "0 16 * * TUE", "America/Chicago", 7200.0, seasons)
    inside = plan_schedule(spec, _utc(2026, 9, 8), _utc(2026, 9, 8, 21, 30))
    assert [d.action for d in inside.decisions] == ["fire"]
    outside = plan_schedule(spec, _utc(2026, 10, 5), _utc(2026, 10, 6, 21, 30))
    assert outside.decisions == ()
    assert outside.out_of_season == 1
    assert outside.planned_through is not None  # the state still moves on


def test_edit_re_anchors_the_schedule() -> None:
    a = ScheduleSpec("job", "sync", "0 * * * *", "UTC")
    b = ScheduleSpec("job", "sync", "30 * * * *", "UTC")
    assert a.key != b.key


def test_schedule_table_marks_paused_and_out_of_season() -> None:
    seasons = (SeasonWindow("s", date(2026, 1, 2), date(2026, 1, 2)),)
    chain = ScheduleSpec("chain", "c", "0 12 * * *", "UTC", seasons=seasons)
    job = ScheduleSpec("job", "j", "0 6 * * *", "UTC")
    rows = schedule_table([chain, job], _utc(2026, 1, 1), _utc(2026, 1, 3), paused={"j": Pause()})
    assert [(r.spec.target, r.slot.day, r.reason) for r in rows] == [
        ("j", 1, "paused"),
        ("c", 1, "out_of_season"),
        ("j", 2, "paused"),
        ("c", 2, "fires"),
    ]
    assert rows[-1].season == "s"


def test_schedule_table_limit_keeps_the_earliest_slots_of_every_schedule() -> None:
    """A limit cuts the range in time, across all schedules: an every-minute schedule must not
    fill it and leave a nightly one with a single slot."""
    minutely = ScheduleSpec("job", "every-minute", "* * * * *", "UTC")
    nightly = ScheduleSpec("job", "nightly", "0 3 * * *", "UTC")
    start = _utc(2027, 1, 1)
    rows = schedule_table([minutely, nightly], start, start + timedelta(days=10), limit=3 * 1440)
    assert len(rows) == 3 * 1440
    assert [r.slot for r in rows] == sorted(r.slot for r in rows)
    assert rows[-1].slot < start + timedelta(days=3)
    assert [r.slot.day for r in rows if r.spec.target == "nightly"] == [1, 2, 3]
    every = schedule_table([minutely, nightly], start, start + timedelta(days=10), limit=10**9)
    assert rows == every[: len(rows)]


# --- counted, not walked ------------------------------------------------------------------------

PLAN_ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/Chicago",
    "Australia/Lord_Howe",
    "America/Havana",
    "Pacific/Apia",
    "Antarctica/Troll",
    "Europe/Dublin",
    "Asia/Kathmandu",
]
PLAN_EXPRS = [
    "* * * * *",
    "0 * * * *",
    "30 2 * * *",
    "*/7 1,2,3 * * *",
    "0 2-4/2 1-7 * 0",
    "5 0 * * *",
    "* 2 * * *",
    "0 */3 * * *",
    "0 0 29 2 *",
    "45 1 * * SUN",
]
SECOND_EXPRS = ["*/20 * * * * *", "15 30 2 * * *", "10,20 59 1 * * 6", "* * 2 * * *"]


def reference_plan(
    spec: ScheduleSpec, last: datetime, now: datetime, pause: Pause | None, most: int
) -> tuple[object, ...]:
    """What the planner decides, from every slot listed one by one (as it once did)."""
    start = max(last, now - MAX_LOOKBACK)
    on_time_from = now - timedelta(seconds=spec.window_seconds)
    slots = list(iter_slots(spec.cron, spec.tz, start, now))
    kept = [s for s in slots if spec.in_season(s)]
    old = [s for s in kept if s < on_time_from]
    recorded = old[len(old) - min(len(old), most) :]
    unrecorded = old[: len(old) - len(recorded)]

    def action(slot: datetime, on_time: bool) -> str:
        if pause is not None and pause.covers(slot):
            return "paused"
        return "fire" if on_time else "missed"

    decisions = [(s, action(s, False)) for s in recorded]
    decisions += [(s, action(s, True)) for s in kept if s >= on_time_from]
    return (
        decisions,
        len(unrecorded),
        unrecorded[0] if unrecorded else None,
        unrecorded[-1] if unrecorded else None,
        len(slots) - len(kept),
        slots[-1] if slots else None,
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    zone=st.sampled_from(PLAN_ZONES),
    expr=st.one_of(st.sampled_from(PLAN_EXPRS), st.sampled_from(SECOND_EXPRS)),
    start=st.datetimes(datetime(2009, 1, 1), datetime(2031, 12, 1)),
    down=st.integers(0, 40 * 86400),
    catch_up=st.sampled_from([0.0, 120.0, 3600.0, 86400.0]),
    fraction=st.sampled_from([0, 250_000]),
    most=st.sampled_from([0, 1, 5, 100]),
    paused=st.sampled_from(["no", "all", "half"]),
    season=st.one_of(st.none(), st.tuples(st.integers(-3, 20), st.integers(0, 10))),
)
def test_the_plan_counts_old_slots_as_listing_them_would(
    zone: str,
    expr: str,
    start: datetime,
    down: int,
    catch_up: float,
    fraction: int,
    most: int,
    paused: str,
    season: tuple[int, int] | None,
) -> None:
    """Old slots are counted a day at a time and only the recorded ones listed: the plan must
    be exactly what listing every slot gives, across offset changes and seasons."""
    if expr in SECOND_EXPRS:
        down //= 400  # the reference lists every slot: keep it to a few thousand
    last = start.replace(tzinfo=UTC)
    now = last + timedelta(seconds=down, microseconds=fraction)
    seasons: tuple[SeasonWindow, ...] = ()
    if season is not None:
        first = last.date() + timedelta(days=season[0])
        seasons = (SeasonWindow("s", first, first + timedelta(days=season[1])),)
    spec = ScheduleSpec("job", "j", expr, zone, catch_up, seasons)
    pause = {"no": None, "all": Pause(), "half": Pause(last + (now - last) / 2)}[paused]
    plan = plan_schedule(spec, last, now, pause=pause, max_recorded=most)
    assert (
        [(d.slot, d.action) for d in plan.decisions],
        plan.unrecorded,
        plan.first_unrecorded,
        plan.last_unrecorded,
        plan.out_of_season,
        plan.planned_through,
    ) == reference_plan(spec, last, now, pause, most)


def test_a_month_down_of_an_every_second_schedule_is_counted_not_walked() -> None:
    """After 31 days down, an every-second schedule has 2.7 million old slots. The planner
    listed every one (over 4 s of CPU, the launcher's event loop blocked); it counts them."""
    spec = ScheduleSpec("job", "tick", "* * * * * *", "Europe/Berlin")
    now = _utc(2026, 5, 1, 12, 0, 0)
    began = time.process_time()
    plan = plan_schedule(spec, now - timedelta(days=40), now)
    took = time.process_time() - began
    assert [d.action for d in plan.decisions] == ["missed"] * 100 + ["fire"] * 61
    assert plan.decisions[0].slot == now - timedelta(seconds=160)
    assert plan.unrecorded == 31 * 86400 - 161  # every slot of the 31 days, less 161 listed
    assert plan.first_unrecorded == now - MAX_LOOKBACK + timedelta(seconds=1)
    assert plan.last_unrecorded == now - timedelta(seconds=161)
    assert plan.planned_through == now
    assert took < 1.0, f"planning took {took:.2f} s of CPU"


@pytest.mark.parametrize(
    ("expr", "zone", "until", "latest"),
    [
        ("* * * * * *", "UTC", _utc(2026, 5, 1, 12, 0, 0, 999), _utc(2026, 5, 1, 12)),
        ("*/10 * * * * *", "Europe/Berlin", _utc(2026, 5, 1, 12, 0, 9), _utc(2026, 5, 1, 12)),
        ("30 2 * * *", "America/Chicago", _utc(2026, 3, 8, 12), _utc(2026, 3, 8, 8)),  # the gap
        ("0 0 29 2 *", "UTC", _utc(2026, 5, 1), None),  # 2024-02-29 is more than 400 days back
        ("0 0 29 2 *", "UTC", _utc(2025, 3, 1), _utc(2024, 2, 29)),
    ],
)
def test_previous_slot_is_the_last_listed_slot(
    expr: str, zone: str, until: datetime, latest: datetime | None
) -> None:
    after = until - timedelta(days=400)
    listed = list(iter_slots(expr, zone, after, until)) if "* * * * * *" not in expr else []
    assert previous_slot(expr, zone, until, after=after) == latest
    if listed:
        assert listed[-1] == latest
