"""The planning tick as a pure function of (schedule, last planned slot, now)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from runlane.core.schedule import (
    MAX_LOOKBACK,
    Pause,
    ScheduleSpec,
    SeasonWindow,
    plan_schedule,
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
