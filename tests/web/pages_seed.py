"""Seeded data for the tests of the runs, chains, events, launchers and schedule pages: a
database where a real launcher ran jobs to every final status (a retry chain, a chain run with
succeeded, failed, skipped and `on: finish` steps, output holding HTML payloads), then a run
left running (claimed), one cancelled, one queued, an event with HTML in its data; and the
server (API and UI) on it, SQLite and PostgreSQL.

`seeded` is a module fixture: a test module imports it (`from tests.web.pages_seed import
seeded`) and gets a `Seeded` with the server and the ids of what was made.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from runlane.catalog import load_catalog
from runlane.core.runs import RunStatus, Trigger
from runlane.service import operations
from runlane.service.config import Settings
from runlane.service.launcher import Launcher
from runlane.service.operations import Requester
from runlane.service.runtime import Runtime, open_runtime
from runlane.service.wiring import build_executors
from tests.api.conftest import CLI, ApiServer, api_settings, running_api
from tests.support.postgres import scratch_database

PY = sys.executable
SCRIPT = "<script>alert('out')</script> <img src=x onerror=alert(1)>"
# The job prints the payload; written as YAML single-quoted text ('' is a quote).
SHOUT_CODE = "'" + f"print({SCRIPT!r})".replace("'", "''") + "'"
CATALOG = f"""
version: 1
global: {{max_deadline: 1h, manual_queue_ttl: 1h, kill_grace: 1s, timezone: Europe/Berlin}}
defaults: {{executor: inline, overlap: allow, max_attempts: 1, deadline: 1m}}
jobs:
  hello:
    command: [{PY}, -c, "print('hello')"]
    schedules: [{{cron: "0 * * * *"}}, {{cron: "30 6 * * *", tz: America/New_York}}]
    on_event: [{{key: greet, debounce: 1m}}]
  shout:
    command:
      - {PY}
      - -c
      - {SHOUT_CODE}
  boom:
    command: [{PY}, -c, "import sys; print('going down'); sys.exit(3)"]
  flaky:
    command: [{PY}, -c, "import os, sys; sys.exit(1 if os.environ['RUNLANE_ATTEMPT'] == '1' else 0)"]
    max_attempts: 2
  slow:
    command: [{PY}, -c, "import time; print('started', flush=True); time.sleep(30)"]
    deadline: 1s
  long:
    command: [{PY}, -c, "import time; time.sleep(60)"]
  careful:
    command: [{PY}, -c, "print('acted')"]
    acts: true
    on_event: [{{key: launch.now}}]
  etl.load:
    command: [{PY}, -c, "print('loaded')"]
chains:
  flow:
    steps:
      first: {{job: hello}}
      second: {{job: boom, after: [{{step: first, on: success}}]}}
      third: {{job: shout, after: [{{step: second, on: success}}]}}
      cleanup: {{job: etl.load, after: [{{step: second, on: finish}}]}}
  guarded:
    steps:
      only: {{job: careful}}
"""
ALICE = Requester("alice", Trigger.CLI)
BIG_LOG_BYTES = 101 * 1024 * 1024  # the running run's log: a little over 100 MB


@dataclass
class Seeded:
    """The server and what was seeded in its database."""

    server: ApiServer
    runs: dict[str, str] = field(default_factory=dict)  # what → run id
    chain_run: str = ""
    big_log_size: int = 0


async def _until(check: object, within: float = 60.0) -> None:
    """Poll `check()` (an async callable) until it is true, at most `within` seconds."""
    async with asyncio.timeout(within):
        # The database is the signal here (a chain's end, a retry's row): read it again.
        while not await check():  # type: ignore[operator]  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def seed(settings: Settings, made: Seeded) -> None:
    """Run the launcher over the seeded jobs and chain, then leave the rest as described."""
    async with open_runtime(settings, create=True, check_schema=False) as rt:
        await rt.store.upgrade()
        await _launched(rt, settings, made)
        await _left_as_they_are(rt, made)


async def _launched(rt: Runtime, settings: Settings, made: Seeded) -> None:
    finished: dict[str, asyncio.Event] = {}

    def hook(signal: str, run_id: str) -> None:
        if signal == "finished":
            finished.setdefault(run_id, asyncio.Event()).set()

    launcher = Launcher(
        store=rt.store,
        catalog=rt.require_catalog(),
        executors=build_executors(settings),
        settings=replace(settings, launcher_id="seed-launcher", claim_interval=0.05),
        hook=hook,
        retry_base_seconds=0.05,
    )
    task = asyncio.create_task(launcher.run())
    try:
        for job in ("shout", "boom", "slow", "flaky"):
            queued = await operations.run_job(rt, job, requester=ALICE)
            made.runs[job] = queued.run.id
        made.chain_run = (await operations.run_chain(rt, "flow", requester=ALICE)).view.run.id
        for job in ("shout", "boom", "slow"):
            run_id = made.runs[job]
            await _until(lambda r=run_id: _final(rt, r))

        async def retried() -> bool:
            runs = await operations.list_runs(rt, job="flaky")
            return any(r.status is RunStatus.SUCCESS for r in runs)

        async def chain_ended() -> bool:
            return (await rt.store.get_chain_run(made.chain_run)).status != "running"

        await _until(retried)
        await _until(chain_ended)
        retry = [r for r in await operations.list_runs(rt, job="flaky") if r.attempt == 2]
        made.runs["flaky_retry"] = retry[0].id
    finally:
        launcher.stop()
        async with asyncio.timeout(30):
            await task


async def _final(rt: Runtime, run_id: str) -> bool:
    return (await rt.store.get_run(run_id)).status.is_final


async def _left_as_they_are(rt: Runtime, made: Seeded) -> None:
    cancelled = await operations.run_job(rt, "hello", requester=ALICE)
    await operations.cancel(rt, cancelled.run.id, requester=ALICE)
    made.runs["cancelled"] = cancelled.run.id
    # Running: claimed by a launcher that is not there (its lease long), with a big log.
    running = await operations.run_job(rt, "long", requester=ALICE)
    (claimed,) = await rt.store.claim(
        "gone-launcher", limit=1, lease_ttl=3600, executors=["inline"], executor_caps={}
    )
    assert claimed.run.id == running.run.id
    await rt.store.set_external_id(claimed.lease, "4242")
    made.runs["running"] = running.run.id
    log = Path(rt.settings.log_dir) / f"{running.run.id}.1.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    block = b"".join(
        b"%09d a line of a long job's output, padded to look real\n" % i for i in range(10_000)
    )
    with log.open("wb") as fh:
        for _ in range(BIG_LOG_BYTES // len(block) + 1):
            fh.write(block)
        fh.write((SCRIPT + "\nthe last whole line\nhalf a li").encode())
    made.big_log_size = log.stat().st_size
    queued = await operations.run_job(rt, "etl.load", requester=ALICE)
    made.runs["queued"] = queued.run.id
    emitted = await operations.emit(
        rt, "greet", {"who": SCRIPT, "n": 1}, requester=ALICE, event_id=f"ev-{uuid.uuid4().hex}"
    )
    made.runs["event"] = emitted.links[0].run_id


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def seeded(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Seeded]:
    """The server on a seeded database of the module's own, on each dialect."""
    tmp = tmp_path_factory.mktemp(f"pages-{request.param}")
    catalog = tmp / "pages-catalog.yaml"
    catalog.write_text(CATALOG)
    load_catalog(catalog)  # a broken catalog fails here, plainly
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp / 'runlane.db'}"
        else:
            url = stack.enter_context(scratch_database("runlane_pages"))
        settings = api_settings(tmp, url, catalog_path=str(catalog))
        made = Seeded(server=None)  # type: ignore[arg-type]
        asyncio.run(seed(settings, made))
        made.server = stack.enter_context(running_api(settings, request.param))
        yield made


__all__ = ["CLI", "SCRIPT", "Seeded", "seeded"]
