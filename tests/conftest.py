"""Shared test configuration: the scratch PostgreSQL database of a session. Service-specific
fixtures live next to the tests that use them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.postgres import scratch_database


@pytest.fixture(scope="session")
def pg_scratch_url() -> Iterator[str]:
    """A PostgreSQL database of this session's own (dropped at the end); skipped locally and a
    failure in CI when the server is unreachable."""
    with scratch_database("runlane_test") as url:
        yield url
