"""Events that start nothing and say so. An event whose debounce window opens while the job
(`overlap: forbid`) is still busy with the previous window's run records a skipped run; so does
an event for a paused or snoozed job (`paused`), until the snooze runs out. SQLite and
PostgreSQL, on a clock the test moves across a window boundary or past a snooze."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runlane.adapters.postgres import PostgresStore
from runlane.adapters.sqlite import SqliteStore
from runlane.catalog import Catalog, parse_catalog_text
from runlane.core.runs import RunStatus
from runlane.ports import Store
from runlane.service.accept import RunRequest, accept_run
from runlane.service.events import emit_event
from runlane.testing.clock import FixedClock

CATALOG = """
version: 1
defaults: {executor: inline, deadline: 1m}
jobs:
  notify:
    command: ["true"]
    overlap: forbid
    on_event: [{key: rumor.signal_created, debounce: 30m}]
"""
PAUSABLE = """
version: 1
defaults: {executor: inline, overlap: allow, deadline: 1m}
jobs:
  snoozed: {command: ["true"], on_event: [{key: k.p}]}
  windowed: {command: ["true"], on_event: [{key: k.p, debounce: 1h}]}
  awake: {command: ["true"], on_event: [{key: k.p}]}
"""
BEFORE_BOUNDARY = datetime(2031, 3, 4, 14, 29, 59, tzinfo=UTC)


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(BEFORE_BOUNDARY)


@pytest.fixture
async def store(database_url: str, clock: FixedClock) -> AsyncIterator[Store]:
    s: Store
    if database_url.startswith("sqlite"):
        s = SqliteStore(database_url.removeprefix("sqlite:///"), clock=clock)
    else:
        s = PostgresStore(database_url, pool_max=2, clock=clock)
    await s.open()
    await s.upgrade()
    yield s
    await s.close()


async def test_a_new_window_while_the_job_is_busy_records_a_skip_not_a_start(
    store: Store, clock: FixedClock
) -> None:
    catalog: Catalog = parse_catalog_text(CATALOG, "catalog.yaml")

    async def accept(request: RunRequest) -> Any:
        return await accept_run(store, catalog, request)

    first = await emit_event(store, catalog, accept, "rumor.signal_created", event_id="e1")
    assert [
        (link.started, r.run.status) for link, r in zip(first.links, first.runs, strict=True)
    ] == [(True, RunStatus.QUEUED)]
    clock.advance(2)  # 14:30:01: the next 30-minute window; the first run is still queued
    second = await emit_event(store, catalog, accept, "rumor.signal_created", event_id="e2")
    [link] = second.links
    [result] = second.runs
    assert result.run.id != first.runs[0].run.id
    assert result.run.status is RunStatus.SKIPPED
    assert result.run.end_reason == "overlap"
    assert link.started is False
    again = await emit_event(store, catalog, accept, "rumor.signal_created", event_id="e2")
    assert [x.started for x in again.links] == [False]  # the same answer when repeated


async def test_a_snoozed_jobs_event_runs_are_skipped_until_the_snooze_runs_out(
    store: Store, clock: FixedClock
) -> None:
    catalog = parse_catalog_text(PAUSABLE, "catalog.yaml")

    async def accept(request: RunRequest) -> Any:
        return await accept_run(store, catalog, request)

    def outcome(emitted: Any) -> dict[str, tuple[bool, RunStatus, str | None]]:
        return {
            link.job: (link.started, result.run.status, result.run.end_reason)
            for link, result in zip(emitted.links, emitted.runs, strict=True)
        }

    until = BEFORE_BOUNDARY + timedelta(minutes=10)
    await store.set_override("snoozed", paused_until=until, reason="deploy", by="test")
    await store.set_override("windowed", paused_until=None, reason="hold", by="test")
    paused = await emit_event(store, catalog, accept, "k.p", event_id="e1")
    assert outcome(paused) == {
        "snoozed": (False, RunStatus.SKIPPED, "paused"),
        "windowed": (False, RunStatus.SKIPPED, "paused"),
        "awake": (True, RunStatus.QUEUED, None),
    }
    again = await emit_event(store, catalog, accept, "k.p", event_id="e1")
    assert outcome(again) == outcome(paused)  # repeating the event changes nothing
    clock.advance(11 * 60)  # the snooze has run out; the row is still there
    assert (await store.overrides())["snoozed"].paused_until == until
    later = await emit_event(store, catalog, accept, "k.p", event_id="e2")
    assert outcome(later)["snoozed"] == (True, RunStatus.QUEUED, None)
    # Still paused: a later event of the same window joins the skipped row, starting nothing.
    assert outcome(later)["windowed"] == (False, RunStatus.SKIPPED, "paused")


async def test_an_event_id_in_a_retrys_form_cannot_take_a_retrys_key(store: Store) -> None:
    """An undebounced listener's run is keyed `job@key@<event id>` and its retries
    `job@key@<event id>#<attempt>`: the run of an event id ending in `#` and digits is keyed with
    a `~` after it, so it can take no retry's row of another event's run (the retry then lost)
    nor be answered with one; the same id again is the same run."""
    catalog = parse_catalog_text(PAUSABLE, "catalog.yaml")

    async def accept(request: RunRequest) -> Any:
        return await accept_run(store, catalog, request)

    emitted = await emit_event(store, catalog, accept, "k.p", event_id="e1#2")
    [started] = [link for link in emitted.links if link.job == "awake"]
    assert started.started
    assert await store.run_by_dedupe_key("awake@k.p@e1#2") is None  # e1's second attempt's
    run = await store.run_by_dedupe_key("awake@k.p@e1#2~")
    assert run is not None
    again = await emit_event(store, catalog, accept, "k.p", event_id="e1#2")
    assert [r.run.id for r in again.runs if r.run.job == "awake"] == [run.id]
    own = await emit_event(store, catalog, accept, "k.p", event_id="e1#2b")
    assert [link.started for link in own.links if link.job == "awake"] == [True]
    assert await store.run_by_dedupe_key("awake@k.p@e1#2b") is not None


async def test_windows_shorter_than_a_second_each_start_their_own_run(
    store: Store, clock: FixedClock
) -> None:
    """`debounce: 500ms`: the windows of one second are two, each its own run (the dedupe key
    keeps the window start's fraction of a second)."""
    catalog = parse_catalog_text(
        "version: 1\ndefaults: {executor: inline, overlap: allow, deadline: 1m}\njobs:\n"
        '  quick: {command: ["true"], on_event: [{key: k.q, debounce: 500ms}]}\n'
    )

    async def accept(request: RunRequest) -> Any:
        return await accept_run(store, catalog, request)

    clock.advance(1.1)  # 14:30:00.100: the window from 14:30:00.000
    first = await emit_event(store, catalog, accept, "k.q", event_id="q1")
    clock.advance(0.2)  # 14:30:00.300: the same window, folded into its run
    folded = await emit_event(store, catalog, accept, "k.q", event_id="q2")
    clock.advance(0.4)  # 14:30:00.700: the window from 14:30:00.500, a run of its own
    second = await emit_event(store, catalog, accept, "k.q", event_id="q3")
    assert [link.started for link in first.links] == [True]
    assert folded.runs[0].run.id == first.runs[0].run.id
    assert [link.started for link in folded.links] == [False]
    assert second.runs[0].run.id != first.runs[0].run.id
    assert [link.started for link in second.links] == [True]
    assert second.runs[0].run.status is RunStatus.QUEUED
