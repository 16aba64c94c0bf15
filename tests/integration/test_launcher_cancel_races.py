"""When a cancel, a deadline, a shutdown and a run's own end meet: the run ends once, with
the outcome that happened, is retried only when nobody asked to cancel it, and leaves nothing
running. On SQLite and on the real PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from runlane.catalog import Catalog, parse_catalog_text
from runlane.core.runs import RunStatus, Trigger
from runlane.ports import RunFilter, Store
from runlane.service.accept import RunRequest, accept_run
from runlane.service.config import Settings
from runlane.service.events import emit_event
from runlane.service.launcher import Launcher
from runlane.service.wiring import build_executors
from runlane.testing.fakes import Script, ScriptedExecutor, exited
from tests.support.waiting import eventually

from .conftest import Events

PY = sys.executable

# `stubborn` notes each SIGTERM in a file of the test's directory and goes on sleeping.
STUBBORN = (
    "import os, signal, time, pathlib\n"
    "d = pathlib.Path(os.environ['RUNLANE_TEST_DIR'])\n"
    "def term(*_):\n"
    "    (d / (os.environ['RUN_ID'] + '.term')).write_text('x')\n"
    "signal.signal(signal.SIGTERM, term)\n"
    "(d / (os.environ['RUN_ID'] + '.pid')).write_text(str(os.getpid()))\n"
    "time.sleep(60)\n"
)


def stubborn_catalog(*, deadline: str, kill_grace: str) -> Catalog:
    return parse_catalog_text(
        "version: 1\n"
        "global: {max_deadline: 1h, manual_queue_ttl: 5m}\n"
        "defaults: {executor: inline, overlap: allow, max_attempts: 2}\n"
        "jobs:\n"
        "  stubborn:\n"
        f"    command: [{PY}, -c, {STUBBORN!r}]\n"
        f"    deadline: {deadline}\n"
        f"    kill_grace: {kill_grace}\n",
        "catalog.yaml",
    )


async def stubborn_run(
    store: Store, catalog: Catalog, settings: Settings
) -> tuple[Launcher, asyncio.Task[None], str]:
    """A launcher with a short shutdown grace, and a run of `stubborn` accepted for it."""
    fast = replace(settings, shutdown_grace=0.05)
    launcher = Launcher(
        store=store, catalog=catalog, executors=build_executors(fast), settings=fast, hook=Events()
    )
    task = asyncio.create_task(launcher.run())
    run = await accept_run(store, catalog, RunRequest(job="stubborn", trigger=Trigger.CLI))
    return launcher, task, run.run.id


@pytest.fixture
def test_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RUNLANE_TEST_DIR", str(tmp_path))
    return tmp_path


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] == "Z")


async def test_a_cancelled_run_the_launcher_stops_on_is_not_retried(
    store: Store, settings: Settings, test_dir: Path
) -> None:
    """Someone cancels a run that takes its time to stop (SIGTERM handled, the kill grace
    running) and the launcher is stopped meanwhile: the run was cancelled, and a cancelled run
    is never retried. It must not be recorded `launcher_shutdown` with a retry queued."""
    catalog = stubborn_catalog(deadline="1m", kill_grace="1s")
    launcher, task, run_id = await stubborn_run(store, catalog, settings)
    try:
        await eventually(lambda: (test_dir / f"{run_id}.pid").exists(), "the run started")
        await store.request_cancel(run_id, by="alice")
        await eventually(lambda: (test_dir / f"{run_id}.term").exists(), "the cancel's SIGTERM")
    finally:
        launcher.stop()
        async with asyncio.timeout(30):
            await task
    ended = await store.get_run(run_id)
    assert (ended.status, ended.end_reason) == (RunStatus.CANCELLED, "cancelled")
    assert [r.id for r in await store.list_runs(RunFilter(job="stubborn"))] == [run_id]


async def test_a_shutdown_ends_a_run_in_its_kill_grace_and_saves_its_outcome(
    store: Store, settings: Settings, test_dir: Path
) -> None:
    """A run past its deadline that ignores SIGTERM is in its kill grace (30 s by default) when
    the launcher is told to stop: the shutdown must end it after its own grace
    (RUNLANE_SHUTDOWN_GRACE, then one second), save its outcome and leave nothing running, not
    leave the row `running` and the process alive once the launcher has stopped."""
    catalog = stubborn_catalog(deadline="1s", kill_grace="10m")
    launcher, task, run_id = await stubborn_run(store, catalog, settings)
    try:
        await eventually(lambda: (test_dir / f"{run_id}.term").exists(), "the deadline's SIGTERM")
        pid = int((test_dir / f"{run_id}.pid").read_text())
    finally:
        launcher.stop()
        async with asyncio.timeout(30):
            await task
    ended = await store.get_run(run_id)
    alive_after = alive(pid)
    if alive_after:
        os.kill(pid, 9)
    assert ended.status is RunStatus.TIMEOUT, (ended.status, ended.end_reason)
    assert ended.end_reason == "deadline"
    assert not alive_after
    assert [r.attempt for r in await store.list_runs(RunFilter(job="stubborn"))] == [2, 1]


async def test_a_run_that_fails_after_a_cancel_request_is_not_retried(
    store: Store, settings: Settings
) -> None:
    """A cancel requested while the run is ending by itself (it fails before the launcher's next
    look for cancel requests) is still a cancel request: "a run somebody asked to cancel is
    never retried, whatever it ended with"."""
    catalog = parse_catalog_text(
        "version: 1\n"
        "defaults: {executor: inline, overlap: allow, max_attempts: 3}\n"
        "jobs:\n  flaky: {command: [flaky]}\n",
        "catalog.yaml",
    )
    executor = ScriptedExecutor()
    executor.script(Script(outcome=None), job="flaky")  # runs until released
    # The launcher looks for cancel requests once a claim interval: a long one here, so the
    # run's own end comes first, as it does for a run that fails within that second.
    slow_polls = replace(settings, claim_interval=60.0)
    events = Events()
    launcher = Launcher(
        store=store,
        catalog=catalog,
        executors={"inline": executor},
        settings=slow_polls,
        hook=events,
        retry_base_seconds=0.05,
    )
    task = asyncio.create_task(launcher.run())
    try:
        run = await accept_run(store, catalog, RunRequest(job="flaky", trigger=Trigger.CLI))
        run_id = run.run.id
        await events.wait("started", run_id)
        await store.request_cancel(run_id, by="alice")
        executor.release(run_id, exited(1, "boom\n"))
        await events.wait("finished", run_id)
    finally:
        launcher.stop()
        async with asyncio.timeout(30):
            await task
    ended = await store.get_run(run_id)
    assert ended.status is RunStatus.FAILURE
    assert executor.calls_to("cancel") == []  # the run ended by itself first
    assert [r.id for r in await store.list_runs(RunFilter(job="flaky"))] == [run_id]


async def test_retries_of_events_whose_ids_hold_a_hash_are_not_merged(
    store: Store, settings: Settings
) -> None:
    """Event ids are free text (`runlane emit --id`, a CloudEvent's id) and, without debounce,
    part of the run's dedupe key. Each failed run with attempts left gets its own retry: two
    events `build#1` and `build#7` must not share one retry row (`job@key@build#2`)."""
    catalog = parse_catalog_text(
        "version: 1\n"
        "defaults: {executor: inline, overlap: allow, max_attempts: 2}\n"
        "jobs:\n  builder: {command: [build], on_event: [{key: build.done}]}\n",
        "catalog.yaml",
    )
    executor = ScriptedExecutor(default=Script(outcome=exited(1, "boom\n")))
    events = Events()
    launcher = Launcher(
        store=store,
        catalog=catalog,
        executors={"inline": executor},
        settings=settings,
        hook=events,
        retry_base_seconds=60.0,  # the retries stay queued
    )

    async def accept(request: RunRequest) -> object:
        return await accept_run(store, catalog, request)

    task = asyncio.create_task(launcher.run())
    try:
        firsts = []
        for event_id in ("build#1", "build#7"):
            emitted = await emit_event(store, catalog, accept, "build.done", event_id=event_id)
            [run] = emitted.runs
            firsts.append(run.run.id)
        for run_id in firsts:
            await events.wait("finished", run_id)
    finally:
        launcher.stop()
        async with asyncio.timeout(30):
            await task
    runs = await store.list_runs(RunFilter(job="builder"))
    retried = sorted(r.retry_of for r in runs if r.retry_of is not None)
    assert retried == sorted(firsts), [(r.dedupe_key, r.retry_of) for r in runs]
