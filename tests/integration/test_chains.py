"""Chains and events end to end on SQLite and PostgreSQL: a launcher runs the steps (inline), the
chain advancer starts, skips and finishes them. Tests wait on launcher hooks, never on sleeps."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from runlane.adapters.postgres import PostgresStore
from runlane.adapters.sqlite import SqliteStore
from runlane.catalog import Catalog, parse_catalog_text
from runlane.core.runs import RunStatus, Trigger
from runlane.errors import DatabaseUnavailable
from runlane.ports import Heartbeat, NewChainRun, RunFilter, Store
from runlane.service import chains as chains_module
from runlane.service.accept import RunRequest, accept_run
from runlane.service.catalog_stamp import stamp_catalog
from runlane.service.chains import ChainRunner, cancel_chain_run, latest_attempts, step_specs
from runlane.service.config import Settings
from runlane.service.events import emit_event
from runlane.service.launcher import Launcher
from runlane.service.wiring import build_executors, store_from_url
from runlane.testing.clock import FixedClock

PY = sys.executable
GATE = "import os, time, pathlib\\ngate = pathlib.Path(os.environ['RUNLANE_TEST_DIR'], 'gate')\\nwhile not gate.exists(): time.sleep(0.02)"
CATALOG = f"""
version: 1
global: {{timezone: "{{zone}}"}}
defaults: {{executor: inline, overlap: allow, deadline: 1m}}
jobs:
  ok: {{command: [{PY}, -c, "pass"], env: {{RUNLANE_TEST_DIR: "{{dir}}"}}}}
  bad: {{command: [{PY}, -c, "raise SystemExit(1)"]}}
  gated: {{command: [{PY}, -c, "{GATE}"], env: {{RUNLANE_TEST_DIR: "{{dir}}"}}}}
  notify:
    command: [{PY}, -c, "pass"]
    on_event: [{{key: rumor.signal_created, debounce: 30m}}]
  instant:
    command: [{PY}, -c, "pass"]
    on_event: [{{key: rumor.signal_created}}]
chains:
  happy:
    steps:
      first: {{job: ok}}
      second: {{job: ok, after: [{{step: first, on: success}}]}}
  failing:
    steps:
      first: {{job: bad}}
      needs-success: {{job: ok, after: [{{step: first, on: success}}]}}
      transitively: {{job: ok, after: [{{step: needs-success, on: success}}]}}
      cleanup: {{job: ok, after: [{{step: first, on: finish}}]}}
  latest:
    steps:
      slow: {{job: gated}}
      lineup: {{job: ok, after: [{{step: slow, on: finish}}], latest: "{{latest}}"}}
  timeout:
    max_duration: 1s
    steps:
      slow: {{job: gated}}
      after: {{job: ok, after: [{{step: slow, on: success}}]}}
"""


class Hooks:
    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], asyncio.Event] = defaultdict(asyncio.Event)
        self.steps: asyncio.Queue[str] = asyncio.Queue()  # ids of step runs, as they start

    def __call__(self, event: str, run_id: str) -> None:
        self.seen[(event, run_id)].set()
        if event == "chain_step":
            self.steps.put_nowait(run_id)

    async def wait(self, event: str, run_id: str) -> None:
        async with asyncio.timeout(30):
            await self.seen[(event, run_id)].wait()


def zone_and_latest(now: datetime) -> tuple[str, str]:
    """A zone where it is about noon at `now`, and a `latest` two minutes before `now` in it.

    A step started by its `latest` is queued with a TTL of `latest` + 30 min - now (at least
    1 s): a fixed "00:00" in UTC gave the test's step 30 minutes just after midnight and one
    second the rest of the day (gone if the launcher was slower than that to claim it). Near noon,
    `latest` and the chain run share a local date whatever the time of day, and the TTL is 28
    minutes."""
    offset = (12 - now.hour) % 24  # hours east of UTC; -11..+14 all exist as Etc/GMT zones
    if offset > 14:
        offset -= 24
    zone = f"Etc/GMT{-offset:+d}"  # POSIX signs: Etc/GMT-5 is UTC+5
    local = now.astimezone(ZoneInfo(zone))
    assert local.hour == 12, (now, zone)
    return zone, (local - timedelta(minutes=2)).strftime("%H:%M")


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    zone, latest = zone_and_latest(datetime.now(UTC))
    text = CATALOG.replace("{dir}", str(tmp_path)).replace("{zone}", zone)
    return parse_catalog_text(text.replace("{latest}", latest), "catalog.yaml")


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    s: Store
    if database_url.startswith("sqlite"):
        s = SqliteStore(database_url.removeprefix("sqlite:///"))
    else:
        s = PostgresStore(database_url, pool_max=4)
    await s.open()
    await s.upgrade()
    yield s
    await s.close()


@pytest.fixture
async def running(
    store: Store, catalog: Catalog, database_url: str, tmp_path: Path
) -> AsyncIterator[tuple[ChainRunner, Hooks]]:
    hooks = Hooks()
    settings = Settings(
        database_url=database_url,
        log_dir=str(tmp_path / "logs"),
        claim_interval=0.05,
        launcher_id="chains-test",
    )
    launcher = Launcher(
        store=store,
        catalog=catalog,
        executors=build_executors(settings),
        settings=settings,
        hook=hooks,
        trigger_interval=0.05,
    )
    task = asyncio.create_task(launcher.run())

    async def accept(request: RunRequest) -> Any:
        return await accept_run(store, catalog, request)

    yield ChainRunner(store, catalog, accept, hooks), hooks
    launcher.stop()
    await task


@contextlib.asynccontextmanager
async def store_an_hour_ago(database_url: str) -> AsyncIterator[Store]:
    """The test database through a store whose clock reads an hour ago: what it records (a
    chain run's start, its deadline) is in the past for everyone else."""
    past = store_from_url(database_url, clock=FixedClock(datetime.now(UTC) - timedelta(hours=1)))
    await past.open()
    try:
        yield past
    finally:
        await past.close()


async def steps_of(runner: ChainRunner, chain_run_id: str) -> dict[str, tuple[str, str | None]]:
    run = await runner.store.get_chain_run(chain_run_id)
    specs = step_specs(runner.catalog, runner.catalog.chains[run.chain], run)
    rows = await runner.store.list_runs(RunFilter(chain_root_id=run.id, limit=100))
    return {
        step: (r.status.value, r.end_reason)
        for step, r in latest_attempts(specs, run.id, rows).items()
    }


async def test_chain_success(running: tuple[ChainRunner, Hooks]) -> None:
    runner, hooks = running
    run = await runner.start("happy", trigger=Trigger.CLI)
    await hooks.wait("chain_finished", run.id)
    assert (await runner.store.get_chain_run(run.id)).status == "success"
    assert await steps_of(runner, run.id) == {
        "first": ("success", "exit"),
        "second": ("success", "exit"),
    }


async def test_chain_failure_skips_success_dependents_transitively(
    running: tuple[ChainRunner, Hooks],
) -> None:
    runner, hooks = running
    run = await runner.start("failing", trigger=Trigger.CLI)
    await hooks.wait("chain_finished", run.id)
    assert (await runner.store.get_chain_run(run.id)).status == "failure"
    assert await steps_of(runner, run.id) == {
        "first": ("failure", "exit"),
        "needs-success": ("skipped", "upstream_failed"),
        "transitively": ("skipped", "upstream_failed"),
        "cleanup": ("success", "exit"),
    }


async def test_a_paused_jobs_step_is_skipped_paused(running: tuple[ChainRunner, Hooks]) -> None:
    runner, hooks = running
    await runner.store.set_override("bad", paused_until=None, reason="maintenance", by="test")
    run = await runner.start("failing", trigger=Trigger.CLI)
    await hooks.wait("chain_finished", run.id)
    steps = await steps_of(runner, run.id)
    assert steps["first"] == ("skipped", "paused")  # the paused job never ran
    assert steps["needs-success"] == ("skipped", "upstream_failed")
    assert steps["cleanup"] == ("success", "exit")  # `on: finish` still runs


async def test_latest_starts_a_step_while_its_parent_runs(
    running: tuple[ChainRunner, Hooks], database_url: str, tmp_path: Path
) -> None:
    runner, hooks = running
    # The chain run starts an hour ago (recorded through a store whose clock is set back), so
    # its `latest` (two minutes ago, see zone_and_latest) is still ahead of it then; the
    # launcher's chain loop, on the real clock, then finds `latest` passed and starts lineup
    # although `slow` still runs.
    async with store_an_hour_ago(database_url) as past:
        run = await ChainRunner(past, runner.catalog, runner.accept, hooks).start(
            "latest", trigger=Trigger.CLI
        )
    while True:
        step = await runner.store.get_run(await asyncio.wait_for(hooks.steps.get(), 30))
        if step.dedupe_key.endswith("/lineup"):
            break
    lineup = step
    assert lineup.queue_expires_at is not None
    assert lineup.queue_expires_at - lineup.queued_at > timedelta(minutes=25)
    await hooks.wait("finished", lineup.id)
    assert (await steps_of(runner, run.id))["slow"][0] in ("queued", "running")
    (tmp_path / "gate").write_text("open")
    await hooks.wait("chain_finished", run.id)
    assert (await runner.store.get_chain_run(run.id)).status == "success"


async def test_a_chain_run_started_after_latest_waits_for_the_parents(
    running: tuple[ChainRunner, Hooks], tmp_path: Path
) -> None:
    runner, hooks = running
    # Started now, after its `latest` (two minutes ago): the gate does not apply to this run, or
    # lineup would start at once beside `slow` and expire unstarted 30 minutes after `latest`.
    run = await runner.start("latest", trigger=Trigger.CLI)
    specs = step_specs(runner.catalog, runner.catalog.chains["latest"], run)
    assert specs["lineup"].latest is None
    before = await steps_of(runner, run.id)
    assert set(before) == {"slow"}  # lineup waits for its parent
    assert before["slow"][0] in ("queued", "running")
    (tmp_path / "gate").write_text("open")
    await hooks.wait("chain_finished", run.id)
    rows = {
        r.dedupe_key.rsplit("/", 1)[1]: r
        for r in await runner.store.list_runs(RunFilter(chain_root_id=run.id))
    }
    assert rows["lineup"].status is RunStatus.SUCCESS
    assert rows["slow"].finished_at is not None
    assert rows["lineup"].queued_at >= rows["slow"].finished_at  # after its parent, not beside it
    assert rows["lineup"].queue_expires_at is None


async def test_max_duration_skips_unstarted_steps_and_marks_overrun(
    running: tuple[ChainRunner, Hooks], tmp_path: Path
) -> None:
    runner, hooks = running
    run = await runner.start("timeout", trigger=Trigger.CLI)
    await hooks.wait("chain_overrun", run.id)
    (tmp_path / "gate").write_text("open")
    await hooks.wait("chain_finished", run.id)
    final = await runner.store.get_chain_run(run.id)
    assert final.overrun
    assert final.end_reason == "chain_timeout"
    assert (await steps_of(runner, run.id))["after"] == ("skipped", "chain_timeout")


async def test_scheduled_chain_run_is_one_per_slot(store: Store, catalog: Catalog) -> None:
    async def accept(request: RunRequest) -> Any:
        return await accept_run(store, catalog, request)

    a = ChainRunner(store, catalog, accept)
    b = ChainRunner(store, catalog, accept)
    slot = datetime(2031, 1, 7, 22, tzinfo=UTC)
    runs = await asyncio.gather(
        a.start("happy", trigger=Trigger.SCHEDULE, slot=slot),
        b.start("happy", trigger=Trigger.SCHEDULE, slot=slot),
    )
    assert runs[0].id == runs[1].id
    rows = await store.list_runs(RunFilter(chain_root_id=runs[0].id))
    assert [r.dedupe_key for r in rows] == [f"ok@{runs[0].id}/first"]


async def test_debounced_event_burst_starts_one_run_per_window(
    database_url: str, catalog: Catalog
) -> None:
    clock = FixedClock(datetime(2031, 1, 1, 12, 0, 5, tzinfo=UTC))
    store: Store
    if database_url.startswith("sqlite"):
        store = SqliteStore(database_url.removeprefix("sqlite:///"), clock=clock)
    else:
        store = PostgresStore(database_url, clock=clock, pool_max=2)
    await store.open()
    await store.upgrade()

    async def accept(request: RunRequest) -> Any:
        return await accept_run(store, catalog, request)

    try:
        burst = []
        for i in range(5):
            burst.append(await emit_event(store, catalog, accept, "rumor.signal_created", {"i": i}))
            clock.advance(60)
        clock.at = datetime(2031, 1, 1, 12, 30, 0, tzinfo=UTC)  # the next 30-minute window
        late = await emit_event(store, catalog, accept, "rumor.signal_created", event_id="late")
        again = await emit_event(store, catalog, accept, "rumor.signal_created", event_id="late")
        notify = await store.list_runs(RunFilter(job="notify"))
        instant = await store.list_runs(RunFilter(job="instant"))
        assert len(notify) == 2  # one per debounce window
        assert len(instant) == 6  # no debounce: every event
        first_run = (
            burst[0].links[0].run_id
            if burst[0].links[0].job == "notify"
            else burst[0].links[1].run_id
        )
        joined = [link for e in burst[1:] for link in e.links if link.job == "notify"]
        assert all(link.run_id == first_run and not link.started for link in joined)
        assert not again.created
        assert [x.run_id for x in again.links] == [x.run_id for x in late.links]
        links = await store.event_links("late")
        assert sorted(x.job for x in links) == ["instant", "notify"]
        assert all(x.started for x in links)
        assert all(r.trigger == "event" for r in notify)
        assert timedelta(0) < max(r.queued_at for r in notify) - min(r.queued_at for r in notify)
        assert {r.status for r in notify} == {RunStatus.QUEUED}
    finally:
        await store.close()


async def test_a_finished_step_advances_its_chain_without_waiting_for_the_tick(
    store: Store, catalog: Catalog, database_url: str, tmp_path: Path
) -> None:
    hooks = Hooks()
    settings = Settings(
        database_url=database_url,
        log_dir=str(tmp_path / "logs"),
        claim_interval=0.05,
        launcher_id="nudge-test",
    )
    launcher = Launcher(
        store=store,
        catalog=catalog,
        executors=build_executors(settings),
        settings=settings,
        hook=hooks,
        trigger_interval=60.0,
    )
    task = asyncio.create_task(launcher.run())
    try:

        async def accept(request: RunRequest) -> Any:
            return await accept_run(store, catalog, request)

        runner = ChainRunner(store, catalog, accept, hooks)
        run = await runner.start("happy", trigger=Trigger.CLI)
        async with asyncio.timeout(15):  # far below the 60 s tick: only the nudge can do it
            await hooks.wait("chain_finished", run.id)
    finally:
        launcher.stop()
        await task
    assert (await store.get_chain_run(run.id)).status == "success"


async def test_a_chain_the_launcher_does_not_know_waits_for_one_that_does(
    store: Store, catalog: Catalog, database_url: str
) -> None:
    """A chain added to the catalog after a launcher loaded it, started from the CLI (which
    reads the file): the launcher on the older catalog must not fail it, its first step is
    already queued. The run waits for a launcher that knows the chain: for a grace period after
    its start (or until its deadline, max_duration), and beyond that while another live launcher
    could be advancing it (a different catalog, with the jobs of the run's steps). Once none
    could for long enough, it fails `unknown_chain`."""
    zone, latest = zone_and_latest(datetime.now(UTC))
    older_text = CATALOG.replace("  happy:", "  happy-before:").replace(
        "  timeout:", "  timeout-before:"
    )
    older = parse_catalog_text(
        older_text.replace("{dir}", "/tmp").replace("{zone}", zone).replace("{latest}", latest),
        "catalog.yaml",
    )
    assert "happy" not in older.chains

    async def accept(request: RunRequest) -> Any:
        return await accept_run(store, catalog, request)

    cli = ChainRunner(store, catalog, accept)

    def stale_launcher(settle: float) -> ChainRunner:
        return ChainRunner(
            store,
            older,
            accept,
            launcher_id="stale",
            catalog_digest=stamp_catalog(older).digest,
            unknown_settle=settle,
        )

    stale = stale_launcher(settle=0.0)
    run = await cli.start("happy", trigger=Trigger.CLI)
    assert (await steps_of(cli, run.id))["first"][0] == "queued"
    assert await stale.advance_all() == 1
    assert await stale.advance_all() == 1  # still there on the next tick
    waiting = await store.get_chain_run(run.id)
    assert (waiting.status, waiting.end_reason) == ("running", None)
    assert await cli.advance(waiting) is not None  # a launcher that knows it carries on
    assert (await steps_of(cli, run.id))["first"][0] == "queued"

    # Started an hour ago (past the grace period): `happy` has no max_duration, `timeout` has
    # one of 1s, long past.
    async with store_an_hour_ago(database_url) as past:
        old = await ChainRunner(past, catalog, accept).start("happy", trigger=Trigger.CLI)
        late = await ChainRunner(past, catalog, accept).start("timeout", trigger=Trigger.CLI)
    assert old.deadline_at is None
    assert late.deadline_at is not None

    async def other_launcher(
        digest: str, jobs: tuple[str, ...] | None, chains: tuple[str, ...] | None = None
    ) -> None:
        await store.beat(
            Heartbeat(
                launcher_id="other",
                host="h",
                pid=1,
                version="test",
                started_at=datetime.now(UTC),
                catalog_digest=digest,
                catalog_jobs=jobs,
                catalog_chains=chains,
            )
        )

    async def status(chain_run_id: str) -> tuple[str, str | None]:
        found = await store.get_chain_run(chain_run_id)
        return found.status, found.end_reason

    # Another live launcher runs the newer catalog: it may be advancing both (it handles the
    # deadline of `late` itself), so they wait. Without a chain list (an older runlane) because
    # it has the steps' jobs; with one, because it lists both chains.
    newer = stamp_catalog(catalog)
    for chains in (None, newer.chains):
        await other_launcher(newer.digest, newer.jobs, chains)
        await stale_launcher(settle=0.0).advance_all()
        assert await status(old.id) == ("running", None)
        assert await status(late.id) == ("running", None)
    # It runs a different catalog, but one without the steps' jobs: it cannot have the chain.
    # Nobody can advance them, but not for long enough yet (one missed heartbeat, a restart).
    await other_launcher("sha256:another", ("bad",))
    await stale_launcher(settle=3600.0).advance_all()
    assert await status(old.id) == ("running", None)
    # A different catalog with every job, whose chain list lacks both: known not to be
    # advancing them (without the list it might have been). For long enough (settle 0): both
    # fail.
    await other_launcher("sha256:another", newer.jobs, ("happy-before", "timeout-before"))
    await stale.advance_all()
    assert await status(old.id) == ("failure", "unknown_chain")
    assert await status(late.id) == ("failure", "unknown_chain")
    assert await status(run.id) == ("running", None)  # within its grace period
    # An ended chain run starts nothing more: its step still queued is cancelled, saying why
    # (as a cancelled chain run's are; a step already running finishes as it would).
    [first] = await store.list_runs(RunFilter(chain_root_id=old.id))
    assert (first.status, first.end_reason) == (RunStatus.CANCELLED, "cancelled")
    assert first.note is not None
    assert "unknown_chain" in first.note
    assert (await steps_of(cli, run.id))["first"][0] == "queued"  # the waiting run's, kept


async def test_a_tick_advances_chain_runs_past_the_first_page(
    store: Store, catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Running chain runs are read a page at a time, and every page each tick: with only the
    oldest page, newer chain runs would never advance while the old ones wait (long steps, a
    chain the launcher does not know)."""
    monkeypatch.setattr(chains_module, "ACTIVE_CHAIN_PAGE", 2)

    async def accept(request: RunRequest) -> Any:
        return await accept_run(store, catalog, request)

    runner = ChainRunner(store, catalog, accept)
    ids = []
    for _ in range(5):  # recorded, not yet advanced: no step has a row
        cid = str(uuid.uuid4())
        await store.create_chain_run(
            NewChainRun(id=cid, chain="happy", dedupe_key=cid, trigger="cli")
        )
        ids.append(cid)
    assert [await steps_of(runner, cid) for cid in ids] == [{}] * 5
    assert await runner.advance_all() == 5
    for cid in ids:
        assert (await steps_of(runner, cid))["first"][0] == "queued"


def without_chains(text: str, *names: str) -> str:
    """The catalog text without the blocks of the chains `names`."""
    kept: list[str] = []
    dropping = False
    for line in text.splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            dropping = line.strip().rstrip(":") in names
        if not dropping:
            kept.append(line)
    return "\n".join(kept) + "\n"


async def test_a_run_of_a_chain_removed_from_the_catalog_file_ends_without_waiting(
    store: Store, catalog: Catalog, tmp_path: Path
) -> None:
    """`runlane chain run happy`, the launcher stopped, `happy` deleted from the catalog file,
    the launcher started again: it took the run for one of a chain added after it loaded its
    catalog, told the person to restart it (the file had no such chain either) and left it
    running for 15 minutes. The file lacks the chain: it was removed, nothing is coming to
    advance the run, which ends `unknown_chain` once no live launcher has had the chain for
    `unknown_settle`. A chain the file does have keeps the wait, and the advice to restart."""
    from structlog.testing import capture_logs

    async def accept(request: RunRequest) -> Any:
        return await accept_run(store, catalog, request)

    removed = await ChainRunner(store, catalog, accept).start("happy", trigger=Trigger.CLI)
    added = await ChainRunner(store, catalog, accept).start("failing", trigger=Trigger.CLI)

    def text(value: str) -> str:
        return (
            value.replace("{dir}", str(tmp_path))
            .replace("{zone}", "UTC")
            .replace("{latest}", "12:00")
        )

    # The launcher's catalog has neither chain; its file has `failing` (added since) only.
    older = parse_catalog_text(text(without_chains(CATALOG, "happy", "failing")), "catalog.yaml")
    path = tmp_path / "catalog.yaml"
    path.write_text(text(without_chains(CATALOG, "happy")))
    assert sorted(older.chains) == ["latest", "timeout"]

    def restarted(settle: float) -> ChainRunner:
        return ChainRunner(
            store,
            older,
            accept,
            launcher_id="restarted",
            catalog_digest=stamp_catalog(older).digest,
            catalog_path=str(path),
            unknown_settle=settle,
        )

    with capture_logs() as entries:
        assert await restarted(settle=3600.0).advance_all() == 2
    hints = {e["chain_run_id"]: e["hint"] for e in entries if e["event"] == "chain.unknown_chain"}
    assert hints[removed.id] == (
        f"chain 'happy' is neither in this launcher's catalog nor in its file {path} "
        "(removed?): the run ends `unknown_chain` once no live launcher has the chain for 1h; "
        f"`runlane cancel {removed.id}` ends it now"
    )
    assert hints[added.id].startswith(
        f"chain 'failing' was added to {path} after this launcher loaded it: restart "
        "`runlane serve` to load the current catalog"
    )
    assert (await store.get_chain_run(removed.id)).status == "running"  # not for 1h yet

    await restarted(settle=0.0).advance_all()
    ended = await store.get_chain_run(removed.id)
    assert (ended.status, ended.end_reason) == ("failure", "unknown_chain")
    waiting = await store.get_chain_run(added.id)
    assert (waiting.status, waiting.end_reason) == ("running", None)  # 15 minutes from its start


async def test_a_cancelled_chain_run_starts_no_more_steps(store: Store, catalog: Catalog) -> None:
    """The chain loop reads a page of running chain runs, then advances each: one cancelled in
    between was advanced as if it still ran, and its `on: finish` step (`cleanup`) was queued,
    after the cancel, in a chain run that had ended: a run nobody cancels."""

    async def accept(request: RunRequest) -> Any:
        return await accept_run(store, catalog, request)

    runner = ChainRunner(store, catalog, accept)
    seen = await runner.start("failing", trigger=Trigger.CLI)  # `first` queued
    (page,) = await store.active_chain_runs()  # the chain loop's page
    assert page.id == seen.id
    await cancel_chain_run(store, seen.id, by="ops")  # `first` cancelled with it
    await runner.advance(page)
    steps = await store.list_runs(RunFilter(chain_root_id=seen.id, limit=100))
    active = [(r.job, r.status) for r in steps if r.status in (RunStatus.QUEUED, RunStatus.RUNNING)]
    assert active == []
    assert (await store.get_chain_run(seen.id)).end_reason == "cancelled"


async def test_a_chain_run_cancelled_while_a_step_starts_leaves_no_step_queued(
    store: Store, catalog: Catalog
) -> None:
    """The cancel lands between the chain runner's plan and its accept of a step: the cancel
    lists the steps before the new one is written, and the runner writes it after the chain
    run has ended. The runner cancels the step it started in a chain run that has ended."""
    chain_run_id: list[str] = []

    async def accept(request: RunRequest) -> Any:
        if chain_run_id and request.dedupe_key == f"ok@{chain_run_id[0]}/cleanup":
            await cancel_chain_run(store, chain_run_id[0], by="ops")
        return await accept_run(store, catalog, request)

    runner = ChainRunner(store, catalog, accept)
    run = await runner.start("failing", trigger=Trigger.CLI)  # `first` queued
    chain_run_id.append(run.id)
    (first,) = await store.list_runs(RunFilter(chain_root_id=run.id, limit=100))
    await store.request_cancel(first.id, by="ops")  # `first` ends: `cleanup` is due
    await runner.advance(await store.get_chain_run(run.id))
    steps = await store.list_runs(RunFilter(chain_root_id=run.id, limit=100))
    assert {r.dedupe_key.rsplit("/", 1)[-1] for r in steps} >= {"cleanup"}  # it was written
    active = [(r.job, r.status) for r in steps if r.status in (RunStatus.QUEUED, RunStatus.RUNNING)]
    assert active == []


async def test_a_step_whose_accept_fails_on_the_database_is_started_later_not_skipped(
    store: Store, catalog: Catalog
) -> None:
    """A step's accept that failed on the database (a dropped connection, a lock timeout) was
    taken for a refusal: the step was recorded `skipped` / `start_failed` by the next statement,
    its `on: success` dependents skipped and the chain run failed, for a blip. The step is
    started at the next advance instead."""
    failed: list[str] = []

    async def accept(request: RunRequest) -> Any:
        if request.dedupe_key and request.dedupe_key.endswith("/first") and not failed:
            failed.append(request.dedupe_key)
            raise DatabaseUnavailable("connection lost")
        return await accept_run(store, catalog, request)

    runner = ChainRunner(store, catalog, accept)
    run = await runner.start("happy", trigger=Trigger.CLI)
    assert failed  # the database failed as the first step was written
    await runner.advance_all()  # the chain loop's next tick
    steps = await steps_of(runner, run.id)
    assert steps == {"first": ("queued", None)}
    assert (await store.get_chain_run(run.id)).status == "running"
