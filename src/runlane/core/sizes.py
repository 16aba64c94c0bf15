"""Sizes in bytes as the catalog writes them: `10MiB`, `100MB`, `512KiB`, or a number of bytes."""

from __future__ import annotations

import math
import re

# Decimal units are powers of 1000 and the `i` ones powers of 1024, as Kubernetes and the SI
# spell them; a unit's case does not matter (`mb`, `MB` and `Mb` are all megabytes: nothing in a
# log cap is counted in bits). `B` may follow any unit or stand alone.
_UNIT_BYTES = {
    "": 1,
    "k": 1000,
    "m": 1000**2,
    "g": 1000**3,
    "t": 1000**4,
    "ki": 1024,
    "mi": 1024**2,
    "gi": 1024**3,
    "ti": 1024**4,
}
# ASCII digits only (`\d` takes any script's, which int() reads too), as the JSON Schema has it.
_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([kmgt]i?)?b?$", re.IGNORECASE)

_EXPECTED = "expected a size such as 512KiB, 10MiB, 100MB or 1GiB (or a number of bytes)"


def parse_size(text: str | int | float) -> int:
    """Bytes in a size such as `10MiB`, `100MB`, `1.5GiB` or `4096`; a bare number means bytes.

    Fractions of a byte round down. Raises ValueError with a plain message on anything else
    (negative, not a number, an unknown unit)."""
    if isinstance(text, bool):
        raise ValueError(f"{_EXPECTED}, got {text!r}")
    if isinstance(text, int):
        number: float | int = text
    elif isinstance(text, float):
        if not math.isfinite(text):
            raise ValueError(f"{_EXPECTED}, got {text!r}")
        number = text
    else:
        match = _SIZE.match(text.strip().replace(" ", ""))
        if match is None:
            raise ValueError(f"{_EXPECTED}, got {text[:40]!r}")
        digits, unit = match.groups()
        scale = _UNIT_BYTES[(unit or "").lower()]
        # Whole numbers stay exact ints: float() would round a large byte count.
        return int(digits) * scale if "." not in digits else math.floor(float(digits) * scale)
    if number < 0:
        raise ValueError(f"a size cannot be negative, got {text!r}")
    return math.floor(number)


def format_size(size: int) -> str:
    """The shortest exact binary spelling of `size` bytes (`10485760` → `10MiB`, `1500` → `1500B`)."""
    for unit in ("Ti", "Gi", "Mi", "Ki"):
        scale = _UNIT_BYTES[unit.lower()]
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}B"
    return f"{size}B"
