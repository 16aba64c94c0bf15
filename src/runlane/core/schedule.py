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
"""

from __future__ import annotations

import bisect
import collections
import functools
import heapq
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
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


def _walls(c: _Compiled, lo: int, hi: int) -> Iterator[int]:
    """Matching wall times `w` with lo ≤ w < hi, ascending. Wall times are naive local times
    counted in seconds since 1970-01-01 00:00 (local)."""
    if lo >= hi:
        return
    day, tod = divmod(lo, _DAY)
    last_day = (hi - 1) // _DAY
    while day <= last_day:
        d = date.fromordinal(day + _EPOCH_ORDINAL)
        if d.month not in c.months:
            nxt = date(d.year + 1, 1, 1) if d.month == 12 else date(d.year, d.month + 1, 1)
            day, tod = nxt.toordinal() - _EPOCH_ORDINAL, 0
            continue
        if c.expr.matches_date(d):
            base = day * _DAY
            for t in _times_from(c, tod):
                w = base + t
                if w >= hi:
                    return
                yield w
        day, tod = day + 1, 0


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


def _slot_seconds(expr: str, zone: str, after: int, until: int) -> Iterator[int]:
    """Slots `s` (epoch seconds) with after < s ≤ until, strictly increasing."""
    c = _compile(expr)
    tz = _zone(zone)
    lo = after + 1
    end = until + 1
    last = after
    prev = _last_transition_before(zone, lo)
    transitions = _transitions_from(zone, lo + 1)
    while lo < end:
        nxt = next(transitions, None)
        hi = end if nxt is None else min(end, nxt[0])
        off = _offset(tz, lo)
        wall_from = lo + off
        if not c.real_time and prev is not None:
            t_at, before, after_off = prev
            if before < after_off:
                if t_at == lo and _any_wall(c, t_at + before, t_at + after_off):
                    # Fixed hours, spring forward: the wall times in the gap fire once, at the
                    # first instant after it.
                    last = lo
                    yield lo
            else:
                # Fixed hours, fall back: repeated wall times fired at their first occurrence.
                wall_from = max(wall_from, t_at + before)
        for w in _walls(c, wall_from, hi + off):
            s = w - off
            if s > last:
                last = s
                yield s
        lo, prev = hi, nxt


def _epoch(value: datetime) -> int:
    return int(value.timestamp() // 1)


def _from_epoch(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


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
        day = self.local(slot).date()
        for season in self.seasons:
            if season.contains(day):
                return season.name
        return None

    def in_season(self, slot: datetime) -> bool:
        return not self.seasons or self.season_of(slot) is not None


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
    on_time_from = now - window
    old: collections.deque[SlotDecision] = collections.deque(maxlen=max(0, max_recorded))
    recent: list[SlotDecision] = []
    unrecorded = 0
    first_unrecorded: datetime | None = None
    last_unrecorded: datetime | None = None
    out_of_season = 0
    planned_through: datetime | None = None
    for slot in iter_slots(spec.cron, spec.tz, start, now):
        planned_through = slot
        if spec.seasons and not spec.in_season(slot):
            out_of_season += 1
            continue
        paused = pause is not None and pause.covers(slot)
        if slot >= on_time_from:
            recent.append(SlotDecision(slot, "paused" if paused else "fire"))
            continue
        decision = SlotDecision(slot, "paused" if paused else "missed")
        if old.maxlen == 0 or len(old) == old.maxlen:
            dropped = old[0] if old.maxlen else decision
            unrecorded += 1
            if first_unrecorded is None:
                first_unrecorded = dropped.slot
            last_unrecorded = dropped.slot
        old.append(decision)
    return SchedulePlan(
        decisions=(*old, *recent),
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
