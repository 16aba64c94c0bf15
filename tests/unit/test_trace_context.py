"""W3C traceparent: the format check every face relies on, and a child's traceparent."""

from __future__ import annotations

import pytest

from runlane.core.trace import (
    TraceparentError,
    child_traceparent,
    parse_traceparent,
    trace_id_of,
)
from runlane.errors import InvalidTraceparent
from runlane.service.operations.arguments import check_traceparent

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_valid_traceparent_parses() -> None:
    parsed = parse_traceparent(GOOD)
    assert (parsed.trace_id, parsed.span_id, parsed.flags) == (
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "00f067aa0ba902b7",
        "01",
    )
    assert str(parsed) == GOOD


def test_a_later_version_is_read_as_version_00() -> None:
    later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next"
    assert str(parse_traceparent(later)) == GOOD


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "not a W3C traceparent"),
        ("00-xyz", "not a W3C traceparent"),
        (GOOD.upper(), "not a W3C traceparent"),
        (GOOD + "-extra", "fields after the flags"),
        ("ff" + GOOD[2:], "version ff"),
        ("00-" + "0" * 32 + "-00f067aa0ba902b7-01", "all-zero trace id"),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01", "all-zero parent id"),
        ("cc-" + "a" * 32 + "-" + "b" * 16 + "-01-" + "x" * 600, "longer than"),
        (GOOD.replace("-", "_"), "not a W3C traceparent"),
    ],
)
def test_bad_traceparents_are_refused_saying_why(text: str, says: str) -> None:
    with pytest.raises(TraceparentError, match=says):
        parse_traceparent(text)


def test_a_child_keeps_the_trace_and_flags_with_a_new_span() -> None:
    children = {child_traceparent(GOOD) for _ in range(50)}
    assert len(children) == 50
    for child in children:
        assert child is not None
        parsed = parse_traceparent(child)
        assert parsed.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
        assert parsed.flags == "01"
        assert parsed.span_id != "00f067aa0ba902b7"
    assert child_traceparent(None) is None
    assert child_traceparent("garbage") is None  # nothing to inherit from a bad stored value


def test_trace_id_of_a_stored_value() -> None:
    assert trace_id_of(GOOD) == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace_id_of(None) is None
    assert trace_id_of("nope") is None


def test_the_operations_check_raises_the_stable_code() -> None:
    assert check_traceparent(None) is None
    assert check_traceparent(f" {GOOD} ") == GOOD
    with pytest.raises(InvalidTraceparent) as caught:
        check_traceparent("00-nope")
    assert caught.value.code == "invalid_traceparent"
    assert caught.value.http_status == 400
    assert caught.value.exit_code == 2
