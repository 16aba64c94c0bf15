"""runlane adapters package."""

from __future__ import annotations
