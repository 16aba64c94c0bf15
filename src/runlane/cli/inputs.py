"""Parsing what a person types on the command line into a request's arguments.

Only the text of the CLI's own syntax is parsed here (`-p NAME=VALUE`, arguments that are not
UTF-8; `emit --data` JSON is `operations.parse_event_data`, which the web UI's form shares); what the request's arguments mean (a limit, a time, an id prefix)
is checked by `runlane.service.operations`, for every face. Every function here raises
`InvalidArgument` (exit 2) with one line that says which flag or argument is wrong and why.
"""

from __future__ import annotations

from collections.abc import Sequence

from runlane.errors import InvalidArgument


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
