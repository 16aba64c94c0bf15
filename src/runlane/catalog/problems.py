"""The report of a catalog's problems, each at FILE:LINE:COL in plain English: pydantic's errors
translated (bounds and field names read from the models) and the "did you mean" hints."""

from __future__ import annotations

import difflib
import sys
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from runlane.catalog.models import DURATION_CHECK, RESERVED_FIELDS, Catalog
from runlane.core.durations import MAX_DURATION_TEXT, format_duration
from runlane.errors import CatalogError

Loc = tuple[str | int, ...]
Position = tuple[int, int]


@dataclass(order=True, frozen=True)
class Problem:
    """One problem, at a 1-based line and column of the file."""

    line: int
    col: int
    message: str


@dataclass
class ProblemReport:
    """The positions of the nodes we read, and the problems found so far."""

    positions: dict[Loc, Position] = field(default_factory=dict)
    key_positions: dict[Loc, Position] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    # Values the YAML reader could not read, each said once: read as None, they are not said
    # again as the wrong type.
    unread: set[Loc] = field(default_factory=set)

    def where(self, loc: Loc, *, key: bool = False) -> Position:
        """The position of the node at `loc` (its key if `key`), or of its nearest ancestor."""
        if key and loc in self.key_positions:
            return self.key_positions[loc]
        for end in range(len(loc), -1, -1):
            pos = self.positions.get(loc[:end])
            if pos is not None:
                return pos
        return (1, 1)

    def add(self, loc: Loc, message: str, *, key: bool = False) -> None:
        """A problem at the node `loc` (at its key if `key`)."""
        self.add_at(self.where(loc, key=key), message)

    def add_at(self, position: Position, message: str) -> None:
        self.problems.append(Problem(position[0], position[1], message))

    def unreadable(self, loc: Loc, message: str) -> None:
        """The value at `loc` could not be read (it stands as None): `message` says why."""
        self.unread.add(loc)
        self.add(loc, message)

    def as_error(self, filename: str) -> CatalogError:
        """One CatalogError listing every problem once, sorted by position, as `FILE:LINE:COL: …`."""
        problems = sorted(set(self.problems))
        count = len(problems)
        summary = f"{filename}: {count} error{'s' if count != 1 else ''}"
        return CatalogError(
            summary, [f"{filename}:{p.line}:{p.col}: {_one_line(p.message)}" for p in problems]
        )


def _one_line(message: str) -> str:
    """Escape control characters (a key may hold a newline) so each problem stays one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


def number_too_large(loc: Loc, digits: int | None, *, negative: bool) -> str:
    """One line for a whole number too long to read or show (`digits` digits; None: more than
    Python's limit) at `loc`: the field's bound on that side when it has one (the same words as
    for a value past it), else that the number is too large (or small)."""
    limit = sys.get_int_max_str_digits()
    size = f"{digits} digits" if digits is not None else f"more than {limit} digits"
    where, bound = dotted(loc), field_bound(loc, lower=negative)
    if bound is not None:
        return f"{where}: {bound}, got a {'negative ' if negative else ''}number of {size}"
    which = "small" if negative else "large"
    limit_text = f"; at most {limit}" if digits is not None else ""
    return f"{where}: the number is too {which} ({size}{limit_text})"


def report_validation_errors(exc: ValidationError, prefix: Loc, report: ProblemReport) -> None:
    """Each pydantic error of `exc` as a problem, at its node under `prefix`; values the YAML
    reader could not read were reported already and are left out."""
    for error in exc.errors(include_url=False):
        loc, message, on_key = _translate(error, prefix)
        if loc not in report.unread:
            report.add(loc, message, key=on_key)


def dotted(loc: Loc) -> str:
    """`jobs.sync.schedules[0].cron`: a location as the messages name it."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out or "the catalog"


def got(value: object) -> str:
    """`got 3`, `got a list`: the value found, shortened, for a message."""
    if value is None:
        return "got nothing"
    if isinstance(value, bool):
        return f"got {'true' if value else 'false'}"
    if isinstance(value, dict):
        return "got a mapping"
    if isinstance(value, list):
        return "got a list"
    text = repr(value)
    return f"got {text[:60]}…" if len(text) > 60 else f"got {text}"


_PLAIN: dict[str, str] = {
    "string_type": "expected a string",
    "int_type": "expected a whole number",
    "int_parsing": "expected a whole number",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "list_type": "expected a list",
    "dict_type": "expected a mapping (key: value)",
    "model_type": "expected a mapping (key: value)",
    "model_attributes_type": "expected a mapping (key: value)",
    "date_type": "expected a date as YYYY-MM-DD",
    "date_parsing": "expected a date as YYYY-MM-DD",
    "date_from_datetime_parsing": "expected a date as YYYY-MM-DD",
    "date_from_datetime_inexact": "expected a date as YYYY-MM-DD, without a time",
}


def _translate(error: ErrorDetails, prefix: Loc) -> tuple[Loc, str, bool]:
    """Plain English for one pydantic error, and where it points."""
    raw_loc: Loc = tuple(error["loc"])
    on_key = bool(raw_loc) and raw_loc[-1] == "[key]"
    loc = prefix + tuple(p for p in raw_loc if p != "[key]")
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    where = dotted(loc)
    if kind == "missing":
        parent = loc[:-1]
        return parent, f"missing required field {loc[-1]!r} in {dotted(parent)}", False
    if kind == "extra_forbidden":
        parent = loc[:-1]
        allowed = _allowed_fields(parent)
        return loc, unknown_field(str(loc[-1]), dotted(parent), allowed), True
    if kind == "value_error":
        message = str(error["msg"]).removeprefix("Value error, ")
        return loc, f"{where}: {message}", on_key
    if on_key and kind == "string_pattern_mismatch":
        return (
            loc,
            f"{where}: {loc[-1]!r} is not a valid environment variable name "
            "(letters, digits and _, not starting with a digit)",
            True,
        )
    if kind == "string_pattern_mismatch":
        return loc, f"{where}: {got(value)}, which does not match {ctx.get('pattern')}", on_key
    if kind == "literal_error":
        return loc, f"{where}: expected {ctx.get('expected')}, {got(value)}", on_key
    if kind in ("greater_than_equal", "greater_than"):
        bound = ctx.get("ge", ctx.get("gt"))
        word = "at least" if kind == "greater_than_equal" else "more than"
        shown = value
        if isinstance(value, float) and loc and loc[-1] not in ("max_attempts",):
            shown = format_duration(value)
        return loc, f"{where}: must be {word} {bound}, got {shown}", on_key
    if kind in ("less_than_equal", "less_than"):
        bound = ctx.get("le", ctx.get("lt"))
        word = "at most" if kind == "less_than_equal" else "less than"
        return loc, f"{where}: must be {word} {bound}, {got(value)}", on_key
    if kind in ("too_short", "string_too_short"):
        return loc, f"{where}: must not be empty", on_key
    if kind in _PLAIN:
        if kind == "string_type" and len(loc) >= 2 and loc[-2] == "command":
            return (
                loc,
                f"{where}: every argv item must be a string (quote it), {got(value)}",
                on_key,
            )
        return loc, f"{where}: {_PLAIN[kind]}, {got(value)}", on_key
    message = str(error["msg"])
    return loc, f"{where}: {message[:1].lower()}{message[1:]}", on_key


def field_names(model: type[BaseModel]) -> list[str]:
    """The names a model's fields are written with in the YAML (aliases), reserved ones left out."""
    names = [info.alias or name for name, info in model.model_fields.items()]
    return [n for n in names if n not in RESERVED_FIELDS]


def unknown_field(name: str, where: str, allowed: list[str]) -> str:
    """`unknown field X in WHERE` with the closest allowed name, or the list of allowed ones."""
    hint = ""
    close = difflib.get_close_matches(name, allowed, n=1)
    if close:
        hint = f" (did you mean {close[0]!r}?)"
    elif allowed:
        hint = f"; allowed: {', '.join(allowed)}"
    return f"unknown field {name!r} in {where}{hint}"


def _type_at(loc: Loc) -> tuple[Any, list[Any]] | None:
    """The type of the value at `loc` and its field's constraints (pydantic's metadata), by
    walking the model types; None where the models say nothing of `loc`."""
    current: Any = Catalog
    metadata: list[Any] = []
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            fields = {info.alias or name: info for name, info in current.model_fields.items()}
            info = fields.get(str(part))
            if info is None:
                return None
            current, metadata = info.annotation, list(info.metadata)
        elif typing.get_origin(current) is dict:
            current, metadata = typing.get_args(current)[1], []
        elif typing.get_origin(current) is list:
            current, metadata = typing.get_args(current)[0], []
        else:
            return None
    return current, metadata


def _allowed_fields(loc: Loc) -> list[str]:
    """The field names of the model found at `loc`, by walking the model types."""
    found = _type_at(loc)
    current = _unwrap(found[0]) if found is not None else None
    if isinstance(current, type) and issubclass(current, BaseModel):
        return field_names(current)
    return []


def field_bound(loc: Loc, *, lower: bool) -> str | None:
    """What the field at `loc` allows at most (`must be at most 1000`, a duration's 100 years),
    or at least when `lower`; None when it sets no such bound."""
    found = _type_at(loc)
    if found is None:
        return None
    constraints = found[1] + _unwrap_annotated(found[0])[1]
    # pydantic's Le, Lt, Ge, Gt (annotated-types), read by their one field each.
    words = (
        (("ge", "at least"), ("gt", "more than"))
        if lower
        else (("le", "at most"), ("lt", "less than"))
    )
    for item in constraints:  # grows as it goes: a nested `Field(gt=0)` adds its own list
        if isinstance(item, FieldInfo):
            constraints += item.metadata
        elif item == DURATION_CHECK:
            if lower:
                return "a duration cannot be negative"
            return f"a duration cannot be longer than {MAX_DURATION_TEXT}"
        for name, word in words:
            if getattr(item, name, None) is not None:
                return f"must be {word} {getattr(item, name)}"
    return None


def _unwrap(tp: Any) -> Any:
    return _unwrap_annotated(tp)[0]


def _unwrap_annotated(tp: Any) -> tuple[Any, list[Any]]:
    """`tp` without `Annotated[...]` and `| None`, and the metadata the `Annotated` held."""
    metadata: list[Any] = []
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp, *more = typing.get_args(tp)
            metadata += more
        elif origin in (typing.Union, types.UnionType):
            options = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(options) != 1:
                return tp, metadata
            tp = options[0]
        else:
            return tp, metadata


def did_you_mean(name: str, known: set[str]) -> str:
    """` (did you mean 'x'?)` for a name close to one of `known`, else what is known."""
    close = difflib.get_close_matches(name, sorted(known), n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    if not known:
        return " (none are defined)"
    names = sorted(known)
    more = f", … {len(names) - 8} more" if len(names) > 8 else ""
    return f" (known: {', '.join(names[:8])}{more})"
