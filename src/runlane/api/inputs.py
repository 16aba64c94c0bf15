"""Text the run log cannot store, refused where it enters the API: U+0000 (PostgreSQL refuses it
in text) and lone surrogates (JSON's `\\ud800`; no UTF-8 encoding exists), in the query, the
path and the body's text fields, as a 422 `invalid_argument` naming the field; and the caps on
the body's free texts (a pause reason, an event's key and id)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Request
from pydantic import AfterValidator, Field

from runlane.errors import InvalidArgument
from runlane.service.events import MAX_EVENT_TEXT_CHARS
from runlane.service.operations import text_problem
from runlane.service.operations.arguments import MAX_REASON_CHARS

# The caps are the operations' (`pause_job`, `emit`), which enforce them for every face; the
# body's schema repeats them so that the OpenAPI document says so.
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
EventText = Annotated[
    str, Field(min_length=1, max_length=MAX_EVENT_TEXT_CHARS), AfterValidator(storable)
]


async def storable_parameters(request: Request) -> None:
    """Refuse a query or path parameter the database could not compare (a router dependency:
    `GET /runs?job=%00` was a 500 on PostgreSQL)."""
    named = [*request.path_params.items(), *request.query_params.multi_items()]
    for name, value in named:
        if isinstance(value, str) and (problem := text_problem(value)) is not None:
            raise InvalidArgument(f"parameter {name!r} {problem}")
