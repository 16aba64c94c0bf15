"""Checking what a person types on the command line before anything is written.

Every function here raises `BadInput` (exit 2) with one line that says which flag or argument is
wrong and why; none of them lets a Python error (OverflowError, RecursionError, …) through.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from runlane.catalog.params import MAX_PARAMS_BYTES
from runlane.core.durations import parse_duration
from runlane.errors import ConfigError

# Times a person may give (`--from`, `--to`, `--at`, `--until`): far enough either way for any
# real schedule, and far from the edges of what `datetime` and the databases can hold.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(3000, 1, 1, tzinfo=UTC)
MAX_SCHEDULE_DAYS = 3660.0  # `runlane schedule` shows at most ten years at once
MAX_LIST_LIMIT = 10_000  # `runs --limit` and `chains --limit` list at most this many at once
MIN_PREFIX = 6  # a run or chain run id prefix needs at least this many characters
MAX_DATA_BYTES = MAX_PARAMS_BYTES  # `emit --data`, as the event data's compact JSON
MAX_DATA_DEPTH = 64  # how deeply `emit --data` may nest objects and arrays

TIME_HINT = "use ISO-8601 (2026-12-01T08:00Z), now, or now+2h"
RANGE_TEXT = f"between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d}"


class BadInput(ConfigError):
    """A flag or argument is not acceptable."""

    code = "bad_input"
    exit_code = 2


def shown(text: str) -> str:
    """`text` quoted for a message, with bytes that are not UTF-8 shown as `\\xff`."""
    return "'" + text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace") + "'"


def invalid_utf8_argument(argv: Sequence[str]) -> str | None:
    """A message naming the first command-line argument that is not valid UTF-8, or None.

    Python hands such bytes over as lone surrogates ("surrogate escapes"), which no database and
    no terminal accepts."""
    for i, arg in enumerate(argv):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            pass
        else:
            continue
        if arg.startswith("-") and "=" in arg:
            where = arg.partition("=")[0]
        elif i > 0 and argv[i - 1].startswith("-") and argv[i - 1] != "--":
            where = argv[i - 1]
        else:
            where = f"argument {i + 1}"
        return f"{where} {shown(arg)} is not valid UTF-8"
    return None


def _in_range(at: datetime, flag: str, text: str) -> datetime:
    if not EARLIEST <= at < LATEST:
        raise BadInput(f"{flag} {text!r}: the time must be {RANGE_TEXT}")
    return at


def _offset(base: datetime, seconds: float, flag: str, text: str) -> datetime:
    if not math.isfinite(seconds) or abs(seconds) > (LATEST - EARLIEST).total_seconds():
        raise BadInput(f"{flag} {text!r}: the time must be {RANGE_TEXT}")
    try:
        return base + timedelta(seconds=seconds)
    except OverflowError:
        raise BadInput(f"{flag} {text!r}: the time must be {RANGE_TEXT}") from None


def parse_iso(text: str, flag: str, hint: str = TIME_HINT) -> datetime:
    """An ISO-8601 time in UTC (a naive one is local time)."""
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
        if at.tzinfo is None:
            at = at.astimezone()
        at = at.astimezone(UTC)
    except (ValueError, OverflowError, OSError):
        # ValueError: not a time; OverflowError/OSError: a time the platform cannot convert
        # (year 1, year 9999 in a zone east of UTC).
        if _looks_like_a_date(text):
            raise BadInput(f"{flag} {text!r}: the time must be {RANGE_TEXT}") from None
        raise BadInput(f"{flag} {text!r} is not a time: {hint}") from None
    return _in_range(at, flag, text)


def _looks_like_a_date(text: str) -> bool:
    try:
        datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return False
    return True


def parse_time(text: str | None, default: datetime, flag: str) -> datetime:
    """An ISO-8601 time (a naive one is local time), `now`, or `now+2h`/`now-1d`; `default` when
    `text` is None."""
    if text is None:
        return _in_range(default, flag, "now")
    word = text.strip().lower()
    if word == "now":
        return _in_range(default, flag, text)
    if word.startswith(("now+", "now-")):
        try:
            seconds = parse_duration(word[4:])
        except ValueError:
            raise BadInput(
                f"{flag} {text!r}: {word[4:]!r} is not a duration such as 2h or 1d"
            ) from None
        at = _offset(default, seconds if word[3] == "+" else -seconds, flag, text)
        return _in_range(at, flag, text)
    if not word:
        raise BadInput(f"{flag} is empty: {TIME_HINT}")
    return parse_iso(text, flag)


def parse_until(text: str, now: datetime) -> datetime:
    """`pause --until`: a duration from now (`2h`, `now+2h`) or an ISO-8601 time, which must be
    later than now (leave `--until` out to pause until `runlane resume`)."""
    hint = "expected a duration such as 2h or an ISO time such as 2026-12-01T08:00Z"
    if not text.strip():
        raise BadInput(f"--until is empty: {hint} (leave --until out to pause until resumed)")
    word = text.strip().lower()
    if word == "now" or word.startswith(("now+", "now-")):
        at = parse_time(text, now, "--until")  # the forms every other time flag takes
    else:
        at = _parse_until_plain(text, now, hint)
    if at <= now:
        raise BadInput(
            f"--until {text!r} is in the past (now is {now:%Y-%m-%dT%H:%M:%SZ}); "
            "leave --until out to pause until resumed"
        )
    return at


def _parse_until_plain(text: str, now: datetime, hint: str) -> datetime:
    try:
        seconds = parse_duration(text)
    except ValueError:
        at = parse_iso(text, "--until", hint)
    else:
        if seconds <= 0:
            raise BadInput(f"--until {text!r}: the duration must be longer than zero")
        at = _in_range(_offset(now, seconds, "--until", text), "--until", text)
    return at


def check_limit(limit: int) -> int:
    """`runs --limit`, `chains --limit`: a whole number from 1 to MAX_LIST_LIMIT. Checked here,
    not by the database: past a 64-bit integer SQLite and PostgreSQL each fail their own way,
    and zero or less asked for nothing."""
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise BadInput(f"--limit {limit}: expected a whole number from 1 to {MAX_LIST_LIMIT}")
    return limit


def check_days(days: float) -> float:
    """`schedule --days`: a finite number of days above zero, at most MAX_SCHEDULE_DAYS."""
    if not math.isfinite(days) or days <= 0:
        raise BadInput(f"--days {days!r}: expected a number of days greater than zero")
    if days > MAX_SCHEDULE_DAYS:
        raise BadInput(f"--days {days!r}: at most {MAX_SCHEDULE_DAYS:g} days (ten years) at once")
    return days


def check_range(
    start: datetime, end: datetime, start_text: str | None, end_text: str | None
) -> None:
    """`schedule --from/--to`: the end after the start, at most MAX_SCHEDULE_DAYS apart."""
    if end <= start:
        raise BadInput(f"--to {end_text!r} is not after --from {start_text or 'now'!r}")
    if end - start > timedelta(days=MAX_SCHEDULE_DAYS):
        raise BadInput(
            f"--from {start_text or 'now'!r} --to {end_text!r}: at most {MAX_SCHEDULE_DAYS:g} days "
            "(ten years) at once"
        )


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not allowed (JSON has no NaN or Infinity)")


def parse_data(text: str) -> dict[str, Any]:
    """`emit --data`: a JSON object of at most MAX_DATA_BYTES, nested at most MAX_DATA_DEPTH
    deep, without NaN or Infinity."""
    size = len(text.encode("utf-8", "surrogateescape"))
    if size > MAX_DATA_BYTES:
        raise BadInput(f"--data is {size} bytes; the limit is {MAX_DATA_BYTES} bytes (1 MiB)")
    depth = _nesting(text) if text.count("[") + text.count("{") > MAX_DATA_DEPTH else 0
    if depth > MAX_DATA_DEPTH:
        raise BadInput(f"--data is nested {depth} levels deep; the limit is {MAX_DATA_DEPTH}")
    try:
        parsed = json.loads(text, parse_constant=_no_constants)
    except RecursionError:  # pragma: no cover - _nesting catches this first
        raise BadInput(f"--data is nested too deeply; the limit is {MAX_DATA_DEPTH}") from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):  # Python's own advice is no use here
            raise BadInput(
                f"--data holds a whole number of more than {sys.get_int_max_str_digits()} "
                "digits; send it as a string"
            ) from None
        raise BadInput(f"--data is not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise BadInput(f"--data must be a JSON object, got {type(parsed).__name__}")
    return parsed


def _nesting(text: str) -> int:
    """The deepest nesting of `[` and `{` outside strings (an upper bound is enough: invalid
    JSON is reported by the parser)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def run_id_prefix(text: str, what: str = "run") -> str:
    """A run (or chain run) id or a prefix of one, lowercased; BadInput when it is too short."""
    prefix = text.strip().lower()
    if len(prefix) < MIN_PREFIX:
        raise BadInput(
            f"{what} id prefix {text!r} is too short: give at least {MIN_PREFIX} characters "
            f"of the id (`runlane {'chains' if what == 'chain run' else 'runs'}` lists them)"
        )
    return prefix
