"""Load `catalog.yaml` and report every problem at once as `FILE:LINE:COL: message`.

The YAML is read with a loader that remembers where each node starts (and refuses duplicate
keys), pydantic validates each section with all its errors collected, and the cross-references
(profiles, deadlines, chain steps, cycles, seasons, reserved fields, event listeners, and the
params of jobs that triggers start) are checked on top. Nothing malformed ever escapes as a
traceback: it all ends as one CatalogError.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from yaml.tokens import ScalarToken

from runlane.catalog.models import (
    DURATION_CHECK,
    RESERVED_FIELDS,
    Catalog,
    Chain,
    Defaults,
    GlobalSettings,
    Job,
    Profile,
    is_valid_name,
)
from runlane.catalog.params import PARAM_NAME_RE, ParamSpec
from runlane.core.durations import (
    MAX_DURATION_SECONDS,
    MAX_DURATION_TEXT,
    format_duration,
    parse_duration,
)
from runlane.errors import CatalogError

Loc = tuple[str | int, ...]
Position = tuple[int, int]

SUPPORTED_VERSION = 1
# Aliases can make a small file expand enormously ("billion laughs"); no real catalog is near this.
_MAX_EXPANDED_NODES = 200_000


@dataclass(order=True, frozen=True)
class _Problem:
    line: int
    col: int
    message: str


@dataclass
class _Report:
    """The positions of the nodes we read, and the problems found so far."""

    positions: dict[Loc, Position] = field(default_factory=dict)
    key_positions: dict[Loc, Position] = field(default_factory=dict)
    problems: list[_Problem] = field(default_factory=list)
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
        self.problems.append(_Problem(position[0], position[1], message))

    def unreadable(self, loc: Loc, message: str) -> None:
        """The value at `loc` could not be read (it stands as None): `message` says why."""
        self.unread.add(loc)
        self.add(loc, message)


# --------------------------------------------------------------------------------------------
# Public entry points


def load_catalog(path: str | os.PathLike[str]) -> Catalog:
    """Read and validate the catalog file at `path`. Raises CatalogError listing every problem."""
    name = os.fspath(path)
    try:
        raw = Path(name).read_bytes()
    except FileNotFoundError:
        raise CatalogError(f"{name}: file not found", [f"{name}: file not found"]) from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise CatalogError(
            f"{name}: cannot read: {reason}", [f"{name}: cannot read: {reason}"]
        ) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        problem = f"{name}:{line}:{col}: the file is not UTF-8 text"
        raise CatalogError(f"{name}: 1 error", [problem]) from None
    return parse_catalog_text(text, filename=name)


def parse_catalog_text(text: str, filename: str = "catalog.yaml") -> Catalog:
    """Validate catalog YAML given as text; `filename` is used in the problem positions."""
    report = _Report()
    catalog: Catalog | None = None
    try:
        data = _read_yaml(text, report)
        if data is not None:
            catalog = _validate(data, report)
    except RecursionError:
        report.problems.append(_Problem(1, 1, "the document is nested too deeply"))
    if catalog is None and not report.problems:
        report.add_at((1, 1), "the catalog could not be read")
    if report.problems or catalog is None:
        problems = sorted(set(report.problems))
        count = len(problems)
        summary = f"{filename}: {count} error{'s' if count != 1 else ''}"
        raise CatalogError(
            summary, [f"{filename}:{p.line}:{p.col}: {_one_line(p.message)}" for p in problems]
        )
    return catalog


def _one_line(message: str) -> str:
    """Escape control characters (a key may hold a newline) so each problem stays one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


# --------------------------------------------------------------------------------------------
# YAML with positions


class _CatalogYamlLoader(yaml.SafeLoader):
    """SafeLoader without YAML 1.1's base-60 numbers, so `latest: 19:15` stays a string, and
    with YAML 1.2's plain scalars in flow context, so `{week: int?, dry_run: bool?}` reads."""

    def scan_plain(self) -> ScalarToken:
        # PyYAML's own scan_plain, except that `?` no longer ends a plain scalar inside `{}`/`[]`
        # (YAML 1.2 allows it; the catalog's optional-param marker needs it).
        chunks: list[str] = []
        start_mark = self.get_mark()
        end_mark = start_mark
        indent = self.indent + 1
        spaces: list[str] = []
        breaks = "\0 \t\r\n\x85\u2028\u2029"
        while True:
            length = 0
            if self.peek() == "#":
                break
            while True:
                ch = self.peek(length)
                if (
                    ch in breaks
                    or (
                        ch == ":"
                        and self.peek(length + 1) in breaks + (",[]{}" if self.flow_level else "")
                    )
                    or (self.flow_level and ch in ",[]{}")
                ):
                    break
                length += 1
            if length == 0:
                break
            self.allow_simple_key = False
            chunks.extend(spaces)
            chunks.append(self.prefix(length))
            self.forward(length)
            end_mark = self.get_mark()
            more = self.scan_plain_spaces(indent, start_mark)
            if not more or self.peek() == "#" or (not self.flow_level and self.column < indent):
                break
            spaces = more
        return ScalarToken("".join(chunks), True, start_mark, end_mark)


_CatalogYamlLoader.yaml_implicit_resolvers = {
    first: [
        (tag, rx)
        for tag, rx in resolvers
        if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_CatalogYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(
        r"""^(?:[-+]?0b[0-1_]+
        |[-+]?0[0-7_]+
        |[-+]?(?:0|[1-9][0-9_]*)
        |[-+]?0x[0-9a-fA-F_]+)$""",
        re.X,
    ),
    list("-+0123456789"),
)
_CatalogYamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
        |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _mark_position(mark: yaml.Mark | None) -> Position:
    if mark is None:
        return (1, 1)
    return (mark.line + 1, mark.column + 1)


_INT_TAG = "tag:yaml.org,2002:int"
_PLAIN_COLLECTION_TAGS = frozenset({"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"})


class _TooLarge(Exception):
    """The document (its aliases expanded) is beyond any reasonable catalog."""

    def __init__(self, by_aliases: bool) -> None:
        super().__init__()
        self.by_aliases = by_aliases


@dataclass
class _Builder:
    """Turns composed YAML nodes into plain data, recording each node's position by path."""

    loader: _CatalogYamlLoader
    report: _Report
    cache: dict[int, tuple[Any, int]] = field(default_factory=dict)
    in_progress: set[int] = field(default_factory=set)
    expanded: int = 0
    aliases_reused: int = 0  # values built once and counted again where an alias repeats them

    def build(self, node: yaml.Node, loc: Loc) -> Any:
        self.report.positions.setdefault(loc, _mark_position(node.start_mark))
        cached = self.cache.get(id(node))
        if cached is not None:
            value, size = cached
            self.aliases_reused += size
            self._count(size)
            return value
        if id(node) in self.in_progress:
            self.report.add(loc, "an alias refers to the node that contains it (a recursive alias)")
            return None
        self.in_progress.add(id(node))
        before = self.expanded
        try:
            value = self._build_new(node, loc)
        finally:
            self.in_progress.discard(id(node))
        self._count(1)
        self.cache[id(node)] = (value, self.expanded - before)
        return value

    def _count(self, size: int) -> None:
        self.expanded += size
        if self.expanded > _MAX_EXPANDED_NODES:
            raise _TooLarge(by_aliases=self.aliases_reused > self.expanded // 2)

    def _build_new(self, node: yaml.Node, loc: Loc) -> Any:
        if isinstance(node, yaml.CollectionNode) and node.tag not in _PLAIN_COLLECTION_TAGS:
            self.report.add(loc, f"unsupported YAML tag {node.tag!r}")
        if isinstance(node, yaml.MappingNode):
            return self._build_mapping(node, loc)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*loc, i)) for i, item in enumerate(node.value)]
        try:
            value = self.loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError) as exc:
            digits = _digits_beyond_int_limit(node)
            if digits is not None:
                negative = str(node.value).startswith("-")
                self.report.unreadable(loc, _number_too_large(loc, digits, negative=negative))
                return None
            reason = getattr(exc, "problem", None) or str(exc)
            self.report.unreadable(loc, f"cannot read this value: {reason}")
            return None
        if node.tag == _INT_TAG and not _printable_int(value):
            # `0x…` of thousands of digits reads, but no message could show it.
            self.report.unreadable(loc, _number_too_large(loc, None, negative=value < 0))
            return None
        return value

    def _build_mapping(self, node: yaml.MappingNode, loc: Loc) -> dict[str, Any]:
        seen: dict[str, int] = {}
        own_keys = {id(key_node) for key_node, _ in node.value}
        own_done: set[str] = set()
        for key_node, _ in node.value:
            if (
                not isinstance(key_node, yaml.ScalarNode)
                or key_node.tag == "tag:yaml.org,2002:merge"
            ):
                continue
            line = key_node.start_mark.line + 1
            if key_node.value in seen:
                self.report.add_at(
                    _mark_position(key_node.start_mark),
                    f"duplicate key {key_node.value!r} (first at line {seen[key_node.value]})",
                )
            else:
                seen[key_node.value] = line
        try:
            self.loader.flatten_mapping(node)  # applies `<<:` merge keys
        except yaml.YAMLError as exc:
            self.report.add(loc, f"bad merge key: {getattr(exc, 'problem', exc)}")
            return {}
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                self.report.add_at(
                    _mark_position(key_node.start_mark), "mapping keys must be plain names"
                )
                continue
            # Keys are always names: `on:` and `yes:` are words here, not YAML 1.1 booleans.
            key = str(key_node.value)
            key_loc = (*loc, key)
            if id(key_node) in own_keys:
                if key in own_done:
                    # A duplicate (reported above): keep the first for validation, but still
                    # read the second so problems inside it (more duplicates) are reported.
                    self.build(value_node, (*loc, key, "<duplicate>"))
                    continue
                own_done.add(key)
            self.report.key_positions[key_loc] = _mark_position(key_node.start_mark)
            self.report.positions[key_loc] = _mark_position(value_node.start_mark)
            result[key] = self.build(value_node, key_loc)
        return result


def _digits_beyond_int_limit(node: yaml.Node) -> int | None:
    """How many digits a whole number has that Python will not read (more than
    `sys.get_int_max_str_digits()`, 4300 by default); None for any other node."""
    limit = sys.get_int_max_str_digits()
    if not (isinstance(node, yaml.ScalarNode) and node.tag == _INT_TAG and limit):
        return None
    if node.value.lstrip("+-").startswith("0"):
        return None  # 0x, 0b, octal: read in a power-of-two base, which has no limit
    digits = sum(c.isdigit() for c in node.value)
    return digits if digits > limit else None


def _printable_int(value: object) -> bool:
    """False for an int of more digits than Python will print (`sys.get_int_max_str_digits()`),
    which `repr` and `str` refuse."""
    limit = sys.get_int_max_str_digits()
    if not isinstance(value, int) or not limit or value.bit_length() <= limit * 3:
        return True  # 2**(3 * limit) < 10**limit: few enough digits
    return bool(abs(value) < 10**limit)


def _number_too_large(loc: Loc, digits: int | None, *, negative: bool) -> str:
    """One line for a whole number too long to read or show (`digits` digits; None: more than
    Python's limit) at `loc`: the field's bound on that side when it has one (the same words as
    for a value past it), else that the number is too large (or small)."""
    limit = sys.get_int_max_str_digits()
    size = f"{digits} digits" if digits is not None else f"more than {limit} digits"
    where, bound = _dotted(loc), _bound(loc, lower=negative)
    if bound is not None:
        return f"{where}: {bound}, got a {'negative ' if negative else ''}number of {size}"
    which = "small" if negative else "large"
    limit_text = f"; at most {limit}" if digits is not None else ""
    return f"{where}: the number is too {which} ({size}{limit_text})"


def _read_yaml(text: str, report: _Report) -> Any:
    loader: _CatalogYamlLoader | None = None
    try:
        loader = _CatalogYamlLoader(text)  # the reader refuses control characters right here
        node = loader.get_single_node()
        if node is None:
            report.add_at((1, 1), "the catalog is empty; it needs at least `version: 1`")
            return None
        report.positions[()] = _mark_position(node.start_mark)
        return _Builder(loader, report).build(node, ())
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = exc.problem or "invalid YAML"
        if exc.context:
            message = f"{exc.context}: {message}" if exc.problem else exc.context
        if "alias" in message and "*" in _line_of(text, mark):
            message += ' (a value starting with * must be quoted, e.g. cron: "*/15 * * * *")'
        report.add_at(_mark_position(mark), f"YAML syntax error: {message}")
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        col = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        report.add_at((line, col), f"YAML syntax error: {exc.reason}")
    except yaml.YAMLError as exc:
        report.add_at((1, 1), f"YAML syntax error: {exc}")
    except _TooLarge as exc:
        report.add_at(
            (1, 1),
            "aliases expand the document far beyond any real catalog"
            if exc.by_aliases
            else f"the catalog is too large: more than {_MAX_EXPANDED_NODES:,} values "
            "(keys, lists and scalars), far beyond any real catalog",
        )
    finally:
        if loader is not None:
            loader.dispose()
    return None


def _line_of(text: str, mark: yaml.Mark | None) -> str:
    if mark is None:
        return ""
    lines = text.splitlines()
    return lines[mark.line] if 0 <= mark.line < len(lines) else ""


# --------------------------------------------------------------------------------------------
# Validation


_SECTIONS_OF_NAMED: dict[str, tuple[str, type[BaseModel]]] = {
    "profiles": ("profile", Profile),
    "jobs": ("job", Job),
    "chains": ("chain", Chain),
}


@dataclass
class _Valid:
    """The parts of the catalog that validated, for the cross-reference checks."""

    global_: GlobalSettings | None = None
    defaults: Defaults | None = None
    profiles: dict[str, Profile] = field(default_factory=dict)
    jobs: dict[str, Job] = field(default_factory=dict)
    chains: dict[str, Chain] = field(default_factory=dict)
    names: dict[str, set[str]] = field(default_factory=dict)


def _validate(data: Any, report: _Report) -> Catalog | None:
    if not isinstance(data, dict):
        report.add(
            (), "the catalog must be a mapping with `version`, `jobs` and friends at the top"
        )
        return None
    allowed = _field_names(Catalog)
    for key in data:
        if key not in allowed:
            report.add((key,), _unknown_field(key, "the catalog", allowed), key=True)
    _check_version(data, report)

    valid = _Valid()
    raw_global, raw_defaults = data.get("global"), data.get("defaults")
    valid.global_ = _validate_model(
        GlobalSettings, {} if raw_global is None else raw_global, ("global",), report
    )
    valid.defaults = _validate_model(
        Defaults, {} if raw_defaults is None else raw_defaults, ("defaults",), report
    )
    for section, (kind, model) in _SECTIONS_OF_NAMED.items():
        entries = data.get(section)
        if entries is None:
            valid.names[section] = set()
            continue
        if not isinstance(entries, dict):
            report.add(
                (section,), f"{section}: expected a mapping of {kind} names, {_got(entries)}"
            )
            valid.names[section] = set()
            continue
        valid.names[section] = set(entries)
        for name, body in entries.items():
            _check_name(kind, name, (section, name), report)
            if body is None:
                body = {}
            checked = _validate_model(model, body, (section, name), report)
            if checked is not None:
                getattr(valid, section)[name] = checked
    _check_cross_references(data, valid, report)
    if report.problems:
        return None
    try:
        return Catalog.model_validate(_without_empty_sections(data))
    except ValidationError as exc:  # a safety net: the sections above should have said it all
        _report_validation_errors(exc, (), report)
        return None


def _without_empty_sections(data: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in data.items() if v is not None or k == "version"}
    for section in _SECTIONS_OF_NAMED:
        if isinstance(out.get(section), dict):
            out[section] = {n: ({} if b is None else b) for n, b in out[section].items()}
    return out


def _check_version(data: dict[str, Any], report: _Report) -> None:
    if "version" not in data:
        report.add((), "missing required field 'version' (write `version: 1` at the top)")
        return
    version = data["version"]
    if not isinstance(version, int) or isinstance(version, bool):
        report.add(("version",), f"version must be the number 1, {_got(version)}")
    elif version != SUPPORTED_VERSION:
        report.add(
            ("version",),
            f"unsupported catalog version {version}; this runlane reads version {SUPPORTED_VERSION}",
        )


def _check_name(kind: str, name: str, loc: Loc, report: _Report) -> None:
    if not is_valid_name(name):
        report.add(
            loc,
            f"{kind} name {name!r} is not allowed: use lowercase letters, digits, '.', '_' and '-', "
            "starting with a letter or digit, at most 63 characters",
            key=True,
        )


_M = TypeVar("_M", bound=BaseModel)


def _validate_model(model: type[_M], value: Any, loc: Loc, report: _Report) -> _M | None:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        _report_validation_errors(exc, loc, report)
        return None


def _report_validation_errors(exc: ValidationError, prefix: Loc, report: _Report) -> None:
    for error in exc.errors(include_url=False):
        loc, message, on_key = _translate(error, prefix)
        if loc not in report.unread:
            report.add(loc, message, key=on_key)


def _dotted(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out or "the catalog"


def _got(value: object) -> str:
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
    where = _dotted(loc)
    if kind == "missing":
        parent = loc[:-1]
        return parent, f"missing required field {loc[-1]!r} in {_dotted(parent)}", False
    if kind == "extra_forbidden":
        parent = loc[:-1]
        allowed = _allowed_fields(parent)
        return loc, _unknown_field(str(loc[-1]), _dotted(parent), allowed), True
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
        return loc, f"{where}: {_got(value)}, which does not match {ctx.get('pattern')}", on_key
    if kind == "literal_error":
        return loc, f"{where}: expected {ctx.get('expected')}, {_got(value)}", on_key
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
        return loc, f"{where}: must be {word} {bound}, {_got(value)}", on_key
    if kind in ("too_short", "string_too_short"):
        return loc, f"{where}: must not be empty", on_key
    if kind in _PLAIN:
        if kind == "string_type" and len(loc) >= 2 and loc[-2] == "command":
            return (
                loc,
                f"{where}: every argv item must be a string (quote it), {_got(value)}",
                on_key,
            )
        return loc, f"{where}: {_PLAIN[kind]}, {_got(value)}", on_key
    message = str(error["msg"])
    return loc, f"{where}: {message[:1].lower()}{message[1:]}", on_key


def _field_names(model: type[BaseModel]) -> list[str]:
    names = [info.alias or name for name, info in model.model_fields.items()]
    return [n for n in names if n not in RESERVED_FIELDS]


def _unknown_field(name: str, where: str, allowed: list[str]) -> str:
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
        return _field_names(current)
    return []


def _bound(loc: Loc, *, lower: bool) -> str | None:
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


# --------------------------------------------------------------------------------------------
# Cross-references


def _check_cross_references(data: dict[str, Any], valid: _Valid, report: _Report) -> None:
    """Checks that span sections. They read the raw data defensively, so that one job's type
    error does not hide its unknown profile or a chain's cycle."""
    _check_reserved(data, report)
    _check_param_names(data, report)
    _check_nested_names(data, report)
    _check_listeners(data, report)
    profile_names = valid.names.get("profiles", set())
    job_names = valid.names.get("jobs", set())
    raw_global = data.get("global")
    raw_global = raw_global if isinstance(raw_global, dict) else {}
    max_deadline: float | None = GlobalSettings().max_deadline
    if valid.global_ is not None:
        max_deadline = valid.global_.max_deadline
    elif "max_deadline" in raw_global:
        max_deadline = _raw_duration(raw_global, "max_deadline")
    raw_seasons = raw_global.get("seasons")
    season_names: set[str] | None = set(raw_seasons) if isinstance(raw_seasons, dict) else None
    if raw_seasons is None:
        season_names = set()
    defaults_deadline = _raw_duration(data.get("defaults"), "deadline")
    if (
        max_deadline is not None
        and defaults_deadline is not None
        and defaults_deadline > max_deadline
    ):
        report.add(
            ("defaults", "deadline"),
            _deadline_message("defaults.deadline", defaults_deadline, max_deadline),
        )
    for name, body in _named_bodies(data, "jobs"):
        profile = body.get("profile")
        if isinstance(profile, str) and profile not in profile_names:
            report.add(
                ("jobs", name, "profile"),
                f"job {name!r} uses unknown profile {profile!r}{_did_you_mean(profile, profile_names)}",
            )
        deadline = _raw_duration(body, "deadline")
        if max_deadline is not None and deadline is not None and deadline > max_deadline:
            report.add(
                ("jobs", name, "deadline"),
                _deadline_message(f"job {name!r} deadline", deadline, max_deadline),
            )
    for name, body in _named_bodies(data, "chains"):
        _check_chain(name, body, job_names, season_names, report)
    _check_triggered_params(data, report)


def _raw_duration(section: object, key: str) -> float | None:
    """The duration at `section[key]` if it is there and valid (else pydantic reports it)."""
    if not isinstance(section, dict):
        return None
    value = section.get(key)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        return parse_duration(value, maximum=MAX_DURATION_SECONDS)
    except ValueError:
        return None


def _deadline_message(what: str, deadline: float, max_deadline: float) -> str:
    return (
        f"{what} {format_duration(deadline)} is above global.max_deadline "
        f"{format_duration(max_deadline)}"
    )


def _did_you_mean(name: str, known: set[str]) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    if not known:
        return " (none are defined)"
    names = sorted(known)
    more = f", … {len(names) - 8} more" if len(names) > 8 else ""
    return f" (known: {', '.join(names[:8])}{more})"


def _named_bodies(data: Mapping[str, Any], section: str) -> list[tuple[str, dict[str, Any]]]:
    """The entries of a named section whose body is a mapping (`name: {}` or `name:`)."""
    entries = data.get(section)
    if not isinstance(entries, dict):
        return []
    return [(n, {} if b is None else b) for n, b in entries.items() if isinstance(b, dict | None)]


def _raw_steps(chain_body: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    steps = chain_body.get("steps")
    if not isinstance(steps, dict):
        return {}
    return {n: ({} if b is None else b) for n, b in steps.items() if isinstance(b, dict | None)}


def _check_reserved(data: Mapping[str, Any], report: _Report) -> None:
    def check(body: Mapping[str, Any], loc: Loc) -> None:
        for reserved in RESERVED_FIELDS:
            if reserved in body:
                report.add(
                    (*loc, reserved),
                    f"`{reserved}` is reserved for a later version of runlane",
                    key=True,
                )

    for name, body in _named_bodies(data, "jobs"):
        check(body, ("jobs", name))
    for name, body in _named_bodies(data, "chains"):
        for step, step_body in _raw_steps(body).items():
            check(step_body, ("chains", name, "steps", step))


def _check_param_names(data: Mapping[str, Any], report: _Report) -> None:
    for name, body in _named_bodies(data, "jobs"):
        params = body.get("params")
        if isinstance(params, dict):
            for param in params:
                if not PARAM_NAME_RE.fullmatch(param):
                    report.add(
                        ("jobs", name, "params", param),
                        f"param name {param!r} is not allowed: use lowercase letters, digits and _, "
                        "not starting with a digit",
                        key=True,
                    )


def _check_listeners(data: Mapping[str, Any], report: _Report) -> None:
    """A job that listens for one key twice would be started twice by each event of it."""
    for name, body in _named_bodies(data, "jobs"):
        listeners = body.get("on_event")
        if not isinstance(listeners, list):
            continue
        first: dict[str, int] = {}
        for i, listener in enumerate(listeners):
            key = listener.get("key") if isinstance(listener, dict) else None
            if not isinstance(key, str):
                continue
            if key in first:
                report.add(
                    ("jobs", name, "on_event", i, "key"),
                    f"job {name!r} listens for event key {key!r} twice (on_event[{first[key]}] "
                    f"and on_event[{i}]), so each such event would start it twice: keep one",
                )
            else:
                first[key] = i


def _required_params(body: Mapping[str, Any]) -> list[tuple[str, ParamSpec]]:
    """The params of a raw job that a run must be given (those whose type reads)."""
    params = body.get("params")
    if not isinstance(params, dict):
        return []
    required = []
    for name, text in params.items():
        try:
            spec = ParamSpec.parse(text)
        except ValueError:
            continue  # reported where the params are validated
        if not spec.optional:
            required.append((str(name), spec))
    return required


def _check_triggered_params(data: Mapping[str, Any], report: _Report) -> None:
    """Schedules, event listeners and chain steps start a job with no params (an event does not
    pass its data as params), so a job they start may not require any: every run they asked
    for would be refused."""
    required = {
        name: params
        for name, body in _named_bodies(data, "jobs")
        if (params := _required_params(body))
    }
    for name, body in _named_bodies(data, "jobs"):
        if name not in required:
            continue
        for trigger, why in (
            ("schedules", "its schedules start it with no params"),
            (
                "on_event",
                "its on_event listeners start it with no params (event data is not params)",
            ),
        ):
            if isinstance(body.get(trigger), list) and body[trigger]:
                report.add(
                    ("jobs", name, trigger),
                    f"job {name!r} has {_params_fix(required[name], why)}",
                    key=True,
                )
    for chain, body in _named_bodies(data, "chains"):
        for step, step_body in _raw_steps(body).items():
            job = step_body.get("job", step)
            if not isinstance(job, str) or job not in required:
                continue
            at: Loc = ("chains", chain, "steps", step)
            report.add(
                (*at, "job") if "job" in step_body else at,
                f"step {step!r} of chain {chain!r} runs job {job!r}, which has "
                + _params_fix(required[job], "a chain step starts it with no params"),
                key="job" not in step_body,
            )


def _params_fix(params: list[tuple[str, ParamSpec]], why: str) -> str:
    """`required param 'week' (int), but WHY: make it optional (week: int?)`."""
    names = ", ".join(f"{name!r} ({spec})" for name, spec in params)
    fix = ", ".join(f"{name}: {spec}?" for name, spec in params)
    if len(params) == 1:
        return f"required param {names}, but {why}: make it optional ({fix})"
    return f"required params {names}, but {why}: make them optional ({fix})"


def _check_nested_names(data: Mapping[str, Any], report: _Report) -> None:
    for name, body in _named_bodies(data, "chains"):
        steps = body.get("steps")
        if isinstance(steps, dict):
            for step in steps:
                _check_name("step", step, ("chains", name, "steps", step), report)
    g = data.get("global")
    if isinstance(g, dict) and isinstance(g.get("seasons"), dict):
        for season in g["seasons"]:
            _check_name("season", season, ("global", "seasons", season), report)


def _step_parents(body: Mapping[str, Any]) -> list[tuple[int, str]]:
    """(index in `after`, step name) for each well-formed `after` entry of a raw step."""
    after = body.get("after")
    if not isinstance(after, list):
        return []
    return [
        (i, dep["step"])
        for i, dep in enumerate(after)
        if isinstance(dep, dict) and isinstance(dep.get("step"), str)
    ]


def _check_chain(
    name: str,
    body: Mapping[str, Any],
    job_names: set[str],
    seasons: set[str] | None,
    report: _Report,
) -> None:
    base: Loc = ("chains", name)
    schedule = body.get("schedule")
    if (
        seasons is not None
        and isinstance(schedule, dict)
        and isinstance(schedule.get("seasons"), list)
    ):
        for i, season in enumerate(schedule["seasons"]):
            if isinstance(season, str) and season not in seasons:
                # One aside: where seasons are defined when there are none, else the hint.
                hint = (
                    _did_you_mean(season, seasons)
                    if seasons
                    else ": none are defined under global.seasons"
                )
                report.add(
                    (*base, "schedule", "seasons", i),
                    f"chain {name!r} uses unknown season {season!r}{hint}",
                )
    steps = _raw_steps(body)
    for step_name, step in steps.items():
        loc: Loc = (*base, "steps", step_name)
        job = step.get("job", step_name)
        if isinstance(job, str) and job not in job_names:
            if "job" in step:
                report.add(
                    (*loc, "job"),
                    f"step {step_name!r} of chain {name!r} runs unknown job {job!r}"
                    f"{_did_you_mean(job, job_names)}",
                )
            else:
                report.add(
                    loc,
                    f"step {step_name!r} of chain {name!r} runs job {step_name!r}, which is not "
                    f"in the catalog{_did_you_mean(step_name, job_names)}; add `job: NAME` to "
                    "the step or define the job",
                    key=True,
                )
        for i, parent in _step_parents(step):
            if parent not in steps:
                report.add(
                    (*loc, "after", i, "step"),
                    f"step {step_name!r} of chain {name!r} waits for unknown step {parent!r}"
                    f"{_did_you_mean(parent, set(steps))}",
                )
    parents = {s: [p for _, p in _step_parents(b) if p in steps] for s, b in steps.items()}
    for cycle in find_cycles(parents):
        # Reported at the `after` entry of the cycle's first step that points back into the cycle.
        first, before = cycle[0], cycle[-2]
        index = next(i for i, p in _step_parents(steps[first]) if p == before)
        report.add(
            (*base, "steps", first, "after", index),
            f"chain {name!r} has a dependency cycle: {' → '.join(cycle)}",
        )


def find_cycles(parents: Mapping[str, list[str]]) -> list[list[str]]:
    """Dependency cycles among steps (`parents[s]` are the steps s runs after), each reported
    once, in run order (`a → b`: b runs after a), closed (first == last), starting from the
    earliest step in `parents`' order."""
    order = {step: i for i, step in enumerate(parents)}
    cycles: list[list[str]] = []
    seen: set[frozenset[tuple[str, str]]] = set()
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(step: str) -> None:
        state[step] = 1
        path.append(step)
        for parent in parents.get(step, []):
            if state.get(parent) == 1:
                # path walks child → parent, so the run order is the reverse.
                run_order = list(reversed(path[path.index(parent) :]))
                start = min(range(len(run_order)), key=lambda k: order.get(run_order[k], 0))
                run_order = run_order[start:] + run_order[:start]
                edges = frozenset(zip(run_order, [*run_order[1:], run_order[0]], strict=True))
                if edges not in seen:
                    seen.add(edges)
                    cycles.append([*run_order, run_order[0]])
            elif parent not in state:
                visit(parent)
        path.pop()
        state[step] = 2

    for step in parents:
        if step not in state:
            visit(step)
    return cycles


def starter_catalog_text() -> str:
    """The commented starter catalog that `runlane init` writes (packaged as starter.yaml)."""
    return (resources.files("runlane.catalog") / "starter.yaml").read_text(encoding="utf-8")
