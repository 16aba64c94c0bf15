"""A background loop of the launcher that raises something it does not handle (a bug) is not
lost silently: it is logged with its traceback (`launcher.loop_failed`), counted
(`runlane_launcher_loop_failures_total`) and started again after a pause that doubles while it
keeps failing. Before, the task ended and nothing said so until shutdown, which swallowed it:
a launcher whose lease renewal or wake-up loop had died ran on wrong."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from runlane.ports import Store
from runlane.service.launcher import launcher as launcher_module
from runlane.service.metrics import Exporter

from .conftest import Running


async def eventually(condition: Callable[[], bool], within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("not within the time allowed")
        await asyncio.sleep(0.02)


async def test_a_failed_loop_is_logged_counted_and_started_again(
    start_launcher: Callable[..., Running], store: Store
) -> None:
    with capture_logs() as entries:
        running = start_launcher()
        heartbeat = running.launcher._heartbeat
        real_run, real_beat = heartbeat.run, heartbeat.beat
        starts: list[float] = []
        beats: list[float] = []

        async def counted_beat() -> None:
            beats.append(time.monotonic())
            await real_beat()

        async def failing_once() -> None:
            starts.append(time.monotonic())
            if len(starts) == 1:
                raise RuntimeError("a bug in the heartbeat loop")
            await real_run()

        # Patched before the launcher's task first runs: it reads them as it starts its loops.
        heartbeat.run = failing_once  # type: ignore[method-assign]
        heartbeat.beat = counted_beat  # type: ignore[method-assign]
        await eventually(lambda: len(starts) >= 2)
        restarted = starts[1]
        # The loop is alive again: it beats after its restart, and again a second later.
        await eventually(lambda: sum(t > restarted for t in beats) >= 2)
        assert starts[1] - starts[0] >= launcher_module.LOOP_RESTART_FIRST - 0.05
        failed = [e for e in entries if e["event"] == "launcher.loop_failed"]
        assert len(failed) == 1
        assert failed[0]["loop"] == "heartbeat"
        assert failed[0]["restart_in"] == launcher_module.LOOP_RESTART_FIRST
        assert failed[0]["log_level"] == "error"
        assert failed[0]["exc_info"] is True  # the traceback goes with the line
        assert running.launcher.metrics.loop_failures == {("heartbeat",): 1}
        scrape = (await Exporter(store, launcher=running.launcher.metrics).scrape()).decode()
        assert 'runlane_launcher_loop_failures_total{loop="heartbeat"} 1.0' in scrape
        await running.stop()
    assert not running.task.cancelled()
    assert running.task.exception() is None


async def test_a_loop_that_keeps_failing_waits_longer_each_time(
    start_launcher: Callable[..., Running], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launcher_module, "LOOP_RESTART_FIRST", 0.05)
    monkeypatch.setattr(launcher_module, "LOOP_RESTART_MAX", 0.2)
    with capture_logs() as entries:
        running = start_launcher()
        starts: list[float] = []

        async def always_failing(*args: Any) -> None:
            starts.append(time.monotonic())
            raise ValueError("a bug that never goes away")

        running.launcher.alerts.run = always_failing  # type: ignore[method-assign]
        await eventually(lambda: len(starts) >= 5)
        await running.stop()
    delays = [e["restart_in"] for e in entries if e["event"] == "launcher.loop_failed"]
    assert delays[:5] == [0.05, 0.1, 0.2, 0.2, 0.2]  # doubled, up to the maximum
    # The stop ended the loop: nothing was started again after it.
    count = len(starts)
    await asyncio.sleep(0.3)
    assert len(starts) == count


async def test_an_sdk_scope_swept_as_an_orphan_is_counted_under_one_job_label(
    start_launcher: Callable[..., Running], store: Store
) -> None:
    # An SDK child scope's name (any string a job's code passes to run_scope(), such as one per
    # item) became the `job` label of runlane_runs_finished_total when the orphan sweep ended
    # its row: a series per name, without bound. Names outside the catalog share one label now.
    import uuid

    from runlane.core.runs import NewRun, RunStatus, Trigger
    from runlane.service.metrics import OTHER_JOB

    names = [f"load[item-{i}]" for i in range(3)]
    for name in names:
        await store.accept(
            NewRun(
                id=str(uuid.uuid4()),
                job=name,
                trigger=Trigger.MANUAL,
                dedupe_key=f"scope:{name}",
                executor="scope",
                overlap="allow",
                status=RunStatus.RUNNING,
                deadline_seconds=0.05,
            )
        )
    running = start_launcher(orphan_grace=0.0, orphan_check_interval=0.1)
    metrics = running.launcher.metrics

    def swept() -> int:
        return sum(n for k, n in metrics.finished.items() if k[2] == "scope")

    await eventually(lambda: swept() == len(names))
    scrape = (await Exporter(store, launcher=metrics).scrape()).decode()
    assert not any(name in scrape for name in names)
    assert (
        f'runlane_runs_finished_total{{executor="scope",job="{OTHER_JOB}",status="timeout",'
        'trigger="manual"} 3.0' in scrape
    )
    await running.stop()
