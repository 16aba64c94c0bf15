"""The run log on PostgreSQL: claims with SKIP LOCKED, fenced writes, LISTEN/NOTIFY wake-ups."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import socket
import time
import uuid
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from functools import partial
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import DictRow, dict_row
from psycopg.types.string import TextLoader
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from runlane.adapters import sqlcommon, sqltriggers
from runlane.adapters.sqlcommon import RowReader, aware_utc
from runlane.core.runs import (
    AcceptResult,
    Claimed,
    Lease,
    NewRun,
    Outcome,
    OverlapAction,
    Run,
    RunStatus,
    can_transition,
)
from runlane.errors import (
    DatabaseConflict,
    DatabaseUnavailable,
    InvalidTransition,
    LeaseLost,
    NotFound,
    OverlapRefused,
    StoreError,
)
from runlane.ports import (
    ChainRun,
    Clock,
    Event,
    EventLink,
    FinishedRun,
    FinishRequest,
    Heartbeat,
    NewChainRun,
    Override,
    RunFilter,
    SystemClock,
)

_PACKAGE = "runlane.adapters.postgres"


class _BatchLeaseExpired(Exception):
    """Raised inside a batched save to roll it back when a lease expired before COMMIT."""


Q = sqlcommon.load_queries(_PACKAGE)
MIGRATIONS = sqlcommon.load_migrations(_PACKAGE)
CURRENT_SCHEMA_VERSION = MIGRATIONS[-1].version

_Conn = AsyncConnection[Any]


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


def _is_uuid(value: str) -> bool:
    if _CANONICAL_UUID(value) is not None:
        return True
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _where(url: str) -> str:
    """`host:port/db` of a connection string, for messages (never the password)."""
    try:
        info = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return sqlcommon.mask_url(url)
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


class PostgresStore:
    """`runlane.ports.Store` on PostgreSQL (psycopg 3, async pool)."""

    dialect = "postgresql"

    def __init__(
        self,
        url: str,
        *,
        clock: Clock | None = None,
        outbox: bool = False,
        pool_max: int = 8,
        application_name: str = "runlane",
        timeout: float | None = None,
    ) -> None:
        """`timeout`: the bound on each call, in seconds (the launcher's RUNLANE_DB_TIMEOUT; see
        LOCK_TIMEOUT_SHARE). None (the CLI, the API, the SDK, `runlane db upgrade`): no bound
        but the pool's wait for a connection, and the server's own settings."""
        self._url = url
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
        self._clock: Clock = clock or SystemClock()
        self._outbox = outbox
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
        # Try the one-statement claim (claim_fast) first; False after it found runs that need an
        # admission decision, until a two-step claim sees the head of the queue free of them.
        self._claim_fast = True

    # --- connections ----------------------------------------------------------------------------

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
                f"PostgreSQL at {_where(self._url)} did not finish the statement: {reason}"
            )
        return self._unavailable(exc)

    def _no_answer(self) -> DatabaseUnavailable:
        return DatabaseUnavailable(
            f"PostgreSQL at {_where(self._url)} did not answer in {self._timeout:g} s"
        )

    def _unavailable(self, exc: BaseException) -> DatabaseUnavailable:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        password = _password(self._url)
        if password:
            reason = reason.replace(password, "***")
        return DatabaseUnavailable(f"cannot reach PostgreSQL at {_where(self._url)}: {reason}")

    async def _configure(self, conn: _Conn) -> None:
        # JSON and UUID columns come back as text: params_raw must keep the stored text, and run
        # ids are plain strings everywhere else in runlane.
        for name in ("json", "jsonb", "uuid"):
            conn.adapters.register_loader(name, TextLoader)
        # Times come back in UTC whatever the server's default zone: psycopg then gives them
        # datetime.UTC itself, which the row readers keep as is (no astimezone per column).
        # No query here depends on the session's zone (timestamptz values are instants).
        if self._session is None or self._timeout is None:
            await conn.execute(b"SET TIME ZONE 'UTC'")
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
            if isinstance(exc, psycopg.OperationalError):
                raise self._failure(exc) from exc
            raise
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

    # --- schema ---------------------------------------------------------------------------------

    async def schema_version(self) -> int:
        async with self._conn() as conn:
            return await self._schema_version(conn)

    @staticmethod
    async def _schema_version(conn: _Conn) -> int:
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(Q["migrations_table_exists"])
        row = await cur.fetchone()
        if row is None or not row["present"]:
            return 0
        await cur.execute(Q["schema_version"])
        row = await cur.fetchone()
        return 0 if row is None else RowReader.integer(row, "version")

    async def upgrade(self) -> list[int]:
        applied: list[int] = []
        # Not bounded, on either side: a migration may rewrite a large table, or wait for the
        # locks of launchers still running, for as long as it takes.
        async with self._conn(bounded=False) as conn:
            async with conn.transaction():
                await self._unbound_migration(conn)
                await conn.execute(Q["bootstrap_migrations"])
            for migration in MIGRATIONS:
                async with conn.transaction():
                    await self._unbound_migration(conn)
                    # Concurrent upgrades (two launchers starting) apply each migration once.
                    await conn.execute(Q["migrate_lock"])
                    if await self._schema_version(conn) >= migration.version:
                        continue
                    await conn.execute(migration.sql)
                    await conn.execute(
                        Q["record_migration"], {"version": migration.version, "now": self._now()}
                    )
                applied.append(migration.version)
        return applied

    async def _unbound_migration(self, conn: _Conn) -> None:
        """Lift the session's bounds for the transaction (only a bounded store sets them)."""
        if self._session is not None:
            await conn.execute(Q["migration_unbounded"])

    async def ensure_current(self) -> None:
        sqlcommon.check_schema_version(await self.schema_version(), CURRENT_SCHEMA_VERSION)

    async def now(self) -> datetime:
        row = await self._fetchone(Q["db_now"], {"now": self._now()})
        assert row is not None
        return _READ.time(row, "now")

    # --- accept ---------------------------------------------------------------------------------

    def _insert_params(
        self, new: NewRun, status: RunStatus, end_reason: str | None
    ) -> dict[str, object]:
        for label, value in (
            ("id", new.id),
            ("parent_run_id", new.parent_run_id),
            ("chain_root_id", new.chain_root_id),
            ("retry_of", new.retry_of),
        ):
            if value is not None and not _is_uuid(value):
                raise StoreError(f"run {label} {value!r} is not a UUID")
        return {
            "now": self._now(),
            "id": new.id,
            "job": new.job,
            "status": status.value,
            "trigger": str(new.trigger),
            "requested_by": new.requested_by,
            "params": sqlcommon.dump_json(new.params),
            "dedupe_key": new.dedupe_key,
            "parent_run_id": new.parent_run_id,
            "chain_root_id": new.chain_root_id,
            "event_id": new.event_id,
            "downstream": None if new.downstream is None else sqlcommon.dump_json(new.downstream),
            "scheduled_for": new.scheduled_for,
            "attempt": new.attempt,
            "retry_of": new.retry_of,
            "max_attempts": new.max_attempts,
            "deadline_seconds": float(new.deadline_seconds),
            "kill_grace_seconds": float(new.kill_grace_seconds),
            "executor": new.executor,
            "overlap": new.overlap,
            "not_before": new.not_before,
            "queue_ttl_seconds": new.queue_ttl_seconds,
            "end_reason": end_reason,
            "note": new.note,
            "traceparent": new.traceparent,
            "outbox": self._outbox,
            "outbox_topic": sqlcommon.OUTBOX_TOPIC_RUN_QUEUED,
            "outbox_payload": sqlcommon.outbox_payload(new.id, new.job, new.executor, new.attempt),
        }

    async def accept(self, new: NewRun, *, overlap_action: OverlapAction = "none") -> AcceptResult:
        if overlap_action == "none" or new.status == RunStatus.SKIPPED:
            # The common case is one statement (row + wake-up + outbox): one round trip.
            params = self._insert_params(new, new.status, new.end_reason)
            row = await self._fetchone(Q["insert_run"], params)
            if row is not None:
                return AcceptResult(_READ.run(row), created=True)
            return await self._existing(new)
        status: RunStatus = new.status
        end_reason = new.end_reason
        async with self._conn() as conn, conn.pipeline(), conn.transaction():
            await conn.execute(Q["job_lock"], {"job": new.job})
            existing_cur = conn.cursor(row_factory=dict_row)
            await existing_cur.execute(Q["run_by_dedupe_key"], {"dedupe_key": new.dedupe_key})
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(Q["active_run_of_job"], {"job": new.job})
            existing = await existing_cur.fetchone()
            if existing is not None:
                # A repeated command is answered with its row, even when that row is the active one.
                return AcceptResult(_READ.run(existing), created=False)
            active = await cur.fetchone()
            if active is not None:
                active_id = RowReader.text(active, "id")
                if overlap_action == "refuse":
                    raise OverlapRefused(
                        f"job {new.job} already has an active run {active_id}", active_id
                    )
                status, end_reason = RunStatus.SKIPPED, "overlap"
            await cur.execute(Q["insert_run"], self._insert_params(new, status, end_reason))
            row = await cur.fetchone()
        if row is not None:
            return AcceptResult(_READ.run(row), created=True)
        return await self._existing(new)

    async def _existing(self, new: NewRun) -> AcceptResult:
        """The row that already holds `new.dedupe_key` (ON CONFLICT DO NOTHING returned none)."""
        row = await self._fetchone(Q["run_by_dedupe_key"], {"dedupe_key": new.dedupe_key})
        if row is None:
            raise StoreError(f"run with dedupe key {new.dedupe_key!r} vanished during accept")
        return AcceptResult(_READ.run(row), created=False)

    # --- claims ---------------------------------------------------------------------------------

    async def claim(
        self,
        owner: str,
        *,
        limit: int,
        lease_ttl: float,
        executors: Collection[str],
        executor_caps: Mapping[str, int],
    ) -> list[Claimed]:
        if limit <= 0 or not executors:
            return []
        now = self._now()
        if self._claim_fast:
            claims = await self._claim_fast_path(owner, limit, lease_ttl, executors, executor_caps)
            if claims is not None:
                return claims
            # Admission has something to decide: claim in two steps until it has not.
            self._claim_fast = False
        # Scan a few more rows than asked: admission may pass over some (overlap, caps).
        scan = min(limit * 4, limit + 256)
        # BEGIN/COMMIT sent as statements (psycopg's transaction() costs ~0.3 ms of Python per
        # use in pipeline mode); an early return leaves the transaction to the pool's
        # connection context, which commits it.
        async with self._claim_conn() as conn, conn.pipeline():
            await conn.execute(b"BEGIN")
            await conn.execute(Q["claim_lock"])
            cand_cur = conn.cursor(row_factory=dict_row)
            await cand_cur.execute(
                Q["claim_candidates"],
                {
                    "now": now,
                    "executors": list(executors),
                    "capped": list(executor_caps),
                    "scan": scan,
                },
            )
            cand_rows = await cand_cur.fetchall()
            if not cand_rows:
                return []
            # The next claim may take the one-statement path again once the head of the queue
            # needs no admission decision.
            self._claim_fast = all(
                r["overlap"] == "allow" and r["executor"] not in executor_caps
                for r in cand_rows[:limit]
            )
            counts = sqlcommon.parse_running_counts(cand_rows[0]["running"])
            chosen = sqlcommon.admit(cand_rows, counts, executor_caps, limit)
            if not chosen:
                return []
            upd = conn.cursor(row_factory=dict_row)
            await upd.execute(
                Q["claim_update"],
                {"now": now, "owner": owner, "ttl": float(lease_ttl), "ids": chosen},
            )
            await conn.execute(b"COMMIT")
            rows = await upd.fetchall()  # a failed COMMIT raises here or as the pipeline ends
        return _claimed(rows, chosen, recovered=False)

    async def _claim_fast_path(
        self,
        owner: str,
        limit: int,
        lease_ttl: float,
        executors: Collection[str],
        executor_caps: Mapping[str, int],
    ) -> list[Claimed] | None:
        """The whole claim as one autocommit statement when the first `limit` due runs need no
        admission decision; None when they do (nothing was claimed). It holds the claim lock
        shared, not exclusive: the runs it takes (`overlap: allow`, uncapped executors) count
        in no admission decision and FOR UPDATE SKIP LOCKED keeps claimers off each other's
        rows, so fast claims run side by side; they only wait for a two-step claim, whose
        locked candidates they would otherwise skip. One claimer per store: the launcher's
        consumer (a second concurrent caller would wait for the one claim connection)."""
        async with self._claim_conn() as conn:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(
                Q["claim_fast"],
                {
                    "now": self._now(),
                    "executors": list(executors),
                    "capped": list(executor_caps),
                    "limit": limit,
                    "owner": owner,
                    "ttl": float(lease_ttl),
                },
            )
            rows = await cur.fetchall()
        if not rows or rows[0]["fast"] is None:
            return []  # nothing is due
        if not rows[0]["fast"]:
            return None
        return _claimed(
            [r for r in rows if r["id"] is not None], None, recovered=False, in_claim_order=True
        )

    async def claim_abandoned(
        self, owner: str, *, limit: int, lease_ttl: float, executors: Collection[str]
    ) -> list[Claimed]:
        if limit <= 0 or not executors:
            return []
        rows = await self._fetchall(
            Q["claim_abandoned"],
            {
                "now": self._now(),
                "owner": owner,
                "ttl": float(lease_ttl),
                "limit": limit,
                "executors": list(executors),
            },
        )
        return _claimed(rows, None, recovered=True)

    async def renew(self, leases: Sequence[Lease], lease_ttl: float) -> set[str]:
        # In id order, as finish_many writes its batch: two statements that lock the same rows
        # in one order cannot deadlock (PostgreSQL breaks a deadlock after deadlock_timeout).
        valid = sorted(
            (ls for ls in leases if _is_uuid(ls.run_id) and _is_uuid(ls.token)),
            key=lambda ls: ls.run_id.lower(),
        )
        if not valid:
            return set()
        rows = await self._fetchall(
            Q["renew"],
            {
                "now": self._now(),
                "ttl": float(lease_ttl),
                "ids": [ls.run_id for ls in valid],
                "tokens": [ls.token for ls in valid],
                "gens": [ls.generation for ls in valid],
            },
        )
        return {RowReader.text(r, "id") for r in rows}

    # --- fenced writes --------------------------------------------------------------------------

    def _fence(self, lease: Lease) -> dict[str, object]:
        if not (_is_uuid(lease.run_id) and _is_uuid(lease.token)):
            raise LeaseLost(f"lease on run {lease.run_id} is lost (malformed lease)")
        return {
            "now": self._now(),
            "id": lease.run_id,
            "token": lease.token,
            "gen": lease.generation,
        }

    async def set_external_id(self, lease: Lease, external_id: str) -> None:
        row = await self._fetchone(
            Q["set_external_id"], {**self._fence(lease), "external_id": external_id}
        )
        if row is None:
            raise LeaseLost(f"lease on run {lease.run_id} is lost: external id not saved")

    async def finish(
        self,
        lease: Lease,
        outcome: Outcome,
        *,
        retry: NewRun | None = None,
        external_id: str | None = None,
        ended_monotonic: float | None = None,
    ) -> Run:
        if not outcome.status.is_final or not can_transition(RunStatus.RUNNING, outcome.status):
            raise InvalidTransition(f"run {lease.run_id} cannot finish as {outcome.status.value}")
        params = {
            **self._fence(lease),
            **sqlcommon.outcome_params(outcome),
            "external_id": external_id,
        }
        ago = partial(sqlcommon.seconds_since, ended_monotonic)  # at the statement, not before
        if retry is None:
            # One statement: the fence in its WHERE is the whole check.
            async with self._conn() as conn:
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(Q["finish"], {**params, "ago": ago()})
                row = await cur.fetchone()
            if row is None:
                raise LeaseLost(f"lease on run {lease.run_id} is lost: outcome not saved")
            return _READ.run(row)
        insert = self._insert_params(retry, retry.status, retry.end_reason)
        async with self._conn() as conn, conn.pipeline(), conn.transaction():
            fin = conn.cursor(row_factory=dict_row)
            await fin.execute(Q["finish"], {**params, "ago": ago()})
            ins = conn.cursor(row_factory=dict_row)
            await ins.execute(Q["insert_run"], insert)
            chk = conn.cursor(row_factory=dict_row)
            # Checked last so a save that ran past its lease rolls back whole.
            await chk.execute(Q["lease_still_valid"], {**self._fence(lease), "now": self._now()})
            row = await fin.fetchone()
            still = await chk.fetchone()
            if row is None or still is None:
                raise LeaseLost(f"lease on run {lease.run_id} is lost: outcome not saved")
        return _READ.run(row)

    async def finish_many(self, requests: Sequence[FinishRequest]) -> list[FinishedRun | None]:
        for req in requests:
            status = req.outcome.status
            if not status.is_final or not can_transition(RunStatus.RUNNING, status):
                raise InvalidTransition(f"run {req.lease.run_id} cannot finish as {status.value}")
        if not requests:
            return []
        try:
            return await self._finish_batch(requests)
        except _BatchLeaseExpired:
            # A lease expired between the UPDATE and COMMIT (rare): save one by one instead.
            out: list[FinishedRun | None] = []
            for req in requests:
                try:
                    run = await self.finish(
                        req.lease,
                        req.outcome,
                        retry=req.retry,
                        external_id=req.external_id,
                        ended_monotonic=req.ended_monotonic,
                    )
                except LeaseLost:
                    out.append(None)
                else:
                    out.append(FinishedRun(run.id, run.status, run.end_reason))
            return out

    async def _finish_batch(self, requests: Sequence[FinishRequest]) -> list[FinishedRun | None]:
        batch: list[dict[str, object]] = []
        ended: list[float | None] = []  # each run's ended_monotonic, in batch order
        # In id order, as renew takes its leases: the rows are locked in one order (see renew).
        for req in sorted(requests, key=lambda r: r.lease.run_id.lower()):
            if not (_is_uuid(req.lease.run_id) and _is_uuid(req.lease.token)):
                raise LeaseLost(f"lease on run {req.lease.run_id} is malformed")
            o = req.outcome
            batch.append(
                {
                    "id": req.lease.run_id,
                    "token": req.lease.token,
                    "gen": req.lease.generation,
                    "status": o.status.value,
                    "end_reason": o.end_reason,
                    "exit_code": o.exit_code,
                    "error_code": o.error_code,
                    "log_tail": o.log_tail,
                    "note": o.note,
                    "external_id": req.external_id,
                }
            )
            ended.append(req.ended_monotonic)

        def params() -> dict[str, object]:
            """Made once a connection is in hand: how long ago each run ended is counted up to
            the statement, not to before a wait for a connection (after an outage, seconds)."""
            for item, at in zip(batch, ended, strict=True):
                item["ago"] = sqlcommon.seconds_since(at)
            # The outcome's texts (log tail, note, error code) are storable by construction
            # (core.runs.storable_text); end reasons and external ids come from runlane itself.
            return {"batch": json.dumps(batch, ensure_ascii=False), "now": self._now()}

        retries = [(r, r.retry) for r in requests if r.retry is not None]
        if not retries:
            # One statement, its own transaction: the fence in its WHERE is the whole check, and
            # BEGIN/COMMIT would cost two more round trips.
            async with self._conn() as conn:
                cur = conn.cursor(row_factory=dict_row)
                await cur.execute(Q["finish_many"], params())
                written = {row["id"]: row for row in await cur.fetchall()}
            return _finished(requests, written)
        async with self._conn() as conn, conn.transaction():
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(Q["finish_many"], params())
            written = {row["id"]: row for row in await cur.fetchall()}
            saved_retries = [(r, new) for r, new in retries if r.lease.run_id in written]
            if saved_retries:
                async with conn.pipeline():
                    for _, new in saved_retries:
                        await conn.execute(
                            Q["insert_run"], self._insert_params(new, new.status, new.end_reason)
                        )
                    checks = []
                    for req, _ in saved_retries:
                        chk = conn.cursor(row_factory=dict_row)
                        await chk.execute(
                            Q["lease_still_valid"], {**self._fence(req.lease), "now": self._now()}
                        )
                        checks.append(chk)
                for chk in checks:
                    # Checked last so a save that ran past its lease rolls back whole.
                    if await chk.fetchone() is None:
                        raise _BatchLeaseExpired
        return _finished(requests, written)

    async def release(
        self, lease: Lease, *, retry_after: float, error_code: str, note: str | None = None
    ) -> None:
        row = await self._fetchone(
            Q["release"],
            {
                **self._fence(lease),
                "retry_after": float(retry_after),
                "error_code": error_code,
                "note": note,
            },
        )
        if row is None:
            raise LeaseLost(f"lease on run {lease.run_id} is lost: not released")

    # --- unleased changes -----------------------------------------------------------------------

    async def finish_unleased(self, run_id: str, expected: RunStatus, outcome: Outcome) -> Run:
        if not _is_uuid(run_id):
            raise NotFound(f"no run {run_id}")
        if not outcome.status.is_final or not can_transition(expected, outcome.status):
            raise InvalidTransition(
                f"run {run_id}: {expected.value} → {outcome.status.value} is not allowed"
            )
        row = await self._fetchone(
            Q["finish_unleased"],
            {
                "now": self._now(),
                "id": run_id,
                "expected": expected.value,
                **sqlcommon.outcome_params(outcome),
            },
        )
        if row is not None:
            return _READ.run(row)
        current = await self.get_run(run_id)
        if current.status == expected and current.lease_token is not None:
            raise InvalidTransition(
                f"run {run_id} is leased by {current.lease_owner}: finish it through its lease"
            )
        raise InvalidTransition(f"run {run_id} is {current.status.value}, not {expected.value}")

    async def retry_repairs_now(self, error_code: str, jobs: Collection[str]) -> list[str]:
        rows = await self._fetchall(
            Q["retry_repairs_now"],
            {"now": self._now(), "error_code": error_code, "jobs": sorted(jobs)},
        )
        return sorted(str(r["id"]) for r in rows)

    async def expire_queued(self, *, limit: int = 500) -> list[Run]:
        rows = await self._fetchall(Q["expire_queued"], {"now": self._now(), "limit": limit})
        return sorted((_READ.run(r) for r in rows), key=lambda r: (r.queued_at, r.id))

    async def sweep_orphans(self, *, grace: float, limit: int = 500) -> list[Run]:
        rows = await self._fetchall(
            Q["sweep_orphans"], {"now": self._now(), "grace": grace, "limit": limit}
        )
        return [_READ.run(r) for r in rows]

    async def request_cancel(self, run_id: str, *, by: str | None = None) -> Run:
        if not _is_uuid(run_id):
            raise NotFound(f"no run {run_id}")
        params = {"now": self._now(), "id": run_id, "note": sqlcommon.cancelled_note(by)}
        row = await self._fetchone(Q["cancel_queued"], params)
        if row is None:
            row = await self._fetchone(Q["cancel_running"], params)
        if row is not None:
            return _READ.run(row)
        current = await self.get_run(run_id)
        raise InvalidTransition(f"run {run_id} already ended as {current.status.value}")

    async def cancel_requests(self, owner: str) -> list[str]:
        rows = await self._fetchall(Q["cancel_requests"], {"owner": owner})
        return [RowReader.text(r, "id") for r in rows]

    # --- reads ----------------------------------------------------------------------------------

    async def get_run(self, run_id: str) -> Run:
        row = await self._fetchone(Q["get_run"], {"id": run_id}) if _is_uuid(run_id) else None
        if row is None:
            raise NotFound(f"no run {run_id}")
        return _READ.run(row)

    async def list_runs(self, flt: RunFilter) -> list[Run]:
        for value in (flt.parent_run_id, flt.chain_root_id):
            if value is not None and not _is_uuid(value):
                return []
        rows = await self._fetchall(
            Q["list_runs"],
            {
                "job": flt.job,
                "status": None if flt.status is None else flt.status.value,
                "parent_run_id": flt.parent_run_id,
                "chain_root_id": flt.chain_root_id,
                "limit": max(0, flt.limit),
            },
        )
        return [_READ.run(r) for r in rows]

    async def count_queued(self) -> int:
        row = await self._fetchone(Q["count_queued"], {})
        return 0 if row is None else RowReader.integer(row, "n")

    async def running_by_launcher(self) -> dict[str, dict[str, int]]:
        return sqlcommon.running_by_launcher(await self._fetchall(Q["running_by_launcher"], {}))

    # --- overrides and heartbeats ---------------------------------------------------------------

    async def set_override(
        self, job: str, *, paused_until: datetime | None, reason: str | None, by: str | None
    ) -> Override:
        row = await self._fetchone(
            Q["set_override"],
            {
                "now": self._now(),
                "job": job,
                "paused_until": paused_until,
                "reason": reason,
                "created_by": by,
            },
        )
        assert row is not None
        return _READ.override(row)

    async def clear_override(self, job: str) -> bool:
        return await self._fetchone(Q["clear_override"], {"job": job}) is not None

    async def overrides(self) -> dict[str, Override]:
        rows = await self._fetchall(Q["overrides"], {})
        return {o.job: o for o in (_READ.override(r) for r in rows)}

    async def beat(self, hb: Heartbeat) -> None:
        async with self._conn() as conn:
            await conn.execute(
                Q["beat"],
                {
                    "now": self._now(),
                    "launcher_id": hb.launcher_id,
                    "host": hb.host,
                    "pid": hb.pid,
                    "version": hb.version,
                    "started_at": hb.started_at,
                    "queue_depth": hb.queue_depth,
                    "running": sqlcommon.dump_json(dict(hb.running)),
                    "catalog_digest": hb.catalog_digest,
                    "catalog_loaded_at": hb.catalog_loaded_at,
                    "catalog_path": hb.catalog_path,
                    "heartbeat_interval": hb.heartbeat_interval,
                    "log_dir": hb.log_dir,
                    "catalog_chains": (
                        None
                        if hb.catalog_chains is None
                        else sqlcommon.dump_json(list(hb.catalog_chains))
                    ),
                    "catalog_jobs": (
                        None
                        if hb.catalog_jobs is None
                        else sqlcommon.dump_json(list(hb.catalog_jobs))
                    ),
                },
            )

    async def launchers(self) -> list[Heartbeat]:
        rows = await self._fetchall(Q["launchers"], {})
        return [_READ.heartbeat(r) for r in rows]

    async def remove_launcher(self, launcher_id: str) -> None:
        async with self._conn() as conn:
            await conn.execute(Q["remove_launcher"], {"launcher_id": launcher_id})

    async def prune_launchers(self, older_than: float) -> list[str]:
        rows = await self._fetchall(
            Q["prune_launchers"], {"now": self._now(), "older_than": float(older_than)}
        )
        return sorted(str(r["launcher_id"]) for r in rows)

    async def check_writable(self) -> None:
        try:
            async with self._conn() as conn, conn.transaction():
                await conn.execute(Q["write_probe"], {"launcher_id": f"write-probe:{uuid.uuid4()}"})
                raise psycopg.Rollback()
        except psycopg.Error as exc:  # read-only transaction, standby, no INSERT privilege
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StoreError(
                f"database not writable: PostgreSQL at {_where(self._url)}: {reason}"
            ) from None

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
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation that
            # arrives as the event fires (gh-86296).
            async with asyncio.timeout(max(0.0, max_wait)):
                await self._wakeup.wait()
        except TimeoutError:
            return False
        self._wakeup.clear()
        return True

    # --- triggers: schedule state, chain runs, events ---------------------------------------------

    async def run_by_dedupe_key(self, dedupe_key: str) -> Run | None:
        row = await self._fetchone(Q["run_by_dedupe_key"], {"dedupe_key": dedupe_key})
        return None if row is None else _READ.run(row)

    async def schedule_states(self) -> dict[str, datetime]:
        rows = await self._fetchall(Q["schedule_states"], {})
        return {RowReader.text(r, "schedule_key"): _READ.time(r, "last_slot") for r in rows}

    async def advance_schedules(self, slots: Mapping[str, datetime]) -> None:
        if not slots:
            return
        now = self._now()
        params = [
            {"schedule_key": key, "last_slot": slot, "now": now}
            for key, slot in sorted(slots.items())
        ]
        async with self._conn() as conn, conn.transaction():
            cur = conn.cursor()
            await cur.executemany(Q["advance_schedule"], params)

    async def forget_schedules(self, keys: Collection[str]) -> None:
        if not keys:
            return
        async with self._conn() as conn:
            await conn.execute(Q["forget_schedules"], {"schedule_keys": sorted(keys)})

    async def create_chain_run(self, new: NewChainRun) -> tuple[ChainRun, bool]:
        if not _is_uuid(new.id):
            raise StoreError(f"chain run id {new.id!r} is not a UUID")
        row = await self._fetchone(
            Q["insert_chain_run"],
            {
                "now": self._now(),
                "id": new.id,
                "chain": new.chain,
                "dedupe_key": new.dedupe_key,
                "trigger": new.trigger,
                "requested_by": new.requested_by,
                "scheduled_for": new.scheduled_for,
                "status": new.status,
                "end_reason": new.end_reason,
                "max_duration": new.max_duration_seconds,
            },
        )
        if row is not None:
            return sqltriggers.chain_run(_READ, row), True
        found = await self._fetchone(Q["chain_run_by_dedupe_key"], {"dedupe_key": new.dedupe_key})
        if found is None:
            raise StoreError(f"chain run {new.dedupe_key!r} could not be written")
        return sqltriggers.chain_run(_READ, found), False

    async def get_chain_run(self, chain_run_id: str) -> ChainRun:
        row = None
        if _is_uuid(chain_run_id):
            row = await self._fetchone(Q["get_chain_run"], {"id": chain_run_id})
        if row is None:
            raise NotFound(f"no chain run {chain_run_id}")
        return sqltriggers.chain_run(_READ, row)

    async def active_chain_runs(
        self, *, after: ChainRun | None = None, limit: int = 500
    ) -> list[ChainRun]:
        rows = await self._fetchall(
            Q["active_chain_runs"],
            {
                "after_at": None if after is None else after.started_at,
                "after_id": None if after is None else after.id,
                "limit": max(0, limit),
            },
        )
        return [sqltriggers.chain_run(_READ, r) for r in rows]

    async def list_chain_runs(self, *, chain: str | None = None, limit: int = 50) -> list[ChainRun]:
        rows = await self._fetchall(Q["list_chain_runs"], {"chain": chain, "limit": max(0, limit)})
        return [sqltriggers.chain_run(_READ, r) for r in rows]

    async def mark_chain_overrun(self, chain_run_id: str) -> ChainRun:
        row = None
        if _is_uuid(chain_run_id):
            row = await self._fetchone(
                Q["mark_chain_overrun"], {"now": self._now(), "id": chain_run_id}
            )
        if row is None:
            raise NotFound(f"no chain run {chain_run_id}")
        return sqltriggers.chain_run(_READ, row)

    async def finish_chain_run(
        self, chain_run_id: str, status: str, end_reason: str | None = None
    ) -> ChainRun | None:
        if not _is_uuid(chain_run_id):
            return None
        row = await self._fetchone(
            Q["finish_chain_run"],
            {"now": self._now(), "id": chain_run_id, "status": status, "end_reason": end_reason},
        )
        return None if row is None else sqltriggers.chain_run(_READ, row)

    async def record_event(
        self, event_id: str, key: str, data: Mapping[str, Any]
    ) -> tuple[Event, bool]:
        row = await self._fetchone(
            Q["insert_event"],
            {
                "now": self._now(),
                "id": event_id,
                "key": key,
                "data": sqlcommon.dump_json(dict(data)),
            },
        )
        if row is not None:
            return sqltriggers.event(_READ, row), True
        found = await self._fetchone(Q["get_event"], {"id": event_id})
        if found is None:
            raise StoreError(f"event {event_id!r} could not be written")
        return sqltriggers.event(_READ, found), False

    async def get_event(self, event_id: str) -> Event:
        row = await self._fetchone(Q["get_event"], {"id": event_id})
        if row is None:
            raise NotFound(f"no event {event_id}")
        return sqltriggers.event(_READ, row)

    async def list_events(self, *, key: str | None = None, limit: int = 50) -> list[Event]:
        rows = await self._fetchall(Q["list_events"], {"key": key, "limit": max(0, limit)})
        return [sqltriggers.event(_READ, r) for r in rows]

    async def link_event_runs(self, links: Sequence[EventLink]) -> None:
        valid = [x for x in links if _is_uuid(x.run_id)]
        if not valid:
            return
        params = [
            {"event_id": x.event_id, "run_id": x.run_id, "job": x.job, "started": x.started}
            for x in valid
        ]
        async with self._conn() as conn, conn.transaction():
            cur = conn.cursor()
            await cur.executemany(Q["link_event_run"], params)

    async def event_links(self, event_id: str) -> list[EventLink]:
        rows = await self._fetchall(Q["event_runs"], {"event_id": event_id})
        return [sqltriggers.event_link(r) for r in rows]

    async def events_of_run(self, run_id: str) -> list[EventLink]:
        if not _is_uuid(run_id):
            return []
        rows = await self._fetchall(Q["events_of_run"], {"run_id": run_id})
        return [sqltriggers.event_link(r) for r in rows]


def _finished(
    requests: Sequence[FinishRequest], written: Mapping[str, Mapping[str, object]]
) -> list[FinishedRun | None]:
    out: list[FinishedRun | None] = []
    for req in requests:
        row = written.get(req.lease.run_id)
        out.append(
            None
            if row is None
            else FinishedRun(
                req.lease.run_id,
                RunStatus(RowReader.text(row, "status")),
                RowReader.opt_text(row, "end_reason"),
            )
        )
    return out


def _claimed(
    rows: Sequence[Mapping[str, object]],
    order: Sequence[str] | None,
    *,
    recovered: bool,
    in_claim_order: bool = False,
) -> list[Claimed]:
    claims: list[Claimed] = []
    for row in rows:
        run = _READ.run(row)
        if run.lease_owner is None or run.lease_token is None:
            raise StoreError(f"claimed run {run.id} has no lease")
        lease = Lease(run.id, run.lease_owner, run.lease_token, run.lease_generation)
        claims.append(Claimed(run, lease, _READ.time(row, "db_now"), recovered=recovered))
    if in_claim_order:
        pass  # the statement sorted them
    elif order is not None:
        rank = {run_id: i for i, run_id in enumerate(order)}
        claims.sort(key=lambda c: rank.get(c.run.id, len(rank)))
    else:
        claims.sort(key=lambda c: (c.run.lease_expires_at is None, c.run.id))
    return claims
