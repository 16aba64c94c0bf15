"""Durations as the catalog writes them: `30s`, `10m`, `2h`, `1d`, or combined like `1h30m`."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from runlane.errors import ConfigError

_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
# ASCII digits only, as the catalog's JSON Schema has it (`\d` there is 0-9; Python's `\d` and
# float() also read other scripts' digits, `٣s`).
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d|w)")
_WHOLE = re.compile(r"^(?:[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h|d|w))+$")

MAX_DURATION_DAYS = 36_500
MAX_DURATION_SECONDS = MAX_DURATION_DAYS * 86400.0
"""The longest duration the catalog and the settings accept: 100 years.

Far beyond any real deadline, TTL, grace or interval, yet every use stays in range: `now` plus or
minus a few such durations (a deadline then an orphan grace; ten heartbeat intervals back for
pruning launchers) stays well inside `datetime`'s years 1-9999 and PostgreSQL's timestamps, the
seconds (3.2e9) fit a `double precision` / SQLite `REAL` column and a PostgreSQL interval, and a
wait that long is below `threading.TIMEOUT_MAX` (about 292 years). A typo such as `99999999d` is refused where it is
parsed instead of overflowing a date later."""

MAX_DURATION_TEXT = f"{MAX_DURATION_DAYS}d (100 years)"

_EXPECTED = "expected a duration such as 30s, 10m, 2h or 1d"


def parse_duration(text: str | int | float, *, maximum: float | None = None) -> float:
    """Seconds in a duration such as `90s`, `10m`, `1h30m`, `1d`. A bare number means seconds.

    With `maximum` (the catalog and the settings pass `MAX_DURATION_SECONDS`), a longer duration
    is refused too. Raises ValueError with a plain message on anything else.
    """
    if isinstance(text, bool):
        raise ValueError(f"{_EXPECTED}, got {text!r}")
    if isinstance(text, int | float):
        if isinstance(text, float) and math.isnan(text):
            raise ValueError(f"{_EXPECTED}, got {text!r}")
        if text < 0:
            raise ValueError(f"a duration cannot be negative, got {text!r}")
        seconds = _as_float(text)
    else:
        s = text.strip().lower().replace(" ", "")
        if re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", s):
            seconds = float(s)
        elif not s or not _WHOLE.match(s):
            raise ValueError(f"{_EXPECTED}, got {text!r}")
        else:
            # float() of a very long run of digits is inf, never an error.
            seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(s))
    if maximum is not None and not seconds <= maximum:
        raise ValueError(
            f"a duration cannot be longer than {_limit_text(maximum)}, got {_shown(text)}"
        )
    return seconds


def _as_float(number: int | float) -> float:
    try:
        return float(number)
    except OverflowError:  # an int beyond any float: longer than any limit
        return math.inf


def _limit_text(maximum: float) -> str:
    return MAX_DURATION_TEXT if maximum == MAX_DURATION_SECONDS else format_duration(maximum)


def _shown(text: str | int | float) -> str:
    try:
        shown = repr(text)
    except ValueError:  # an int of more digits than Python will print
        return "a number of more than 4300 digits"
    return f"{shown[:40]}…" if len(shown) > 40 else shown


def format_duration(seconds: float) -> str:
    """The shortest catalog-style spelling of `seconds` (`90` → `1m30s`)."""
    if not math.isfinite(seconds):
        return repr(seconds)
    if seconds < 1 and seconds > 0:
        return f"{round(seconds * 1000)}ms"
    total = round(seconds)
    if total == 0:
        return "0s"
    out = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, total = divmod(total, size)
        if n:
            out.append(f"{n}{unit}")
    return "".join(out)


def env_duration(
    environ: Mapping[str, str],
    name: str,
    default: float,
    *,
    minimum: float = 0.0,
    maximum: float = MAX_DURATION_SECONDS,
    why: str = "",
) -> float:
    """The duration in the environment variable `name` (`default` when unset or empty), more
    than zero and from `minimum` to `maximum`; otherwise ConfigError, one line:
    `NAME='value': what is wrong` (and `why`, when the bounds have a reason)."""
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = parse_duration(raw, maximum=maximum)
    except ValueError as exc:
        raise ConfigError(f"{name}={_shown(raw)}: {exc}") from exc
    if value <= 0:
        raise ConfigError(f"{name}={raw!r}: must be greater than zero")
    if value < minimum:
        raise ConfigError(
            f"{name}={raw!r}: cannot be shorter than {format_duration(minimum)}"
            + (f" ({why})" if why else "")
        )
    return value
