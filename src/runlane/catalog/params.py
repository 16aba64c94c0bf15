"""Typed run params: the allowlist a job declares (`week: int?`) and the coercion of a run's values."""

from __future__ import annotations

import difflib
import json
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from runlane.errors import ParamError, PayloadTooLarge

MAX_PARAMS_BYTES = 1024 * 1024
"""The largest a run's params may be, measured as compact JSON (UTF-8)."""

ParamType = Literal["int", "float", "bool", "str", "choice"]

PARAM_NAME_RE = re.compile(r"[a-z_][a-z0-9_]*")
_SPEC_RE = re.compile(r"^\s*(int|float|bool|str|choice\[(?P<choices>[^\]]*)\])\s*(?P<opt>\?)?\s*$")
PARAM_SPEC_PATTERN = r"^\s*(int|float|bool|str|choice\[[^\]]*\])\s*\??\s*$"

_INT_RE = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_TRUE = frozenset({"true", "yes", "1"})
_FALSE = frozenset({"false", "no", "0"})
_TYPE_WORDS = {"int": "an int", "float": "a float", "bool": "a bool", "str": "a string"}


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """One allowed param: its type, whether it may be left out, and the values of a `choice`."""

    type: ParamType
    optional: bool = False
    choices: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: object) -> ParamSpec:
        """`int`, `float`, `bool`, `str` or `choice[a,b]`, each optionally followed by `?`."""
        if isinstance(text, ParamSpec):
            return text
        if not isinstance(text, str):
            raise ValueError(
                f"a param type must be a string such as int, float, bool, str or choice[a,b] "
                f"(add ? for optional), got {text!r}"
            )
        m = _SPEC_RE.match(text)
        if not m:
            raise ValueError(
                f"unknown param type {text!r}; use int, float, bool, str or choice[a,b,c], "
                "optionally followed by ? (e.g. int?)"
            )
        optional = m.group("opt") is not None
        if m.group("choices") is None:
            # The regex allows only the four plain type words here.
            return cls(type=cast(ParamType, m.group(1)), optional=optional)
        choices = tuple(c.strip() for c in m.group("choices").split(","))
        if not choices or any(not c for c in choices):
            raise ValueError(f"choice param type {text!r} has an empty choice")
        if len(set(choices)) != len(choices):
            raise ValueError(f"choice param type {text!r} lists a choice twice")
        return cls(type="choice", optional=optional, choices=choices)

    def __str__(self) -> str:
        base = f"choice[{','.join(self.choices)}]" if self.type == "choice" else self.type
        return base + ("?" if self.optional else "")

    def describe(self) -> str:
        """`an int`, `one of a, b` — for error messages."""
        if self.type == "choice":
            return "one of " + ", ".join(self.choices)
        return _TYPE_WORDS[self.type]


def coerce_params(
    specs: Mapping[str, ParamSpec], raw: Mapping[str, object], *, job_name: str, from_strings: bool
) -> dict[str, Any]:
    """Check `raw` against a job's param allowlist `specs` (`ResolvedJob.params`) and return the
    typed values; `job_name` names the job in the messages.

    `from_strings=True` parses text as a person types it on the command line (`-p week=3`);
    otherwise the values are JSON values and must already have the right JSON type (a bool is
    never an int). Optional params left out (or JSON null) are simply absent from the result.
    Raises ParamError naming every problem at once, or PayloadTooLarge above MAX_PARAMS_BYTES.
    """
    problems: list[tuple[str | None, str]] = []  # (the param, what is wrong with it)
    result: dict[str, Any] = {}
    ill_typed: set[str] = set()
    for name in sorted(raw, key=str):
        value = raw[name]
        spec = specs.get(name) if isinstance(name, str) else None
        if spec is None:
            problems.append((str(name), _unknown_param(str(name), specs)))
            continue
        if value is None and not from_strings:
            continue  # JSON null: treated as not given
        try:
            result[name] = _coerce_one(spec, value, from_strings=from_strings)
        except ValueError as exc:
            ill_typed.add(name)
            problems.append((name, f"param {name!r} must be {exc}"))
    for name, spec in specs.items():
        if not spec.optional and name not in result and name not in ill_typed:
            problems.append((name, f"missing required param {name!r} ({spec})"))
    if problems:
        text = "; ".join(problem for _, problem in problems)
        raise ParamError(f"job {job_name!r}: {text}", problems)
    size = len(
        json.dumps(result, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
    )
    if size > MAX_PARAMS_BYTES:
        raise PayloadTooLarge(
            f"job {job_name!r}: params are {size} bytes as JSON; the limit is {MAX_PARAMS_BYTES} "
            "bytes (1 MiB)"
        )
    return result


def _unknown_param(name: str, specs: Mapping[str, ParamSpec]) -> str:
    if not specs:
        return f"unknown param {name!r}: this job takes no params"
    allowed = ", ".join(f"{n} ({s})" for n, s in specs.items())
    hint = ""
    # Case first: difflib finds nothing close for one-letter names (`C` for `c`).
    close = [n for n in specs if n.lower() == name.lower()] or difflib.get_close_matches(
        name, list(specs), n=1
    )
    if close:
        hint = f" (did you mean {close[0]!r}?)"
    return f"unknown param {name!r}{hint}; allowed: {allowed}"


def _coerce_one(spec: ParamSpec, value: object, *, from_strings: bool) -> object:
    """The typed value, or ValueError whose text completes 'param X must be …'."""
    if from_strings and isinstance(value, str):
        return _from_string(spec, value)
    return _from_json(spec, value)


def _got(value: object) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int of more digits than Python will print
        return f"got a number of more than {sys.get_int_max_str_digits()} digits"
    return f"got {text[:60]}…" if len(text) > 60 else f"got {text}"


def _too_many_digits(spec: ParamSpec, digits: int | None) -> ValueError:
    """The error for a whole number of more digits (None: unknown) than Python reads or writes
    (`sys.get_int_max_str_digits()`, 4300 by default): no job could be given it, as JSON or as
    text."""
    limit = sys.get_int_max_str_digits()
    got = f"one of {digits}" if digits is not None else "a longer one"
    return ValueError(f"{spec.describe()} of at most {limit} digits, got {got}")


def _from_string(spec: ParamSpec, text: str) -> object:
    if spec.type == "str":
        return text
    if spec.type == "choice":
        if text in spec.choices:
            return text
        raise ValueError(f"{spec.describe()}, {_got(text)}")
    stripped = text.strip()
    if spec.type == "int" and _INT_RE.fullmatch(stripped):
        try:
            return int(stripped)
        except ValueError:  # the only one the pattern leaves: too many digits
            raise _too_many_digits(spec, len(stripped.lstrip("+-"))) from None
    if spec.type == "float" and _FLOAT_RE.fullmatch(stripped):
        number = float(stripped)
        if math.isfinite(number):
            return number
        raise ValueError(  # a number, beyond what a float holds
            f"a float of at most {sys.float_info.max:.4g} either way, got a number too large "
            f"({len(stripped)} characters)"
        )
    if spec.type == "bool":
        word = stripped.lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise ValueError(f"a bool (true/false, yes/no, 1/0), {_got(text)}")
    raise ValueError(f"{spec.describe()}, {_got(text)}")


def _from_json(spec: ParamSpec, value: object) -> object:
    if spec.type == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            limit = sys.get_int_max_str_digits()
            if limit and value.bit_length() > 3 * limit and abs(value) >= 10**limit:
                raise _too_many_digits(spec, None)  # it could not be stored as JSON
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif spec.type == "float":
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:  # an int beyond any float
                number = math.inf
            if math.isfinite(number):
                return number
    elif spec.type == "bool":
        if isinstance(value, bool):
            return value
    elif spec.type == "str":
        if isinstance(value, str):
            return value
    elif isinstance(value, str) and value in spec.choices:
        return value
    raise ValueError(f"{spec.describe()}, {_got(value)}")


def params_json_schema(specs: Mapping[str, ParamSpec]) -> dict[str, Any]:
    """A job's param allowlist as a JSON Schema (draft 2020-12) of the `params` object a run
    takes as JSON: each param's type (a `choice` as an enum), the required ones, no others.
    An optional param may be null (treated as left out)."""
    json_types = {"int": "integer", "float": "number", "bool": "boolean", "str": "string"}
    properties: dict[str, Any] = {}
    for name, spec in specs.items():
        prop: dict[str, Any] = (
            {"type": "string", "enum": list(spec.choices)}
            if spec.type == "choice"
            else {"type": json_types[spec.type]}
        )
        if spec.optional:
            prop["type"] = [prop["type"], "null"]
            if "enum" in prop:
                prop["enum"] = [*prop["enum"], None]
        properties[name] = prop
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name, spec in specs.items() if not spec.optional],
        "additionalProperties": False,
    }
