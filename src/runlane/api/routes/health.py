"""Probes: `/healthz` (the process serves HTTP: liveness) and `/readyz` (the database answers
and is at this runlane's schema version: readiness). Both unauthenticated, as the kubelet and a
load balancer ask without a token (deploy/base/deployment.yaml)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter

from runlane.api.deps import RuntimeDep
from runlane.api.problems import problem_responses
from runlane.errors import DatabaseUnavailable, SchemaOutOfDate, StoreError

router = APIRouter(tags=["health"])

# Each readiness check gives up after this long: a probe's own timeout is a few seconds, and a
# database that takes longer than this to say its schema version is not ready to serve.
READY_CHECK_SECONDS = 2.0


# HEAD as well (uptime monitors and load balancers often probe with it), kept out of the
# OpenAPI document: the same answer without its body.
@router.head("/healthz", include_in_schema=False)
@router.get("/healthz", summary="Liveness: the process is serving")
async def healthz() -> dict[str, str]:
    """Always 200 while the process serves HTTP; reads no database (a database outage must not
    restart every replica: readiness takes them out of the Service instead)."""
    return {"status": "ok"}


async def _bounded(what: str, call: Any) -> Any:
    try:
        async with asyncio.timeout(READY_CHECK_SECONDS):
            return await call
    except TimeoutError:
        raise DatabaseUnavailable(
            f"the database did not answer {what} within {READY_CHECK_SECONDS:g}s"
        ) from None


@router.head("/readyz", include_in_schema=False)
@router.get(
    "/readyz",
    summary="Readiness: the database answers and its schema is current",
    responses=problem_responses(503),
)
async def readyz(rt: RuntimeDep) -> dict[str, Any]:
    """200 with the schema version when the database answers (within 2 s) and is at this
    runlane's schema version; else 503 problem+json, `database_unavailable` or
    `schema_out_of_date` (run `runlane db upgrade`)."""
    try:
        version = await _bounded("for its schema version", rt.store.schema_version())
        await _bounded("for its schema version", rt.store.ensure_current())
    except (DatabaseUnavailable, SchemaOutOfDate):
        raise
    except StoreError as exc:  # a missing SQLite file, a read error: not ready either
        raise DatabaseUnavailable(f"the database cannot be read: {exc.message}") from exc
    return {"status": "ready", "schema_version": version}
