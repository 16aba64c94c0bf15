"""Parsing what a person types on the command line into a request's arguments.

Only the text of the CLI's own syntax is parsed here (`-p NAME=VALUE`, `emit --data` JSON,
arguments that are not UTF-8); what the request's arguments mean (a limit, a time, an id prefix)
is checked by `runlane.service.operations`, for every face. Every function here raises
`InvalidArgument` (exit 2) with one line that says which flag or argument is wrong and why.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from runlane.catalog.params import MAX_PARAMS_BYTES
from runlane.errors import InvalidArgument

MAX_DATA_BYTES = MAX_PARAMS_BYTES  # `emit --data`, as the event data's compact JSON
MAX_DATA_DEPTH = 64  # how deeply `emit --data` may nest objects and arrays


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


def parse_params(pairs: list[str]) -> dict[str, str]:
    """`run -p NAME=VALUE`, repeatable: the params as text (the job's types check them)."""
    params: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise InvalidArgument(f"-p {pair!r}: expected NAME=VALUE")
        if name in params:
            raise InvalidArgument(f"-p {name}: given twice")
        params[name] = value
    return params


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not allowed (JSON has no NaN or Infinity)")


def parse_data(text: str) -> dict[str, Any]:
    """`emit --data`: a JSON object of at most MAX_DATA_BYTES, nested at most MAX_DATA_DEPTH
    deep, without NaN or Infinity."""
    size = len(text.encode("utf-8", "surrogateescape"))
    if size > MAX_DATA_BYTES:
        raise InvalidArgument(
            f"--data is {size} bytes; the limit is {MAX_DATA_BYTES} bytes (1 MiB)"
        )
    depth = _nesting(text) if text.count("[") + text.count("{") > MAX_DATA_DEPTH else 0
    if depth > MAX_DATA_DEPTH:
        raise InvalidArgument(
            f"--data is nested {depth} levels deep; the limit is {MAX_DATA_DEPTH}"
        )
    try:
        parsed = json.loads(text, parse_constant=_no_constants)
    except RecursionError:  # pragma: no cover - _nesting catches this first
        raise InvalidArgument(
            f"--data is nested too deeply; the limit is {MAX_DATA_DEPTH}"
        ) from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):  # Python's own advice is no use here
            raise InvalidArgument(
                f"--data holds a whole number of more than {sys.get_int_max_str_digits()} "
                "digits; send it as a string"
            ) from None
        raise InvalidArgument(f"--data is not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise InvalidArgument(f"--data must be a JSON object, got {type(parsed).__name__}")
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
