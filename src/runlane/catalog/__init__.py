"""runlane catalog package."""

from __future__ import annotations
