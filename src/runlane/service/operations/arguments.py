"""What a request carries besides its names: who asks, and the checks of its arguments.

Every face passes the same arguments (a list limit, a time such as `2h`, `now+1d` or an ISO
time, an id prefix), so they are checked here, once. Each check raises `InvalidArgument` (exit
2) with one line that names the argument and why; none lets a Python error (OverflowError, …)
through. The messages name the CLI's flags, which are the arguments' names.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from runlane.core.access import Access, Role
from runlane.core.durations import parse_duration
from runlane.core.runs import Trigger
from runlane.core.trace import TraceparentError, parse_traceparent
from runlane.errors import Forbidden, InvalidArgument, InvalidTraceparent
from runlane.service.accept import text_problem

# Times a person may give (`--from`, `--to`, `--at`, `--until`): far enough either way for any
# real schedule, and far from the edges of what `datetime` and the databases can hold.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(3000, 1, 1, tzinfo=UTC)
MAX_SCHEDULE_DAYS = 3660.0  # `runlane schedule` shows at most ten years at once
MAX_LIST_LIMIT = 10_000  # `runs --limit` and `chains --limit` list at most this many at once
MIN_PREFIX = 6  # a run or chain run id prefix needs at least this many characters

TIME_HINT = "use ISO-8601 (2026-12-01T08:00Z), now, or now+2h"
RANGE_TEXT = f"between {EARLIEST:%Y-%m-%d} and {LATEST:%Y-%m-%d}"


@dataclass(frozen=True, slots=True)
class Requester:
    """Who asks, and through which face: `name` is recorded with the runs, chain runs and
    pauses the request writes; `trigger` is the run's trigger (cli, manual for the API, mcp);
    `access` is what an authenticated requester (an API token, a trusted proxy's user) may do.
    None is the local CLI, which holds the database credentials itself: checking it would
    protect nothing, so it may do everything."""

    name: str | None
    trigger: Trigger = Trigger.CLI
    access: Access | None = None

    def require(self, need: Role, *, jobs: Iterable[str] = (), action: str) -> None:
        """Forbidden unless this requester may `action` (needing `need`) on every job of
        `jobs`. Called by each write operation before it writes anything, so every face gets
        the same answer; the message names the role needed, the requester's role and the job
        outside its globs."""
        if self.access is None:
            return
        who = repr(self.name) if self.name else "the requester"  # a token or a proxy's user
        if not self.access.allows(need):
            raise Forbidden(
                f"{action} needs the {need} role; {who} has the {self.access.role} role"
            )
        for job in jobs:
            if not self.access.allows(need, job):
                globs = ", ".join(self.access.jobs)
                raise Forbidden(
                    f"{action} of job {job!r} needs the {need} role for that job; {who} has "
                    f"the {self.access.role} role for jobs matching {globs} only"
                )


def _in_range(at: datetime, flag: str, text: str) -> datetime:
    if not EARLIEST <= at < LATEST:
        raise InvalidArgument(f"{flag} {text!r}: the time must be {RANGE_TEXT}")
    return at


def _offset(base: datetime, seconds: float, flag: str, text: str) -> datetime:
    if not math.isfinite(seconds) or abs(seconds) > (LATEST - EARLIEST).total_seconds():
        raise InvalidArgument(f"{flag} {text!r}: the time must be {RANGE_TEXT}")
    try:
        return base + timedelta(seconds=seconds)
    except OverflowError:
        raise InvalidArgument(f"{flag} {text!r}: the time must be {RANGE_TEXT}") from None


def parse_iso(text: str, flag: str, hint: str = TIME_HINT) -> datetime:
    """An ISO-8601 time in UTC (a naive one is local time)."""
    if any(c < " " or c == "\x7f" for c in text.strip()):
        # CPython's parser stops at a NUL and would take `2030-01-01\x00…` for a time.
        raise InvalidArgument(f"{flag} {text!r} is not a time: {hint}")
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
        if at.tzinfo is None:
            at = at.astimezone()
        at = at.astimezone(UTC)
    except (ValueError, OverflowError, OSError):
        # ValueError: not a time; OverflowError/OSError: a time the platform cannot convert
        # (year 1, year 9999 in a zone east of UTC).
        if _looks_like_a_date(text):
            raise InvalidArgument(f"{flag} {text!r}: the time must be {RANGE_TEXT}") from None
        raise InvalidArgument(f"{flag} {text!r} is not a time: {hint}") from None
    return _in_range(at, flag, text)


def _looks_like_a_date(text: str) -> bool:
    try:
        datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return False
    return True


def parse_time(text: str | datetime | None, default: datetime, flag: str) -> datetime:
    """An ISO-8601 time (a naive one is local time), `now`, or `now+2h`/`now-1d`; `default` when
    `text` is None. A `datetime` (from a face that parsed it) is checked for its range only."""
    if text is None:
        return _in_range(default, flag, "now")
    if isinstance(text, datetime):
        return _in_range(_utc(text), flag, text.isoformat())
    word = text.strip().lower()
    if word == "now":
        return _in_range(default, flag, text)
    if word.startswith(("now+", "now-")):
        try:
            seconds = parse_duration(word[4:])
        except ValueError:
            raise InvalidArgument(
                f"{flag} {text!r}: {word[4:]!r} is not a duration such as 2h or 1d"
            ) from None
        at = _offset(default, seconds if word[3] == "+" else -seconds, flag, text)
        return _in_range(at, flag, text)
    if not word:
        raise InvalidArgument(f"{flag} is empty: {TIME_HINT}")
    return parse_iso(text, flag)


def _utc(at: datetime) -> datetime:
    """`at` in UTC (a naive time is local time)."""
    return (at if at.tzinfo is not None else at.astimezone()).astimezone(UTC)


def parse_until(text: str | datetime, now: datetime) -> datetime:
    """`pause --until`: a duration from now (`2h`, `now+2h`) or an ISO-8601 time (or a
    `datetime`), which must be later than now (leave `--until` out to pause until `runlane
    resume`)."""
    hint = "expected a duration such as 2h or an ISO time such as 2026-12-01T08:00Z"
    if isinstance(text, datetime):
        at = _in_range(_utc(text), "--until", text.isoformat())
        text = text.isoformat()
    elif not text.strip():
        raise InvalidArgument(
            f"--until is empty: {hint} (leave --until out to pause until resumed)"
        )
    elif text.strip().lower() == "now" or text.strip().lower().startswith(("now+", "now-")):
        at = parse_time(text, now, "--until")  # the forms every other time flag takes
    else:
        at = _parse_until_plain(text, now, hint)
    if at <= now:
        raise InvalidArgument(
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
            raise InvalidArgument(f"--until {text!r}: the duration must be longer than zero")
        at = _in_range(_offset(now, seconds, "--until", text), "--until", text)
    return at


def check_limit(limit: int) -> int:
    """`runs --limit`, `chains --limit`: a whole number from 1 to MAX_LIST_LIMIT. Checked here,
    not by the database: past a 64-bit integer SQLite and PostgreSQL each fail their own way,
    and zero or less asked for nothing."""
    if not 1 <= limit <= MAX_LIST_LIMIT:
        raise InvalidArgument(
            f"--limit {limit}: expected a whole number from 1 to {MAX_LIST_LIMIT}"
        )
    return limit


def check_days(days: float) -> float:
    """`schedule --days`: a finite number of days above zero, at most MAX_SCHEDULE_DAYS."""
    if not math.isfinite(days) or days <= 0:
        raise InvalidArgument(f"--days {days:g}: expected a number of days greater than zero")
    if days > MAX_SCHEDULE_DAYS:
        raise InvalidArgument(
            f"--days {days:g}: at most {MAX_SCHEDULE_DAYS:g} days (ten years) at once"
        )
    return days


def check_range(
    start: datetime, end: datetime, start_text: str | None, end_text: str | None
) -> None:
    """`schedule --from/--to`: the end after the start, at most MAX_SCHEDULE_DAYS apart."""
    if end <= start:
        raise InvalidArgument(f"--to {end_text!r} is not after --from {start_text or 'now'!r}")
    if end - start > timedelta(days=MAX_SCHEDULE_DAYS):
        raise InvalidArgument(
            f"--from {start_text or 'now'!r} --to {end_text!r}: at most {MAX_SCHEDULE_DAYS:g} days "
            "(ten years) at once"
        )


def check_text(value: str | None, name: str) -> str | None:
    """`value` unless the database could not compare it (U+0000, a lone surrogate):
    `invalid_argument` naming `name`, for every face (the API refuses such a query or path
    parameter before any operation runs; MCP's tool arguments reach the operations as sent)."""
    if value is not None and (problem := text_problem(value)) is not None:
        raise InvalidArgument(f"{name} {problem}")
    return value


def run_id_prefix(text: str, what: str = "run") -> str:
    """A run (or chain run) id or a prefix of one, lowercased; InvalidArgument when it is too
    short, or not text the database can compare."""
    check_text(text, f"{what} id {text!r}")
    prefix = text.strip().lower()
    if len(prefix) < MIN_PREFIX:
        raise InvalidArgument(
            f"{what} id prefix {text!r} is too short: give at least {MIN_PREFIX} characters "
            f"of the id (`runlane {'chains' if what == 'chain run' else 'runs'}` lists them)"
        )
    return prefix


def confirms(confirm: str | None, name: str) -> bool:
    """Whether the name a person typed to confirm a run (`confirm`) confirms the job or
    chain `name`: only that exact name does."""
    return confirm is not None and confirm == name


def check_traceparent(traceparent: str | None) -> str | None:
    """A caller's traceparent (the API's header, the CLI's `--traceparent`) as the run stores
    it, or `invalid_traceparent` saying what is wrong with it."""
    if traceparent is None:
        return None
    try:
        return str(parse_traceparent(traceparent.strip()))
    except TraceparentError as exc:
        raise InvalidTraceparent(f"traceparent {traceparent[:80]!r} {exc}") from None


MAX_REASON_CHARS = 500  # a pause reason is a line in `runlane jobs`, not a document


def check_reason(reason: str | None) -> str | None:
    """`pause --reason`: at most MAX_REASON_CHARS characters, text the database can store."""
    if reason is None:
        return None
    if len(reason) > MAX_REASON_CHARS:
        raise InvalidArgument(
            f"--reason is {len(reason)} characters long; at most {MAX_REASON_CHARS}"
        )
    if (problem := text_problem(reason)) is not None:
        raise InvalidArgument(f"--reason {problem}")
    return reason
