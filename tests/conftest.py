"""Shared test configuration: the scratch PostgreSQL database of a session. Service-specific
fixtures live next to the tests that use them."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.postgres import scratch_database

# `runlane serve` serves HTTP on 127.0.0.1:8080 unless told otherwise: the launchers the tests
# start (several at once, in processes that copy this environment) serve none, and a test of
# the HTTP face gives its own free port.
os.environ.setdefault("RUNLANE_HTTP_ADDR", "off")


@pytest.fixture(scope="session")
def pg_scratch_url() -> Iterator[str]:
    """A PostgreSQL database of this session's own (dropped at the end); skipped locally and a
    failure in CI when the server is unreachable."""
    with scratch_database("runlane_test") as url:
        yield url
