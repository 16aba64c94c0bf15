"""Where the CLI finds an inline run's log file (`Runtime.find_log`): under its own
RUNLANE_LOG_DIR first; else in the log directory the heartbeat of the run's launcher reports (on
this host), or of a live launcher on this host. A SQLite store and an injected clock."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runlane.adapters.sqlite import SqliteStore
from runlane.core.runs import Run, RunStatus
from runlane.ports import Heartbeat
from runlane.service.config import Settings
from runlane.service.runtime import Runtime
from runlane.testing.clock import FixedClock

T0 = datetime(2031, 3, 4, 5, 6, 7, tzinfo=UTC)
HERE = socket.gethostname()


def a_run(
    status: RunStatus = RunStatus.RUNNING, *, owner: str | None = "L1", executor: str = "inline"
) -> Run:
    return Run(
        id="r1",
        job="j",
        status=status,
        trigger="cli",
        dedupe_key="k",
        attempt=2,
        executor=executor,
        overlap="allow",
        params={},
        params_raw="{}",
        queued_at=T0,
        lease_owner=owner,
    )


def log_in(directory: Path) -> Path:
    """The run's log file (attempt 2) written in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "r1.2.log"
    path.write_text("output\n")
    return path


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(T0)


@pytest.fixture
async def runtime(tmp_path: Path, clock: FixedClock) -> AsyncIterator[Runtime]:
    store = SqliteStore(str(tmp_path / "runlane.db"), clock=clock)
    await store.open()
    await store.upgrade()
    try:
        yield Runtime(Settings(log_dir=str(tmp_path / "here")), store, catalog=None)
    finally:
        await store.close()


async def beat(rt: Runtime, launcher_id: str, log_dir: Path | None, host: str = HERE) -> None:
    await rt.store.beat(
        Heartbeat(
            launcher_id,
            host,
            1,
            "test",
            T0,
            heartbeat_interval=1.0,
            log_dir=None if log_dir is None else str(log_dir),
        )
    )


async def test_the_local_file_is_found_without_asking_the_database(tmp_path: Path) -> None:
    local = log_in(tmp_path / "here")
    never_opened = SqliteStore(str(tmp_path / "none.db"), create=False)
    rt = Runtime(Settings(log_dir=str(tmp_path / "here")), never_opened, catalog=None)
    assert await rt.find_log(a_run()) == local


async def test_the_launcher_that_claimed_the_run_says_where_its_log_is(
    runtime: Runtime, tmp_path: Path, clock: FixedClock
) -> None:
    theirs = log_in(tmp_path / "launcher-1")
    await beat(runtime, "L1", tmp_path / "launcher-1")
    await beat(runtime, "L2", tmp_path / "launcher-2")
    assert await runtime.find_log(a_run()) == theirs
    assert await runtime.find_log(a_run(RunStatus.SUCCESS)) == theirs  # kept after the end
    clock.advance(3600)  # silent for long: its heartbeat row still says where it wrote
    assert await runtime.find_log(a_run(RunStatus.FAILURE)) == theirs


async def test_without_the_claiming_launcher_here_a_live_launcher_here_is_asked(
    runtime: Runtime, tmp_path: Path, clock: FixedClock
) -> None:
    local = tmp_path / "here" / "r1.2.log"
    elsewhere = log_in(tmp_path / "launcher-1")
    # The claiming launcher runs on another host: the same path there names another file.
    await beat(runtime, "L1", tmp_path / "launcher-1", host="worker-7")
    assert await runtime.find_log(a_run()) == local
    await beat(runtime, "stale", tmp_path / "launcher-1")
    clock.advance(10)  # three of its 1 s intervals have passed: not live
    assert await runtime.find_log(a_run()) == local
    await beat(runtime, "L2", tmp_path / "launcher-1")
    assert await runtime.find_log(a_run()) == elsewhere
    assert await runtime.find_log(a_run(owner="gone")) == elsewhere  # its heartbeat was deleted


async def test_queued_pod_and_unreported_runs_keep_the_local_path(
    runtime: Runtime, tmp_path: Path
) -> None:
    local = tmp_path / "here" / "r1.2.log"
    log_in(tmp_path / "launcher-1")
    await beat(runtime, "L1", tmp_path / "launcher-1")
    assert await runtime.find_log(a_run(RunStatus.QUEUED)) == local  # writes no log yet
    assert await runtime.find_log(a_run(executor="pod")) == local  # its log is the pod's
    await beat(runtime, "L1", None)  # a launcher of an older runlane does not say
    assert await runtime.find_log(a_run()) == local
