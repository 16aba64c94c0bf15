"""Property-based tests of every operation from the OpenAPI spec (schemathesis): whatever a
client sends within (and around) the documented shapes, the API never answers 5xx and every
answer matches the spec. The app runs in process (`from_asgi`'s transport) on a seeded SQLite
database with an admin token; bounded to a few examples per operation for the suite's budget."""

from __future__ import annotations

import asyncio
import atexit
import shutil
import tempfile
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from runlane.api.app import create_app
from runlane.core.access import Role
from runlane.service import operations
from runlane.service.operations import Requester
from runlane.service.runtime import open_runtime

from .conftest import api_settings

# The schema is read when the module is collected, so the app (and its directory) exist then;
# removed at exit, whether or not the tests ran.
WORKDIR = Path(tempfile.mkdtemp(prefix="runlane-schemathesis-"))
atexit.register(shutil.rmtree, WORKDIR, ignore_errors=True)
SETTINGS = api_settings(WORKDIR, f"sqlite:///{WORKDIR / 'runlane.db'}")
APP = create_app(SETTINGS)
AUTH: dict[str, str] = {}

schema = schemathesis.openapi.from_dict(APP.openapi())
schema.app = APP

CHECKS = [not_a_server_error, response_schema_conformance]


async def _seed() -> str:
    """The database migrated, an admin token, and a few runs and a chain run to find."""
    async with open_runtime(SETTINGS, create=True, check_schema=False) as rt:
        await rt.store.upgrade()
        made = await operations.create_token(rt, "fuzz", role=Role.ADMIN, requester=Requester(None))
        for job in ("hello", "etl.load", "single"):
            await operations.run_job(rt, job, requester=Requester("seed"))
        await operations.run_chain(rt, "pair", requester=Requester("seed"))
        return made.secret


@pytest.fixture(scope="module", autouse=True)
def seeded() -> None:
    AUTH["Authorization"] = f"Bearer {asyncio.run(_seed())}"


@schema.parametrize()
@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_operation_answers_as_documented(case: schemathesis.Case) -> None:
    case.call_and_validate(headers=AUTH, checks=CHECKS)
