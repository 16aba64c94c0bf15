"""runlane: a durable job launcher. One catalog, one run log, every trigger through one accept path."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
