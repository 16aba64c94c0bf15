"""Recovery rules: a dead launcher's runs are taken over, a stalled launcher's writes are refused,
a database outage loses nothing, corrupt state is kept for repair."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from structlog.testing import capture_logs

from runlane.catalog import Catalog
from runlane.core.runs import Run, RunStatus, Trigger
from runlane.errors import DatabaseUnavailable, TemporaryExecutorError
from runlane.ports import Execution, ExecutionEvent, ExecutionSpec, Executor, RunFilter, Store
from runlane.service.accept import RunRequest, accept_run
from runlane.service.config import Settings
from runlane.service.doctor import diagnose, stuck_runs
from runlane.service.launcher import Launcher
from runlane.service.wiring import build_executors, store_from_url
from tests.support.postgres import PG_URL
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import eventually

from .conftest import Events, Running


@pytest.fixture(autouse=True)
def test_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where jobs write pid files and look for their gate (inherited through the environment)."""
    monkeypatch.setenv("RUNLANE_TEST_DIR", str(tmp_path))
    return tmp_path


async def accept(store: Store, catalog: Catalog, job: str, **kw: Any) -> str:
    result = await accept_run(store, catalog, RunRequest(job=job, trigger=Trigger.CLI, **kw))
    return result.run.id


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    with contextlib.suppress(FileNotFoundError):
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


async def test_runs_of_a_dead_launcher_end_launcher_lost_and_are_retried(
    store: Store, catalog: Catalog, start_launcher: Callable[..., Running]
) -> None:
    run_id = await accept(store, catalog, "sleeper")
    # A launcher claims it and dies before it can renew: its lease is left to expire.
    [claimed] = await store.claim(
        "dead-launcher", limit=1, lease_ttl=0.0, executors=["inline"], executor_caps={}
    )
    assert claimed.run.id == run_id
    [stuck] = await stuck_runs(store)  # what `runlane status` shows meanwhile
    assert (stuck.run_id, stuck.why) == (run_id, "its launcher stopped renewing the lease")
    launcher = start_launcher()
    await launcher.events.wait("finished", run_id)
    run = await store.get_run(run_id)
    assert (run.status, run.end_reason) == (RunStatus.FAILURE, "launcher_lost")
    assert run.lease_owner == launcher.launcher.owner
    assert run.lease_generation == claimed.lease.generation + 1
    [retry] = [r for r in await store.list_runs(RunFilter(job="sleeper")) if r.retry_of == run_id]
    assert retry.attempt == 2
    await launcher.events.wait("started", retry.id)


async def test_a_cancel_asked_while_no_launcher_watched_ends_cancelled_not_retried(
    store: Store, catalog: Catalog, start_launcher: Callable[..., Running]
) -> None:
    run_id = await accept(store, catalog, "sleeper")  # max_attempts: 2
    [claimed] = await store.claim(
        "dead-launcher", limit=1, lease_ttl=0.0, executors=["inline"], executor_caps={}
    )
    # `runlane cancel` while the launcher is dead: it can only ask.
    asked = await store.request_cancel(run_id, by="alice")
    assert asked.status is RunStatus.RUNNING
    launcher = start_launcher()
    await launcher.events.wait("finished", run_id)
    run = await store.get_run(run_id)
    assert (run.status, run.end_reason) == (RunStatus.CANCELLED, "cancelled")
    assert run.note is not None
    assert "cancel requested" in run.note
    assert [r.id for r in await store.list_runs(RunFilter(job="sleeper"))] == [run_id]  # no retry
    assert claimed.lease.generation + 1 == run.lease_generation


class Outage:
    """The real store, unreachable while `down` (every call raises DatabaseUnavailable)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.down = False
        self.failures = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not asyncio.iscoroutinefunction(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                self.failures += 1
                raise DatabaseUnavailable("cannot reach the database (test outage)")
            return await attr(*args, **kwargs)

        return call


async def test_after_an_outage_a_launcher_leaves_expired_leases_alone_for_a_ttl(
    store: Store, catalog: Catalog, settings: Settings
) -> None:
    # Another launcher holds a run whose lease ran out during a database outage both of them
    # saw: this one must give it a lease TTL to reconnect and revive its lease before taking
    # over a run that may well be alive (taking it at once killed healthy runs and re-ran them).
    run_id = await accept(store, catalog, "sleeper")
    await store.claim(
        "other-launcher", limit=1, lease_ttl=0.0, executors=["inline"], executor_caps={}
    )
    outage = Outage(store)
    outage.down = True
    events = Events()
    ttl = 1.5
    launcher = Launcher(
        store=outage,
        catalog=catalog,
        executors=build_executors(settings),  # type: ignore[arg-type]
        settings=replace(settings, lease_ttl=ttl, lease_renew_interval=0.5),
        hook=events,
    )
    task = asyncio.create_task(launcher.run())
    try:
        await eventually(lambda: outage.failures >= 1, "a store call failing", within=20)
        outage.down = False
        back = time.monotonic()
        await events.wait("claimed", run_id)
        assert time.monotonic() - back >= ttl - 0.2  # held off, then recovered as usual
    finally:
        launcher.stop()
        await task


def _launcher_behind_an_outage(
    store: Store, catalog: Catalog, settings: Settings
) -> tuple[Outage, Events, Launcher, asyncio.Task[None]]:
    """A running launcher whose database the test can take away (`outage.down = True`)."""
    outage = Outage(store)
    events = Events()
    quick = replace(settings, lease_ttl=1.0, lease_renew_interval=0.3, shutdown_grace=0.5)
    launcher = Launcher(
        store=outage,
        catalog=catalog,
        executors=build_executors(quick),  # type: ignore[arg-type]
        settings=quick,
        hook=events,
    )
    return outage, events, launcher, asyncio.create_task(launcher.run())


async def test_an_outcome_the_database_missed_is_recorded_from_the_journal_not_rerun(
    store: Store,
    catalog: Catalog,
    settings: Settings,
    test_dir: Path,
    start_launcher: Callable[..., Running],
) -> None:
    # The run ends while the database is down, and its launcher is stopped before the database
    # returns: the launcher that takes it over records how it ended, and runs nothing again.
    outage, events, first, task = _launcher_behind_an_outage(store, catalog, settings)
    run_id = await accept(store, catalog, "gate")
    await events.wait("started", run_id)
    journal = Path(settings.log_dir) / f"{run_id}.1.outcome.json"
    outage.down = True
    (test_dir / "gate").write_text("open")
    # The outcome could not be saved: it is journaled.
    await eventually(journal.exists, "the outcome journaled", within=20)
    first.stop()
    async with asyncio.timeout(30):
        await task
    assert (await store.get_run(run_id)).status is RunStatus.RUNNING  # the database missed it
    back = datetime.now(UTC)
    outage.down = False
    second = start_launcher(lease_ttl=1.0, lease_renew_interval=0.3)
    await second.events.wait("finished", run_id)
    run = await store.get_run(run_id)
    assert (run.status, run.exit_code) == (RunStatus.SUCCESS, 0)
    assert run.note is not None
    assert "outcome journal" in run.note
    assert "gate passed" in (run.log_tail or "")
    assert [r.id for r in await store.list_runs(RunFilter(job="gate"))] == [run_id]  # not re-run
    assert not journal.exists()  # recorded: the journal is gone
    # It ended before the database came back, and its record says so: finished_at is when it
    # ended (from the journal), not when the second launcher could save it.
    assert run.started_at is not None
    assert run.finished_at is not None
    assert run.started_at <= run.finished_at < back


async def test_an_outcome_saved_after_an_outage_keeps_the_time_the_run_ended(
    store: Store, catalog: Catalog, settings: Settings, test_dir: Path
) -> None:
    # The save of the outcome waits out the outage; the run's duration must not grow with it.
    # (The database runs on this machine: its clock is the test's.)
    outage, events, launcher, task = _launcher_behind_an_outage(store, catalog, settings)
    try:
        run_id = await accept(store, catalog, "gate")
        await events.wait("started", run_id)
        outage.down = True
        (test_dir / "gate").write_text("open")
        journal = Path(settings.log_dir) / f"{run_id}.1.outcome.json"
        await eventually(journal.exists, "the run ended (its outcome journaled)", within=20)
        seen = outage.failures
        # The save is retried, and waits.
        await eventually(lambda: outage.failures >= seen + 3, "three more failed saves", within=20)
        back = datetime.now(UTC)
        outage.down = False
        await events.wait("finished", run_id)
    finally:
        launcher.stop()
        async with asyncio.timeout(30):
            await task
    run = await store.get_run(run_id)
    assert (run.status, run.exit_code) == (RunStatus.SUCCESS, 0)
    assert run.started_at is not None
    assert run.finished_at is not None
    assert run.started_at <= run.finished_at < back


async def test_every_outcome_of_an_outage_is_journaled_not_only_the_first_batch(
    store: Store,
    catalog: Catalog,
    settings: Settings,
    test_dir: Path,
    start_launcher: Callable[..., Running],
) -> None:
    # Three runs end one after another during an outage. The first outcome's save is retried
    # for as long as the outage lasts; the two behind it (one a failure with an attempt left,
    # whose retry is computed first) must be journaled too, or the launcher that takes them
    # over records them lost and runs them again.
    outage, events, first, task = _launcher_behind_an_outage(store, catalog, settings)
    gates = {"a": 0, "b": 0, "c": 1}
    ids = {
        g: await accept(store, catalog, "gated", params={"gate": g, "code": code})
        for g, code in gates.items()
    }
    for run_id in ids.values():
        await events.wait("started", run_id)
    outage.down = True
    for gate, run_id in ids.items():
        (test_dir / gate).write_text("open")
        journal = Path(settings.log_dir) / f"{run_id}.1.outcome.json"
        # Journaled while the database is still down.
        await eventually(journal.exists, "the outcome journaled", within=20)
    first.stop()
    async with asyncio.timeout(30):
        await task
    outage.down = False
    second = start_launcher(lease_ttl=1.0, lease_renew_interval=0.3)
    for run_id in ids.values():
        await second.events.wait("finished", run_id)
    for gate, run_id in ids.items():
        run = await store.get_run(run_id)
        expected = RunStatus.SUCCESS if gates[gate] == 0 else RunStatus.FAILURE
        assert (run.status, run.exit_code, run.end_reason) == (expected, gates[gate], "exit"), run
        assert "outcome journal" in (run.note or "")
        assert f"passed {gate}" in (run.log_tail or "")
    attempts = sorted(
        (r.params or {}).get("gate", "") + str(r.attempt)
        for r in await store.list_runs(RunFilter(job="gated"))
    )
    assert attempts == ["a1", "b1", "c1", "c2"]  # the failure's retry, and nothing run again


def _write_journal(log_dir: Path, run_id: str, **fields: object) -> Path:
    """An outcome journal file as a dead launcher `dead-launcher` left it for attempt 1."""
    log_dir.mkdir(parents=True, exist_ok=True)
    journal = log_dir / f"{run_id}.1.outcome.json"
    record = {"run_id": run_id, "attempt": 1, "launcher": "dead-launcher", **fields}
    journal.write_text(json.dumps(record))
    return journal


async def test_a_journal_with_a_status_no_run_can_end_in_is_set_aside_not_retried_forever(
    store: Store,
    catalog: Catalog,
    settings: Settings,
    start_launcher: Callable[..., Running],
) -> None:
    # A journal file saying `running` (hand-edited, or corrupt): its outcome can never be
    # recorded. Read as it was, every takeover failed to finish the run, which stayed running
    # and was taken over again every lease TTL. It is set aside, as an unreadable journal is.
    run_id = await accept(store, catalog, "hello")
    await store.claim(
        "dead-launcher", limit=1, lease_ttl=0.0, executors=["inline"], executor_caps={}
    )
    journal = _write_journal(
        Path(settings.log_dir),
        run_id,
        status="running",
        end_reason="exit",
        exit_code=0,
        ended_at="2026-01-01T00:00:00+00:00",
    )
    with capture_logs() as logged:
        launcher = start_launcher()
        await launcher.events.wait("finished", run_id, within=15)
    run = await store.get_run(run_id)
    assert (run.status, run.end_reason) == (RunStatus.FAILURE, "launcher_lost")
    assert not journal.exists()
    assert journal.with_name(journal.name + ".corrupt").exists()
    [unreadable] = [e for e in logged if e["event"] == "run.journal_unreadable"]
    assert unreadable["run_id"] == run_id
    assert "running" in unreadable["error"]


async def open_gate_until_finished(test_dir: Path, events: Events, run_id: str) -> None:
    (test_dir / "gate").write_text("open")
    await events.wait("finished", run_id)


async def stop(launcher: Launcher, task: asyncio.Task[None]) -> None:
    launcher.stop()
    async with asyncio.timeout(30):
        await task


class LostCommitAnswer:
    """The real store, except that the first outcome save commits and then its answer is lost
    (the connection drops at COMMIT, as in a failover): the launcher sees an outage."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.dropped = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def finish_many(self, requests: Any) -> Any:
        result = await self._store.finish_many(requests)
        if not self.dropped:
            self.dropped += 1
            raise DatabaseUnavailable("the connection dropped at COMMIT (test)")
        return result


async def test_an_outcome_saved_whose_answer_was_lost_is_not_called_a_lost_lease(
    store: Store, catalog: Catalog, settings: Settings, test_dir: Path
) -> None:
    # The save landed, but the launcher never heard so: written again, it finds the row final,
    # and its lease "gone". It used to log run.lease_lost ("another launcher took the run over",
    # untrue) and fire the lease_lost hook; the row already holds this launcher's own outcome.
    flaky = LostCommitAnswer(store)
    events = Events()
    launcher = Launcher(
        store=flaky,
        catalog=catalog,
        executors=build_executors(settings),  # type: ignore[arg-type]
        settings=settings,
        hook=events,
    )
    task = asyncio.create_task(launcher.run())
    try:
        run_id = await accept(store, catalog, "gate")
        await events.wait("started", run_id)
        with capture_logs() as logged:
            await open_gate_until_finished(test_dir, events, run_id)
    finally:
        await stop(launcher, task)
    assert flaky.dropped == 1
    run = await store.get_run(run_id)
    assert (run.status, run.exit_code) == (RunStatus.SUCCESS, 0)
    names = [e["event"] for e in logged]
    assert "run.lease_lost" not in names, logged
    assert ("lease_lost", run_id) not in events.log
    assert "run.finished" in names
    # The outcome was journaled during the "outage"; recorded, its journal is gone.
    assert not (Path(settings.log_dir) / f"{run_id}.1.outcome.json").exists()


async def test_corrupt_state_is_kept_for_repair_and_listed_by_doctor(
    store: Store, catalog: Catalog, settings: Settings, start_launcher: Callable[..., Running]
) -> None:
    gone = await accept(store, catalog, "hello")
    bad = await accept(store, catalog, "hello")
    # The job disappears from the catalog; another run's params are corrupted behind our back.
    catalog2 = catalog.model_copy(
        update={"jobs": {k: v for k, v in catalog.jobs.items() if k != "careful"}}
    )
    if settings.database_url.startswith("sqlite"):
        import sqlite3

        path = settings.database_url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE run_log SET job = 'careful' WHERE id = ?", (gone,))
            conn.execute("UPDATE run_log SET params = '{not json' WHERE id = ?", (bad,))
    else:
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            conn.execute("UPDATE run_log SET job = 'careful' WHERE id = %s", (gone,))
            # jsonb cannot hold invalid JSON; a valid non-object is the corruption PostgreSQL allows
            conn.execute("UPDATE run_log SET params = '\"oops\"'::jsonb WHERE id = %s", (bad,))
    events = Events()
    launcher = Launcher(
        store=store,
        catalog=catalog2,
        executors=build_executors(settings),
        settings=settings,
        hook=events,
    )
    task = asyncio.create_task(launcher.run())
    ok = await accept(store, catalog2, "hello")
    await events.wait("finished", gone)
    await events.wait("finished", bad)
    await events.wait("finished", ok)  # the launcher is not blocked by them
    launcher.stop()
    await task
    kept = await store.get_run(gone)
    assert (kept.status, kept.error_code) == (RunStatus.QUEUED, "unknown_job")
    assert kept.not_before is not None
    corrupt = await store.get_run(bad)
    assert (corrupt.status, corrupt.error_code) == (RunStatus.QUEUED, "corrupt_params")
    assert (await store.get_run(ok)).status is RunStatus.SUCCESS
    findings = await diagnose(replace(settings), store)
    flagged = {f.run_id for f in findings if f.check == "repair" and f.level == "error"}
    assert {gone, bad} <= flagged


async def test_doctor_warns_of_an_orphan_after_the_configured_orphan_grace(
    store: Store, catalog: Catalog, settings: Settings
) -> None:
    # `runlane doctor` used a fixed 10 minutes, whatever RUNLANE_ORPHAN_GRACE (which the
    # launcher's orphan sweep uses) said.
    run_id = await accept(store, catalog, "slow")  # deadline: 1s
    await store.claim(
        "dead-launcher", limit=1, lease_ttl=3600, executors=["inline"], executor_caps={}
    )
    quick = replace(settings, orphan_grace=0.2)

    async def orphan_warned() -> bool:
        return any(
            f.check == "orphans" and f.level == "warning" and f.run_id == run_id
            for f in await diagnose(quick, store)
        )

    await eventually(orphan_warned, "doctor's orphan warning", within=10)


# ------------------------------------------------------------------------ PostgreSQL only


@pytest.fixture
def pg_url(database_url: str) -> str:
    if not database_url.startswith("postgresql"):
        pytest.skip("a PostgreSQL scenario")
    return database_url


@pytest.fixture
def serve_env(settings: Settings, test_dir: Path) -> dict[str, str]:
    return dict(
        os.environ,
        RUNLANE_DATABASE_URL=settings.database_url,
        RUNLANE_CATALOG=settings.catalog_path,
        RUNLANE_LOG_DIR=settings.log_dir,
        RUNLANE_LEASE_TTL="1500ms",
        RUNLANE_LEASE_RENEW_INTERVAL="300ms",
        RUNLANE_CLAIM_INTERVAL="100ms",
        RUNLANE_LOG_LEVEL="warning",
        RUNLANE_TEST_DIR=str(test_dir),
    )


@pytest.fixture
def serve_proc(serve_env: dict[str, str], test_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    with (test_dir / "serve.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runlane", "serve"],
            env=serve_env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        yield proc
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()


async def test_a_stalled_launcher_is_fenced_out_and_kills_its_process(
    pg_url: str,
    store: Store,
    catalog: Catalog,
    settings: Settings,
    test_dir: Path,
    serve_proc: subprocess.Popen[bytes],
) -> None:
    run_id = await accept(store, catalog, "sleeper")
    pidfile = test_dir / f"{run_id}.1.pid"
    await eventually(
        lambda: pidfile.exists() and pidfile.read_text() != "", "the run's pid file", within=20
    )
    child = int(pidfile.read_text())
    before = await store.get_run(run_id)
    assert before.status is RunStatus.RUNNING
    stale_owner = before.lease_owner

    serve_proc.send_signal(signal.SIGSTOP)  # the launcher stalls past its lease
    events = Events()
    other = Launcher(
        store=store,
        catalog=catalog,
        executors=build_executors(settings),
        settings=replace(settings, lease_ttl=1.5, lease_renew_interval=0.3),
        hook=events,
        retry_base_seconds=30.0,
    )
    task = asyncio.create_task(other.run())
    try:
        await events.wait("finished", run_id)
        taken = await store.get_run(run_id)
        assert (taken.status, taken.end_reason) == (RunStatus.FAILURE, "launcher_lost")
        assert taken.lease_owner == other.owner != stale_owner
        assert taken.lease_generation == before.lease_generation + 1

        serve_proc.send_signal(signal.SIGCONT)  # it wakes up believing it still holds the run
        # Its renewal fails: it kills its process.
        await eventually(lambda: not pid_alive(child), f"process {child} killed", within=20)
        after = await store.get_run(run_id)
        assert (after.status, after.end_reason, after.lease_owner) == (
            taken.status,
            taken.end_reason,
            taken.lease_owner,
        )
        assert after.finished_at == taken.finished_at  # no write from the stale lease landed
    finally:
        other.stop()
        await task
    serve_proc.send_signal(signal.SIGTERM)
    assert serve_proc.wait(timeout=30) == 0


async def test_database_outage_loses_no_outcome(
    pg_url: str, catalog: Catalog, settings: Settings, test_dir: Path
) -> None:
    host_port = pg_url.split("@", 1)[1].split("/", 1)[0]
    host, port = host_port.split(":")
    proxy = TcpProxy(host, int(port))
    await proxy.start()
    proxied = pg_url.replace(host_port, f"127.0.0.1:{proxy.port}")
    store = store_from_url(proxied)
    await store.open()
    await store.upgrade()
    events = Events()
    launcher = Launcher(
        store=store,
        catalog=catalog,
        executors=build_executors(settings),
        settings=replace(settings, database_url=proxied),
        hook=events,
    )
    task = asyncio.create_task(launcher.run())
    try:
        run_id = await accept(store, catalog, "gate")
        await events.wait("started", run_id)
        log_file = Path(settings.log_dir) / f"{run_id}.1.log"
        await proxy.cut()  # the database goes away while the run is in flight
        (test_dir / "gate").write_text("open")
        await eventually(
            lambda: log_file.exists() and "gate passed" in log_file.read_text(),
            "'gate passed' in the run's log",
            within=20,
        )
        assert not events.seen[("finished", run_id)].is_set()  # the outcome could not be written
        with capture_logs() as logged:
            await proxy.restore()
            await events.wait("finished", run_id)
        run = await store.get_run(run_id)
        assert (run.status, run.exit_code) == (RunStatus.SUCCESS, 0)
        assert "gate passed" in (run.log_tail or "")
        # The launcher says once that the database is back.
        assert [e["event"] for e in logged].count("launcher.database_reachable") == 1
    finally:
        launcher.stop()
        await task
        await store.close()
        await proxy.close()


def _database_read_only(url: str, read_only: bool) -> None:
    """What a failover to a standby looks like to the launcher: its connections are cut, and
    the ones it makes again refuse every write (`default_transaction_read_only`), until the
    database is writable again (cut once more: the new ones write)."""
    dbname = str(conninfo_to_dict(url)["dbname"])
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        setting = "SET default_transaction_read_only = on" if read_only else "RESET ALL"
        admin.execute(sql.SQL("ALTER DATABASE {} " + setting).format(sql.Identifier(dbname)))
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (dbname,),
        )


async def test_an_outcome_a_read_only_database_refused_is_saved_once_it_takes_writes(
    pg_url: str,
    store: Store,
    catalog: Catalog,
    start_launcher: Callable[..., Running],
    test_dir: Path,
) -> None:
    running = start_launcher()
    run_id = await accept(store, catalog, "gate")
    await running.events.wait("started", run_id)

    def refused(logged: list[dict[str, Any]]) -> bool:
        return any(
            e["event"] == "run.supervisor_crashed"
            or (e["event"] == "store.write_retry" and "read-only" in str(e.get("error")))
            for e in logged
        )

    with capture_logs() as logged:
        try:
            _database_read_only(pg_url, True)
            (test_dir / "gate").write_text("open")
            await eventually(lambda: refused(logged), "the outcome's save refused", within=5)
        finally:
            _database_read_only(pg_url, False)
        await running.events.wait("finished", run_id, within=5)
    # The outcome waited for the database rather than being dropped (the run left `running`
    # until its lease expired, then `launcher_lost` and run again).
    assert not [e for e in logged if e["event"] == "run.supervisor_crashed"]
    fresh = store_from_url(pg_url)
    await fresh.open()
    try:
        run = await fresh.get_run(run_id)
    finally:
        await fresh.close()
    assert (run.status, run.exit_code) == (RunStatus.SUCCESS, 0)
    assert "gate passed" in (run.log_tail or "")


class SlowStart:
    """An executor whose provider call is slower than the run's whole deadline."""

    def __init__(self, inner: Executor, delay: float) -> None:
        self.inner = inner
        self.delay = delay
        self.name = inner.name

    async def start(self, spec: ExecutionSpec) -> Execution:
        await asyncio.sleep(self.delay)  # the slow lookup under test
        return await self.inner.start(spec)

    async def reattach(self, spec: ExecutionSpec) -> Execution | None:
        return await self.inner.reattach(spec)

    def events(self, execution: Execution) -> AsyncIterator[ExecutionEvent]:
        return self.inner.events(execution)

    async def cancel(self, execution: Execution, *, grace: float) -> None:
        await self.inner.cancel(execution, grace=grace)

    async def logs(self, execution: Execution, *, tail_bytes: int = 65536) -> str:
        return await self.inner.logs(execution, tail_bytes=tail_bytes)

    def stop_following(self, execution: Execution) -> None:
        self.inner.stop_following(execution)

    def prepare(self) -> None:
        self.inner.prepare()


async def run_slowly_started(
    store: Store, catalog: Catalog, settings: Settings, slow: type[SlowStart]
) -> tuple[Run, Events]:
    """A run of `slow` (deadline 1 s) by a launcher whose inline start takes 1.3 s, once it has
    ended; and what the launcher's hook saw."""
    events = Events()
    inline = build_executors(settings)["inline"]
    launcher = Launcher(
        store=store,
        catalog=catalog,
        executors={"inline": slow(inline, delay=1.3)},
        settings=settings,
        hook=events,
    )
    task = asyncio.create_task(launcher.run())
    try:
        run_id = await accept(store, catalog, "slow")  # deadline 1s
        await events.wait("finished", run_id)
    finally:
        launcher.stop()
        await task
    return await store.get_run(run_id), events


async def test_a_slow_start_never_leaves_an_expired_run_going(
    store: Store, catalog: Catalog, settings: Settings
) -> None:
    run, events = await run_slowly_started(store, catalog, settings, SlowStart)
    run_id = run.id
    assert (run.status, run.end_reason) == (RunStatus.TIMEOUT, "deadline")
    assert "while the executor was starting" in (run.note or "")
    assert ("started", run_id) not in events.log


class SlowStartSayingMore(SlowStart):
    """A slow start whose execution ends with a note and a tail of its own (the inline
    executor's when it could not write the log file whole)."""

    NOTE = (
        "the log file x.1.log is incomplete: writing it failed (Is a directory); "
        "the tail here is complete"
    )

    async def _ended(self, execution: Execution) -> AsyncIterator[ExecutionEvent]:
        async for event in self.inner.events(execution):
            if event.outcome is not None:
                event = replace(
                    event, outcome=replace(event.outcome, note=self.NOTE, log_tail="last words\n")
                )
            yield event

    def events(self, execution: Execution) -> AsyncIterator[ExecutionEvent]:
        return self._ended(execution)


async def test_a_run_ended_for_a_slow_start_keeps_what_its_execution_said(
    store: Store, catalog: Catalog, settings: Settings
) -> None:
    # The launcher ends the run itself (timeout) once the start returns: the execution's note
    # and tail are kept beside its own note, so the CLI can still show the saved tail.
    run, _ = await run_slowly_started(store, catalog, settings, SlowStartSayingMore)
    assert (run.status, run.end_reason) == (RunStatus.TIMEOUT, "deadline")
    assert run.note == (
        "the deadline passed while the executor was starting the run; " + SlowStartSayingMore.NOTE
    )
    assert run.log_tail == "last words\n"


class FlakyReattach(SlowStart):
    """An executor whose provider is unreachable when a run is taken over."""

    async def reattach(self, spec: ExecutionSpec) -> Execution | None:
        raise TemporaryExecutorError(
            "API server unavailable (503)", error_code="api_unavailable", retry_after=60
        )


async def test_a_provider_outage_during_takeover_releases_the_run(
    store: Store, catalog: Catalog, settings: Settings
) -> None:
    run_id = await accept(store, catalog, "sleeper")
    await store.claim(
        "dead-launcher", limit=1, lease_ttl=0.0, executors=["inline"], executor_caps={}
    )
    events = Events()
    inline = build_executors(settings)["inline"]
    launcher = Launcher(
        store=store,
        catalog=catalog,
        executors={"inline": FlakyReattach(inline, delay=0)},
        settings=settings,
        hook=events,
    )
    task = asyncio.create_task(launcher.run())
    try:
        await events.wait("finished", run_id)
    finally:
        launcher.stop()
        await task
    run = await store.get_run(run_id)
    assert (run.status, run.error_code) == (RunStatus.QUEUED, "api_unavailable")
    assert run.not_before is not None
    assert run.lease_token is None


async def test_doctor_reports_missing_kubernetes_permissions(
    store: Store, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runlane.testing.kube.fake import KubeFake

    no_cluster = [f for f in await diagnose(settings, store) if f.check == "kubernetes"]
    assert [(f.level, f.message) for f in no_cluster] == [
        ("ok", "no cluster configured: pod jobs run inline")
    ]
    fake = KubeFake(
        allow=["create jobs.batch", "get jobs.batch", "list jobs.batch", "watch jobs.batch"]
    ).start()
    try:
        monkeypatch.setenv("KUBECONFIG", str(fake.kubeconfig_path))
        found = [f for f in await diagnose(settings, store) if f.check == "kubernetes"]
    finally:
        fake.stop()
    assert [f.level for f in found] == ["error"]
    assert "delete jobs.batch" in found[0].message
    assert "get pods/log" in found[0].message


class HeldRenewal:
    """The real store, except that the first renewal of `run_id` is held (once `entered` is set)
    until `proceed` is set, then made with the leases it was given."""

    def __init__(self, store: Store, run_id: str) -> None:
        self._store = store
        self.run_id = run_id
        self.entered = asyncio.Event()
        self.proceed = asyncio.Event()
        self.returned = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def renew(self, leases: Any, lease_ttl: float) -> set[str]:
        held = not self.entered.is_set() and any(lease.run_id == self.run_id for lease in leases)
        if held:
            self.entered.set()
            await self.proceed.wait()
        kept: set[str] = await self._store.renew(leases, lease_ttl)
        if held:
            self.returned.set()
        return kept


class DeferredFirstStart(SlowStart):
    """An executor whose first start fails for a while (a provider hiccup), once `go` is set."""

    def __init__(self, inner: Executor, go: asyncio.Event) -> None:
        super().__init__(inner, delay=0.0)
        self.go = go
        self.starts = 0

    async def start(self, spec: ExecutionSpec) -> Execution:
        self.starts += 1
        if self.starts == 1:
            await self.go.wait()
            raise TemporaryExecutorError(
                "provider busy (test)", error_code="api_unavailable", retry_after=0
            )
        return await self.inner.start(spec)


async def test_a_renewal_of_an_older_lease_never_kills_the_run_claimed_again(
    store: Store, catalog: Catalog, settings: Settings, test_dir: Path
) -> None:
    # A renewal is in flight with the run's first lease while the run is released (a provider
    # hiccup) and claimed again with a new one. The renewal cannot find the first lease: that
    # says nothing about the new one, which the launcher used to mark lost and kill.
    run_id = await accept(store, catalog, "gate")
    held = HeldRenewal(store, run_id)
    inline = DeferredFirstStart(build_executors(settings)["inline"], held.entered)
    events = Events()
    launcher = Launcher(
        store=held,
        catalog=catalog,
        executors={"inline": inline},  # type: ignore[arg-type]
        settings=replace(settings, lease_renew_interval=0.2),
        hook=events,
    )
    task = asyncio.create_task(launcher.run())
    try:
        await events.wait("started", run_id)  # the second claim's start
        assert inline.starts == 2
        held.proceed.set()
        await held.returned.wait()
        await open_gate_until_finished(test_dir, events, run_id)
    finally:
        await stop(launcher, task)
    assert ("lease_lost", run_id) not in events.log
    run = await store.get_run(run_id)
    assert (run.status, run.exit_code) == (RunStatus.SUCCESS, 0)
