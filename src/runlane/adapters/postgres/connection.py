"""PostgreSQL connections for the store: bounds on every wait (libpq TCP settings, session
timeouts, a watchdog that hangs up on a server that stopped answering), the pools, and the
LISTEN connection that turns NOTIFY into wake-ups. The statements are in `store.py`."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import socket
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import DictRow, dict_row
from psycopg.types.string import TextLoader
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from runlane.adapters.postgres.statements import Q
from runlane.adapters.sql.base import wait_for_event
from runlane.adapters.sql.rows import RowReader, aware_utc
from runlane.core.secrets import mask_url
from runlane.errors import DatabaseConflict, DatabaseUnavailable, InvalidArgument, StoreError
from runlane.ports.clock import Clock, SystemClock

_Conn = AsyncConnection[Any]


def _refused_value(exc: BaseException) -> InvalidArgument:
    """What a value PostgreSQL cannot store is to the caller: `invalid_argument`, saying why."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return InvalidArgument(f"a value cannot be stored in the database: {first[:200]}")


_SESSION_UTC = Q["session_utc"].encode()  # bytes: sent as they are, no conversion per connection


def where(url: str) -> str:
    """`host:port/db` of a connection string, for messages (never the password)."""
    try:
        info = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return mask_url(url)
    host = str(info.get("host") or "localhost")
    port = str(info.get("port") or "5432")
    db = str(info.get("dbname") or info.get("user") or "")
    return f"{host}:{port}/{db}"


def _password(url: str) -> str | None:
    try:
        value = conninfo_to_dict(url).get("password")
    except psycopg.ProgrammingError:
        return None
    return str(value) if value else None


# A store with a timeout T (the launcher's: RUNLANE_DB_TIMEOUT) bounds every wait on the
# database. PostgreSQL gives up on a lock wait after a quarter of T (`DatabaseConflict`: retried,
# the database is up) and on a statement after half of it (the connection stays usable); the
# client hangs up on a connection whose call has not ended after T (`_Watchdog`): the server
# or the network between has stopped answering (`DatabaseUnavailable`).
LOCK_TIMEOUT_SHARE = 0.25
STATEMENT_TIMEOUT_SHARE = 0.5
CANCEL_REQUEST_TIMEOUT = 1.0  # see _BoundedConnection
# "cannot execute INSERT in a read-only transaction": a hot standby, or a session with
# default_transaction_read_only (psycopg's ReadOnlySqlTransaction, an InternalError).
READ_ONLY_SQLSTATE = "25006"


def _tcp_bounds(url: str, timeout: float) -> dict[str, object]:
    """libpq parameters that bound a connection's waits in the kernel, for those the URL (or
    PGCONNECT_TIMEOUT) leaves unset: a connection attempt gives up after `connect_timeout`;
    keepalives find a dead peer behind an idle connection (the wake-up listener), and
    `tcp_user_timeout` drops a connection whose sent data stays unacknowledged, instead of the
    kernel retransmitting for ~15 minutes. (Neither notices a peer whose kernel still answers
    while the server does not: that is the watchdog's part.)"""
    seconds = max(1, math.ceil(timeout))
    wanted: dict[str, object] = {
        # Half the bound (a healthy server connects in milliseconds): a stopping launcher's
        # pools wait for a connection attempt in progress. Whole seconds; psycopg takes 2 at least.
        "connect_timeout": max(2, math.ceil(timeout / 2)),
        "keepalives": 1,
        "keepalives_idle": seconds,
        "keepalives_interval": max(1, math.ceil(timeout / 3)),
        "keepalives_count": 3,
        "tcp_user_timeout": math.ceil(timeout * 1000),  # milliseconds
    }
    try:
        given = set(conninfo_to_dict(url))
    except psycopg.ProgrammingError:
        given = set()
    if os.environ.get("PGCONNECT_TIMEOUT"):
        given.add("connect_timeout")
    return {name: value for name, value in wanted.items() if name not in given}


def _session_bounds(url: str, timeout: float) -> dict[str, str | None]:
    """The session's `statement_timeout` and `lock_timeout` (parameters of `session_bounds`);
    None for one the URL sets itself in `options`."""
    try:
        options = str(conninfo_to_dict(url).get("options") or "")
    except psycopg.ProgrammingError:
        options = ""
    return {
        name: None if name in options else f"{max(1, round(timeout * share * 1000))}ms"
        for name, share in (
            ("statement_timeout", STATEMENT_TIMEOUT_SHARE),
            ("lock_timeout", LOCK_TIMEOUT_SHARE),
        )
    }


class _Watchdog:
    """Hangs up a connection whose call has not ended `timeout` seconds after it began: its
    socket is shut down, so whatever waits on it fails at once ("server closed the connection
    unexpectedly") and the connection is discarded. Not a task cancellation (asyncio.timeout):
    psycopg answers that by asking the server to cancel the statement over a new connection,
    then waiting for the statement to end, up to 5 s each (psycopg #1371) — 10 s more on a
    server that answers nothing. One timer per call, cancelled when it ends (~1 us)."""

    __slots__ = ("_conn", "_timer", "fired")

    def __init__(self, conn: _Conn, timeout: float) -> None:
        self._conn = conn
        self.fired = False
        self._timer = asyncio.get_running_loop().call_later(timeout, self._hang_up)

    def _hang_up(self) -> None:
        self.fired = True
        with contextlib.suppress(OSError, psycopg.Error):
            # A duplicate of the descriptor: shutdown() acts on the socket both name, close()
            # only on the duplicate; psycopg closes its own. The family does not matter here.
            sock = socket.fromfd(self._conn.pgconn.socket, socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.shutdown(socket.SHUT_RDWR)
            finally:
                sock.close()

    def cancel(self) -> None:
        self._timer.cancel()


class _BoundedConnection(AsyncConnection[Any]):
    """The connections of a store with a bound. When the task waiting on a statement is
    cancelled (a launcher stopping), psycopg asks the server to cancel the statement, over a
    new connection, and waits for that up to 5 s: as long again as a stopping launcher's
    other steps on a server that answers nothing. Here it waits a second at most (a cancel
    request takes a few round trips): the session's statement_timeout stops the statement on
    a server that is alive, and the watchdog hangs up on one that is not."""

    async def cancel_safe(self, *, timeout: float = 30.0) -> None:  # noqa: ASYNC109 (psycopg's)
        await super().cancel_safe(timeout=min(timeout, CANCEL_REQUEST_TIMEOUT))


def _decode_time(value: object) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return aware_utc(value)
    raise ValueError(f"not a timestamp: {value!r}")


_READ = RowReader(_decode_time)


# The form PostgreSQL prints (every id and lease token the store hands out): checked without
# building a uuid.UUID, ~0.3 us instead of ~2 us, twice for every outcome saved.
_CANONICAL_UUID = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
).fullmatch


# Every other form PostgreSQL's uuid input takes: 32 hex digits in either case, a hyphen allowed
# after any group of four, the whole in braces or not. (`uuid.UUID` is no test of that: it also
# takes `urn:uuid:`, underscores and non-ASCII digits, which PostgreSQL refuses with an error.)
_HEX_GROUPS = r"(?:[0-9a-fA-F]{4}-?){7}[0-9a-fA-F]{4}"
_PG_UUID = re.compile(rf"{_HEX_GROUPS}|\{{{_HEX_GROUPS}\}}").fullmatch


def _is_uuid(value: str) -> bool:
    return _CANONICAL_UUID(value) is not None or _PG_UUID(value) is not None


class PostgresConnections:
    """The connection side of `PostgresStore`: its pools (one for calls, one for claims), the
    bound on each call, and the wake-up listener. A base class, not a member, so a call costs
    no extra lookup on the launcher's hot path."""

    def __init__(
        self,
        url: str,
        *,
        clock: Clock | None = None,
        pool_max: int = 8,
        application_name: str = "runlane",
        timeout: float | None = None,
    ) -> None:
        self._url = url
        self._clock: Clock = clock or SystemClock()
        # Shown in pg_stat_activity; a launcher passes its id, so operators (and the chaos
        # suite's audit trigger) can tell which launcher wrote what.
        self._application_name = application_name[:63]
        self._timeout = timeout
        self._connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            "application_name": self._application_name,
            **({} if timeout is None else _tcp_bounds(url, timeout)),
        }
        self._session = None if timeout is None else _session_bounds(url, timeout)
        # How long a call waits for a connection: during an outage a call fails after this (and
        # is retried by its caller) instead of psycopg's 30 s, so a launcher told to stop acts
        # on it promptly.
        self._pool_timeout = 5.0 if timeout is None else min(5.0, timeout)
        self._connection_class: type[_Conn] = (
            AsyncConnection if timeout is None else _BoundedConnection
        )
        self._drained_at = -math.inf  # when a hang-up last replaced the pools' connections
        self._pool_max = max(1, pool_max)
        self._pool: AsyncConnectionPool[_Conn] | None = None
        # Claims have a connection of their own (opened at the first claim, so CLI commands
        # never open it), set up once for them (`claim_session`): the common claim is then one
        # autocommit statement instead of BEGIN, lock, claim and COMMIT.
        self._claim_pool: AsyncConnectionPool[_Conn] | None = None
        self._claim_pool_lock = asyncio.Lock()
        self._listen_conn: _Conn | None = None
        self._listener: asyncio.Task[None] | None = None
        self._wakeup = asyncio.Event()

    # --- connecting -----------------------------------------------------------------------------

    def _failure(self, exc: BaseException) -> StoreError:
        """What a failed statement means: a conflict PostgreSQL broke by aborting it (class 40:
        a deadlock, a serialization failure; 55P03: a lock wait past `lock_timeout`), which is
        safe to run again; otherwise the database cannot be reached, or did not finish the
        statement in time (57014: past `statement_timeout`)."""
        sqlstate = exc.sqlstate if isinstance(exc, psycopg.Error) else None
        if sqlstate is not None and (sqlstate.startswith("40") or sqlstate == "55P03"):
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return DatabaseConflict(f"PostgreSQL aborted the statement: {reason}")
        if sqlstate == "57014":
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return DatabaseUnavailable(
                f"PostgreSQL at {where(self._url)} did not finish the statement: {reason}"
            )
        return self._unavailable(exc)

    def _no_answer(self) -> DatabaseUnavailable:
        return DatabaseUnavailable(
            f"PostgreSQL at {where(self._url)} did not answer in {self._timeout:g} s"
        )

    def _refuses_writes(self, exc: BaseException) -> DatabaseUnavailable:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return DatabaseUnavailable(
            f"PostgreSQL at {where(self._url)} refuses writes: {reason} (a standby, or a "
            "read-only session)"
        )

    def _unavailable(self, exc: BaseException) -> DatabaseUnavailable:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        password = _password(self._url)
        if password:
            reason = reason.replace(password, "***")
        return DatabaseUnavailable(f"cannot reach PostgreSQL at {where(self._url)}: {reason}")

    async def _configure(self, conn: _Conn) -> None:
        # JSON and UUID columns come back as text: params_raw must keep the stored text, and run
        # ids are plain strings everywhere else in runlane.
        for name in ("json", "jsonb", "uuid"):
            conn.adapters.register_loader(name, TextLoader)
        # Times come back in UTC whatever the server's default zone: psycopg then gives them
        # datetime.UTC itself, which the row readers keep as is (no astimezone per column).
        # No query here depends on the session's zone (timestamptz values are instants).
        if self._session is None or self._timeout is None:
            await conn.execute(_SESSION_UTC)
            return
        # The same round trip sets the session's bounds; bounded itself, as every call is.
        watchdog = _Watchdog(conn, self._timeout)
        try:
            await conn.execute(Q["session_bounds"], self._session)
        except psycopg.Error:
            if not watchdog.fired:
                raise
        finally:
            watchdog.cancel()
        if watchdog.fired:  # hung up: never handed out, even if the answer came at the end
            await conn.close()
            raise self._no_answer()

    async def _connect_direct(self) -> _Conn:
        try:
            conn = await self._connection_class.connect(self._url, **self._connect_kwargs)
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc) from None
        try:
            await self._configure(conn)
        except BaseException as exc:  # dropped between connect and set-up, or cancelled
            await conn.close()
            if isinstance(exc, psycopg.OperationalError):
                raise self._unavailable(exc) from None
            raise
        return conn

    async def open(self) -> None:
        if self._pool is not None:
            return
        # A direct connection first: it reports the real reason when the server is unreachable
        # (the pool would only time out). It is closed before the pool connects: only a launcher
        # listens for wake-ups, and it starts listening at its first wait (wait_for_wakeup). A
        # store that only accepts and reads (the CLI, the API, the SDK inside every job) holds
        # no LISTEN backend, which PostgreSQL would otherwise wake at every NOTIFY in the
        # database for as long as the store is open.
        probe = await self._connect_direct()
        await probe.close()  # before the pool connects: never two backends for one at open
        pool: AsyncConnectionPool[_Conn] = AsyncConnectionPool(
            self._url,
            min_size=1,
            max_size=self._pool_max,
            connection_class=self._connection_class,
            kwargs=self._connect_kwargs,
            configure=self._configure,
            open=False,
            timeout=self._pool_timeout,
        )
        try:
            await pool.open(wait=True, timeout=10.0)
        except BaseException as exc:  # unreachable now, or open() cancelled: no pool left open
            await pool.close()
            if isinstance(exc, (PoolTimeout, psycopg.OperationalError)):
                raise self._unavailable(exc) from None
            raise
        self._pool = pool

    async def close(self) -> None:
        # Everything is taken before the first await: a wait_for_wakeup() meanwhile finds the
        # store closed instead of starting a new listener that nothing would ever stop.
        listener, self._listener = self._listener, None
        pool, self._pool = self._pool, None
        claim_pool, self._claim_pool = self._claim_pool, None
        try:
            if listener is not None:
                listener.cancel()
                # Whatever the task ended with, the connections below are closed.
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await listener
        finally:
            if self._listen_conn is not None:
                await self._listen_conn.close()
                self._listen_conn = None
            # Side by side: each waits for a connection attempt in progress (up to the
            # connect_timeout when the server does not answer).
            pools = [p for p in (claim_pool, pool) if p is not None]
            closed = await asyncio.gather(*(p.close() for p in pools), return_exceptions=True)
            for failure in closed:
                if isinstance(failure, BaseException):
                    raise failure

    async def _listen_forever(self) -> None:
        """Turn notifications into `_wakeup`; LISTEN again on a new connection when one drops.

        Each time LISTEN takes effect the waiters are woken once: a run committed before it (or
        while the connection was down) sent its NOTIFY to nobody, so one claim looks for it."""
        backoff = 0.1
        while True:
            try:
                conn = await self._connect_direct()
            except (DatabaseUnavailable, psycopg.Error):
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            try:  # closed however this ends: a drop, an error, close() cancelling this task
                await conn.execute(Q["listen_wakeup"])
                self._listen_conn = conn
                backoff = 0.1
                self._wakeup.set()
                async for _notify in conn.notifies():
                    self._wakeup.set()
            except psycopg.Error:
                # A drop (OperationalError), or LISTEN refused (a hot standby after a failover
                # refuses it): try again after the backoff; the poll covers the gap.
                pass
            finally:
                self._listen_conn = None
                await conn.close()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    def _conn(self, *, bounded: bool = True) -> AbstractAsyncContextManager[_Conn]:
        """A connection of the pool for one call (committed at the end unless it failed);
        `bounded=False` only for `upgrade`, whose migrations take as long as they take."""
        if self._pool is None:
            raise StoreError("the PostgreSQL store is not open: call open() first")
        return self._use(self._pool, bounded=bounded)

    @contextlib.asynccontextmanager
    async def _use(
        self, pool: AsyncConnectionPool[_Conn], *, bounded: bool = True
    ) -> AsyncIterator[_Conn]:
        """What `pool.connection()` does (commit, or roll back on an error; the pool replaces a
        broken connection), with the store's bound on the whole call: the statements, and the
        COMMIT or ROLLBACK at the end. A connection hung up on is closed, never reused."""
        try:
            conn = await pool.getconn()
        except (PoolTimeout, psycopg.OperationalError) as exc:
            raise self._failure(exc) from exc
        watchdog = None if self._timeout is None or not bounded else _Watchdog(conn, self._timeout)
        try:
            async with conn:
                yield conn
        except psycopg.Error as exc:
            if watchdog is not None and watchdog.fired:
                raise self._no_answer() from exc
            if isinstance(exc, psycopg.errors.ProgramLimitExceeded):
                # Class 54 (an index row or value past PostgreSQL's limits): psycopg files it
                # under OperationalError, but it is the request's, not an outage; running it
                # again fails the same way (a bus command would be retried for ever).
                raise _refused_value(exc) from exc
            if isinstance(exc, psycopg.OperationalError):
                raise self._failure(exc) from exc
            if exc.sqlstate == READ_ONLY_SQLSTATE:
                # A standby (a failover in progress: a name or a proxy that still points at a
                # server in recovery) or a read-only session: nothing was written. Like an
                # outage, the write is retried (a launcher journals its outcomes meanwhile)
                # rather than the error escaping as a crash, and a face says it in one line.
                raise self._refuses_writes(exc) from exc
            if isinstance(exc, psycopg.DataError):
                # A value the server refuses (U+0000 in text, a number out of range) came
                # from a request: the client's error to fix, not the store's.
                raise _refused_value(exc) from exc
            raise
        except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 encoding exists
            raise _refused_value(exc) from exc
        finally:
            if watchdog is not None:
                watchdog.cancel()
                if watchdog.fired:
                    await conn.close()  # (its answer may have come as it was hung up)
                    await self._replace_connections()
            await pool.putconn(conn)

    async def _replace_connections(self) -> None:
        """After a hang-up, the pools' other connections are likely as dead (a partition, a
        failover): the idle ones are replaced now and the busy ones as they come back, rather
        than every later call waiting out the bound on one of them. Once per bound at most."""
        now = time.monotonic()
        if self._timeout is None or now - self._drained_at < self._timeout:
            return
        self._drained_at = now
        for pool in (self._pool, self._claim_pool):
            if pool is not None and not pool.closed:
                with contextlib.suppress(Exception):  # best effort: each call is bounded anyway
                    await pool.drain()

    async def _configure_claims(self, conn: _Conn) -> None:
        await self._configure(conn)
        await conn.execute(Q["claim_session"])

    @contextlib.asynccontextmanager
    async def _claim_conn(self) -> AsyncIterator[_Conn]:
        """The claims' own connection (a pool of one: psycopg_pool reconnects it after an
        outage and rolls back or drops it when a claim fails halfway)."""
        if self._pool is None:
            raise StoreError("the PostgreSQL store is not open: call open() first")
        pool = self._claim_pool
        if pool is None:
            async with self._claim_pool_lock:
                pool = self._claim_pool
                if pool is None:
                    pool = AsyncConnectionPool(
                        self._url,
                        min_size=1,
                        max_size=1,
                        connection_class=self._connection_class,
                        kwargs=self._connect_kwargs,
                        configure=self._configure_claims,
                        open=False,
                        timeout=self._pool_timeout,
                    )
                    await pool.open(wait=False)
                    self._claim_pool = pool
        async with self._use(pool) as conn:
            yield conn

    def _now(self) -> datetime | None:
        """The time parameter of every statement: None (the database's clock) unless pinned."""
        return self._clock.now_or_none()

    async def _fetchone(self, sql: str, params: Mapping[str, object]) -> DictRow | None:
        async with self._conn() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(sql, params)
            return await cur.fetchone()

    async def _fetchall(self, sql: str, params: Mapping[str, object]) -> list[DictRow]:
        async with self._conn() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(sql, params)
            return await cur.fetchall()

    async def wait_for_wakeup(self, max_wait: float) -> bool:
        if self._listener is None or self._listener.done():
            if self._pool is None:
                raise StoreError("the PostgreSQL store is not open: call open() first")
            ended, self._listener = (
                self._listener,
                asyncio.create_task(self._listen_forever(), name="runlane-postgres-listen"),
            )
            failure = None if ended is None or ended.cancelled() else ended.exception()
            if failure is not None:  # said once; the new listener is already starting
                raise StoreError(f"the wake-up listener failed ({failure!r}); listening again")
        return await wait_for_event(self._wakeup, max_wait)
