"""Cron expressions parsed into sets of allowed values, ready for slot planning.

Standard five fields (minute hour day-of-month month day-of-week) or six with a leading seconds
field; the `@daily`-style aliases; lists, ranges and steps; month and day names. Day-of-week uses
0-6 with Sunday as 0 (7 is accepted as Sunday too). Like Vixie cron, when both day-of-month and
day-of-week are restricted (their field does not start with `*`), a day matches if *either* does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

ALIASES: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_MONTH_NAMES = {
    name: i
    for i, name in enumerate(
        ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"],
        start=1,
    )
}
_DAY_NAMES = {name: i for i, name in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}
# The longest each month can be (February in a leap year), to refuse dates that never exist.
_MONTH_MAX_DAYS = {
    1: 31,
    2: 29,
    3: 31,
    4: 30,
    5: 31,
    6: 30,
    7: 31,
    8: 31,
    9: 30,
    10: 31,
    11: 30,
    12: 31,
}


@dataclass(frozen=True, slots=True)
class _FieldSpec:
    name: str
    low: int
    high: int
    names: dict[str, int] | None = None


_SECOND = _FieldSpec("second", 0, 59)
_MINUTE = _FieldSpec("minute", 0, 59)
_HOUR = _FieldSpec("hour", 0, 23)
_DOM = _FieldSpec("day-of-month", 1, 31)
_MONTH = _FieldSpec("month", 1, 12, _MONTH_NAMES)
_DOW = _FieldSpec("day-of-week", 0, 7, _DAY_NAMES)


@dataclass(frozen=True, slots=True)
class CronExpr:
    """A parsed cron expression: the allowed values of every field, plus what slot planning needs.

    `days_of_week` uses 0 = Sunday … 6 = Saturday. A five-field expression has `seconds == {0}`.
    `hour_is_wildcard` is true when the hour field is exactly `*`: such schedules fire every hour
    of wall-clock time, which decides how a DST gap or repeat is handled.
    """

    expr: str
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    dom_restricted: bool
    dow_restricted: bool
    hour_is_wildcard: bool
    hour_field: str
    has_seconds: bool = False

    def matches_date(self, day: date) -> bool:
        """Whether the expression fires at some time on this calendar day."""
        if day.month not in self.months:
            return False
        dom_ok = day.day in self.days_of_month
        dow_ok = day.isoweekday() % 7 in self.days_of_week
        if self.dom_restricted and self.dow_restricted:
            return dom_ok or dow_ok
        return dom_ok and dow_ok

    def matches_time(self, hour: int, minute: int, second: int = 0) -> bool:
        """Whether the expression fires at this wall-clock time (on a day that matches)."""
        return hour in self.hours and minute in self.minutes and second in self.seconds

    def matches(self, dt_local_naive: datetime) -> bool:
        """Whether the expression fires at this local wall-clock time (microseconds ignored)."""
        return self.matches_date(dt_local_naive.date()) and self.matches_time(
            dt_local_naive.hour, dt_local_naive.minute, dt_local_naive.second
        )


def parse_cron(expr: str) -> CronExpr:
    """Parse a cron expression. Raises ValueError with a plain message naming the bad field."""
    if not isinstance(expr, str):
        raise ValueError(f"a cron expression must be a string, got {expr!r}")
    text = " ".join(expr.split())
    if not text:
        raise ValueError("the cron expression is empty")
    if text.startswith("@"):
        alias = ALIASES.get(text.lower())
        if alias is None:
            known = ", ".join(sorted(ALIASES))
            raise ValueError(f"unknown cron alias {text!r}; known aliases: {known}")
        fields = alias.split()
    else:
        fields = text.split(" ")
    if len(fields) == 5:
        fields = ["0", *fields]
        has_seconds = False
    elif len(fields) == 6:
        has_seconds = True
    else:
        raise ValueError(
            f"cron expression {expr.strip()!r} has {len(fields)} field(s); expected 5 "
            "(minute hour day-of-month month day-of-week) or 6 with a leading seconds field"
        )
    sec_f, min_f, hour_f, dom_f, month_f, dow_f = fields
    seconds = _parse_field(sec_f, _SECOND)
    minutes = _parse_field(min_f, _MINUTE)
    hours = _parse_field(hour_f, _HOUR)
    doms = _parse_field(dom_f, _DOM)
    months = _parse_field(month_f, _MONTH)
    dows = frozenset(d % 7 for d in _parse_field(dow_f, _DOW))
    dom_restricted = not dom_f.startswith("*")
    dow_restricted = not dow_f.startswith("*")
    if dom_restricted and not dow_restricted:
        longest = max(_MONTH_MAX_DAYS[m] for m in months)
        if min(doms) > longest:
            raise ValueError(
                f"cron expression {expr.strip()!r} never fires: no month in the month field "
                f"{month_f!r} has day {min(doms)}"
            )
    return CronExpr(
        expr=expr.strip(),
        seconds=seconds,
        minutes=minutes,
        hours=hours,
        days_of_month=doms,
        months=months,
        days_of_week=dows,
        dom_restricted=dom_restricted,
        dow_restricted=dow_restricted,
        hour_is_wildcard=hour_f == "*",
        hour_field=hour_f,
        has_seconds=has_seconds,
    )


def _parse_field(text: str, spec: _FieldSpec) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise ValueError(f"the {spec.name} field {text!r} has an empty list item")
        values.update(_parse_item(item, text, spec))
    return frozenset(values)


def _parse_item(item: str, field_text: str, spec: _FieldSpec) -> range:
    base, slash, step_text = item.partition("/")
    step = 1
    if slash:
        if not _is_number(step_text):
            raise ValueError(f"the {spec.name} field {field_text!r} has a bad step {step_text!r}")
        step = int(step_text)
        if step == 0:
            raise ValueError(f"the {spec.name} field {field_text!r} has a step of 0")
    if base == "*":
        low, high = spec.low, spec.high
        if spec is _DOW:
            high = 6  # `*` means every day once, not Sunday twice
    elif "-" in base:
        first, _, last = base.partition("-")
        low = _parse_value(first, field_text, spec)
        high = _parse_value(last, field_text, spec)
        if low > high:
            raise ValueError(
                f"the {spec.name} field {field_text!r} has a backwards range {base!r} "
                f"(ranges do not wrap around)"
            )
    else:
        low = _parse_value(base, field_text, spec)
        # `5/15` means "from 5 to the end, every 15", as in most crons that accept it.
        high = spec.high if slash else low
        if slash and spec is _DOW:
            high = 6
    return range(low, high + 1, step)


def _is_number(token: str) -> bool:
    return token.isascii() and token.isdigit()


def _parse_value(token: str, field_text: str, spec: _FieldSpec) -> int:
    if spec.names and token.upper() in spec.names:
        return spec.names[token.upper()]
    if not _is_number(token):
        hint = ""
        if spec.names:
            hint = f" (use {spec.low}-{spec.high} or names like {next(iter(spec.names))})"
        raise ValueError(f"the {spec.name} field {field_text!r} has a bad value {token!r}{hint}")
    value = int(token)
    if not spec.low <= value <= spec.high:
        raise ValueError(
            f"the {spec.name} field {field_text!r}: {value} is out of range {spec.low}-{spec.high}"
        )
    return value
