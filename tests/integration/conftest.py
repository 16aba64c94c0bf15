"""Fixtures for launcher tests: a catalog of small inline jobs, stores on both dialects, and a
launcher running in the background whose hook turns events into awaitables (no sleeps)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from runlane.catalog import Catalog, load_catalog
from runlane.ports import Store
from runlane.service.accept import RunRequest, accept_run
from runlane.service.config import Settings
from runlane.service.launcher import Launcher
from runlane.service.runtime import Runtime
from runlane.service.wiring import build_executors, store_from_url
from tests.support.loops import LOOPS, LoopFactory
from tests.support.postgres import PG_URL, scratch_database, truncate_all

__all__ = ["CATALOG", "PG_URL", "PY"]  # tests.acceptance imports these from here

PY = sys.executable

CATALOG = f"""
version: 1
global: {{max_deadline: 1h, manual_queue_ttl: 5m, kill_grace: 1s}}
defaults: {{executor: inline, overlap: allow, max_attempts: 1, deadline: 1m}}
jobs:
  hello:
    command: [{PY}, -c, "import os, json; print('hello', os.environ['RUN_ID'], os.environ['RUN_TRIGGER'], os.environ['RUNLANE_PARAMS'], os.environ.get('RUNLANE_PARAM_WEEK', '-'))"]
    params: {{week: int?, dry_run: bool?}}
  fail:
    command: [{PY}, -c, "import sys; print('boom'); sys.exit(3)"]
  flaky:
    command: [{PY}, -c, "import os, sys; sys.exit(1 if os.environ['RUNLANE_ATTEMPT'] == '1' else 0)"]
    max_attempts: 3
  slow:
    command: [{PY}, -c, "import time; print('started', flush=True); time.sleep(60)"]
    deadline: 1s
    max_attempts: 1
  long:
    command: [{PY}, -c, "import time; print('started', flush=True); time.sleep(60)"]
    max_attempts: 2
  single:
    command: [{PY}, -c, "import time; time.sleep(0.3)"]
    overlap: forbid
  serial:
    command: [{PY}, -c, "import time; time.sleep(0.2)"]
    overlap: queue
  careful:
    command: [{PY}, -c, "print('acted')"]
    acts: true
  kubejob:
    command: [{PY}, -c, "print('ran inline')"]
    executor: pod
  sleeper:
    command: [{PY}, -c, "import os, time, pathlib; pathlib.Path(os.environ['RUNLANE_TEST_DIR'], os.environ['RUN_ID'] + '.' + os.environ['RUNLANE_ATTEMPT'] + '.pid').write_text(str(os.getpid())); time.sleep(60)"]
    max_attempts: 2
  gate:
    command: [{PY}, -c, "import os, time, pathlib; gate = pathlib.Path(os.environ['RUNLANE_TEST_DIR'], 'gate')\\nwhile not gate.exists(): time.sleep(0.02)\\nprint('gate passed', flush=True)"]
  gated:
    command: [{PY}, -c, "import os, sys, time, pathlib; gate = pathlib.Path(os.environ['RUNLANE_TEST_DIR'], os.environ['RUNLANE_PARAM_GATE'])\\nwhile not gate.exists(): time.sleep(0.02)\\nprint('passed', gate.name, flush=True)\\nsys.exit(int(os.environ.get('RUNLANE_PARAM_CODE', '0')))"]
    params: {{gate: str, code: int?}}
    max_attempts: 2
"""


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A scratch PostgreSQL database for this session (dropped at the end)."""
    with scratch_database("runlane_launcher") as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runlane.db'}"
    url: str = request.getfixturevalue("pg_database")
    truncate_all(url)
    return url


@pytest.fixture
def catalog_file(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(CATALOG)
    return path


@pytest.fixture
def catalog(catalog_file: Path) -> Catalog:
    return load_catalog(catalog_file)


def launcher_settings(
    database_url: str, catalog_file: Path, tmp_path: Path, **overrides: Any
) -> Settings:
    """The launcher tests' settings: short leases, quick claims and beats, a unique id."""
    values: dict[str, Any] = {
        "database_url": database_url,
        "catalog_path": str(catalog_file),
        "log_dir": str(tmp_path / "logs"),
        "concurrency": 8,
        "lease_ttl": 10.0,
        "lease_renew_interval": 2.0,
        "claim_interval": 0.1,
        "heartbeat_interval": 1.0,
        "shutdown_grace": 1.0,
        "launcher_id": f"test-{uuid.uuid4().hex[:6]}",
    }
    return Settings(**(values | overrides))


@pytest.fixture
def settings(database_url: str, catalog_file: Path, tmp_path: Path) -> Settings:
    return launcher_settings(database_url, catalog_file, tmp_path)


@pytest.fixture
async def store(settings: Settings) -> AsyncIterator[Store]:
    s = store_from_url(settings.database_url)
    await s.open()
    await s.upgrade()
    yield s
    await s.close()


@pytest.fixture
def rt(store: Store, settings: Settings, catalog: Catalog) -> Runtime:
    """The operations' context on the test's store, settings and catalog."""
    return Runtime(settings=settings, store=store, catalog=catalog)


class Events:
    """Launcher hook events as awaitables: `await events.wait("finished", run_id)`."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], asyncio.Event] = defaultdict(asyncio.Event)
        self.log: list[tuple[str, str]] = []

    def __call__(self, event: str, run_id: str) -> None:
        self.log.append((event, run_id))
        self.seen[(event, run_id)].set()

    async def wait(self, event: str, run_id: str, within: float = 30.0) -> None:
        async with asyncio.timeout(within):
            await self.seen[(event, run_id)].wait()


class Running:
    def __init__(self, launcher: Launcher, task: asyncio.Task[None], events: Events) -> None:
        self.launcher = launcher
        self.task = task
        self.events = events

    async def stop(self) -> None:
        self.launcher.stop()
        async with asyncio.timeout(30):
            await self.task


@pytest.fixture
async def start_launcher(
    store: Store, catalog: Catalog, settings: Settings
) -> AsyncIterator[Callable[..., Running]]:
    started: list[Running] = []

    def start(**overrides: Any) -> Running:
        events = Events()
        s = replace(settings, **overrides) if overrides else settings
        launcher = Launcher(
            store=store,
            catalog=catalog,
            executors=build_executors(s),
            settings=s,
            hook=events,
            retry_base_seconds=0.05,
        )
        task = asyncio.create_task(launcher.run())
        r = Running(launcher, task, events)
        started.append(r)
        return r

    yield start
    for r in started:
        if not r.task.done():
            await r.stop()


@contextlib.asynccontextmanager
async def running_launcher(
    store: Any, catalog: Catalog, settings: Settings, executors: dict[str, Any] | None = None
) -> AsyncIterator[Events]:
    """A launcher running on `store` (its executors: `settings`' by default, retries 50 ms
    apart) for the block; its hook's events. Stopped, and waited for, at the block's end."""
    events = Events()
    launcher = Launcher(
        store=store,
        catalog=catalog,
        executors=build_executors(settings) if executors is None else executors,
        settings=settings,
        hook=events,
        retry_base_seconds=0.05,
    )
    task = asyncio.create_task(launcher.run())
    try:
        yield events
    finally:
        launcher.stop()
        async with asyncio.timeout(30):
            await task


async def run_to_end(
    store: Any, catalog: Catalog, settings: Settings, requests: list[RunRequest]
) -> list[str]:
    """Start a launcher, accept `requests`, wait until each run's supervision is over, stop the
    launcher; the run ids, in order. `store` may wrap a real one."""
    async with running_launcher(store, catalog, settings) as events:
        ids = [(await accept_run(store, catalog, r)).run.id for r in requests]
        for run_id in ids:
            await events.wait("finished", run_id)
        return ids


# The suites of the inline executor (every spawn mode) and of its spawner processes run on
# uvloop too: `runlane serve`'s loop by default (RUNLANE_EVENT_LOOP=auto), and the executor is
# the launcher's code closest to the loop (readers on pipes and pidfds, timers, the spawners'
# reports). Every other test here runs on asyncio's loop, as before.
_ON_BOTH_LOOPS = ("test_inline_executor", "test_spawner")


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, LoopFactory]:
    if item.path.stem in _ON_BOTH_LOOPS:
        return dict(LOOPS)
    return {"asyncio": LOOPS["asyncio"]}
