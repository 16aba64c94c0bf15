"""Text the run log cannot store, refused where it enters the API: U+0000 (PostgreSQL refuses it
in text) and lone surrogates (JSON's `\\ud800`; no UTF-8 encoding exists), in the query, the
path and the body's text fields, as a 422 `invalid_argument` naming the field; and the caps on
a pause reason (an event's key and id are `emit`'s to check: `bad_event`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Request
from pydantic import AfterValidator, Field

from runlane.errors import InvalidArgument
from runlane.service.events import MAX_EVENT_TEXT_CHARS
from runlane.service.operations import text_problem
from runlane.service.operations.arguments import MAX_REASON_CHARS

# The caps are the operations' (`pause_job`, `emit`), which enforce them for every face; the
# body's schema repeats them so that the OpenAPI document says so (an event's key and id are
# left to `emit`, whose code, `bad_event`, is not the schema's `invalid_argument`).
__all__ = ["MAX_EVENT_TEXT_CHARS", "MAX_REASON_CHARS"]


def storable(text: str) -> str:
    """`text` unless the database could not store it (a pydantic validator: its ValueError
    is a 422 `invalid_argument` pointing at the field)."""
    problem = text_problem(text)
    if problem is not None:
        raise ValueError(f"the text {problem}")
    return text


StoredText = Annotated[str, AfterValidator(storable)]
"""A body's text field that is written to the database as it is."""

Reason = Annotated[str, Field(max_length=MAX_REASON_CHARS), AfterValidator(storable)]
# An event's key and id: `emit` checks them (`bad_event`, as on the CLI and over MCP); the
# schema only says what it takes.
EventText = Annotated[
    str, Field(json_schema_extra={"minLength": 1, "maxLength": MAX_EVENT_TEXT_CHARS})
]


async def storable_parameters(request: Request) -> None:
    """Refuse a query or path parameter the database could not compare (a router dependency:
    `GET /runs?job=%00` was a 500 on PostgreSQL)."""
    named = [*request.path_params.items(), *request.query_params.multi_items()]
    for name, value in named:
        if isinstance(value, str) and (problem := text_problem(value)) is not None:
            raise InvalidArgument(f"parameter {name!r} {problem}")
