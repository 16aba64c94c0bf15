"""Every launcher call to PostgreSQL is bounded: a database that stops answering without closing
its connections, a row lock somebody keeps, are outages or conflicts the launcher rides out, and
a launcher whose database hangs still stops when told to."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from structlog.testing import capture_logs

from runlane.catalog import Catalog
from runlane.core.runs import RunStatus, Trigger
from runlane.ports import RunFilter, Store
from runlane.service.accept import RunRequest, accept_run
from runlane.service.config import Settings
from runlane.service.launcher import Launcher
from runlane.service.wiring import build_executors, store_from_url
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import eventually

from .conftest import Events, Running

pytestmark = pytest.mark.postgres

BOUND = 1.0  # RUNLANE_DB_TIMEOUT in these tests: the smallest allowed


@pytest.fixture
def pg_url(database_url: str) -> str:
    if not database_url.startswith("postgresql"):
        pytest.skip("a PostgreSQL scenario")
    return database_url


@pytest.fixture(autouse=True)
def test_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the `gated` job looks for its gate (inherited through the environment)."""
    monkeypatch.setenv("RUNLANE_TEST_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
async def proxy(pg_url: str) -> AsyncIterator[TcpProxy]:
    host_port = pg_url.split("@", 1)[1].split("/", 1)[0]
    host, port = host_port.split(":")
    p = TcpProxy(host, int(port))
    await p.start()
    yield p
    await p.close()


def through(pg_url: str, proxy: TcpProxy) -> str:
    host_port = pg_url.split("@", 1)[1].split("/", 1)[0]
    return pg_url.replace(host_port, f"127.0.0.1:{proxy.port}")


@pytest.fixture
def direct(pg_url: str, store: Store) -> Store:
    """A store that never goes through the proxy: what the database really holds."""
    return store


@contextlib.asynccontextmanager
async def launcher_on(url: str, catalog: Catalog, settings: Settings) -> AsyncIterator[Events]:
    """A launcher whose store has the launcher's bounds (`BOUND`), running until the block ends."""
    store = store_from_url(url, db_timeout=BOUND)
    await store.open()
    events = Events()
    launcher = Launcher(
        store=store,
        catalog=catalog,
        executors=build_executors(settings),
        settings=replace(settings, database_url=url, db_timeout=BOUND),
        hook=events,
        retry_base_seconds=0.05,
    )
    running = Running(launcher, asyncio.create_task(launcher.run()), events)
    try:
        yield events
    finally:
        await running.stop()
        await store.close()


async def accept_gated(store: Store, catalog: Catalog, gate: str, code: int) -> str:
    request = RunRequest(job="gated", trigger=Trigger.CLI, params={"gate": gate, "code": code})
    return (await accept_run(store, catalog, request)).run.id


def logged(entries: list[dict[str, Any]], event: str) -> Callable[[], bool]:
    return lambda: any(e["event"] == event for e in entries)


async def test_a_database_gone_silent_mid_run_is_an_outage_within_the_bound(
    pg_url: str,
    proxy: TcpProxy,
    direct: Store,
    catalog: Catalog,
    settings: Settings,
    test_dir: Path,
) -> None:
    # The database stops answering while the run is in flight, its connections left open (a
    # partition that drops packets, a frozen server): no error ever comes, only silence.
    with capture_logs() as entries:
        async with launcher_on(through(pg_url, proxy), catalog, settings) as events:
            run_id = await accept_gated(direct, catalog, "gate", code=1)  # fails; 2 attempts
            await events.wait("started", run_id)
            proxy.black_hole()
            (test_dir / "gate").write_text("open")
            ended = time.monotonic()
            # The save gives up after the bound and the outage handling takes over: the
            # outcome is journaled, and the claim loop says the database is unavailable.
            journal = Path(settings.log_dir) / f"{run_id}.1.outcome.json"
            await eventually(journal.exists, "the outcome journaled", within=BOUND + 5)
            assert time.monotonic() - ended < BOUND + 3
            await eventually(
                logged(entries, "launcher.database_unavailable"),
                "launcher.database_unavailable logged",
                within=BOUND + 5,
            )
            unavailable = next(e for e in entries if e["event"] == "launcher.database_unavailable")
            assert unavailable["error"].endswith(f"did not answer in {BOUND:g} s")
            assert (await direct.get_run(run_id)).status is RunStatus.RUNNING
            proxy.forward()  # the network heals: what it held back is delivered too
            await events.wait("finished", run_id)
    run = await direct.get_run(run_id)
    assert (run.status, run.exit_code, run.end_reason) == (RunStatus.FAILURE, 1, "exit")
    # Recorded once, with one retry: the statements the silent database got late (a save
    # the launcher had given up on) and the launcher's own retries land as one outcome.
    runs = await direct.list_runs(RunFilter(job="gated"))
    assert sorted((r.attempt, r.retry_of) for r in runs) == [(1, None), (2, run_id)]
    assert not journal.exists()
    assert logged(entries, "launcher.database_reachable")()


async def test_a_row_lock_held_by_another_session_delays_the_save_until_released(
    pg_url: str, direct: Store, catalog: Catalog, settings: Settings, test_dir: Path
) -> None:
    # An operator's `BEGIN; UPDATE run_log …` left open in psql holds one run's row: its
    # renewal and its save give up waiting after the lock timeout and are tried again, the other
    # runs' leases are renewed meanwhile, and the save lands once the lock is released.
    quick = replace(settings, lease_renew_interval=0.3)
    with capture_logs() as entries:
        async with launcher_on(pg_url, catalog, quick) as events:
            locked_id = await accept_gated(direct, catalog, "locked", code=0)
            other_id = await accept_gated(direct, catalog, "other", code=0)
            for run_id in (locked_id, other_id):
                await events.wait("started", run_id)
            operator = await psycopg.AsyncConnection.connect(pg_url)  # a transaction, held
            try:
                await operator.execute("UPDATE run_log SET note = note WHERE id = %s", (locked_id,))
                before = (await direct.get_run(other_id)).lease_expires_at
                await eventually(
                    logged(entries, "lease.renew_locked"),
                    "lease.renew_locked logged",
                    within=BOUND + 5,
                )
                renewal = next(e for e in entries if e["event"] == "lease.renew_locked")
                assert renewal["runs"] == [locked_id]
                other = await direct.get_run(other_id)
                assert before is not None
                assert other.lease_expires_at is not None
                assert other.lease_expires_at > before  # renewed while the lock was held
                (test_dir / "locked").write_text("open")
                await eventually(
                    logged(entries, "store.write_conflict_retry"),
                    "store.write_conflict_retry logged",
                    within=BOUND + 5,
                )
                conflict = next(e for e in entries if e["event"] == "store.write_conflict_retry")
                assert "lock timeout" in conflict["error"]
                assert ("finished", locked_id) not in events.log
                assert ("lease_lost", locked_id) not in events.log
            finally:
                await operator.rollback()
                await operator.close()
            await events.wait("finished", locked_id, within=10)
            (test_dir / "other").write_text("open")
            await events.wait("finished", other_id, within=10)
    for run_id in (locked_id, other_id):
        run = await direct.get_run(run_id)
        assert (run.status, run.exit_code) == (RunStatus.SUCCESS, 0)
    # A conflict is not an outage: nothing was journaled, no hold-off began.
    assert not logged(entries, "launcher.database_unavailable")()
    assert not logged(entries, "store.write_retry")()


async def test_sigterm_stops_a_launcher_whose_database_is_silent_in_bounded_time(
    pg_url: str, proxy: TcpProxy, direct: Store, settings: Settings, test_dir: Path
) -> None:
    env = dict(
        os.environ,
        RUNLANE_DATABASE_URL=through(pg_url, proxy),
        RUNLANE_CATALOG=settings.catalog_path,
        RUNLANE_LOG_DIR=settings.log_dir,
        RUNLANE_DB_TIMEOUT=f"{BOUND:g}s",
        RUNLANE_CLAIM_INTERVAL="100ms",
        RUNLANE_HEARTBEAT_INTERVAL="200ms",
        RUNLANE_LOG_LEVEL="warning",
    )
    log = test_dir / "serve.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "runlane",
            "serve",
            env=env,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    try:

        async def beating() -> bool:  # it runs: its heartbeat is there
            assert proc.returncode is None, log.read_text()
            return bool(await direct.launchers())

        await eventually(beating, "the launcher's first heartbeat", within=30)
        proxy.black_hole()
        # Its calls hang now (claims, heartbeats), each until the bound says so in its log.
        await eventually(
            lambda: "did not answer in 1 s" in log.read_text(),
            "'did not answer in 1 s' in the launcher's log",
            within=BOUND + 10,
        )
        proc.send_signal(signal.SIGTERM)
        # The calls in flight end within the bound (the consumer's) or are cancelled (the
        # other loops'); the pools' close waits for a connection attempt in progress at most.
        # On a quiet machine the stop takes 2-4 bounds (a call, its cancel request, a pool's
        # connection attempt, one after another); a CI machine at load 2+ has taken more than
        # 10 s. Without the bounds the stop waits for TCP's own timeout (minutes), so 20 s
        # still tells a bounded stop from a hung one; the log says where the time went.
        signalled = time.monotonic()
        try:
            async with asyncio.timeout(6 * BOUND + 14):
                await proc.wait()
        except TimeoutError:
            pytest.fail(
                f"SIGTERM did not stop the launcher in {time.monotonic() - signalled:.1f} s;"
                f" its log:\n{log.read_text()}"
            )
        assert proc.returncode == 0, log.read_text()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
