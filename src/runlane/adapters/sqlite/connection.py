"""The SQLite store's connection: one sqlite3 connection on one worker thread, write
transactions (BEGIN IMMEDIATE), time as fixed-width text, in-process wake-ups, and the
primitives `SqlStoreBase` runs its statements with. The statements are in `store.py`."""

from __future__ import annotations

import asyncio
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
from runlane.errors import DatabaseUnavailable, StoreError
from runlane.ports.clock import Clock, SystemClock

T = TypeVar("T")
DictRow = dict[str, object]


def format_time(value: datetime) -> str:
    """Fixed-width UTC text: text comparison in SQL is then time comparison."""
    return aware_utc(value).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
    checks made inside cannot be invalidated by another writer before COMMIT."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = work(conn)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return result


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

    async def close(self) -> None:
        conn, executor = self._conn, self._executor
        self._conn, self._executor = None, None
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
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    raise DatabaseUnavailable(
                        f"SQLite database at {self.path} is busy: {exc}"
                    ) from exc
                raise StoreError(f"SQLite error on {self.path}: {exc}") from exc
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite error on {self.path}: {exc}") from exc

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
        """Woken by this store's own accepts, releases and finishes; runs written by other
        processes are found by the caller's periodic poll."""
        return await wait_for_event(self._wakeup, max_wait)
