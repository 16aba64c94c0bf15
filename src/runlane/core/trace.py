"""W3C Trace Context (`traceparent`): the format check, and a child's traceparent in the same
trace (a chain step, an event's run), as https://www.w3.org/TR/trace-context/ defines them.

A run carries the traceparent it was started with (or one derived from its parent's) in its
row; its process sees it as `TRACEPARENT` (the OpenTelemetry environment carrier). runlane makes
no spans of its own: it passes the caller's trace on.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

# version "-" trace-id "-" parent-id "-" trace-flags, lowercase hex. Version ff is invalid; a
# later version than 00 may append "-" fields, which a version-00 reader ignores.
_TRACEPARENT = re.compile(
    r"(?P<version>[0-9a-f]{2})-(?P<trace_id>[0-9a-f]{32})-(?P<span_id>[0-9a-f]{16})"
    r"-(?P<flags>[0-9a-f]{2})(?P<rest>-[ -~]*)?"
)
MAX_TRACEPARENT_CHARS = 512  # far above the 55 of version 00: a bound for what later ones append
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


class TraceparentError(ValueError):
    """The text is not a W3C traceparent; the message says which part is wrong."""


@dataclass(frozen=True, slots=True)
class TraceParent:
    """A parsed traceparent (as version 00 reads it: a later version's extra fields dropped)."""

    trace_id: str
    span_id: str
    flags: str

    def __str__(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"

    def child(self) -> TraceParent:
        """The same trace and flags under a new span id: what a run started by this one
        carries."""
        return TraceParent(self.trace_id, new_span_id(), self.flags)


def new_span_id() -> str:
    """A random, non-zero 8-byte span id in lowercase hex."""
    while True:
        span = secrets.token_hex(8)
        if span != _ZERO_SPAN:
            return span


def parse_traceparent(text: str) -> TraceParent:
    """The traceparent in `text`, or `TraceparentError` saying what is wrong with it."""
    if len(text) > MAX_TRACEPARENT_CHARS:
        raise TraceparentError(f"is longer than {MAX_TRACEPARENT_CHARS} characters")
    found = _TRACEPARENT.fullmatch(text)
    if found is None:
        raise TraceparentError(
            "is not a W3C traceparent: expected 00-<32 hex trace id>-<16 hex span id>-<2 hex "
            "flags>, lowercase (00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01)"
        )
    version = found["version"]
    if version == "ff":
        raise TraceparentError("has version ff, which is invalid")
    if version == "00" and found["rest"]:
        raise TraceparentError("has fields after the flags, which version 00 does not allow")
    if found["trace_id"] == _ZERO_TRACE:
        raise TraceparentError("has an all-zero trace id, which is invalid")
    if found["span_id"] == _ZERO_SPAN:
        raise TraceparentError("has an all-zero parent id, which is invalid")
    return TraceParent(found["trace_id"], found["span_id"], found["flags"])


def child_traceparent(parent: str | None) -> str | None:
    """A child of the stored traceparent `parent` (same trace id, new span id); None when there
    is none, or when it does not parse (a row written before the check: nothing to inherit)."""
    if parent is None:
        return None
    try:
        return str(parse_traceparent(parent).child())
    except TraceparentError:
        return None


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id of a stored traceparent, for logs; None when there is none or it is bad."""
    if traceparent is None:
        return None
    found = _TRACEPARENT.fullmatch(traceparent)
    return None if found is None else found["trace_id"]
