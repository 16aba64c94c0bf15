"""The layout of a chain run's graph (the `/chain-runs/{id}` page's SVG): pure functions from
the steps and their dependencies to boxes and edges on a grid, which a template draws.

Layers are longest paths: a step with no `after` is in layer 0, any other one layer right of
its furthest parent, so every edge points right. Within a layer, steps are ordered by the mean
row of their parents (one barycentre pass, ties kept in the given order), which keeps the
usual fan-out and fan-in shapes free of crossings; the steps come in dependency order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# The grid, in SVG user units (the picture scales with the page).
NODE_WIDTH = 176
NODE_HEIGHT = 52
COLUMN_GAP = 64  # between a layer's boxes and the next layer's
ROW_GAP = 20
MARGIN = 12
# A label longer than this is cut with an ellipsis (the full name is the box's tooltip).
LABEL_CHARS = 22


@dataclass(frozen=True, slots=True)
class GraphStep:
    """What the layout is given of a step: its name, what it waits for (`(step, on)`, `on`:
    `success` or `finish`) and what the box shows and links to."""

    name: str
    after: tuple[tuple[str, str], ...]
    status: str = "pending"
    job: str | None = None
    run_id: str | None = None


@dataclass(frozen=True, slots=True)
class PlacedStep:
    """A step's box: its top-left corner, layer (column) and row, and its shortened label."""

    step: GraphStep
    layer: int
    row: int
    x: int
    y: int
    label: str

    @property
    def width(self) -> int:
        return NODE_WIDTH

    @property
    def height(self) -> int:
        return NODE_HEIGHT


@dataclass(frozen=True, slots=True)
class PlacedEdge:
    """An arrow from `parent`'s right side to `child`'s left side; `on` is `success` or
    `finish` (drawn solid or dashed); `path` is its SVG path data (a cubic curve)."""

    parent: str
    child: str
    on: str
    path: str


@dataclass(frozen=True, slots=True)
class GraphLayout:
    """Every step placed, every edge routed, and the picture's size."""

    steps: tuple[PlacedStep, ...]
    edges: tuple[PlacedEdge, ...]
    width: int
    height: int


def layers(steps: Sequence[GraphStep]) -> dict[str, int]:
    """Each step's layer: 0 without parents, else one more than its furthest parent's. A
    parent that is not among `steps` (a chain changed since the run) is ignored; a cycle
    cannot occur (the catalog refuses one), and would put its steps in layer 0."""
    names = {s.name for s in steps}
    parents = {s.name: [p for p, _ in s.after if p in names and p != s.name] for s in steps}
    found: dict[str, int] = {}
    visiting: set[str] = set()

    def depth(name: str) -> int:
        if name in found:
            return found[name]
        if name in visiting:
            return 0
        visiting.add(name)
        level = max((depth(p) + 1 for p in parents[name]), default=0)
        visiting.discard(name)
        found[name] = level
        return level

    for s in steps:
        depth(s.name)
    return found


def order_rows(steps: Sequence[GraphStep], layer_of: Mapping[str, int]) -> dict[str, int]:
    """Each step's row in its layer: layer 0 in the given order, every later layer by the
    mean row of its parents (ties in the given order)."""
    index = {s.name: i for i, s in enumerate(steps)}
    by_layer: dict[int, list[GraphStep]] = {}
    for s in steps:
        by_layer.setdefault(layer_of[s.name], []).append(s)
    row: dict[str, int] = {}
    for level in sorted(by_layer):
        members = by_layer[level]

        def barycentre(s: GraphStep) -> tuple[float, int]:
            rows = [row[p] for p, _ in s.after if p in row]
            return (sum(rows) / len(rows) if rows else float(index[s.name]), index[s.name])

        ordered = members if level == 0 else sorted(members, key=barycentre)
        for i, s in enumerate(ordered):
            row[s.name] = i
    return row


def short_label(text: str, limit: int = LABEL_CHARS) -> str:
    """`text`, cut to `limit` characters with an ellipsis when longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def layout(steps: Sequence[GraphStep]) -> GraphLayout:
    """Boxes and edges for `steps` (in dependency order): columns are layers, and each column
    is centred on the tallest one."""
    if not steps:
        return GraphLayout((), (), 2 * MARGIN, 2 * MARGIN)
    layer_of = layers(steps)
    row_of = order_rows(steps, layer_of)
    per_layer: dict[int, int] = {}
    for s in steps:
        per_layer[layer_of[s.name]] = per_layer.get(layer_of[s.name], 0) + 1
    tallest = max(per_layer.values())
    column = NODE_WIDTH + COLUMN_GAP
    line = NODE_HEIGHT + ROW_GAP

    def place(s: GraphStep) -> PlacedStep:
        level, r = layer_of[s.name], row_of[s.name]
        offset = (tallest - per_layer[level]) * line // 2  # centre a short column
        return PlacedStep(
            s, level, r, MARGIN + level * column, MARGIN + offset + r * line, short_label(s.name)
        )

    placed = tuple(place(s) for s in steps)
    at = {p.step.name: p for p in placed}
    edges: list[PlacedEdge] = []
    for p in placed:
        for parent, on in p.step.after:
            if parent not in at or parent == p.step.name:
                continue
            edges.append(PlacedEdge(parent, p.step.name, on, _curve(at[parent], p)))
    width = MARGIN * 2 + (max(layer_of.values()) + 1) * column - COLUMN_GAP
    height = MARGIN * 2 + tallest * line - ROW_GAP
    return GraphLayout(placed, tuple(edges), width, height)


def _curve(parent: PlacedStep, child: PlacedStep) -> str:
    """A cubic curve from the middle of `parent`'s right side to the middle of `child`'s left
    side, leaving and arriving horizontally."""
    x1, y1 = parent.x + NODE_WIDTH, parent.y + NODE_HEIGHT // 2
    x2, y2 = child.x, child.y + NODE_HEIGHT // 2
    bend = max((x2 - x1) // 2, COLUMN_GAP // 2)
    return f"M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}"
