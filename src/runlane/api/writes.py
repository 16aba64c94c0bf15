"""What every write of the API does around its operation: record it in the audit table (who,
what, target, from where, and the outcome: `ok` or the refusal's code, refused writes too), and
make it safe to retry under an `Idempotency-Key` (`operations.idempotent`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import structlog
from fastapi import Header, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from runlane.errors import RunlaneError
from runlane.service import operations
from runlane.service.operations import Requester
from runlane.service.runtime import Runtime

T = TypeVar("T")
log = structlog.get_logger("runlane.api")

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
) -> T:
    """`call()`, recorded in the audit table with its outcome. A refusal is recorded and then
    raised; when the audit row of a refusal cannot be written, the refusal still reaches the
    client (and the failure the log). The role and job scope are checked by the operation
    (`Requester.require`), so its refusal (`forbidden`) is recorded like any other."""
    remote = remote_of(request)
    try:
        result = await call()
    except RunlaneError as exc:
        try:
            await operations.record_audit(
                rt,
                requester=requester,
                action=action,
                target=target,
                outcome=exc.code,
                remote=remote,
                detail=exc.message[:500],
            )
        except RunlaneError as audit_exc:
            log.warning("api_audit_failed", action=action, target=target, error=audit_exc.code)
        raise
    await operations.record_audit(
        rt, requester=requester, action=action, target=target, outcome="ok", remote=remote
    )
    return result


async def maybe_idempotent(
    request: Request,
    rt: Runtime,
    requester: Requester,
    key: str | None,
    body: Any,
    action: Callable[[], Awaitable[tuple[int, dict[str, Any]]]],
) -> tuple[int, dict[str, Any], bool]:
    """`action()` once per `Idempotency-Key` (per caller): a retry with the same key and body
    gets the first answer again (`replayed`), another body with the key is refused. Without
    the header, `action()` as it is."""
    if key is None:
        status, payload = await action()
        return status, payload, False
    done = await operations.idempotent(
        rt,
        owner=requester.name or "",
        key=key,
        fingerprint=operations.request_fingerprint(request.method, request.url.path, body),
        action=action,
    )
    return done.status, done.body, done.replayed


async def created(
    request: Request,
    rt: Runtime,
    requester: Requester,
    *,
    action: str,
    target: str,
    key: str | None,
    body: BaseModel,
    make: Callable[[], Awaitable[dict[str, Any]]],
    location: str,
) -> JSONResponse:
    """A write that creates something (a run, a chain run): `make()` under the request's
    Idempotency-Key and recorded in the audit table; 201 with `Location` (`location` with the
    new thing's `id`) and, for a replay, `Idempotency-Replayed: true`."""

    async def once() -> tuple[int, dict[str, Any]]:
        return 201, await make()

    async def call() -> tuple[int, dict[str, Any], bool]:
        return await maybe_idempotent(
            request, rt, requester, key, body.model_dump(mode="json"), once
        )

    status, payload, replayed = await audited(
        request, rt, requester, action=action, target=target, call=call
    )
    headers = {"Location": location.format(id=payload["id"])}
    if replayed:
        headers["Idempotency-Replayed"] = "true"
    return JSONResponse(payload, status_code=status, headers=headers)
