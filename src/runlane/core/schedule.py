"""Schedule math: the slots of a cron schedule in its time zone, and what one planning tick does.

Everything here is a pure function of its arguments (`now` included); nothing reads a clock.

**Daylight-saving rule** (the one Vixie cron and Dagster apply):

- When the hour field is `*` or `*/n`, the schedule follows *real time*: an instant is a slot when
  its local wall time matches. It fires in both occurrences of a repeated hour, and nothing is owed
  for wall times that never existed.
- When hours are fixed, each matching wall time of each local date fires exactly once: a wall time
  that does not exist (spring forward) fires at the first instant after the gap; one that occurs
  twice (fall back) fires at its first occurrence only. Several wall times of one gap fire once,
  as the one instant after it.

Slots are UTC instants on whole seconds. The planner walks the time line in segments of constant
UTC offset (the zone's transitions are found once per zone and year, by sampling the zone's offset
every hour and bisecting each change to the second), so slots come out strictly increasing.
Within a segment slots can also be counted a day at a time, which is how the planner and
`previous_slot` find the slots they need in a long range without listing all of them.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from datetime import time as dt_time
from typing import Literal
from zoneinfo import ZoneInfo

from runlane.core.cron import CronExpr, parse_cron

ON_TIME_GRACE_SECONDS = 60.0
"""A slot counts as on time this long after it, whatever `catch_up` says: the scheduler ticks, so
every slot is noticed a little late. `catch_up` widens the window; it never narrows it."""

MAX_MISSED_RECORDED = 100
"""Missed slots recorded as `skipped`/`missed` rows per schedule per recovery; the rest are counted."""

MAX_LOOKBACK = timedelta(days=31)
"""How far back a recovery looks. Slots before this are not examined (the plan says so)."""

_SEARCH_YEARS = 9  # `0 0 29 2 *` can wait 8 years (2096 → 2104)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_DAY = 86400
_SAMPLE_STEP = 6 * 3600


# --- compiled cron ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Compiled:
    expr: CronExpr
    hours: tuple[int, ...]
    minutes: tuple[int, ...]
    seconds: tuple[int, ...]
    months: frozenset[int]
    real_time: bool


@functools.lru_cache(maxsize=8192)
def _compile(expr: str) -> _Compiled:
    cron = parse_cron(expr)
    return _Compiled(
        expr=cron,
        hours=tuple(sorted(cron.hours)),
        minutes=tuple(sorted(cron.minutes)),
        seconds=tuple(sorted(cron.seconds)),
        months=cron.months,
        real_time=follows_real_time(cron),
    )


def follows_real_time(cron: CronExpr) -> bool:
    """True when the hour field is `*` or `*/n`: such a schedule follows real time across DST."""
    field_text = cron.hour_field
    return field_text == "*" or field_text.startswith("*/")


def _times_from(c: _Compiled, tod: int) -> Iterator[int]:
    """Matching seconds-of-day ≥ `tod`, ascending."""
    h0, rem = divmod(tod, 3600)
    m0, s0 = divmod(rem, 60)
    for h in c.hours[bisect.bisect_left(c.hours, h0) :]:
        m_start = m0 if h == h0 else 0
        for m in c.minutes[bisect.bisect_left(c.minutes, m_start) :]:
            s_start = s0 if (h == h0 and m == m0) else 0
            for s in c.seconds[bisect.bisect_left(c.seconds, s_start) :]:
                yield h * 3600 + m * 60 + s


DayFilter = Callable[[date], bool]
"""A test on a slot's local date (a chain's seasons): slots of dates it refuses are left out."""


def _matching_days(
    c: _Compiled, first_day: int, last_day: int, day_ok: DayFilter | None
) -> Iterator[int]:
    """Days (counted from 1970-01-01) from `first_day` to `last_day` on which `c` fires and that
    `day_ok` accepts, ascending; months the expression excludes are skipped whole."""
    day = first_day
    while day <= last_day:
        d = date.fromordinal(day + _EPOCH_ORDINAL)
        if d.month not in c.months:
            nxt = date(d.year + 1, 1, 1) if d.month == 12 else date(d.year, d.month + 1, 1)
            day = nxt.toordinal() - _EPOCH_ORDINAL
            continue
        if c.expr.matches_date(d) and (day_ok is None or day_ok(d)):
            yield day
        day += 1


def _walls(c: _Compiled, lo: int, hi: int, day_ok: DayFilter | None = None) -> Iterator[int]:
    """Matching wall times `w` with lo ≤ w < hi, ascending. Wall times are naive local times
    counted in seconds since 1970-01-01 00:00 (local)."""
    if lo >= hi:
        return
    for day in _matching_days(c, lo // _DAY, (hi - 1) // _DAY, day_ok):
        base = day * _DAY
        for t in _times_from(c, max(0, lo - base)):
            w = base + t
            if w >= hi:
                return
            yield w


def _times_below(c: _Compiled, tod: int) -> int:
    """How many matching seconds-of-day are < `tod` (0 ≤ tod ≤ one day)."""
    h0, rem = divmod(tod, 3600)
    m0, s0 = divmod(rem, 60)
    per_minute = len(c.seconds)
    per_hour = len(c.minutes) * per_minute
    hour_at = bisect.bisect_left(c.hours, h0)
    n = hour_at * per_hour
    if hour_at < len(c.hours) and c.hours[hour_at] == h0:
        minute_at = bisect.bisect_left(c.minutes, m0)
        n += minute_at * per_minute
        if minute_at < len(c.minutes) and c.minutes[minute_at] == m0:
            n += bisect.bisect_left(c.seconds, s0)
    return n


def _count_walls(c: _Compiled, lo: int, hi: int, day_ok: DayFilter | None = None) -> int:
    """How many wall times `_walls(c, lo, hi, day_ok)` yields, a day at a time rather than one
    by one: an every-second expression over a month is 31 steps, not 2.7 million."""
    if lo >= hi:
        return 0
    n = 0
    for day in _matching_days(c, lo // _DAY, (hi - 1) // _DAY, day_ok):
        base = day * _DAY
        n += _times_below(c, min(_DAY, hi - base)) - _times_below(c, max(0, lo - base))
    return n


def _any_wall(c: _Compiled, lo: int, hi: int) -> bool:
    return next(_walls(c, lo, hi), None) is not None


# --- zone transitions ---------------------------------------------------------------------------


def _offset(tz: ZoneInfo, ts: int) -> int:
    off = datetime.fromtimestamp(ts, tz).utcoffset()
    return 0 if off is None else int(off.total_seconds())


@functools.lru_cache(maxsize=16384)
def _year_transitions(zone: str, year: int) -> tuple[tuple[int, int, int], ...]:
    """(instant, offset before, offset after) of every offset change in `year` (UTC), found by
    sampling every six hours and bisecting each change to the second. After a change the scan
    resumes from the change itself, so two changes between samples are both found (tzdb has no
    pair of changes that cancel out within six hours)."""
    tz = _zone(zone)
    start = int(datetime(year, 1, 1, tzinfo=UTC).timestamp())
    end = int(datetime(year + 1, 1, 1, tzinfo=UTC).timestamp())
    found: list[tuple[int, int, int]] = []
    prev_ts = start - 1
    prev_off = _offset(tz, prev_ts)
    while prev_ts < end - 1:
        ts = min(prev_ts + _SAMPLE_STEP, end - 1)
        off = _offset(tz, ts)
        if off == prev_off:
            prev_ts = ts
            continue
        lo, hi = prev_ts, ts
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _offset(tz, mid) == prev_off:
                lo = mid
            else:
                hi = mid
        after = _offset(tz, hi)
        found.append((hi, prev_off, after))
        prev_ts, prev_off = hi, after
    return tuple(found)


def _year_of(ts: int) -> int:
    return time.gmtime(ts).tm_year


@functools.lru_cache(maxsize=1024)
def _zone(key: str) -> ZoneInfo:
    """ZoneInfo keeps only 8 zones strongly cached; a catalog often uses more."""
    return ZoneInfo(key)


def _transitions_from(zone: str, lo: int) -> Iterator[tuple[int, int, int]]:
    """Transitions at or after `lo`, ascending, up to the search horizon."""
    first = _year_of(lo)
    for year in range(first, first + _SEARCH_YEARS + 1):
        for t in _year_transitions(zone, year):
            if t[0] >= lo:
                yield t


def _last_transition_before(zone: str, ts: int) -> tuple[int, int, int] | None:
    """The latest transition at or before `ts` within about a year, or None."""
    year = _year_of(ts)
    for y in (year, year - 1):
        earlier = [t for t in _year_transitions(zone, y) if t[0] <= ts]
        if earlier:
            return earlier[-1]
    return None


# --- slots --------------------------------------------------------------------------------------


def _segments(
    c: _Compiled, zone: str, after: int, until: int
) -> Iterator[tuple[int | None, int, int, int]]:
    """The time line (after, until] cut at the zone's offset changes: for each piece of constant
    UTC offset, `(gap, wall_from, wall_to, offset)`. Its slots are the matching wall times `w`
    with wall_from ≤ w < wall_to, at instant `w - offset`; `gap` (fixed hours, spring forward) is
    the instant after the gap, which stands for the gap's wall times, else None."""
    tz = _zone(zone)
    lo = after + 1
    end = until + 1
    prev = _last_transition_before(zone, lo)
    transitions = _transitions_from(zone, lo + 1)
    while lo < end:
        nxt = next(transitions, None)
        hi = end if nxt is None else min(end, nxt[0])
        off = _offset(tz, lo)
        wall_from = lo + off
        gap = None
        if not c.real_time and prev is not None:
            t_at, before, after_off = prev
            if before < after_off:
                if t_at == lo and _any_wall(c, t_at + before, t_at + after_off):
                    # Fixed hours, spring forward: the wall times in the gap fire once, at the
                    # first instant after it.
                    gap = lo
            else:
                # Fixed hours, fall back: repeated wall times fired at their first occurrence.
                wall_from = max(wall_from, t_at + before)
        yield gap, wall_from, hi + off, off
        lo, prev = hi, nxt


def _slot_seconds(
    expr: str, zone: str, after: int, until: int, day_ok: DayFilter | None = None
) -> Iterator[int]:
    """Slots `s` (epoch seconds) with after < s ≤ until, strictly increasing; with `day_ok`,
    only those whose local date it accepts."""
    c = _compile(expr)
    last = after
    for gap, wall_from, wall_to, off in _segments(c, zone, after, until):
        if gap is not None and _day_accepted(day_ok, gap + off):
            last = gap
            yield gap
        for w in _walls(c, wall_from, wall_to, day_ok):
            s = w - off
            if s > last:  # the gap's instant may also be a wall time of its own
                last = s
                yield s


def _day_accepted(day_ok: DayFilter | None, wall: int) -> bool:
    return day_ok is None or day_ok(date.fromordinal(wall // _DAY + _EPOCH_ORDINAL))


def _count_slots(
    expr: str, zone: str, after: int, until: int, day_ok: DayFilter | None = None
) -> int:
    """`len(list(_slot_seconds(...)))` in O(days + offset changes), whatever the slots' density."""
    c = _compile(expr)
    n = 0
    for gap, wall_from, wall_to, off in _segments(c, zone, after, until):
        n += _count_walls(c, wall_from, wall_to, day_ok)
        if gap is not None and _day_accepted(day_ok, gap + off):
            wall = gap + off
            # The gap's instant counts once, also when it is a matching wall time itself.
            n += 0 if wall_from <= wall < wall_to and _any_wall(c, wall, wall + 1) else 1
    return n


def _start_of_last(
    expr: str, zone: str, after: int, until: int, n: int, day_ok: DayFilter | None = None
) -> int:
    """The latest `x` in [after, until) with `n` slots in (x, until]: the latest `n` slots of
    (after, until] are those after `x`, and the earliest of them is at `x + 1`. The caller
    knows (after, until] holds at least `n` (n ≥ 1). Found by counting, never by listing: back
    from `until` in growing steps, then by bisection."""
    hi = until  # (hi, until] holds fewer than n
    step = 64
    lo = max(after, until - step)
    while lo > after and _count_slots(expr, zone, lo, until, day_ok) < n:
        hi, step = lo, step * 16
        lo = max(after, until - step)
    while hi - lo > 1:  # (lo, until] holds at least n, (hi, until] fewer
        mid = (lo + hi) // 2
        if _count_slots(expr, zone, mid, until, day_ok) >= n:
            lo = mid
        else:
            hi = mid
    return lo


def _epoch(value: datetime) -> int:
    return int(value.timestamp() // 1)


def _from_epoch(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def wall_instant(day: date, wall: dt_time, zone: str) -> datetime:
    """The instant of the wall time `wall` on the local date `day` in `zone`, by the rule fixed
    hours follow (the module's docstring): a wall time that does not exist (spring forward) is
    the first instant after the gap; one that occurs twice (fall back), its first occurrence.
    An aware UTC datetime (a repeated wall time's own datetime compares unequal to every other
    zone's, PEP 495)."""
    tz = _zone(zone)
    first = datetime.combine(day, wall, tzinfo=tz)  # fold=0: the earlier of a repeated time
    naive = first.replace(tzinfo=None)
    if first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == naive:
        return first.astimezone(UTC)
    # In a gap: fold=0 reads it with the offset before the change, an instant after it.
    changed = _last_transition_before(zone, _epoch(first))
    if changed is None:  # no change found within a year: cannot be a gap after all
        return first.astimezone(UTC)
    return _from_epoch(changed[0])


def iter_slots(expr: str, zone: str, after: datetime, until: datetime) -> Iterator[datetime]:
    """The slots of `expr` in `zone` with after < slot ≤ until, as aware UTC datetimes."""
    for s in _slot_seconds(expr, zone, _epoch(after), _epoch(until)):
        yield _from_epoch(s)


def next_slot(expr: str, zone: str, after: datetime) -> datetime | None:
    """The first slot strictly after `after`, or None within the search horizon (9 years)."""
    a = _epoch(after)
    horizon = a + int(timedelta(days=366 * _SEARCH_YEARS).total_seconds())
    for s in _slot_seconds(expr, zone, a, horizon):
        return _from_epoch(s)
    return None


def previous_slot(expr: str, zone: str, until: datetime, *, after: datetime) -> datetime | None:
    """The last slot with after < slot ≤ until, or None: found by counting, so an every-second
    expression costs what a daily one does."""
    a, z = _epoch(after), _epoch(until)
    if _count_slots(expr, zone, a, z) == 0:
        return None
    return _from_epoch(_start_of_last(expr, zone, a, z, 1) + 1)


# --- schedules and the planning tick -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SeasonWindow:
    """A named window of local dates (inclusive) in which a season-restricted schedule fires."""

    name: str
    start: date
    end: date

    def contains(self, day: date) -> bool:
        return self.start <= day <= self.end


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """One schedule as the planner sees it: a job's or a chain's cron in a zone.

    `key` names the schedule in the planning state; it includes the cron and the zone, so editing
    either re-anchors the schedule from now instead of replaying slots of the old expression.
    `seasons` empty means all year.
    """

    kind: Literal["job", "chain"]
    target: str
    cron: str
    tz: str
    catch_up: float = 0.0
    seasons: tuple[SeasonWindow, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.target}|{self.cron}|{self.tz}"

    @property
    def window_seconds(self) -> float:
        """How late a slot may still fire (and how long its run may wait in the queue)."""
        return max(self.catch_up, ON_TIME_GRACE_SECONDS)

    def local(self, slot: datetime) -> datetime:
        return slot.astimezone(_zone(self.tz))

    def season_of(self, slot: datetime) -> str | None:
        """The season the slot's local date falls in; None when outside every listed season
        (or when the schedule has no seasons)."""
        return self.season_of_day(self.local(slot).date())

    def season_of_day(self, day: date) -> str | None:
        for season in self.seasons:
            if season.contains(day):
                return season.name
        return None

    def in_season(self, slot: datetime) -> bool:
        return not self.seasons or self.season_of(slot) is not None

    def in_season_day(self, day: date) -> bool:
        return self.season_of_day(day) is not None


@dataclass(frozen=True, slots=True)
class Pause:
    """A pause or snooze on the schedule's target: slots before `until` (or all, when None) are
    recorded `skipped`/`paused`."""

    until: datetime | None = None

    def covers(self, slot: datetime) -> bool:
        return self.until is None or slot < self.until


SlotAction = Literal["fire", "missed", "paused"]


@dataclass(frozen=True, slots=True)
class SlotDecision:
    slot: datetime
    action: SlotAction


@dataclass(frozen=True, slots=True)
class SchedulePlan:
    """What one planning tick decided for one schedule.

    `decisions` are in slot order: `fire` (accept a queued run), `missed` (older than the catch-up
    window: record `skipped`/`missed`), `paused` (record `skipped`/`paused`). `unrecorded` counts
    old slots beyond `MAX_MISSED_RECORDED` (the earliest ones), `first_unrecorded`/
    `last_unrecorded` bound them. `planned_through` is the new "last planned slot" (None: no slot
    was due, keep the old one). `lookback_from` is set when the last planned slot was older than
    `MAX_LOOKBACK` and slots before it were not examined.
    """

    decisions: tuple[SlotDecision, ...] = ()
    unrecorded: int = 0
    first_unrecorded: datetime | None = None
    last_unrecorded: datetime | None = None
    out_of_season: int = 0
    planned_through: datetime | None = None
    lookback_from: datetime | None = None


def plan_schedule(
    spec: ScheduleSpec,
    last_planned: datetime | None,
    now: datetime,
    *,
    pause: Pause | None = None,
    max_recorded: int = MAX_MISSED_RECORDED,
) -> SchedulePlan:
    """Decide every slot in (last_planned, now].

    A schedule planned for the first time (`last_planned` None) owes only a slot at `now` itself:
    nothing is owed from before a launcher first saw it (nor after an edit of its cron or
    zone, which gives it a new key). A slot fires when `now - slot` is within
    the window (`catch_up`, at least `ON_TIME_GRACE_SECONDS`); older ones are recorded as missed,
    at most `max_recorded` (the latest ones), the rest counted. Slots outside the seasons are
    skipped silently (counted only). A paused target turns its slots into `paused` decisions.

    The work is bounded by the window's slots and `max_recorded`, not by how long the schedule
    went unplanned: older slots are counted a day at a time and only the recorded ones listed.
    """
    window = timedelta(seconds=spec.window_seconds)
    lookback_from: datetime | None = None
    if last_planned is None:
        start = now - timedelta(seconds=1)
    else:
        start = last_planned
        if now - last_planned > MAX_LOOKBACK:
            start = now - MAX_LOOKBACK
            lookback_from = start
    a, z = _epoch(start), _epoch(now)
    # Slots are whole seconds: the old ones (before `now - window`) are those ≤ old_end.
    on_time_from = now - window
    old_end = _epoch(on_time_from)
    if _from_epoch(old_end) == on_time_from:
        old_end -= 1
    old_end = max(a, old_end)

    def decide(slot: datetime, on_time: bool) -> SlotDecision:
        if pause is not None and pause.covers(slot):
            return SlotDecision(slot, "paused")
        return SlotDecision(slot, "fire" if on_time else "missed")

    # On time: every slot in the window, one by one (the window is catch_up, at least a minute).
    recent: list[SlotDecision] = []
    out_of_season = 0
    planned_through: datetime | None = None
    for s in _slot_seconds(spec.cron, spec.tz, old_end, z):
        planned_through = _from_epoch(s)
        if spec.seasons and not spec.in_season(planned_through):
            out_of_season += 1
            continue
        recent.append(decide(planned_through, on_time=True))
    # Older: counted, and only the latest `max_recorded` (in season) listed. Never walked one by
    # one: after a month down, an every-second schedule has 2.7 million of them.
    in_season = spec.in_season_day if spec.seasons else None
    old_all = _count_slots(spec.cron, spec.tz, a, old_end)
    old = old_all if in_season is None else _count_slots(spec.cron, spec.tz, a, old_end, in_season)
    out_of_season += old_all - old
    if planned_through is None and old_all:
        planned_through = _from_epoch(_start_of_last(spec.cron, spec.tz, a, old_end, 1) + 1)
    recorded = min(old, max(0, max_recorded))
    cut = old_end  # the recorded slots are those in (cut, old_end]
    if recorded:
        cut = _start_of_last(spec.cron, spec.tz, a, old_end, recorded, in_season)
    listed = [
        decide(_from_epoch(s), on_time=False)
        for s in _slot_seconds(spec.cron, spec.tz, cut, old_end, in_season)
    ]
    unrecorded = old - recorded
    first_unrecorded: datetime | None = None
    last_unrecorded: datetime | None = None
    if unrecorded:
        first = next(_slot_seconds(spec.cron, spec.tz, a, cut, in_season))
        first_unrecorded = _from_epoch(first)
        last_unrecorded = _from_epoch(_start_of_last(spec.cron, spec.tz, a, cut, 1, in_season) + 1)
    return SchedulePlan(
        decisions=(*listed, *recent),
        unrecorded=unrecorded,
        first_unrecorded=first_unrecorded,
        last_unrecorded=last_unrecorded,
        out_of_season=out_of_season,
        planned_through=planned_through,
        lookback_from=lookback_from,
    )


@dataclass(frozen=True, slots=True)
class SlotRow:
    """One line of the schedule table: a slot and whether it would fire."""

    spec: ScheduleSpec
    slot: datetime
    local: datetime
    season: str | None
    fires: bool
    reason: str  # "fires", "paused", "out_of_season"


def schedule_table(
    specs: list[ScheduleSpec],
    start: datetime,
    end: datetime,
    *,
    paused: dict[str, Pause] | None = None,
    limit: int = 100_000,
) -> list[SlotRow]:
    """The first `limit` slots of all the schedules together with start < slot ≤ end, ordered
    by time then target: the earliest slots of every schedule, never all of one schedule's
    first. Ask for one more than you show to tell whether the range holds more."""
    pauses = paused or {}

    def slots_of(i: int, spec: ScheduleSpec) -> Iterator[tuple[datetime, str, str, int]]:
        for slot in iter_slots(spec.cron, spec.tz, start, end):
            yield slot, spec.kind, spec.target, i

    rows: list[SlotRow] = []
    merged = heapq.merge(*(slots_of(i, spec) for i, spec in enumerate(specs)))
    for slot, _, _, i in itertools.islice(merged, max(0, limit)):
        spec = specs[i]
        pause = pauses.get(spec.target) if spec.kind == "job" else None
        season = spec.season_of(slot)
        if spec.seasons and season is None:
            fires, reason = False, "out_of_season"
        elif pause is not None and pause.covers(slot):
            fires, reason = False, "paused"
        else:
            fires, reason = True, "fires"
        rows.append(SlotRow(spec, slot, spec.local(slot), season, fires, reason))
    return rows
