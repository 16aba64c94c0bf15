"""Durations as the catalog writes them: `30s`, `10m`, `2h`, `1d`, or combined like `1h30m`."""

from __future__ import annotations

import re

_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_WHOLE = re.compile(r"^(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+$")


def parse_duration(text: str | int | float) -> float:
    """Seconds in a duration such as `90s`, `10m`, `1h30m`, `1d`. A bare number means seconds.

    Raises ValueError with a plain message on anything else.
    """
    if isinstance(text, bool):
        raise ValueError(f"expected a duration such as 30s, 10m, 2h or 1d, got {text!r}")
    if isinstance(text, int | float):
        if text < 0:
            raise ValueError(f"a duration cannot be negative, got {text!r}")
        return float(text)
    s = text.strip().lower().replace(" ", "")
    if re.fullmatch(r"\d+(?:\.\d+)?", s):
        return float(s)
    if not s or not _WHOLE.match(s):
        raise ValueError(f"expected a duration such as 30s, 10m, 2h or 1d, got {text!r}")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _PART.findall(s))


def format_duration(seconds: float) -> str:
    """The shortest catalog-style spelling of `seconds` (`90` → `1m30s`)."""
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
