"""runlane local package."""

from __future__ import annotations
