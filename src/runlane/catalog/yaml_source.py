"""Read catalog YAML into plain data, recording where each node starts.

A SafeLoader without YAML 1.1's base-60 numbers and with YAML 1.2's plain scalars in flow
context; it refuses duplicate keys and recursive aliases and bounds the expanded size.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.tokens import ScalarToken

from runlane.catalog.problems import Loc, Position, ProblemReport, dotted, number_too_large

# Aliases can make a small file expand enormously ("billion laughs"); no real catalog is near this.
_MAX_EXPANDED_NODES = 200_000


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
_NULL_TAG = "tag:yaml.org,2002:null"
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
    report: ProblemReport
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
                self.report.unreadable(loc, number_too_large(loc, digits, negative=negative))
                return None
            reason = getattr(exc, "problem", None) or str(exc)
            self.report.unreadable(loc, f"{dotted(loc)}: cannot read this value: {reason}")
            return None
        if node.tag == _INT_TAG and not _printable_int(value):
            # `0x…` of thousands of digits reads, but no message could show it.
            self.report.unreadable(loc, number_too_large(loc, None, negative=value < 0))
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


def read_yaml(text: str, report: ProblemReport) -> Any:
    """The document as plain data (None when it cannot be read), each node's position kept in
    `report`; syntax errors, unreadable values and oversized documents become problems."""
    loader: _CatalogYamlLoader | None = None
    try:
        loader = _CatalogYamlLoader(text)  # the reader refuses control characters right here
        node = loader.get_single_node()
        if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == _NULL_TAG):
            # No document, or one that says nothing (`---` alone, `~`): the same for a person.
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
