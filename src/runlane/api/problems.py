"""Every error of the API as `application/problem+json` (RFC 9457): the operation's stable
`code` (docs/errors.md) with its HTTP status, a constant `title` per code, the message as
`detail`, and the extras a client acts on (`active_run_id`, `errors` pointing at the fields).

The `type` URI (`https://runlane.dev/problems/<code>`) is an identifier, not a page to fetch:
compare it (or `code`) as a string. Framework errors (validation, a route that does not exist,
a method the route does not take) and anything unexpected are rendered here too, so a client
never sees another shape, a 500 for what it sent, or a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from runlane.api.headers import SECURITY_HEADERS
from runlane.errors import (
    CatalogError,
    MalformedRequest,
    MethodNotAllowed,
    NotFound,
    OverlapRefused,
    ParamError,
    RunlaneError,
    Unauthenticated,
)

log = structlog.get_logger("runlane.api")

PROBLEM_TYPE_BASE = "https://runlane.dev/problems/"
PROBLEM_MEDIA_TYPE = "application/problem+json"
WWW_AUTHENTICATE = 'Bearer realm="runlane"'

# One title per code: constant, so a client may show it; `detail` says what happened this time.
TITLES: Mapping[str, str] = {
    "error": "Error",
    "config_error": "Server configuration is invalid",
    "catalog_invalid": "The catalog is invalid",
    "invalid_argument": "An argument is not acceptable",
    "invalid_traceparent": "The traceparent is not W3C Trace Context",
    "refused": "The run was refused",
    "unknown_job": "No such job",
    "unknown_chain": "No such chain",
    "param_invalid": "The params do not match the job",
    "payload_too_large": "The request is too large",
    "overlap_refused": "A run of the job is already active",
    "bad_event": "The event cannot be recorded",
    "event_id_taken": "The event id is taken",
    "confirmation_required": "Confirmation required",
    "not_found": "Not found",
    "unknown_run": "No such run",
    "unknown_chain_run": "No such chain run",
    "ambiguous_id": "The id prefix is ambiguous",
    "not_cancellable": "Nothing to cancel",
    "store_error": "The database failed",
    "database_unavailable": "The database is unavailable",
    "database_conflict": "The database broke a conflict: try again",
    "schema_out_of_date": "The database schema is out of date",
    "bus_unavailable": "The message broker is unavailable",
    "bus_topology_mismatch": "The broker's queues were declared with other arguments",
    "unauthenticated": "Authentication required",
    "forbidden": "Not allowed",
    "malformed_request": "The request is malformed",
    "method_not_allowed": "Method not allowed",
    "request_timeout": "The request took too long",
    "too_many_streams": "Too many followed logs are open",
    "idempotency_key_reused": "The idempotency key was used with another request",
    "idempotency_key_in_flight": "A request with this idempotency key is in progress",
    "token_exists": "A token of that name exists",
    "csrf_refused": "The form was not sent by its page",
    "unknown_token": "No such token",
    "token_not_live": "The token is revoked or has expired",
    "internal_error": "Internal server error",
}


class ProblemResponse(JSONResponse):
    """A problem as JSON with every non-ASCII character escaped: a refusal may quote what the
    client sent, a lone surrogate included (`"\\ud800"` in a JSON body), which UTF-8 cannot
    encode; escaped, it goes back as it came."""

    media_type = PROBLEM_MEDIA_TYPE

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


class FieldProblem(BaseModel):
    """One problem of a request, `pointer` (RFC 6901) naming the field in the body
    (`/params/week`) or the query parameter (`#/query/limit`)."""

    pointer: str
    detail: str


class Problem(BaseModel):
    """An error (RFC 9457). `code` is the stable code of docs/errors.md; `type` is
    `https://runlane.dev/problems/<code>`, an identifier (not a page to fetch)."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
    code: str
    instance: str | None = None
    active_run_id: str | None = Field(default=None, description="overlap_refused: the active run")
    errors: list[FieldProblem] | None = Field(
        default=None, description="invalid_argument, param_invalid: every problem found"
    )
    problems: list[str] | None = Field(default=None, description="catalog_invalid: every problem")


def title_of(code: str) -> str:
    return TITLES.get(code) or code.replace("_", " ").capitalize()


def problem_body(
    status: int,
    code: str,
    detail: str,
    *,
    instance: str | None = None,
    extras: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_BASE + code,
        "title": title_of(code),
        "status": status,
        "detail": detail,
        "code": code,
    }
    if instance is not None:
        body["instance"] = instance
    if extras:
        body.update(extras)
    return body


def problem_bytes(status: int, code: str, detail: str, *, instance: str | None = None) -> bytes:
    """The body of a problem, for the pure-ASGI middleware (no Response object there)."""
    return json.dumps(problem_body(status, code, detail, instance=instance)).encode()


def status_of(exc: RunlaneError) -> int:
    """The error's HTTP status (docs/errors.md): every RunlaneError subclass carries one."""
    status = getattr(exc, "http_status", 500)
    return status if isinstance(status, int) and 400 <= status <= 599 else 500


def extras_of(exc: RunlaneError) -> dict[str, Any]:
    """What a client acts on besides the code: the active run of an overlap refusal, every
    field problem of bad params (each pointing at its param), every catalog problem."""
    extras: dict[str, Any] = {}
    if isinstance(exc, OverlapRefused):
        extras["active_run_id"] = exc.active_run_id
    if isinstance(exc, ParamError):
        extras["errors"] = [
            {"pointer": f"/params/{_escape_pointer(name)}" if name else "/params", "detail": text}
            for name, text in param_problems(exc)
        ]
    if isinstance(exc, CatalogError) and exc.problems:
        extras["problems"] = list(exc.problems)
    return extras


def param_problems(exc: ParamError) -> list[tuple[str | None, str]]:
    """Every problem of a `ParamError` as (param name or None, text); one for the whole
    message when the refusal did not list them."""
    return list(exc.problems) or [(None, exc.message)]


def _escape_pointer(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def problem(
    exc: RunlaneError,
    *,
    instance: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """The problem response of `exc`: its status, code, title, message and extras (401s say
    how to authenticate in `WWW-Authenticate`)."""
    status = status_of(exc)
    all_headers = dict(headers or {})
    if isinstance(exc, Unauthenticated):
        all_headers.setdefault("WWW-Authenticate", WWW_AUTHENTICATE)
    return ProblemResponse(
        problem_body(status, exc.code, exc.message, instance=instance, extras=extras_of(exc)),
        status_code=status,
        headers=all_headers or None,
    )


def _pointer(loc: Sequence[int | str]) -> str:
    """A FastAPI error location as a JSON pointer: into the body (`/params/x`), or, for the
    query, a path and a header, `#/query/limit` (a pointer into the request's parts)."""
    if not loc:
        return ""
    where, *rest = loc
    path = "/" + "/".join(_escape_pointer(str(p)) for p in rest) if rest else ""
    if where == "body":
        return path or "/"
    return f"#/{where}{path}"


def _is_json_error(errors: Sequence[Any]) -> bool:
    return any(isinstance(e, Mapping) and e.get("type") == "json_invalid" for e in errors)


def _is_unread_body(errors: Sequence[Any]) -> bool:
    """A body FastAPI left as bytes: sent with a Content-Type that is not JSON (`curl -d`
    sends a form), so it was never parsed."""
    return any(
        isinstance(e, Mapping)
        and tuple(e.get("loc", ())) == ("body",)
        and isinstance(e.get("input"), bytes)
        for e in errors
    )


async def _runlane_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RunlaneError)
    return problem(exc, instance=request.url.path)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    if _is_json_error(errors):
        return problem(
            MalformedRequest("the request body is not valid JSON"), instance=request.url.path
        )
    if _is_unread_body(errors):
        sent = request.headers.get("content-type", "")
        message = (
            f"the request body was sent as {sent[:100]!r}, not JSON: "
            "send it with the header Content-Type: application/json"
        )
        return problem(MalformedRequest(message), instance=request.url.path)
    listed = [
        {"pointer": _pointer(tuple(e.get("loc", ()))), "detail": str(e.get("msg", "invalid"))}
        for e in errors
    ]
    detail = (
        "; ".join(f"{item['pointer'] or 'request'}: {item['detail']}" for item in listed)
        or "the request is not acceptable"
    )
    return ProblemResponse(
        problem_body(
            422, "invalid_argument", detail, instance=request.url.path, extras={"errors": listed}
        ),
        status_code=422,
    )


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    path = request.url.path
    if isinstance(exc.__cause__, RunlaneError):  # FastAPI's 400 for a body it failed to read
        return problem(exc.__cause__, instance=path)
    if exc.status_code == 404:
        return problem(NotFound(f"no such route: {request.method} {path}"), instance=path)
    if exc.status_code == 405:
        allow = (exc.headers or {}).get("Allow") or (exc.headers or {}).get("allow")
        headers = {"Allow": allow} if allow else None
        return problem(
            MethodNotAllowed(f"{request.method} is not allowed on {path}"),
            instance=path,
            headers=headers,
        )
    code = {400: "malformed_request", 401: "unauthenticated", 403: "forbidden"}.get(
        exc.status_code, "error"
    )
    return ProblemResponse(
        problem_body(exc.status_code, code, str(exc.detail), instance=path),
        status_code=exc.status_code,
        headers=exc.headers,
    )


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    # The traceback goes to the log, never to the client. Starlette sends this answer from
    # outside every middleware: it brings the security headers itself.
    log.error("api_unexpected_error", path=request.url.path, method=request.method, exc_info=exc)
    return ProblemResponse(
        problem_body(
            500,
            "internal_error",
            "the server failed to answer; the error is in its log",
            instance=request.url.path,
        ),
        status_code=500,
        headers=dict(SECURITY_HEADERS),
    )


def install_problem_handlers(app: FastAPI) -> None:
    """Render every error of `app` as a problem."""
    app.add_exception_handler(RunlaneError, _runlane_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses` of a route's problems (and of every route's: 401, 403, 413,
    422, 500, 503)."""
    described = {
        400: "The body is not JSON (`malformed_request`)",
        401: "No token, or an unknown, expired or revoked one (`unauthenticated`)",
        403: "The token's role or job scope does not allow it (`forbidden`)",
        404: "The job, chain, run or chain run does not exist",
        405: "The route does not take this method (`method_not_allowed`)",
        409: "The run log's state forbids it (`overlap_refused`, `not_cancellable`, ...)",
        413: "The body (or the params) is larger than 1 MiB (`payload_too_large`)",
        422: "An argument is not acceptable (every problem listed in `errors`)",
        500: "The server's own setup is broken (`catalog_invalid`, `internal_error`, ...)",
        503: "The database is unavailable, or the request timed out",
    }
    chosen = sorted({401, 422, 500, 503, *statuses})
    return {
        status: {
            "description": described.get(status, "An error"),
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in chosen
    }
