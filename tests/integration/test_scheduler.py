"""The scheduler on SQLite and the real PostgreSQL: racing launchers, catch-up after downtime,
pauses, queue expiry, and the loop inside a running launcher. Time is pinned with FixedClock."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from runlane.adapters.postgres import PostgresStore
from runlane.adapters.sqlite import SqliteStore
from runlane.catalog import Catalog, parse_catalog_text
from runlane.core.runs import RunStatus
from runlane.errors import DatabaseUnavailable
from runlane.ports import Heartbeat, RunFilter, Store
from runlane.service.accept import RunRequest, accept_run
from runlane.service.config import Settings
from runlane.service.launcher import Launcher
from runlane.service.scheduler import Scheduler, explain
from runlane.service.wiring import build_executors
from runlane.testing.clock import FixedClock

PY = sys.executable
T0 = datetime(2031, 5, 1, 10, 0, tzinfo=UTC)
CATALOG = f"""
version: 1
defaults: {{executor: inline, overlap: allow, deadline: 1m}}
jobs:
  minutely:
    command: [{PY}, -c, "pass"]
    schedules: [{{cron: "* * * * *", tz: UTC, catch_up: 1h}}]
  hourly:
    command: [{PY}, -c, "pass"]
    schedules: [{{cron: "0 * * * *", tz: Europe/Berlin, catch_up: 1h}}]
  every-second:
    command: [{PY}, -c, "pass"]
    schedules: [{{cron: "* * * * * *", tz: UTC}}]
"""


def catalog_with(*jobs: str) -> Catalog:
    cat = parse_catalog_text(CATALOG, "catalog.yaml")
    return cat.model_copy(update={"jobs": {k: v for k, v in cat.jobs.items() if k in jobs}})


StoreFactory = Callable[[FixedClock | None], "asyncio.Future[Store]"]


@pytest.fixture
async def make_store(database_url: str) -> AsyncIterator[Callable[..., object]]:
    opened: list[Store] = []

    async def make(clock: FixedClock | None = None) -> Store:
        store: Store
        if database_url.startswith("sqlite"):
            store = SqliteStore(database_url.removeprefix("sqlite:///"), clock=clock)
        else:
            store = PostgresStore(database_url, clock=clock, pool_max=4)
        await store.open()
        await store.upgrade()
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


def scheduler(store: Store, catalog: Catalog) -> Scheduler:
    async def accept(request: RunRequest) -> object:
        return await accept_run(store, catalog, request)

    return Scheduler(store, catalog, accept)  # type: ignore[arg-type]


async def rows(store: Store, job: str) -> list[object]:
    return await store.list_runs(RunFilter(job=job, limit=10_000))  # type: ignore[return-value]


async def test_two_launchers_racing_make_exactly_one_run_per_slot(
    make_store: Callable[..., object],
) -> None:
    catalog = catalog_with("minutely")
    clock = FixedClock(T0)
    a = await make_store(clock)  # type: ignore[misc]
    b = await make_store(clock)  # type: ignore[misc]
    sa, sb = scheduler(a, catalog), scheduler(b, catalog)
    first = await asyncio.gather(sa.tick(), sb.tick())
    assert sum(r.created for r in first) == 1  # 10:00, once; nothing owed from before
    clock.advance(3 * 3600)  # both launchers were down for three hours
    reports = await asyncio.gather(sa.tick(), sb.tick(), sa.tick(), sb.tick())
    runs = await rows(a, "minutely")
    keys = [r.dedupe_key for r in runs]  # type: ignore[attr-defined]
    assert len(keys) == len(set(keys))
    assert sum(r.created for r in reports) + 1 == len(runs)
    fired = [r for r in runs if r.status == RunStatus.QUEUED]  # type: ignore[attr-defined]
    missed = [r for r in runs if r.end_reason == "missed"]  # type: ignore[attr-defined]
    assert len(fired) == 1 + 61  # on time at T0, then every slot of the last hour (both ends)
    assert len(missed) == 100  # bounded; the other 19 are only counted, in a log line
    assert all(r.status == RunStatus.SKIPPED for r in missed)  # type: ignore[attr-defined]


async def test_three_hours_down_with_one_hour_catch_up(make_store: Callable[..., object]) -> None:
    catalog = catalog_with("hourly")
    clock = FixedClock(datetime(2031, 5, 1, 8, 0, tzinfo=UTC))  # 10:00 in Berlin
    store = await make_store(clock)  # type: ignore[misc]
    sched = scheduler(store, catalog)
    assert (await sched.tick()).created == 1
    clock.at = datetime(2031, 5, 1, 11, 30, tzinfo=UTC)  # back at 13:30 local
    report = await sched.tick()
    by_slot = {
        r.scheduled_for.hour: (r.status, r.end_reason)  # type: ignore[attr-defined]
        for r in await rows(store, "hourly")
    }
    assert by_slot == {
        8: (RunStatus.QUEUED, None),
        9: (RunStatus.SKIPPED, "missed"),
        10: (RunStatus.SKIPPED, "missed"),
        11: (RunStatus.QUEUED, None),  # 13:00 local, 30 min late: inside catch_up
    }
    assert report.created == 3
    assert (await sched.tick()).created == 0  # nothing fires twice
    # A fresh scheduler (a restarted launcher) reads the state from the store.
    assert (await scheduler(store, catalog).tick()).created == 0


async def test_scheduled_run_waiting_past_catch_up_expires(
    make_store: Callable[..., object],
) -> None:
    catalog = catalog_with("hourly")
    clock = FixedClock(datetime(2031, 5, 1, 8, 0, tzinfo=UTC))
    store = await make_store(clock)  # type: ignore[misc]
    await scheduler(store, catalog).tick()
    clock.advance(3600 + 1)
    expired = await store.expire_queued()
    assert [(r.job, r.status, r.end_reason) for r in expired] == [
        ("hourly", RunStatus.SKIPPED, "expired")
    ]


async def test_paused_job_slots_are_recorded_paused(make_store: Callable[..., object]) -> None:
    catalog = catalog_with("hourly")
    clock = FixedClock(datetime(2031, 5, 1, 8, 0, tzinfo=UTC))
    store = await make_store(clock)  # type: ignore[misc]
    await store.set_override("hourly", paused_until=None, reason="maintenance", by="test")
    await scheduler(store, catalog).tick()
    (run,) = await rows(store, "hourly")
    assert (run.status, run.end_reason) == (RunStatus.SKIPPED, "paused")  # type: ignore[attr-defined]


async def test_launcher_runs_scheduled_slots(
    make_store: Callable[..., object], database_url: str, tmp_path: Path
) -> None:
    catalog = catalog_with("every-second")
    store = await make_store()  # type: ignore[misc]
    finished: asyncio.Queue[str] = asyncio.Queue()
    scheduled: list[str] = []

    def hook(event: str, run_id: str) -> None:
        if event == "scheduled":
            scheduled.append(run_id)
        elif event == "finished":
            finished.put_nowait(run_id)

    settings = Settings(
        database_url=database_url,
        log_dir=str(tmp_path / "logs"),
        claim_interval=0.05,
        launcher_id="sched-test",
    )
    launcher = Launcher(
        store=store,
        catalog=catalog,
        executors=build_executors(settings),
        settings=settings,
        hook=hook,
        trigger_interval=0.2,
    )
    task = asyncio.create_task(launcher.run())
    try:
        async with asyncio.timeout(30):
            done = [await finished.get() for _ in range(2)]
    finally:
        launcher.stop()
        await task
    for run_id in done:
        run = await store.get_run(run_id)
        assert run.trigger == "schedule"
        assert run.status == RunStatus.SUCCESS
        assert run.dedupe_key == f"every-second@{run.scheduled_for:%Y-%m-%dT%H:%M:%SZ}"
    assert set(done) <= set(scheduled)


async def test_explain_an_every_second_schedule_without_walking_its_year(
    make_store: Callable[..., object],
) -> None:
    """`runlane explain` looked for the latest slot by listing every slot of the 400 days
    before (an every-second cron: 34 million, half a minute of CPU); it computes it."""
    catalog = catalog_with("every-second")
    clock = FixedClock(T0)
    store = await make_store(clock)  # type: ignore[misc]
    await scheduler(store, catalog).tick()
    began = time.process_time()
    found = await explain(store, catalog, "every-second", T0 + timedelta(microseconds=500))
    took = time.process_time() - began
    assert (found.slot, found.verdict) == (T0, "fired")
    assert took < 2.0, f"explain took {took:.2f} s of CPU"


def catalog_of(*crons: str) -> Catalog:
    """A catalog whose job `edited` has these schedules (every one with a catch_up of 1h)."""
    schedules = ", ".join(f'{{cron: "{cron}", tz: UTC, catch_up: 1h}}' for cron in crons)
    return parse_catalog_text(
        f"""
version: 1
defaults: {{executor: inline, overlap: allow, deadline: 1m}}
jobs:
  edited:
    command: [{PY}, -c, "pass"]
    schedules: [{schedules}]
""",
        "catalog.yaml",
    )


async def test_a_cron_edited_and_edited_back_starts_again_from_now(
    make_store: Callable[..., object],
) -> None:
    """`*/10` for 12 s, then `*/15` (serve restarted) for 40 s, then `*/10` again: the state of
    `*/10` was still there, so the restored schedule replayed its slots of the `*/15` period
    (and, older than catch_up, would record them `missed`). Each launcher forgets the state of
    the schedules its catalog lacks: a schedule that comes back starts from now."""
    clock = FixedClock(T0)
    store = await make_store(clock)  # type: ignore[misc]
    a, b = catalog_of("*/10 * * * * *"), catalog_of("*/15 * * * * *")

    async def serve(catalog: Catalog, *seconds: int) -> None:
        sched = scheduler(store, catalog)  # a launcher started on this catalog
        for second in seconds:
            clock.at = T0 + timedelta(seconds=second)
            await sched.tick()

    async def slots() -> list[int]:
        found = await rows(store, "edited")
        return sorted(int((r.scheduled_for - T0).total_seconds()) for r in found)  # type: ignore[attr-defined]

    await serve(a, 0, 5, 10, 12)
    await serve(b, 13, 15, 30, 45, 52)
    await serve(a, 53, 60)
    assert await slots() == [0, 10, 15, 30, 45, 60]  # not 20, 40, 50 of the `*/15` period

    # Removed (no schedule at all), then restored hours later: nothing fires or is `missed`
    # for the time it was gone.
    await serve(catalog_of(), 3600)
    await serve(a, 4 * 3600, 4 * 3600 + 10)
    assert await slots() == [0, 10, 15, 30, 45, 60, 4 * 3600, 4 * 3600 + 10]
    assert set(await store.schedule_states()) == {"job:edited|*/10 * * * * *|UTC"}

    # Down (no launcher) while the cron was edited and edited back: nothing changed as far as
    # any launcher could see, and the schedule catches up as usual.
    await serve(a, 4 * 3600 + 600)
    assert len(await slots()) == 8 + 59  # every `*/10` slot of the ten minutes down


async def test_a_launcher_on_an_older_catalog_keeps_a_newer_catalogs_schedule_state(
    make_store: Callable[..., object],
) -> None:
    """A rolling restart: launcher `new` runs a catalog with `minutely` (catch_up: 1h), launcher
    `old` one without it. `old` forgot `minutely`'s state as it started and every minute; `new`
    restarting then saw the schedule for the first time and the slots owed meanwhile were lost,
    not even recorded `missed`. A state is forgotten only while no live launcher runs another
    catalog (one that may have the schedule); once the fleet agrees, it is."""
    clock = FixedClock(T0)
    store = await make_store(clock)  # type: ignore[misc]
    newer, older = catalog_with("minutely", "hourly"), catalog_with("hourly")

    def launcher(name: str, catalog: Catalog) -> Scheduler:
        async def accept(request: RunRequest) -> object:
            return await accept_run(store, catalog, request)

        return Scheduler(
            store,  # type: ignore[arg-type]
            catalog,
            accept,
            launcher_id=name,
            catalog_digest=f"sha256:{name}",
            stale_after=45.0,
        )

    async def beat(name: str) -> None:
        await store.beat(  # type: ignore[attr-defined]
            Heartbeat(
                launcher_id=name,
                host="h",
                pid=1,
                version="test",
                started_at=T0,
                catalog_digest=f"sha256:{name}",
                heartbeat_interval=15.0,
            )
        )

    await beat("new")
    await launcher("new", newer).tick()  # 10:00 fires
    clock.at = T0 + timedelta(seconds=30)
    await beat("old")
    await launcher("old", older).tick()  # `new` is live: its schedule's state stays
    assert "job:minutely|* * * * *|UTC" in await store.schedule_states()  # type: ignore[attr-defined]
    clock.at = T0 + timedelta(seconds=40)
    await beat("new")  # (restarting: its row still live)
    clock.at = T0 + timedelta(minutes=5)
    await launcher("new", newer).tick()  # the new process catches up 10:01 … 10:05
    assert len(await rows(store, "minutely")) == 6

    # `new` gone for good (its heartbeat stale): `old` forgets the state it does not run.
    clock.at = T0 + timedelta(minutes=10)
    await beat("old")
    await launcher("old", older).tick()
    assert set(await store.schedule_states()) == {"job:hourly|0 * * * *|Europe/Berlin"}  # type: ignore[attr-defined]


async def test_a_slot_whose_accept_fails_on_the_database_is_planned_again(
    make_store: Callable[..., object],
) -> None:
    """An accept that failed on the database (a dropped connection, a lock timeout) was logged
    `schedule.refused` and the schedule's state moved past its slot all the same: the run was
    never written and no later tick planned it again. The slot is tried again while it is
    within catch_up."""
    catalog = catalog_with("hourly")
    clock = FixedClock(datetime(2031, 5, 1, 8, 0, tzinfo=UTC))
    store = await make_store(clock)  # type: ignore[misc]
    failing = {"hourly@2031-05-01T09:00:00Z"}

    async def accept(request: RunRequest) -> object:
        if request.dedupe_key in failing:
            failing.discard(request.dedupe_key)
            raise DatabaseUnavailable("connection lost")
        return await accept_run(store, catalog, request)

    sched = Scheduler(store, catalog, accept)  # type: ignore[arg-type]
    assert (await sched.tick()).created == 1  # 08:00
    clock.at = datetime(2031, 5, 1, 9, 0, tzinfo=UTC)
    assert (await sched.tick()).created == 0  # 09:00: the database failed
    clock.advance(5)
    assert (await sched.tick()).created == 1  # 09:00, five seconds late
    assert sorted(r.scheduled_for.hour for r in await rows(store, "hourly")) == [8, 9]  # type: ignore[attr-defined]
    # A restarted launcher agrees: nothing more is owed.
    assert (await scheduler(store, catalog).tick()).created == 0


async def test_a_slot_caught_up_late_expires_when_its_window_ends(
    make_store: Callable[..., object],
) -> None:
    """A slot caught up 50 minutes late (catch_up 1h) was queued with the whole catch_up as its
    queue TTL from then: it could still start 1h50m after its slot. Its window ends an hour
    after the slot, queued or not."""
    catalog = catalog_with("hourly")
    clock = FixedClock(datetime(2031, 5, 1, 8, 0, tzinfo=UTC))
    store = await make_store(clock)  # type: ignore[misc]
    sched = scheduler(store, catalog)
    await sched.tick()
    (first,) = await store.expire_queued() or [None]  # nothing to expire yet
    assert first is None
    clock.at = datetime(2031, 5, 1, 9, 50, tzinfo=UTC)  # the launcher was down since 08:00
    await sched.tick()  # 09:00 fires, 50 minutes late
    clock.at = datetime(2031, 5, 1, 10, 0, 1, tzinfo=UTC)  # past 09:00 + catch_up
    expired = {r.scheduled_for.hour for r in await store.expire_queued()}  # type: ignore[attr-defined]
    assert expired == {8, 9}
