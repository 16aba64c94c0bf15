"""What every write of the API does around its operation: record it in the audit table (who,
what, target, from where, and the outcome: `ok` or the refusal's code, refused writes too), and
make it safe to retry under an `Idempotency-Key` (`operations.idempotent`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any, TypeVar

from fastapi import Header, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from runlane.errors import InvalidArgument
from runlane.service import operations
from runlane.service.operations import Requester
from runlane.service.runtime import Runtime

T = TypeVar("T")

IDEMPOTENCY_HEADER = "Idempotency-Key"

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias=IDEMPOTENCY_HEADER,
        description="Makes the request safe to retry: the same key and body return the first "
        "answer (header `Idempotency-Replayed: true`); the key with another body is 422 "
        "`idempotency_key_reused`. 1 to 255 printable ASCII characters; kept 24 hours.",
    ),
]

Traceparent = Annotated[
    str | None,
    Header(
        alias="traceparent",
        description="The caller's W3C Trace Context: stored on the run (every step's run of a "
        "chain, every run an event starts, each with a span id of its own) and given to its "
        "process as `TRACEPARENT`. Not one: 400 `invalid_traceparent`.",
    ),
]


def remote_of(request: Request) -> str | None:
    """The peer's address (the proxy's, behind one: the audit records who connected)."""
    return request.client.host if request.client else None


async def audited(
    request: Request,
    rt: Runtime,
    requester: Requester,
    *,
    action: str,
    target: str | None,
    call: Callable[[], Awaitable[T]],
    outcome_of: Callable[[T], str] | None = None,
) -> T:
    """`operations.audited` with the request's peer as the remote address."""
    return await operations.audited(
        rt,
        requester,
        action=action,
        target=target,
        remote=remote_of(request),
        call=call,
        outcome_of=outcome_of,
    )


def idempotency_owner(request: Request, requester: Requester) -> str:
    """Whose keys a request's Idempotency-Key is one of: the token's or the proxy user's, by
    kind, so a proxy user named like a token (or the other way round) has keys of its own."""
    kind = getattr(request.state, "requester_kind", "token")
    return f"{kind}:{requester.name or ''}"


def body_json(body: BaseModel) -> Any:
    """The request body as JSON values, for its fingerprint. A body nested too deep to be
    serialised (hundreds of levels in `params`) is the client's error, not a 500."""
    try:
        return body.model_dump(mode="json")
    except ValueError as exc:
        raise InvalidArgument(f"the request body cannot be read: {exc}") from None


async def created(
    request: Request,
    rt: Runtime,
    requester: Requester,
    *,
    action: str,
    target: str,
    key: str | None,
    body: BaseModel,
    allowed: Callable[[], Awaitable[None]],
    make: Callable[[str | None], Awaitable[tuple[dict[str, Any], datetime]]],
    location: str,
) -> JSONResponse:
    """A write that creates something (a run, a chain run): `make(dedupe_key)` under the
    request's Idempotency-Key and recorded in the audit table; 201 with `Location` (`location`
    with the new thing's `id`) and, for a replay, `Idempotency-Replayed: true`.

    `allowed()` raises `Forbidden` unless the requester may do it: it is called before the key
    is looked at, so a stored answer is replayed only to a caller that may still ask for it
    (a token demoted since, or scoped to other jobs, is refused). `make` writes its run under
    the dedupe key derived from the owner, key and request (`idempotency_dedupe_key`; None
    without a key), so a retry after a failure that came after the write finds the same run.
    A replay is audited as `replayed`, not as a second `ok`."""

    async def call() -> tuple[int, dict[str, Any], bool]:
        await allowed()
        if key is None:
            made, _ = await make(None)
            return 201, made, False
        owner = idempotency_owner(request, requester)
        fingerprint = operations.request_fingerprint(
            request.method, request.url.path, body_json(body)
        )
        dedupe_key = operations.idempotency_dedupe_key(owner, key, fingerprint)

        async def made_in(life_key: str) -> tuple[dict[str, Any], str, datetime]:
            made, made_at = await make(life_key)
            return made, str(made["id"]), made_at

        async def once() -> tuple[int, dict[str, Any]]:
            # (A run of an earlier life of the key, which has expired since, is not this one's.)
            return 201, await operations.this_lifes_effect(rt, dedupe_key, made_in)

        done = await operations.idempotent(
            rt, owner=owner, key=key, fingerprint=fingerprint, action=once
        )
        return done.status, done.body, done.replayed

    status, payload, replayed = await audited(
        request,
        rt,
        requester,
        action=action,
        target=target,
        call=call,
        outcome_of=lambda done: "replayed" if done[2] else "ok",
    )
    headers = {"Location": location.format(id=payload["id"])}
    if replayed:
        headers["Idempotency-Replayed"] = "true"
    return JSONResponse(payload, status_code=status, headers=headers)
