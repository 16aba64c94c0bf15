"""The SQLite store's connection: one sqlite3 connection on one worker thread, write
transactions (BEGIN IMMEDIATE), time as fixed-width text, wake-ups (this process's writes at
once, other processes' commits within `WATCH_SECONDS`), and the primitives `SqlStoreBase` runs its statements with. The statements are in `store.py`."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

from runlane.adapters.sql.base import SqlStoreBase, wait_for_event
from runlane.adapters.sql.rows import Row, RowReader, aware_utc
from runlane.adapters.sqlite.statements import CONNECTION_PRAGMAS, Q
from runlane.errors import DatabaseUnavailable, InvalidArgument, StoreError
from runlane.ports.clock import Clock, SystemClock

T = TypeVar("T")
# How often a waiting store asks whether another process committed (`PRAGMA data_version`, a
# read of the WAL index in shared memory: ~5 us, no disk, never waiting for a lock): every
# WATCH_SECONDS after a wake-up, then half as often at each quiet look, down to every
# WATCH_IDLE_SECONDS. A run accepted by `runlane run` in another process starts within about
# that long, not at the next claim poll (a second); an idle launcher wakes 5 times a second
# for it (each wake-up of a process costs ~0.1-0.3 ms of CPU on this VM, whatever it does).
WATCH_SECONDS = 0.02
WATCH_IDLE_SECONDS = 0.2
_DATA_VERSION = Q["data_version"]
DictRow = dict[str, object]


def format_time(value: datetime) -> str:
    """Fixed-width UTC text: text comparison in SQL is then time comparison. (isoformat, not
    strftime: `%Y` writes the year 999 as `999`, which sorts after `2031`.)"""
    return aware_utc(value).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _opt_time(value: datetime | None) -> str | None:
    return None if value is None else format_time(value)


def _decode_time(value: object) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return aware_utc(value)
    return aware_utc(datetime.fromisoformat(str(value)))


_READ = RowReader(_decode_time)


def _row(row: sqlite3.Row) -> DictRow:
    return dict(zip(row.keys(), row, strict=True))


def _one(cur: sqlite3.Cursor) -> DictRow | None:
    row: sqlite3.Row | None = cur.fetchone()
    return None if row is None else _row(row)


def _all(cur: sqlite3.Cursor) -> list[DictRow]:
    rows: list[sqlite3.Row] = cur.fetchall()
    return [_row(r) for r in rows]


def split_statements(script: str) -> list[str]:
    """The statements of a SQL script, split where SQLite itself says a statement is complete."""
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    rest = "\n".join(ln for ln in buffer.splitlines() if not ln.strip().startswith("--"))
    if rest.strip():
        raise ValueError(f"incomplete SQL statement at the end of a script: {rest.strip()[:80]!r}")
    return statements


def _write(conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """Run `work` in one write transaction. BEGIN IMMEDIATE takes the write lock up front, so
    checks made inside cannot be invalidated by another writer before COMMIT. A COMMIT that
    fails (a full disk) is rolled back too: left open, the transaction would refuse every
    later BEGIN on this connection."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = work(conn)
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)
        raise
    return result


def _rollback(conn: sqlite3.Connection) -> None:
    """Undo what is open without hiding the error that brought us here: SQLite may have ended
    the transaction itself (a full disk, an I/O error), and a ROLLBACK with none open fails."""
    if conn.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


# What a write meets when the file cannot take it for now: a full disk (or the database's own
# size cap), an I/O error, the file or its directory made read-only. Nothing was written; like
# an outage, it is retried (a launcher journals its outcomes meanwhile), not taken for a refusal
# of the request, and a face says it in one line (`database_unavailable`).
UNWRITABLE = ("SQLITE_FULL", "SQLITE_IOERR", "SQLITE_READONLY")


def unwritable(exc: BaseException) -> bool:
    """Whether `exc` is SQLite saying the file cannot be written just now (`UNWRITABLE`)."""
    return str(getattr(exc, "sqlite_errorname", "") or "").startswith(UNWRITABLE)


class SqliteConnection(SqlStoreBase):
    """The connection side of `SqliteStore` (a base class: no extra lookup per call)."""

    _read = _READ
    _statements = Q

    def __init__(self, path: str, *, clock: Clock | None = None, create: bool = True) -> None:
        self.path = path
        # False: a missing file is an error ("no database at PATH"), never created by a read.
        self._create = create
        self._clock: Clock = clock or SystemClock()
        self._conn: sqlite3.Connection | None = None
        # One thread for every call: the event loop never waits on fsync, and calls are
        # serialised the way one sqlite3 connection needs.
        self._executor: ThreadPoolExecutor | None = None
        self._wakeup = asyncio.Event()
        # A second connection that only asks whether anything was committed (wait_for_wakeup):
        # opened with the store for a database file, never for one in memory.
        self._watch: sqlite3.Connection | None = None
        self._data_version: int | None = None  # as last seen on it
        self._watch_every = WATCH_SECONDS  # how long until the next look

    # --- plumbing -------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        in_memory = self.path == ":memory:" or self.path.startswith("file:")
        if not self._create and not in_memory and not Path(self.path).exists():
            raise StoreError(f"no database at {self.path} — run `runlane db upgrade`")
        try:
            if self._create or in_memory:
                conn = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False, timeout=5.0
                )
            else:
                # mode=rw: a file removed since the check above is not created either.
                uri = f"file:{urllib.parse.quote(str(Path(self.path).absolute()))}?mode=rw"
                conn = sqlite3.connect(
                    uri, isolation_level=None, check_same_thread=False, timeout=5.0, uri=True
                )
        except sqlite3.Error as exc:
            if not self._create and not Path(self.path).exists():
                raise StoreError(f"no database at {self.path} — run `runlane db upgrade`") from None
            raise DatabaseUnavailable(
                f"cannot open SQLite database at {self.path}: {exc}"
            ) from None
        try:
            conn.row_factory = sqlite3.Row
            for name in CONNECTION_PRAGMAS:
                conn.execute(Q[name])
        except sqlite3.Error as exc:
            conn.close()
            raise DatabaseUnavailable(
                f"cannot open SQLite database at {self.path}: {exc}"
            ) from None
        return conn

    async def open(self) -> None:
        if self._conn is not None:
            return
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="runlane-sqlite")
        try:
            self._conn = await asyncio.get_running_loop().run_in_executor(executor, self._connect)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        self._executor = executor
        if not (self.path == ":memory:" or self.path.startswith("file:")):
            try:
                # timeout 0: a look that finds the database busy returns at once (and looks
                # again at the next tick) instead of holding the event loop.
                self._watch = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False, timeout=0.0
                )
            except sqlite3.Error:  # woken by this process's writes and the claim poll only
                self._watch = None

    async def close(self) -> None:
        conn, executor = self._conn, self._executor
        self._conn, self._executor = None, None
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.close()
        if conn is not None and executor is not None:
            await asyncio.get_running_loop().run_in_executor(executor, conn.close)
        if executor is not None:
            executor.shutdown(wait=True)

    async def _call(self, work: Callable[[sqlite3.Connection], T]) -> T:
        conn, executor = self._conn, self._executor
        if conn is None or executor is None:
            raise StoreError("the SQLite store is not open: call open() first")

        def guarded() -> T:
            try:
                return work(conn)
            except sqlite3.Error as exc:
                if isinstance(exc, sqlite3.OperationalError) and (
                    "locked" in str(exc) or "busy" in str(exc)
                ):
                    raise DatabaseUnavailable(
                        f"SQLite database at {self.path} is busy: {exc}"
                    ) from exc
                if unwritable(exc):
                    raise DatabaseUnavailable(
                        f"SQLite database at {self.path} cannot be written: {exc}"
                    ) from exc
                raise StoreError(f"SQLite error on {self.path}: {exc}") from exc
            except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 encoding exists
                # Refused as PostgreSQL refuses it; the transaction was rolled back (`_write`).
                raise InvalidArgument(
                    f"a value cannot be stored in the database: {str(exc)[:200]}"
                ) from exc

        return await asyncio.get_running_loop().run_in_executor(executor, guarded)

    def _now(self) -> datetime:
        return aware_utc(self._clock.now())

    # --- the primitives of SqlStoreBase ---------------------------------------------------------

    async def _read_one(self, name: str, params: Mapping[str, object]) -> Row | None:
        sql = Q[name]
        return await self._call(lambda c: _one(c.execute(sql, params)))

    async def _read_all(self, name: str, params: Mapping[str, object]) -> list[Row]:
        sql = Q[name]
        return await self._call(lambda c: list[Row](_all(c.execute(sql, params))))

    async def _write_one(self, name: str, params: Mapping[str, object]) -> Row | None:
        sql = Q[name]
        return await self._call(lambda c: _write(c, lambda w: _one(w.execute(sql, params))))

    async def _write_all(self, name: str, params: Mapping[str, object]) -> list[Row]:
        sql = Q[name]
        return await self._call(
            lambda c: _write(c, lambda w: list[Row](_all(w.execute(sql, params))))
        )

    async def _write_many(self, name: str, params: Sequence[Mapping[str, object]]) -> None:
        sql = Q[name]
        await self._call(lambda c: _write(c, lambda w: w.executemany(sql, params).close()))

    async def _execute(self, name: str, params: Mapping[str, object]) -> None:
        sql = Q[name]
        await self._call(lambda c: c.execute(sql, params).close())

    def _param_time(self, value: datetime | None) -> object:
        return _opt_time(value)

    def _param_now(self) -> object:
        return format_time(self._now())

    def _param_since(self, seconds: float) -> object:
        return format_time(self._now() - timedelta(seconds=seconds))

    async def wait_for_wakeup(self, max_wait: float) -> bool:
        """Woken at once by this store's own accepts, releases and finishes, and within
        `WATCH_SECONDS` to `WATCH_IDLE_SECONDS` by a commit of another connection (another process: the CLI, the API
        of another `runlane serve`, a second launcher), seen as a change of `PRAGMA
        data_version` on the watch connection. A commit made between two waits wakes the next
        one. This store's other writes (heartbeats, renewals) wake it too: one needless claim
        each, at their own pace."""
        if self._watch is None:  # in memory: nothing else can write to it
            return await wait_for_event(self._wakeup, max_wait)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, max_wait)
        if self._changed_elsewhere():  # committed since the last look (the first: a baseline)
            self._watch_every = WATCH_SECONDS
            return True
        while True:
            remaining = deadline - loop.time()
            every = self._watch_every
            if await wait_for_event(self._wakeup, min(remaining, every)):
                self._watch_every = WATCH_SECONDS
                return True
            if self._changed_elsewhere():
                self._watch_every = WATCH_SECONDS
                return True
            self._watch_every = min(every * 2, WATCH_IDLE_SECONDS)
            if remaining <= every:
                return False

    def _changed_elsewhere(self) -> bool:
        """Whether a commit landed since the last look (on the event-loop thread: the pragma
        reads the WAL index in shared memory, a few microseconds, and never waits for a
        lock)."""
        watch = self._watch
        if watch is None:
            return False
        try:
            # Every row fetched: a statement left open would hold a read snapshot, and the WAL
            # could not be checkpointed past it.
            rows = watch.execute(_DATA_VERSION).fetchall()
        except sqlite3.Error:  # busy for an instant (a checkpoint): look again at the next tick
            return False
        version = int(rows[0][0])
        changed = self._data_version is not None and version != self._data_version
        self._data_version = version
        return changed
