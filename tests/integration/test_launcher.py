"""The launcher end to end with the inline executor, on SQLite and on the real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import replace

import pytest
import structlog
import structlog.testing

from runlane.catalog import Catalog, parse_catalog_text
from runlane.core.runs import RunStatus, Trigger
from runlane.errors import (
    ConfirmationRequired,
    DatabaseUnavailable,
    OverlapRefused,
    ParamError,
    RunRefused,
    UnknownJob,
)
from runlane.ports import EventFact, RunFilter, Store
from runlane.service.accept import RunRequest, accept_run
from runlane.service.config import Settings
from runlane.service.launcher import Launcher
from runlane.service.wiring import build_executors
from tests.support.waiting import eventually

from .conftest import Events, Running


async def accept(store: Store, catalog: Catalog, job: str, **kw: object) -> str:
    req = RunRequest(job=job, trigger=kw.pop("trigger", Trigger.CLI), **kw)  # type: ignore[arg-type]
    result = await accept_run(store, catalog, req)
    return result.run.id


async def test_success_records_output_env_and_params(
    store: Store, catalog: Catalog, start_launcher: Callable[..., Running]
) -> None:
    launcher = start_launcher()
    run_id = await accept(store, catalog, "hello", params={"week": "7"}, params_from_strings=True)
    await launcher.events.wait("finished", run_id)
    run = await store.get_run(run_id)
    assert run.status is RunStatus.SUCCESS
    assert run.exit_code == 0
    assert run.params == {"week": 7}
    assert run.log_tail is not None
    words = run.log_tail.split()
    assert words[:3] == ["hello", run_id, "cli"]
    assert json.loads(words[3]) == {"week": 7}
    assert words[4] == "7"
    assert run.started_at is not None
    assert run.finished_at is not None
    assert run.finished_at >= run.started_at
    assert run.external_id is not None
    assert run.external_id.isdigit()


async def test_failure_is_retried_as_new_rows_until_success(
    store: Store, catalog: Catalog, start_launcher: Callable[..., Running]
) -> None:
    launcher = start_launcher()
    first = await accept(store, catalog, "flaky")
    await launcher.events.wait("finished", first)
    run1 = await store.get_run(first)
    assert run1.status is RunStatus.FAILURE
    assert run1.exit_code == 1
    retries = [r for r in await store.list_runs(RunFilter(job="flaky")) if r.retry_of == first]
    assert len(retries) == 1
    run2 = retries[0]
    assert run2.attempt == 2
    assert run2.trigger == "retry"
    assert run2.dedupe_key == f"{run1.dedupe_key}#2"
    await launcher.events.wait("finished", run2.id)
    assert (await store.get_run(run2.id)).status is RunStatus.SUCCESS
    assert len(await store.list_runs(RunFilter(job="flaky"))) == 2


async def test_failure_without_attempts_left_is_final(
    store: Store, catalog: Catalog, start_launcher: Callable[..., Running]
) -> None:
    launcher = start_launcher()
    run_id = await accept(store, catalog, "fail")
    await launcher.events.wait("finished", run_id)
    run = await store.get_run(run_id)
    assert (run.status, run.exit_code, run.error_code) == (RunStatus.FAILURE, 3, "exit_code")
    assert "boom" in (run.log_tail or "")
    assert len(await store.list_runs(RunFilter(job="fail"))) == 1


async def test_deadline_ends_in_timeout(
    store: Store, catalog: Catalog, start_launcher: Callable[..., Running]
) -> None:
    launcher = start_launcher()
    run_id = await accept(store, catalog, "slow")
    await launcher.events.wait("finished", run_id)
    run = await store.get_run(run_id)
    assert run.status is RunStatus.TIMEOUT
    assert run.end_reason == "deadline"
    assert run.started_at is not None
    assert run.finished_at is not None
    took = (run.finished_at - run.started_at).total_seconds()
    assert 0.9 <= took < 10, took


async def test_accept_refuses_bad_requests_and_writes_nothing(
    store: Store, catalog: Catalog
) -> None:
    with pytest.raises(UnknownJob):
        await accept(store, catalog, "nope")
    with pytest.raises(ParamError):
        await accept(store, catalog, "hello", params={"week": "seven"}, params_from_strings=True)
    with pytest.raises(ParamError):
        await accept(store, catalog, "hello", params={"colour": "red"}, params_from_strings=True)
    with pytest.raises(ConfirmationRequired):
        await accept(store, catalog, "careful")
    assert await store.list_runs(RunFilter()) == []
    await accept(store, catalog, "careful", confirmed=True)
    assert len(await store.list_runs(RunFilter())) == 1


async def test_overlap_forbid_refuses_a_person_and_skips_a_schedule(
    store: Store, catalog: Catalog
) -> None:
    first = await accept(store, catalog, "single")
    with pytest.raises(OverlapRefused) as info:
        await accept(store, catalog, "single")
    assert info.value.active_run_id == first
    assert info.value.exit_code == 3
    skipped = await accept(
        store, catalog, "single", trigger=Trigger.SCHEDULE, dedupe_key="single@slot"
    )
    row = await store.get_run(skipped)
    assert (row.status, row.end_reason) == (RunStatus.SKIPPED, "overlap")


async def test_overlap_queue_runs_one_at_a_time(
    store: Store, catalog: Catalog, start_launcher: Callable[..., Running]
) -> None:
    a = await accept(store, catalog, "serial")
    b = await accept(store, catalog, "serial")
    launcher = start_launcher()
    await launcher.events.wait("finished", a)
    await launcher.events.wait("finished", b)
    ra, rb = await store.get_run(a), await store.get_run(b)
    assert ra.status is RunStatus.SUCCESS
    assert rb.status is RunStatus.SUCCESS
    assert ra.finished_at is not None
    assert rb.started_at is not None
    assert rb.started_at >= ra.finished_at


async def test_queued_run_past_its_ttl_is_skipped_expired(
    store: Store, catalog: Catalog, start_launcher: Callable[..., Running]
) -> None:
    run_id = await accept(store, catalog, "hello", queue_ttl_seconds=0.0)
    launcher = start_launcher()
    await launcher.events.wait("expired", run_id)
    run = await store.get_run(run_id)
    assert (run.status, run.end_reason) == (RunStatus.SKIPPED, "expired")


async def test_cancel_running_run(
    store: Store, catalog: Catalog, start_launcher: Callable[..., Running]
) -> None:
    launcher = start_launcher()
    run_id = await accept(store, catalog, "long")
    await launcher.events.wait("started", run_id)
    requested = await store.request_cancel(run_id, by="test")
    assert requested.status is RunStatus.RUNNING
    assert requested.cancel_requested_at is not None
    await launcher.events.wait("finished", run_id)
    run = await store.get_run(run_id)
    assert run.status is RunStatus.CANCELLED
    # cancelled runs are never retried even with attempts left
    assert len(await store.list_runs(RunFilter(job="long"))) == 1


async def test_cancel_queued_run_needs_no_launcher(store: Store, catalog: Catalog) -> None:
    run_id = await accept(store, catalog, "hello")
    run = await store.request_cancel(run_id, by="test")
    assert run.status is RunStatus.CANCELLED


async def test_graceful_shutdown_ends_inline_runs_and_retries_them(
    store: Store, catalog: Catalog, start_launcher: Callable[..., Running]
) -> None:
    launcher = start_launcher(shutdown_grace=0.2)
    run_id = await accept(store, catalog, "long")
    await launcher.events.wait("started", run_id)
    await launcher.stop()
    run = await store.get_run(run_id)
    assert (run.status, run.end_reason) == (RunStatus.FAILURE, "launcher_shutdown")
    retries = [r for r in await store.list_runs(RunFilter(job="long")) if r.retry_of == run_id]
    assert len(retries) == 1
    assert retries[0].status is RunStatus.QUEUED
    assert await store.launchers() == []


async def test_a_second_stop_ends_the_grace_period_at_once(
    store: Store, catalog: Catalog, start_launcher: Callable[..., Running]
) -> None:
    # As a second SIGTERM/SIGINT does: the run is ended now, not after the 10 minutes of grace,
    # and recorded as a shutdown (retried) like any run the grace period ran out on.
    launcher = start_launcher(shutdown_grace=600.0)
    run_id = await accept(store, catalog, "long")
    await launcher.events.wait("started", run_id)
    launcher.launcher.stop()
    launcher.launcher.stop()
    async with asyncio.timeout(30):
        await launcher.task
    run = await store.get_run(run_id)
    assert (run.status, run.end_reason) == (RunStatus.FAILURE, "launcher_shutdown")
    assert [
        r.status for r in await store.list_runs(RunFilter(job="long")) if r.retry_of == run_id
    ] == [RunStatus.QUEUED]


async def test_heartbeat_is_written(
    store: Store, catalog: Catalog, start_launcher: Callable[..., Running]
) -> None:
    launcher = start_launcher()
    await launcher.launcher.beat()
    beats = await store.launchers()
    assert [h.launcher_id for h in beats] == [launcher.launcher.owner]


async def test_pod_job_without_a_cluster_runs_inline_and_says_so(
    store: Store, catalog: Catalog, start_launcher: Callable[..., Running]
) -> None:
    launcher = start_launcher()
    run_id = await accept(store, catalog, "kubejob")
    await launcher.events.wait("finished", run_id)
    run = await store.get_run(run_id)
    assert (run.executor, run.status, run.note) == (
        "inline",
        RunStatus.SUCCESS,
        "no_cluster_fallback",
    )
    assert "ran inline" in (run.log_tail or "")


async def test_pod_fallback_refuse_refuses_pod_jobs_without_a_cluster(
    store: Store, catalog: Catalog
) -> None:
    with pytest.raises(RunRefused, match="no cluster is configured"):
        await accept_run(
            store, catalog, RunRequest(job="kubejob", trigger=Trigger.CLI), pod_fallback="refuse"
        )
    assert await store.list_runs(RunFilter(job="kubejob")) == []


async def test_a_renewal_racing_an_outcome_being_saved_is_not_a_lost_lease(
    store: Store, settings: Settings
) -> None:
    """A renewal that misses a run because its outcome committed meanwhile (the row is no longer
    `running`) is not a lost lease: no `lease_lost`, no warning for a run that ended normally.
    Renewals every millisecond over 400 short runs, 16 at a time, make the race happen dozens
    of times on the old code, and made renewals and saves deadlock on PostgreSQL."""
    catalog = parse_catalog_text(
        "version: 1\ndefaults: {executor: inline, max_attempts: 1, overlap: allow}\n"
        'jobs:\n  quick: {command: ["true"]}\n',
        "catalog.yaml",
    )
    events = Events()
    fast = replace(settings, lease_renew_interval=0.001, concurrency=16)
    launcher = Launcher(
        store=store, catalog=catalog, executors=build_executors(fast), settings=fast, hook=events
    )
    ids = [await accept(store, catalog, "quick") for _ in range(400)]
    with structlog.testing.capture_logs() as logged:
        task = asyncio.create_task(launcher.run())
        try:
            for run_id in ids:
                await events.wait("finished", run_id, within=60)
        finally:
            launcher.stop()
            await task
    assert [e for e in events.log if e[0] == "lease_lost"] == []
    # Renewals and saves of the same rows never race into a deadlock (PostgreSQL would fail one
    # after deadlock_timeout: a renewal or save retried, a second lost).
    troubles = {"lease.renew_failed", "store.write_retry", "store.write_conflict_retry"}
    assert [e for e in logged if e["event"] in troubles or "lease_lost" in e["event"]] == []
    finished = await store.list_runs(RunFilter(job="quick", limit=1000))
    assert len(finished) == 400
    assert {r.status for r in finished} == {RunStatus.SUCCESS}


async def test_the_database_bus_retries_turning_facts_off_until_it_lands(
    store: Store, start_launcher: Callable[..., Running], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Facts left on with no relay to publish them would grow the outbox unread: a launcher of
    the database bus keeps trying to turn them off (on PostgreSQL the switch can wait out
    run_log's lock, or the database can be away) until it lands."""
    await store.set_bus_facts(True)  # the database was on the RabbitMQ bus before
    real = store.set_bus_facts
    calls: list[bool] = []
    landed: list[bool] = []

    async def flaky(enabled: bool) -> None:
        calls.append(enabled)
        if len(calls) == 1:
            raise DatabaseUnavailable("the database went away")
        await real(enabled)
        landed.append(enabled)

    monkeypatch.setattr(store, "set_bus_facts", flaky)
    with structlog.testing.capture_logs() as logs:
        start_launcher()
        # Landed, not only tried: the event below must come after facts are off.
        await eventually(lambda: landed, "a second try that lands")
    assert calls[:2] == [False, False]
    assert landed == [False]
    assert any(e["event"] == "launcher.bus_facts_unset" for e in logs)
    fact = EventFact("runlane://events")
    await store.record_event("after", "some.key", {}, fact=fact)
    assert await store.outbox_pending() == 0  # facts are off: the event wrote none
