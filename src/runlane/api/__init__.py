"""The HTTP API face (FastAPI on uvicorn): `create_app(settings)` is the ASGI app that
`runlane serve` runs beside the launcher and `runlane web` runs alone.

Every endpoint calls `runlane.service.operations` (no SQL, no check of its own), answers with
the JSON shapes of `runlane.service.views`, and every error is `application/problem+json`
carrying the operation's stable `code` (docs/errors.md). See docs/api.md.
"""

from __future__ import annotations

from runlane.api.app import create_app

__all__ = ["create_app"]
