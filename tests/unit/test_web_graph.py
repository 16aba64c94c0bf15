"""The chain graph's layout (`runlane.web.graph`): longest-path layers, rows ordered by the
parents', boxes that never overlap, and edges from a parent's right side to a child's left."""

from __future__ import annotations

import itertools

from runlane.web.graph import (
    LABEL_CHARS,
    NODE_HEIGHT,
    NODE_WIDTH,
    GraphStep,
    layers,
    layout,
    order_rows,
    short_label,
)


def step(name: str, *after: str, on: str = "success") -> GraphStep:
    return GraphStep(name, tuple((p, on) for p in after))


DIAMOND = [
    step("extract"),
    step("left", "extract"),
    step("right", "extract"),
    step("load", "left", "right"),
]


def test_layers_are_longest_paths() -> None:
    steps = [*DIAMOND, step("report", "extract", "load")]
    assert layers(steps) == {"extract": 0, "left": 1, "right": 1, "load": 2, "report": 3}


def test_a_parent_missing_from_the_steps_is_ignored() -> None:
    assert layers([step("a", "gone"), step("b", "a")]) == {"a": 0, "b": 1}


def test_rows_follow_the_parents() -> None:
    # Two strands given interleaved: each child lines up with its own parent.
    steps = [step("a"), step("b"), step("b2", "b"), step("a2", "a")]
    rows = order_rows(steps, layers(steps))
    assert rows == {"a": 0, "b": 1, "a2": 0, "b2": 1}


def test_boxes_do_not_overlap_and_fit_in_the_picture() -> None:
    steps = [
        step("root"),
        *[step(f"fan{i}", "root") for i in range(6)],
        step("join", *[f"fan{i}" for i in range(6)]),
    ]
    graph = layout(steps)
    assert len(graph.steps) == len(steps)
    for a, b in itertools.combinations(graph.steps, 2):
        apart_x = a.x + NODE_WIDTH <= b.x or b.x + NODE_WIDTH <= a.x
        apart_y = a.y + NODE_HEIGHT <= b.y or b.y + NODE_HEIGHT <= a.y
        assert apart_x or apart_y, (a.step.name, b.step.name)
    for p in graph.steps:
        assert min(p.x, p.y) >= 0
        assert p.x + NODE_WIDTH <= graph.width
        assert p.y + NODE_HEIGHT <= graph.height
    # The single root and the join are centred on the fan's column.
    by_name = {p.step.name: p for p in graph.steps}
    fan_mid = sum(by_name[f"fan{i}"].y for i in range(6)) / 6
    assert abs(by_name["root"].y - fan_mid) <= NODE_HEIGHT
    assert by_name["root"].y == by_name["join"].y


def test_edges_run_right_from_parent_to_child_with_their_kind() -> None:
    steps = [step("a"), step("b", "a"), GraphStep("c", (("a", "success"), ("b", "finish")))]
    graph = layout(steps)
    kinds = {(e.parent, e.child): e.on for e in graph.edges}
    assert kinds == {("a", "b"): "success", ("a", "c"): "success", ("b", "c"): "finish"}
    at = {p.step.name: p for p in graph.steps}
    for e in graph.edges:
        start, end = e.path.split(" C")[0], e.path.rsplit(" ", 1)[1]
        x1, y1 = (int(v) for v in start.removeprefix("M").split(","))
        x2, y2 = (int(v) for v in end.split(","))
        assert (x1, y1) == (at[e.parent].x + NODE_WIDTH, at[e.parent].y + NODE_HEIGHT // 2)
        assert (x2, y2) == (at[e.child].x, at[e.child].y + NODE_HEIGHT // 2)
        assert x2 > x1


def test_long_names_are_cut_and_an_empty_chain_is_an_empty_picture() -> None:
    name = "x" * 40
    (placed,) = layout([step(name)]).steps
    assert len(placed.label) == LABEL_CHARS
    assert placed.label.endswith("…")
    assert placed.step.name == name
    assert short_label("short") == "short"
    empty = layout([])
    assert (empty.steps, empty.edges) == ((), ())
