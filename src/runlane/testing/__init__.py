"""runlane testing package."""

from __future__ import annotations
