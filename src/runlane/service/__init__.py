"""runlane service package."""

from __future__ import annotations
