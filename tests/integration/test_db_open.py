"""Opening the database through the library API: reads never create a SQLite file, a read-only
database stops a launcher at start, and live launchers prune the rows of dead ones."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runlane.adapters.sqlite import SqliteStore
from runlane.catalog import Catalog
from runlane.errors import DatabaseUnavailable, StoreError
from runlane.ports import Heartbeat, Store
from runlane.service.config import Settings
from runlane.service.launcher import Launcher
from runlane.service.runtime import GC_YOUNG_THRESHOLD, open_runtime, serve
from runlane.service.wiring import build_executors, store_from_url
from runlane.testing.clock import FixedClock

T0 = datetime(2031, 3, 4, 5, 6, 7, tzinfo=UTC)


async def test_reads_do_not_create_a_missing_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "typo.db"
    settings = Settings(database_url=f"sqlite:///{path}", catalog_path=str(tmp_path / "c.yaml"))
    with pytest.raises(StoreError, match=r"no database at .*typo\.db — run `runlane db upgrade`"):
        async with open_runtime(settings, catalog=False, check_schema=False):
            pass
    assert not path.exists()
    # The library default (and `runlane db upgrade`) still creates it.
    async with open_runtime(settings, catalog=False, check_schema=False, create=True) as rt:
        await rt.store.upgrade()
    assert path.exists()
    async with open_runtime(settings, catalog=False) as rt:
        assert await rt.store.launchers() == []


async def test_a_missing_file_removed_before_connect_is_not_created(tmp_path: Path) -> None:
    store = store_from_url(f"sqlite:///{tmp_path / 'gone.db'}", create=False)
    with pytest.raises(StoreError, match="no database at"):
        await store.open()
    assert not (tmp_path / "gone.db").exists()


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make a SQLite file unwritable: `chattr +i` as root, file and directory modes otherwise."""
    if os.geteuid() == 0:
        chattr = shutil.which("chattr")
        if chattr is None:
            pytest.skip("root without chattr: cannot make a read-only file")
        made = subprocess.run([chattr, "+i", str(path)], capture_output=True, check=False)
        if made.returncode != 0:
            pytest.skip(f"chattr +i failed: {made.stderr.decode().strip()}")
        try:
            yield
        finally:
            subprocess.run([chattr, "-i", str(path)], check=False)
        return
    path.chmod(0o444)
    path.parent.chmod(0o555)
    try:
        yield
    finally:
        path.parent.chmod(0o755)
        path.chmod(0o644)


@pytest.fixture
async def sqlite_settings(tmp_path: Path, catalog_file: Path) -> Settings:
    url = f"sqlite:///{tmp_path / 'ro.db'}"
    store = store_from_url(url)
    await store.open()
    await store.upgrade()
    await store.close()
    return Settings(
        database_url=url,
        catalog_path=str(catalog_file),
        log_dir=str(tmp_path / "logs"),
        claim_interval=0.1,
        heartbeat_interval=1.0,
    )


async def test_serve_refuses_a_read_only_sqlite_database(
    sqlite_settings: Settings, tmp_path: Path
) -> None:
    with read_only(tmp_path / "ro.db"):
        async with open_runtime(sqlite_settings, catalog=False) as rt:
            with pytest.raises(StoreError, match="database not writable"):
                await rt.store.check_writable()
        async with asyncio.timeout(10):
            with pytest.raises(StoreError, match="database not writable"):
                await serve(sqlite_settings, install_signals=False)
    # Writable again: the probe passes and wrote nothing.
    async with open_runtime(sqlite_settings, catalog=False) as rt:
        await rt.store.check_writable()
        assert await rt.store.launchers() == []


async def read_only_url_of(url: str) -> str:
    """`url`'s database, migrated, through sessions that are read-only (as a hot standby's)."""
    store = store_from_url(url)
    await store.open()
    await store.upgrade()
    await store.close()
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options=-c%20default_transaction_read_only%3Don"


@pytest.mark.postgres
async def test_serve_refuses_a_read_only_postgres_database(
    pg_database: str, catalog_file: Path, tmp_path: Path
) -> None:
    read_only_url = await read_only_url_of(pg_database)
    settings = Settings(
        database_url=read_only_url, catalog_path=str(catalog_file), log_dir=str(tmp_path / "logs")
    )
    async with open_runtime(settings, catalog=False) as rt:
        with pytest.raises(StoreError, match=r"database not writable: PostgreSQL at .*read-only"):
            await rt.store.check_writable()
    async with asyncio.timeout(20):
        with pytest.raises(StoreError, match="database not writable"):
            await serve(settings, install_signals=False)


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runlane", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.postgres
async def test_a_write_refused_by_a_read_only_postgres_is_one_line_not_a_traceback(
    pg_database: str, catalog_file: Path
) -> None:
    read_only_url = await read_only_url_of(pg_database)
    env = dict(os.environ, RUNLANE_DATABASE_URL=read_only_url, RUNLANE_CATALOG=str(catalog_file))
    proc = _cli(env, "run", "hello", "--json")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: PostgreSQL at "), line
    assert "refuses writes" in line, line
    assert json.loads(proc.stdout)["error"] == "database_unavailable"
    # A store call says the same: the launcher's outage path (retried, outcomes journaled).
    read_only = store_from_url(read_only_url)
    await read_only.open()
    try:
        with pytest.raises(DatabaseUnavailable, match="refuses writes"):
            await read_only.set_override("hello", paused_until=None, reason=None, by=None)
    finally:
        await read_only.close()


async def cap_sqlite_pages(store: SqliteStore, *, full: bool) -> None:
    """Make the database file full (no page more than it has: SQLITE_FULL on the next write
    that needs one, as on a full disk) or give it room again."""

    def cap(conn: sqlite3.Connection) -> None:
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
        conn.execute(f"PRAGMA max_page_count = {int(pages) if full else 1 << 30}")

    await store._call(cap)


async def test_a_full_sqlite_disk_is_an_outage_to_retry_not_a_wedged_connection(
    tmp_path: Path,
) -> None:
    """A write SQLite cannot make (a full disk) was a plain store error: a launcher dropped the
    outcome it was saving, the CLI said `store_error`. It is `database_unavailable`, the outage
    a launcher retries (journaling its outcomes), and the connection stays usable: a failed
    COMMIT or an automatic rollback left it refusing every later BEGIN."""
    store = SqliteStore(str(tmp_path / "full.db"))
    await store.open()
    await store.upgrade()
    try:
        await cap_sqlite_pages(store, full=True)
        refused: list[DatabaseUnavailable] = []
        for n in range(40):  # until a page is needed (the file has some room left in its pages)
            try:
                await store.set_override(f"job-{n}", paused_until=None, reason="x" * 900, by=None)
            except DatabaseUnavailable as exc:
                refused.append(exc)
                break
        assert [str(e) for e in refused] == [
            f"SQLite database at {tmp_path / 'full.db'} cannot be written: database or disk is full"
        ]
        # The connection is not left in a transaction: the next write meets the disk again.
        with pytest.raises(DatabaseUnavailable, match="database or disk is full"):
            await store.set_override("again", paused_until=None, reason="x" * 900, by=None)
        await cap_sqlite_pages(store, full=False)
        await store.set_override("again", paused_until=None, reason="room again", by=None)
        assert (await store.overrides())["again"].reason == "room again"
    finally:
        await store.close()


async def test_a_launcher_beat_prunes_launchers_silent_for_an_hour(
    tmp_path: Path, catalog: Catalog
) -> None:
    clock = FixedClock(T0)
    store: Store = SqliteStore(str(tmp_path / "prune.db"), clock=clock)
    await store.open()
    try:
        await store.upgrade()
        await store.beat(Heartbeat("killed-9", "h", 1, "0.1.0", T0, running={"inline": 1}))
        await store.beat(Heartbeat("quiet", "h", 2, "0.1.0", T0))
        s = Settings(log_dir=str(tmp_path / "logs"), heartbeat_interval=15.0, launcher_id="live")
        launcher = Launcher(store=store, catalog=catalog, executors=build_executors(s), settings=s)
        clock.advance(3000)
        await store.beat(Heartbeat("quiet", "h", 2, "0.1.0", T0))
        clock.advance(601)  # killed-9: 3601 s silent (> 1 h = max(1 h, 10 x 15 s)); quiet: 601 s
        await launcher.beat()
        assert [h.launcher_id for h in await store.launchers()] == ["live", "quiet"]
    finally:
        await store.close()


def test_the_prune_bound_is_an_hour_or_ten_heartbeats() -> None:
    assert Settings().launcher_prune_after == 3600.0
    assert Settings(heartbeat_interval=600.0).launcher_prune_after == 6000.0


async def test_serve_freezes_what_its_start_up_allocated(sqlite_settings: Settings) -> None:
    # `runlane serve` hides its start-up objects from the cyclic collector once running and
    # collects its young generation less often, until it returns; a library caller of serve()
    # keeps the collector as it was.
    import gc

    from runlane.core.runs import Trigger
    from runlane.service.accept import RunRequest, accept_run

    gc.unfreeze()
    before = gc.get_threshold()
    assert before[0] != GC_YOUNG_THRESHOLD
    seen: dict[str, int] = {}
    finished = asyncio.Event()

    def hook(event: str, run_id: str) -> None:
        if event == "finished":
            seen["frozen"] = gc.get_freeze_count()
            seen["young"] = gc.get_threshold()[0]
            finished.set()

    async with open_runtime(sqlite_settings) as rt:
        await accept_run(
            rt.store, rt.require_catalog(), RunRequest(job="hello", trigger=Trigger.CLI)
        )
    for freeze in (False, True):
        finished.clear()
        stop = asyncio.Event()
        task = asyncio.create_task(
            serve(sqlite_settings, hook=hook, stop=stop, install_signals=False, freeze_gc=freeze)
        )
        try:
            if freeze:  # the first launcher ran the run: queue another for this one
                async with open_runtime(sqlite_settings) as rt:
                    await accept_run(
                        rt.store, rt.require_catalog(), RunRequest(job="hello", trigger=Trigger.CLI)
                    )
            async with asyncio.timeout(30):
                await finished.wait()
        finally:
            stop.set()
            await task
            frozen = seen["frozen"]
            gc.unfreeze()
        assert (frozen > 10_000) is freeze, frozen
        assert seen["young"] == (GC_YOUNG_THRESHOLD if freeze else before[0])
        assert gc.get_threshold() == before  # as it was once serve() returned
