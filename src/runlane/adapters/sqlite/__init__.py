"""runlane sqlite package."""

from __future__ import annotations
