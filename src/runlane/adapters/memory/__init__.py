"""runlane memory package."""

from __future__ import annotations
