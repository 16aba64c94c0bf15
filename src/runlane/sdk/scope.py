"""`run_scope()`: what a job's own code uses to adopt its run and record nested work as child runs.

Imported by every job, so it imports little: the store and the run model load on first write.
"""

from __future__ import annotations

import atexit
import contextvars
import json
import logging
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import Future

    from runlane.core.runs import NewRun, Outcome
    from runlane.ports import Store

_log = logging.getLogger("runlane.sdk")
StoreCall = Callable[["Store"], Awaitable[Any]]

# A Kubernetes CronJob names its Jobs `<cronjob>-<scheduled minute since epoch>` and their pods
# `<job>-<5 random characters>`.
_CRONJOB_POD = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?-\d{8,}-[a-z0-9]{5}$")
_NOTE_MAX_CHARS = 2000

# How long the SDK may hold up a job for its bookkeeping. A database that takes connections and
# never answers (a hung server, a black-holed proxy) would otherwise stall every process that
# enters a scope for psycopg's own default of minutes. libpq gets 3 s to connect (its
# `connect_timeout`, whole seconds, at least 2; a URL that names one keeps it): a healthy server
# answers in well under a second, even across regions with TLS. Opening the store as a whole
# (connect, set-up, the pool's first connection) gets 5 s, and each call on an open store 5 s
# (the pool's own wait for a connection). A failure to open turns the store off for the rest
# of the process: one warning, then no more tries. A call that fails or runs out of time on an
# open store is warned about and only that scope goes unrecorded: a moment's hiccup (a failover,
# a SQLite writer holding its lock) must not leave the rows this process wrote `running` with
# nothing to finish them. Once calls have failed for `_GIVE_UP_AFTER` seconds in all, the store
# is turned off too. So a database that does not answer holds a process up by at most about
# `_OPEN_TIMEOUT + _GIVE_UP_AFTER + _CALL_TIMEOUT` (3 s when it hangs at connect), however many
# scopes the process enters.
_CONNECT_TIMEOUT = 3
_OPEN_TIMEOUT = 5.0
_CALL_TIMEOUT = 5.0
_GIVE_UP_AFTER = 6.0


def trigger_from_env(default: str = "manual") -> str:
    """What started this process: `RUN_TRIGGER` when the launcher set it; `schedule` in a pod a
    Kubernetes CronJob made (judged by its hostname); else `default`."""
    trigger = os.environ.get("RUN_TRIGGER")
    if trigger:
        return trigger
    hostname = os.environ.get("HOSTNAME")
    if hostname is None:
        import socket

        hostname = socket.gethostname()
    if _CRONJOB_POD.match(hostname):
        return "schedule"
    return default


def params_from_env() -> dict[str, Any]:
    """The run's params from `RUNLANE_PARAMS` (JSON object), or from the file named by
    `RUNLANE_PARAMS_FILE` (params too large for the environment travel in a mounted ConfigMap);
    `{}` when neither is set."""
    raw = os.environ.get("RUNLANE_PARAMS")
    source = "RUNLANE_PARAMS"
    if not raw:
        path = os.environ.get("RUNLANE_PARAMS_FILE")
        if not path:
            return {}
        source = path
        try:
            with open(path, encoding="utf-8") as fh:
                raw = fh.read()
        except OSError as exc:
            raise ValueError(f"cannot read the params file {path}: {exc.strerror}") from exc
    try:
        params = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source} is not valid JSON: {exc}") from exc
    if not isinstance(params, dict):
        raise ValueError(f"{source} must be a JSON object, not {type(params).__name__}")
    return params


@dataclass(frozen=True, slots=True)
class RunScope:
    """The run this code is part of. `adopted`: the launcher's own row (RUN_ID), not a child row
    this scope wrote. `recorded`: a row exists for `run_id` (False without a database)."""

    run_id: str
    parent_run_id: str | None
    trigger: str
    adopted: bool
    job: str
    params: dict[str, Any] = field(default_factory=dict)
    recorded: bool = True


_current: contextvars.ContextVar[RunScope | None] = contextvars.ContextVar(
    "runlane_run_scope", default=None
)


def current_scope() -> RunScope | None:
    """The innermost `run_scope` around the caller, if any."""
    return _current.get()


class RunScopeContext:
    """The context manager `run_scope()` returns; usable with `with` and `async with`."""

    def __init__(self, name: str | None = None) -> None:
        self._name = name
        self._scope: RunScope | None = None
        self._token: contextvars.Token[RunScope | None] | None = None

    # -- sync -----------------------------------------------------------------------------------

    def __enter__(self) -> RunScope:
        scope, new_row = self._plan()
        if new_row is not None:
            scope = self._record(scope, _store_call(_accepter(new_row)))
        return self._activate(scope)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        scope = self._deactivate()
        if scope.recorded and not scope.adopted:
            outcome = _outcome_for(exc)
            self._finish(scope, lambda: _store_call(_finisher(scope.run_id, outcome)))

    # -- async: the store call runs on the SDK's thread, the caller's loop keeps running -------

    async def __aenter__(self) -> RunScope:
        import asyncio

        scope, new_row = self._plan()
        if new_row is not None:
            try:
                accepted: Any = await asyncio.wrap_future(_submit(_accepter(new_row)))
            except Exception as error:  # noqa: BLE001 (bookkeeping never breaks the job)
                accepted = error
            scope = self._record(scope, accepted)
        return self._activate(scope)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        import asyncio

        scope = self._deactivate()
        if scope.recorded and not scope.adopted:
            outcome = _outcome_for(exc)
            future = _submit(_finisher(scope.run_id, outcome))
            try:
                await asyncio.wrap_future(future)
            except Exception as error:  # noqa: BLE001 (bookkeeping never breaks the job)
                _warn_store_failed("finish", scope.run_id, error)

    # -- shared ---------------------------------------------------------------------------------

    def _plan(self) -> tuple[RunScope, NewRun | None]:
        """The scope to enter, and the child row to write for it (None: adopt, or no store)."""
        if self._scope is not None:
            raise RuntimeError("a run_scope() object can be entered only once")
        parent = _current.get()
        env_run_id = os.environ.get("RUN_ID")
        if parent is None and env_run_id:
            scope = RunScope(
                run_id=env_run_id,
                parent_run_id=os.environ.get("RUN_PARENT_ID") or None,
                trigger=trigger_from_env(),
                adopted=True,
                job=self._name or os.environ.get("RUNLANE_JOB") or _script_name(),
                params=params_from_env(),
            )
            return scope, None
        parent_id = parent.run_id if parent else (os.environ.get("RUN_PARENT_ID") or None)
        scope = RunScope(
            run_id=str(uuid.uuid4()),
            parent_run_id=parent_id,
            trigger=trigger_from_env(),
            adopted=False,
            job=self._name
            or (parent.job if parent else None)
            or os.environ.get("RUNLANE_JOB")
            or _script_name(),
            params=dict(parent.params) if parent else params_from_env(),
            recorded=False,
        )
        if _database_url() is None:
            _warn_no_database()
            return scope, None
        return scope, _child_row(scope)

    def _record(self, scope: RunScope, accepted: Any) -> RunScope:
        if isinstance(accepted, BaseException):
            _warn_store_failed("record", scope.run_id, accepted)
            return scope
        return RunScope(
            run_id=scope.run_id,
            parent_run_id=scope.parent_run_id,
            trigger=scope.trigger,
            adopted=False,
            job=scope.job,
            params=scope.params,
            recorded=True,
        )

    def _activate(self, scope: RunScope) -> RunScope:
        self._scope = scope
        if scope.recorded:
            _environment_enter(scope.run_id)
        self._token = _current.set(scope)
        return scope

    def _deactivate(self) -> RunScope:
        assert self._scope is not None
        assert self._token is not None
        _current.reset(self._token)
        if self._scope.recorded:
            _environment_leave(self._scope.run_id)
        return self._scope

    @staticmethod
    def _finish(scope: RunScope, call: Callable[[], Any]) -> None:
        result = call()
        if isinstance(result, BaseException):
            _warn_store_failed("finish", scope.run_id, result)


# What subprocesses inherit. The process environment is shared by every thread, so it is kept
# here, under a lock, not per context: while any recorded scope is open, RUN_ID is gone (a
# subprocess's own run_scope() writes a child row instead of adopting the run a second time) and
# RUN_PARENT_ID names the most recently entered scope still open, so a subprocess started inside
# a nested scope is recorded under that scope. When the last one closes, both are as they were.
_env_lock = threading.Lock()
_env_scopes: list[str] = []  # run ids of the open recorded scopes, in the order entered
_env_saved: dict[str, str | None] = {}


def _environment_enter(run_id: str) -> None:
    with _env_lock:
        if not _env_scopes:
            _env_saved.clear()
            _env_saved.update({k: os.environ.get(k) for k in ("RUN_ID", "RUN_PARENT_ID")})
            os.environ.pop("RUN_ID", None)
        _env_scopes.append(run_id)
        os.environ["RUN_PARENT_ID"] = run_id


def _environment_leave(run_id: str) -> None:
    with _env_lock:
        if run_id in _env_scopes:
            _env_scopes.remove(run_id)
        if _env_scopes:
            # Scopes of other threads or tasks may close out of order: name one still open.
            os.environ["RUN_PARENT_ID"] = _env_scopes[-1]
            return
        for key, value in _env_saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _env_saved.clear()


def run_scope(name: str | None = None) -> RunScopeContext:
    """Mark a block of a job's code as a run.

    The outermost scope of a process the launcher started adopts its run (`RUN_ID`; no row is
    written) and takes `RUN_ID` out of the environment so subprocesses become children: while a
    scope is open, `RUN_PARENT_ID` names it (the innermost one, when scopes nest), so a
    subprocess's own scope is recorded under the scope it was started in. Any other scope — nested, or in a subprocess that sees only `RUN_PARENT_ID` — writes a child row
    (`executor="scope"`, `running`) and ends it `success`, or `failure` (`error_code`
    `exception`) when the block raises; the exception propagates. Without
    `RUNLANE_DATABASE_URL` scopes still work and write nothing (one warning is logged). Store
    failures are logged, never raised: bookkeeping must not break the job. A database that
    cannot be opened, or does not answer within a few seconds, is given up on for the rest of
    the process after one warning: the job goes on, its scopes unrecorded.
    """
    return RunScopeContext(name)


def _script_name() -> str:
    return Path(sys.argv[0]).stem if sys.argv and sys.argv[0] not in ("", "-c") else "python"


def _child_row(scope: RunScope) -> NewRun:
    from runlane.core.runs import NewRun, RunStatus, Trigger

    try:
        trigger = Trigger(scope.trigger)
    except ValueError:
        trigger = Trigger.MANUAL
    return NewRun(
        id=scope.run_id,
        job=scope.job,
        trigger=trigger,
        dedupe_key=f"scope:{scope.run_id}",
        executor="scope",
        overlap="allow",
        parent_run_id=scope.parent_run_id,
        status=RunStatus.RUNNING,
    )


# A child row's deadline is its parent's: the orphan sweep ends a `running` row past its
# deadline (and the grace) whose process it cannot see, so a row with a deadline of its own (the
# run model's default hour) would end `timeout` / `orphaned` while the run it belongs to, and
# the process in it, go on. Per parent run id: its seconds left, as of `time.monotonic()` then.
# Used on the store thread's loop only; the parents' rows are read once each.
_parent_deadlines: dict[str, tuple[float, float]] = {}
_PARENT_DEADLINES_MAX = 10_000


def _accepter(row: NewRun) -> StoreCall:
    """The store call that writes the child row `row`, with its parent's deadline."""

    async def accept(store: Store) -> Any:
        child = row
        if row.parent_run_id is not None:
            left = await _seconds_left(store, row.parent_run_id)
            if left is not None:
                from dataclasses import replace

                child = replace(row, deadline_seconds=max(1.0, left))
        accepted = await store.accept(child)
        if len(_parent_deadlines) >= _PARENT_DEADLINES_MAX:
            _parent_deadlines.clear()
        _parent_deadlines[child.id] = (child.deadline_seconds, time.monotonic())
        return accepted

    return accept


async def _seconds_left(store: Store, run_id: str) -> float | None:
    """Seconds until the deadline of the running run `run_id`, in database time; None when it
    has none (no such row, or not running)."""
    known = _parent_deadlines.get(run_id)
    if known is None:
        from runlane.core.runs import RunStatus
        from runlane.errors import NotFound

        try:
            parent = await store.get_run(run_id)
        except NotFound:
            return None
        if parent.status is not RunStatus.RUNNING or parent.deadline_at is None:
            return None
        left = (parent.deadline_at - await store.now()).total_seconds()
        known = _parent_deadlines[run_id] = (left, time.monotonic())
    left, at = known
    return left - (time.monotonic() - at)


def _outcome_for(exc: BaseException | None) -> Outcome:
    from runlane.core.runs import EndReason, Outcome, RunStatus

    if exc is None or (isinstance(exc, SystemExit) and exc.code in (None, 0)):
        return Outcome(RunStatus.SUCCESS, EndReason.EXIT, exit_code=0)
    asyncio = sys.modules.get("asyncio")  # a CancelledError means asyncio is loaded already
    cancelled = (
        KeyboardInterrupt if asyncio is None else (KeyboardInterrupt, asyncio.CancelledError)
    )
    if isinstance(exc, cancelled):
        return Outcome(RunStatus.CANCELLED, EndReason.CANCELLED, note=type(exc).__name__)
    note = f"{type(exc).__name__}: {exc}"[:_NOTE_MAX_CHARS]
    return Outcome(RunStatus.FAILURE, EndReason.EXIT, error_code="exception", note=note)


def _finisher(run_id: str, outcome: Outcome) -> StoreCall:
    from runlane.core.runs import RunStatus

    def finish(store: Store) -> Awaitable[Any]:
        return store.finish_unleased(run_id, RunStatus.RUNNING, outcome)

    return finish


# -- the store, on a private loop in a background thread ---------------------------------------
#
# The Store API is async and the SDK is sync-first; a private loop in its own thread serves both
# plain scripts and code already inside a running event loop (which must not be re-entered).


def _database_url() -> str | None:
    # Stripped as store_from_url reads it: a stray newline must not reach libpq's database name.
    return (os.environ.get("RUNLANE_DATABASE_URL") or "").strip() or None


_warned_no_database = False


def _warn_no_database() -> None:
    global _warned_no_database
    if not _warned_no_database:
        _warned_no_database = True
        _log.warning("RUNLANE_DATABASE_URL is not set: run_scope() records no child runs")


class _StoreUnusable(Exception):
    """The store failed in a way that ends the SDK's use of it for this process (it could not
    be opened, or stopped answering); the message is the reason."""


class _StoreOff(Exception):
    """The store was given up on earlier in this process, and that was warned about then."""


def _reason(error: BaseException) -> str:
    """One line saying what went wrong; the exception's type when its text is empty (a bare
    `TimeoutError` says nothing)."""
    return " ".join(str(error).split()) or type(error).__name__


def _warn_store_failed(what: str, run_id: str, error: BaseException) -> None:
    if isinstance(error, _StoreOff):
        return
    if isinstance(error, _StoreUnusable):
        _log.warning(
            "run_scope(): could not %s run %s: %s; the job goes on, and run_scope() records "
            "nothing more in this process",
            what,
            run_id,
            _reason(error),
        )
        return
    _log.warning("run_scope(): could not %s run %s: %s", what, run_id, _reason(error))


def _with_connect_timeout(url: str) -> str:
    """A PostgreSQL `url` with libpq's `connect_timeout` added, unless it names one already."""
    if not url.startswith(("postgresql://", "postgres://")):
        return url
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        if "connect_timeout" in conninfo_to_dict(url):
            return url
    except psycopg.Error:
        return url  # store_from_url reports the bad URL
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}connect_timeout={_CONNECT_TIMEOUT}"


class _StoreThread:
    """One store and one event loop per process, opened on first use, closed at exit."""

    def __init__(self, url: str) -> None:
        import asyncio

        self.url = url
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="runlane-sdk-store", daemon=True
        )
        self.thread.start()
        self._store: Store | None = None
        self._opening: asyncio.Task[Store] | None = None  # used on the loop's thread only
        # Set once the store is given up on; read without a lock (one bool, set one way).
        self.off = False
        self.failed_seconds = 0.0  # time spent in calls that failed (the loop's thread only)

    async def _open(self) -> Store:
        import asyncio

        from runlane.core.secrets import mask_url
        from runlane.service.wiring import store_from_url

        # Never create a database: a URL naming no file is a mistake to report, not an empty
        # database to record child rows in that nobody reads.
        store = store_from_url(_with_connect_timeout(self.url), create=False)
        deadline = asyncio.timeout(_OPEN_TIMEOUT)
        try:
            async with deadline:
                await store.open()  # cancelled at the deadline, it closes what it opened
        except TimeoutError:
            if not deadline.expired():
                raise
            raise TimeoutError(
                f"timed out connecting to the database at {mask_url(self.url)} "
                f"after {_OPEN_TIMEOUT:g} s"
            ) from None
        self._store = store
        return store

    async def _call(self, call: StoreCall) -> Any:
        import asyncio

        from runlane.errors import DatabaseUnavailable

        if self.off:
            raise _StoreOff
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._open())
        try:
            try:
                # shield: a caller giving up must not cancel the open other calls wait on.
                store = await asyncio.shield(self._opening)
            except Exception as error:  # noqa: BLE001 (whatever stops the open ends recording)
                raise _StoreUnusable(_reason(error)) from None
            deadline = asyncio.timeout(_CALL_TIMEOUT)
            began = time.monotonic()
            try:
                async with deadline:
                    return await call(store)
            except TimeoutError:
                if not deadline.expired():
                    raise
                reason = f"no answer from the database in {_CALL_TIMEOUT:g} s"
            except DatabaseUnavailable as error:
                reason = _reason(error)
            # This call failed; the next may well land (a hiccup), unless failures add up.
            self.failed_seconds += time.monotonic() - began
            if self.failed_seconds < _GIVE_UP_AFTER:
                raise RuntimeError(reason)
            raise _StoreUnusable(reason)
        except _StoreUnusable:
            if self.off:  # another call gave up first and said so
                raise _StoreOff from None
            self.off = True
            raise

    def submit(self, call: StoreCall) -> Future[Any]:
        import asyncio
        from concurrent.futures import Future

        if self.off:
            done: Future[Any] = Future()
            done.set_exception(_StoreOff())
            return done
        return asyncio.run_coroutine_threadsafe(self._call(call), self.loop)

    def close(self) -> None:
        import asyncio

        async def shut_down() -> None:
            # Nothing may be left pending when the loop closes: a task still connecting would be
            # destroyed with it ("Task was destroyed but it is pending!" on the job's stderr).
            opening = self._opening
            if opening is not None and not opening.done():
                opening.cancel()
                await asyncio.gather(opening, return_exceptions=True)
            if self._store is not None:
                await self._store.close()
                self._store = None
            current = asyncio.current_task()
            rest = [task for task in asyncio.all_tasks() if task is not current]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)
            await self.loop.shutdown_asyncgens()

        self.off = True
        try:
            asyncio.run_coroutine_threadsafe(shut_down(), self.loop).result(timeout=5)
        except Exception as error:  # noqa: BLE001 (best effort at exit)
            _log.debug("run_scope(): closing the store failed: %s", _reason(error))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


_store_thread: _StoreThread | None = None
_store_lock = threading.Lock()


def _submit(call: StoreCall) -> Future[Any]:
    global _store_thread
    url = _database_url()
    assert url is not None
    with _store_lock:
        if _store_thread is None or _store_thread.url != url:
            if _store_thread is not None:
                _store_thread.close()
            _store_thread = _StoreThread(url)
            _register_close_at_exit()
        return _store_thread.submit(call)


_close_registered = False


def _register_close_at_exit() -> None:
    global _close_registered
    if not _close_registered:
        _close_registered = True
        # atexit runs while daemon threads still live, so the store can close cleanly.
        atexit.register(_close_store_thread)


# A backstop only: the store thread keeps the deadlines itself; this one runs out only when its
# loop is wedged (a call blocking the loop's thread).
_WAIT_BACKSTOP = _OPEN_TIMEOUT + _CALL_TIMEOUT + 1.0


def _store_call(call: StoreCall) -> Any:
    """Run `call(store)` on the store thread and wait; an error is returned, not raised."""
    future = _submit(call)
    try:
        return future.result(timeout=_WAIT_BACKSTOP)
    except Exception as error:  # noqa: BLE001 (bookkeeping never breaks the job)
        if future.done():
            return error  # the call's own outcome
    future.cancel()
    store_thread = _store_thread
    if store_thread is not None:
        if store_thread.off:
            return _StoreOff()
        store_thread.off = True
    return _StoreUnusable(f"no answer from the SDK's store thread in {_WAIT_BACKSTOP:g} s")


def _close_store_thread() -> None:
    global _store_thread
    with _store_lock:
        if _store_thread is not None:
            _store_thread.close()
            _store_thread = None
