"""Shared test configuration. Service-specific fixtures live next to the tests that use them."""

from __future__ import annotations
