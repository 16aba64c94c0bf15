"""runlane sdk package."""

from __future__ import annotations
