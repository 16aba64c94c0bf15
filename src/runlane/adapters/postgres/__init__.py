"""runlane postgres package."""

from __future__ import annotations
