"""The security headers every answer of the API carries (added by `middleware.SecurityHeaders`,
and by the last-resort error handler, which answers from outside the middleware)."""

from __future__ import annotations

SECURITY_HEADERS: tuple[tuple[str, str], ...] = (
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'"),
)
