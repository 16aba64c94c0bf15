"""The inline executor: a run as a local subprocess in its own process group, with a bounded log.

Not asyncio's subprocess API: its 3.11 child watcher starts a thread per child. Exit is watched
with a pidfd on the event loop and output is read from a non-blocking pipe, so one launcher can
keep thousands of short runs a minute moving on one thread.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import os
import queue
import select
import shutil
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path

import structlog

from runlane.adapters.files.logfile import BoundedLog, read_log_tail
from runlane.adapters.files.params import write_params_dir
from runlane.adapters.local import libcspawn
from runlane.adapters.local.fdwatch import FdWatcher
from runlane.adapters.local.guardian import Guardian, GuardianError, guardian_argv
from runlane.adapters.local.pdeathsig import (
    PdeathsigMode,
    prctl_pdeathsig,
    setpriv_supports_pdeathsig,
)
from runlane.adapters.local.process import (
    Child,
    Process,
    Spawner,
    Termination,
    check_command,
)
from runlane.adapters.local.remote import RemoteChild, SpawnerClient, SpawnerError
from runlane.adapters.local.spawner import RESTORED_SIGNALS
from runlane.core.envsplit import split_env, without_run_context
from runlane.core.runs import EndReason, RunStatus
from runlane.errors import PermanentExecutorError, TemporaryExecutorError
from runlane.ports import Execution, ExecutionEvent, ExecutionSpec

log = structlog.get_logger("runlane.inline")

# Spawns on worker threads (with the guardian, glibc's posix_spawn through ctypes; or Popen where
# there is no posix_spawn): each waits for its child to exec (vfork), so several can be in
# progress at once. RUNLANE_SPAWN_THREADS is read and checked by Settings;
# runlane.service.wiring.build_executors sets this from it.
SPAWN_THREADS = 6


class InlineExecutor:
    """Runs each run's command as a local subprocess (the `inline` executor).

    - `start(spec)` spawns `spec.command` as an argv list (never a shell) in a new process group,
      stdin `/dev/null`, stdout and stderr merged into `<log_dir>/<run_id>.<attempt>.log`
      (bounded: the spec's `log_max_bytes`, else this executor's, then only the last
      `tail_bytes` are kept), environment = the launcher's plus `spec.env`. Idempotent while
      the (run_id, attempt) is running here.
      `external_id` is the pid. The run dies with the launcher: `pdeathsig_mode` says how.
    - `spawn_process` (the default on Linux, unless `pdeathsig` or `spawn_off_loop` asks for
      another mode): `spawners` spawner processes (`runlane.adapters.local.spawner`) spawn, watch and
      reap the runs, read their output into the bounded logs, and SIGKILL every run's group
      when the launcher dies; the launcher sends each run as one message and keeps the
      deadlines (`remote`). `pdeathsig_mode` is then `spawner`. With `idle_on_loop` (the
      default mode's, not `spawn_process=True`'s), a run an idle executor starts (nothing live,
      no other start under way) is spawned on the loop instead, guarded by the guardian.
    - `pdeathsig`: `guardian` registers each run's process group with a
      small helper process (`runlane.adapters.local.guardian`) that SIGKILLs every registered
      group when the launcher dies — grandchildren too — and keeps the plain vfork spawn path;
      `setpriv` (argv prefixed with `setpriv --pdeathsig KILL --`) and `prctl` (a `preexec_fn`)
      have the kernel SIGKILL the direct child only, at about half the spawn rate; `none`.
    - `events(execution)` yields `running`, then one `finished` with the `Outcome`.
    - The deadline (`spec.deadline_seconds`, loop clock, from start) and `cancel` send SIGTERM to
      the group, then SIGKILL after the grace; descendants left when the leader exits that way
      are SIGKILLed with it.
    - `kill_now(execution, end_reason=...)` SIGKILLs the group at once and ends the run
      `cancelled` with the given reason (for a lost lease); `shutdown(grace)` ends every live
      run `cancelled`/`launcher_shutdown` and waits for them.
    - `reattach(spec)` finds only this executor's own live children: an inline process dies with
      its launcher, so there is nothing to find after a takeover.
    - `running_count()` / `running()` serve the heartbeat.

    All methods must be called from the event loop thread: the spawner client and the
    guardian's set of groups have one owner, and in the `setpriv`/`prctl` modes the kernel's parent-death signal fires when
    the *thread* that spawned a child exits, so those spawn on the loop thread. With the
    guardian the spawn itself runs on a worker thread (`spawn_off_loop`) whenever another run
    is live or starting (an idle executor spawns on the loop: lower pickup latency); that
    thread writes the child's group to the guardian's pipe at once (`Guardian.announce`, under
    the pipe's lock), and the loop registers it in the set and watches it when the spawn
    reaches it.
    """

    name = "inline"

    def __init__(
        self,
        log_dir: str | Path,
        *,
        log_max_bytes: int = 10 * 1024 * 1024,
        tail_bytes: int = 65536,
        tail_lines: int = 100,
        pdeathsig: PdeathsigMode = "auto",
        spawn_off_loop: bool | None = None,
        spawn_process: bool | None = None,
        spawners: int = 2,
        idle_on_loop: bool | None = None,
    ) -> None:
        # Absolute, once: the paths a run is given (RUNLANE_PARAMS_FILE) must still name the
        # same files after the job changes directory, and per-run paths stay plain string
        # concatenation. Not resolve(): a symlinked log directory keeps the name it was given.
        self.log_dir = Path(log_dir).absolute()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._log_prefix = os.path.join(self.log_dir, "")  # noqa: PTH118 - str, for speed
        self.log_max_bytes = log_max_bytes
        self.tail_bytes = tail_bytes
        self.tail_lines = tail_lines
        # Live runs by (run id, attempt), as the Execution each start returned: its `handle` is
        # the Child. The child holds no reference back, so a finished run's objects are freed
        # by reference counting as soon as the launcher lets go of its Execution, instead of
        # waiting as a reference cycle for the cyclic collector (8 objects a run).
        self._live: dict[tuple[str, int], Execution] = {}
        self.watcher = FdWatcher()
        self._closed = False
        # The launcher's environment, read once: copying os.environ per run (encode/decode of
        # every variable) costs more than the rest of starting a run in Python. Without what
        # describes a run (its TRACEPARENT, its params): each run's come from the run alone.
        self._base_env = without_run_context(os.environ)
        self._setpriv: str | None = None
        self._preexec: Callable[[], None] | None = None
        self._guardian: Guardian | None = None
        # With `spawn_process`, a spawner process starts, watches and reaps the runs, and kills
        # them when the launcher dies (`spawner`): no spawn threads, and a guardian only for
        # the runs an idle executor spawns on the loop (`idle_on_loop`).
        self._remote: SpawnerClient | None = None
        chosen = spawn_process is None
        if spawn_process is None:  # the default where it can be, unless another mode was asked
            spawn_process = pdeathsig == "auto" and spawn_off_loop is None and spawner_available()
        if idle_on_loop is None:  # the default mode's: not with spawners asked for by name
            idle_on_loop = chosen and spawn_process
        if idle_on_loop and not spawn_process:
            raise PermanentExecutorError(
                "spawning an idle executor's runs on the loop goes with spawner processes",
                error_code="config_error",
            )
        if spawn_process:
            if not spawner_available():
                raise PermanentExecutorError(
                    "a spawner process needs Linux (epoll, posix_spawn)", error_code="config_error"
                )
            if pdeathsig not in ("auto", "guardian") or spawn_off_loop is not None:
                raise PermanentExecutorError(
                    "a spawner process is its runs' guardian: no other pdeathsig or spawn mode "
                    "goes with it",
                    error_code="config_error",
                )
            self._remote = SpawnerClient(self._base_env, processes=spawners)
            pdeathsig = "none"
        # Best first: the guardian keeps the plain vfork spawn; setpriv (exec in place, spawned
        # with vfork) is cheaper than fork() + prctl; prctl is for where setpriv is missing.
        if pdeathsig == "guardian" or (pdeathsig == "auto" and sys.platform.startswith("linux")):
            argv = guardian_argv()
            if argv is not None:
                self._guardian = Guardian(argv)  # its process starts on the first spawn
            elif pdeathsig == "guardian":
                raise PermanentExecutorError(
                    "no Python interpreter to run the guardian with", error_code="config_error"
                )
        if self._guardian is None and pdeathsig in ("auto", "setpriv"):
            self._setpriv = setpriv_supports_pdeathsig()
            if self._setpriv is None and pdeathsig == "setpriv":
                raise PermanentExecutorError(
                    "setpriv with --pdeathsig is not available", error_code="config_error"
                )
        if self._guardian is None and self._setpriv is None and pdeathsig in ("auto", "prctl"):
            self._preexec = prctl_pdeathsig()
        self.pdeathsig_mode: str = (
            "spawner"
            if self._remote
            else "guardian"
            if self._guardian
            else "setpriv"
            if self._setpriv
            else "prctl"
            if self._preexec
            else "none"
        )
        # Without a preexec_fn, runs start with os.posix_spawn on the loop thread, the cheapest
        # way (docs/performance.md). Popen stays for the preexec_fn (prctl) mode and where there
        # is no posix_spawn; there, in modes without a parent-death signal, spawns go to a few
        # worker threads. PDEATHSIG modes must spawn on the loop thread (the signal fires when
        # the spawning *thread* exits).
        # `spawn_off_loop` (the default where it can be: guardian mode on glibc) spawns on worker
        # threads with the GIL released during the vfork wait (`libcspawn`), so the loop goes
        # on with other runs meanwhile (docs/performance.md, "Off the event loop"). Only the
        # guardian allows it: nothing then depends on which thread spawned a child.
        # With spawners, an idle executor spawns its run on the loop (`idle_on_loop`), guarded
        # by the guardian: the spawn follows the claim at once, without the hop to a spawner
        # and its wake-up (~0.5-1 ms of an idle launcher's pickup, docs/performance.md,
        # "Twenty-third session"). Any run started while another is live or starting goes to
        # a spawner, so a busy launcher's loop never waits out a spawn.
        if idle_on_loop and (argv := guardian_argv()) is not None:
            self._guardian = Guardian(argv)  # its process starts on the first idle spawn
        self.idle_on_loop = self._remote is not None and self._guardian is not None
        off_loop = self._remote is None and self._guardian is not None and libcspawn.available()
        if spawn_off_loop and not off_loop:
            raise PermanentExecutorError(
                "spawning off the event loop needs the guardian and glibc",
                error_code="config_error",
            )
        off_loop = off_loop if spawn_off_loop is None else spawn_off_loop
        self._spawner = Spawner(
            log_max_bytes=log_max_bytes,
            tail_bytes=tail_bytes,
            setpriv=self._setpriv,
            preexec=self._preexec,
            libc=libcspawn.LibcSpawn(RESTORED_SIGNALS) if off_loop else None,
            # An idle run spawned on the loop gets what a spawner's would: no terminal.
            new_session=self.idle_on_loop,
        )
        self._fallback_logged = -math.inf  # when an idle run last went to a spawner unguarded
        self._spawn = self._spawner.spawn
        self._posix_spawn_ok = self._spawner.posix_spawn_ok
        self._spawn_pool: SpawnThreads | None = None
        # Starts in progress on the spawn pool (the only start path with an await in it), so a
        # second start of the same attempt waits for the first instead of spawning again.
        self._starting: dict[tuple[str, int], asyncio.Future[Execution]] = {}
        self.spawn_off_loop = off_loop and self._posix_spawn_ok
        if self.spawn_off_loop or (
            self._setpriv is None and self._preexec is None and not self._posix_spawn_ok
        ):
            self._spawn_pool = SpawnThreads(SPAWN_THREADS, self._guardian)

    # -- the Executor port --------------------------------------------------------------------

    async def start(self, spec: ExecutionSpec) -> Execution:
        key = (spec.run_id, spec.attempt)
        live = self._live.get(key)
        if live is not None:
            return live
        if self._spawn_pool is None and self._remote is None:
            # Spawned on this thread with no await in between: no second start of the same
            # attempt can begin before this one has registered it in `_live`.
            return await self._start(spec, key)
        pending = self._starting.get(key)
        if pending is not None:  # the same attempt is being started right now: one process
            return await asyncio.shield(pending)
        future: asyncio.Future[Execution] = asyncio.get_running_loop().create_future()
        self._starting[key] = future
        try:
            execution = await self._start(spec, key)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: only concurrent callers re-raise it
            raise
        finally:
            del self._starting[key]
        future.set_result(execution)
        return execution

    async def _start(self, spec: ExecutionSpec, key: tuple[str, int]) -> Execution:
        if not spec.command:
            raise PermanentExecutorError("the job has an empty command", error_code="invalid_spec")
        if "/" in spec.run_id or spec.run_id.startswith("."):
            raise PermanentExecutorError(
                f"run id {spec.run_id!r} cannot name a log file", error_code="invalid_spec"
            )
        guardian = self._guardian
        remote = self._remote
        if remote is not None and guardian is not None and self._idle():
            # One turn of the loop first: the first run of a claimed batch finds the executor
            # idle too, and its siblings, whose tasks run in this turn, go to the spawners; so
            # does this one then, rather than hold the loop for a spawn while they wait.
            await asyncio.sleep(0)
        if remote is not None and (guardian is None or not self._idle()):
            if guardian is not None and guardian.groups and guardian.pid is None:
                # A guardian that died while a run it guards still lives (and could not be
                # replaced then) is replaced now: a busy executor makes no idle start that
                # would. That run's group is sent to the new one.
                with contextlib.suppress(GuardianError):
                    guardian.ensure()
            guardian = None  # a spawner's run: it is the run's guardian
        elif guardian is not None:
            try:
                guardian.ensure()  # started lazily; replaced here if it died
            except GuardianError as exc:
                if remote is None:
                    raise TemporaryExecutorError(
                        f"cannot guard a new run: {exc}", error_code="spawn_failed"
                    ) from exc
                self._no_guardian(exc)
                guardian = None  # no guardian for an idle spawn: the spawners take the run
        # Params too large for the environment (E2BIG past 128 KiB in one variable) go to files
        # in a private directory; RUNLANE_PARAMS_FILE names the JSON one (the SDK reads it).
        # Per-run paths as plain strings: pathlib joins are slow on the loop thread.
        base = f"{self._log_prefix}{spec.run_id}.{spec.attempt}"
        params_dir = base + ".params"
        run_env, spilled = split_env(spec.env, params_dir)
        if spilled:
            write_params_dir(Path(params_dir), spilled)
        if remote is not None and guardian is None:
            return await self._start_remote(remote, spec, key, run_env, params_dir, spilled)
        try:
            self.watcher.ensure()  # the epoll set (made at the first run) before any process
        except OSError as exc:
            raise _not_started(
                f"cannot watch a new run: {exc.strerror}", params_dir, spilled
            ) from exc
        env = {**self._base_env, **run_env}
        program = spec.command[0]
        if self._setpriv is not None:
            # setpriv reports a missing command as exit 127 after its own exec; check first so
            # the run fails with a clear, permanent reason instead.
            check_command(program, env.get("PATH"))
            argv = [self._setpriv, "--pdeathsig", "KILL", "--", *spec.command]
        else:
            argv = list(spec.command)
        log_path = base + ".log"  # = self.log_path(spec.run_id, spec.attempt)
        spawn = partial(self._spawn, argv, env, log_path, spec.log_max_bytes)
        try:
            if self._spawn_pool is not None and not (
                # An idle executor spawns on the loop: nothing else is waiting for the loop,
                # and a hop to a thread and back would only add to the run's pickup latency.
                self.spawn_off_loop and not self._live and len(self._starting) <= 1
            ):
                # A cancelled start cancels this future; the spawn goes on in its thread, and
                # what it starts is ended there (`SpawnThreads`), so that no process runs
                # unwatched and unguarded.
                (read_fd, proc, log), announced = await self._spawn_pool.submit(spawn)
            else:
                # On the event-loop thread (never a worker thread with PDEATHSIG: it fires when
                # the spawning thread exits, not the process).
                read_fd, proc, log = spawn()
                announced = None
        except BaseException:
            if spilled:
                shutil.rmtree(params_dir, ignore_errors=True)
            raise
        if guardian is not None:
            # The child is its own group leader (process_group=0), so pgid == pid. Until the
            # guardian has it a launcher death would leave this one run unguarded: a spawn
            # thread announced it already (`announced`), one on this thread is written now.
            try:
                guardian.register(proc.pid, announced=announced)
            except GuardianError as exc:
                guardian.groups.discard(proc.pid)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                guardian.withdraw(proc.pid)
                proc.wait()
                os.close(read_fd)
                log.close()
                if remote is not None:  # an idle run the guardian lost: a spawner takes it
                    self._no_guardian(exc)
                    return await self._start_remote(remote, spec, key, run_env, params_dir, spilled)
                if spilled:
                    shutil.rmtree(params_dir, ignore_errors=True)
                raise TemporaryExecutorError(
                    f"cannot guard a new run: {exc}", error_code="spawn_failed"
                ) from exc
        os.set_blocking(read_fd, False)
        child = Child(self, spec, proc, read_fd, log, log_path, guardian)
        child.params_dir = Path(params_dir) if spilled else None
        execution = Execution(spec.run_id, spec.attempt, str(proc.pid), handle=child)
        self._live[key] = execution
        child.watch()
        return execution

    def prepare(self) -> None:
        """Start the spawner processes and the guardian now, not at the first run that needs
        them: the spawners take ~15-20 ms to start (their Popen holds the loop 5-8 ms of it),
        which the first runs of a launcher starting onto a backlog, or of the first burst after
        an idle start, would wait out. What cannot start now is logged; the first start tries
        again and reports it on the run."""
        if self._closed:
            return
        # OSError: SpawnerError and GuardianError are ones, and so is what the pipes and fcntl
        # raise on the way (EMFILE at the descriptor limit).
        if self._remote is not None:
            try:
                self._remote.ensure()
            except OSError as exc:
                log.warning("inline.prepare_failed", helper="spawners", error=str(exc))
        if self._guardian is not None:
            try:
                self._guardian.ensure()
            except OSError as exc:
                log.warning("inline.prepare_failed", helper="guardian", error=str(exc))

    def _no_guardian(self, exc: GuardianError) -> None:
        """An idle run goes to a spawner because the guardian is not there: said at most once a
        minute (each such start is slower, not unsafe: the spawner guards the run)."""
        now = time.monotonic()
        if now - self._fallback_logged >= 60.0:
            self._fallback_logged = now
            log.warning("inline.guardian_unavailable", error=str(exc), spawns="spawner processes")

    def _idle(self) -> bool:
        """Nothing live and no other start under way (this one's is in `_starting`)."""
        return self._posix_spawn_ok and not self._live and len(self._starting) <= 1

    async def _start_remote(
        self,
        remote: SpawnerClient,
        spec: ExecutionSpec,
        key: tuple[str, int],
        run_env: dict[str, str],
        params_dir: str,
        spilled: object,
    ) -> Execution:
        """Start the run in the spawner process and wait for its pid (or why it did not start):
        the loop runs on meanwhile. A start cancelled while it waits is killed on arrival."""
        try:
            remote.ensure()  # started lazily; replaced here if it died
        except SpawnerError as exc:
            raise _not_started(f"cannot start the run: {exc}", params_dir, spilled) from exc
        child = RemoteChild(
            self, remote, spec, f"{self._log_prefix}{spec.run_id}.{spec.attempt}.log"
        )
        child.params_dir = Path(params_dir) if spilled else None
        try:
            remote.spawn(
                child,
                list(spec.command),
                run_env,
                log_max_bytes=spec.log_max_bytes or self.log_max_bytes,
                tail_bytes=self.tail_bytes,
                tail_lines=self.tail_lines,
            )
        except ValueError as exc:  # marshal refused a value (only plain str can travel)
            if spilled:
                shutil.rmtree(params_dir, ignore_errors=True)
            raise PermanentExecutorError(
                f"the run's command or environment cannot be sent to the spawner: {exc}",
                error_code="invalid_spec",
            ) from exc
        try:
            pid = await child.started
        except BaseException:
            if child.started.done() and not child.started.cancelled():
                # Cancelled in the turn its pid came: it runs, and nobody would watch it.
                child.kill(Termination(RunStatus.CANCELLED, EndReason.CANCELLED))
            if spilled:
                shutil.rmtree(params_dir, ignore_errors=True)
            raise
        execution = Execution(spec.run_id, spec.attempt, str(pid), handle=child)
        if not child.finished.done():  # (its end may have come with its pid)
            self._live[key] = execution
            child.arm_deadline()
        return execution

    async def reattach(self, spec: ExecutionSpec) -> Execution | None:
        return self._live.get((spec.run_id, spec.attempt))

    async def events(self, execution: Execution) -> AsyncIterator[ExecutionEvent]:
        child = _child_of(execution)
        yield ExecutionEvent("running")
        outcome = await asyncio.shield(child.finished)
        yield ExecutionEvent("finished", outcome)

    def stop_following(self, execution: Execution) -> None:
        """Nothing to forget: a process is this launcher's own to the end (its exit is reaped
        and its entry dropped whether or not anyone reads its events; it dies with the
        launcher), and a lost lease ends it (`kill_now`)."""

    async def cancel(self, execution: Execution, *, grace: float) -> None:
        """SIGTERM the group, SIGKILL after `grace`; the run ends `cancelled`. Idempotent; a
        finished execution is left alone. Returns at once: `events` reports the end."""
        _child_of(execution).terminate(Termination(RunStatus.CANCELLED, EndReason.CANCELLED), grace)

    async def logs(self, execution: Execution, *, tail_bytes: int = 65536) -> str:
        return read_log_tail(_child_of(execution).log_path, tail_bytes)

    # -- for the service ----------------------------------------------------------------------

    def kill_now(
        self,
        execution: Execution,
        *,
        end_reason: str = EndReason.CANCELLED,
        note: str | None = None,
    ) -> None:
        """SIGKILL the group at once; the run ends `cancelled` with `end_reason` (e.g.
        `lease_lost`), replacing any reason a deadline or cancel set before."""
        _child_of(execution).kill(Termination(RunStatus.CANCELLED, end_reason, note=note))

    async def shutdown(self, grace: float) -> None:
        """End every live run (`cancelled`, `launcher_shutdown`): SIGTERM, SIGKILL after
        `grace`, and wait until each has been reaped and its log closed."""
        children = [_child_of(execution) for execution in self._live.values()]
        for child in children:
            child.terminate(
                Termination(RunStatus.CANCELLED, EndReason.LAUNCHER_SHUTDOWN),
                grace,
            )
        if children:
            await asyncio.gather(*(asyncio.shield(c.finished) for c in children))
        if self._guardian is not None and not self._live:
            self._guardian.close()  # nothing is registered now; the next spawn starts another
        if self._remote is not None and not self._live and not self._remote.runs:
            self._remote.close()  # nothing is live there now; the next start starts another

    @property
    def spawn_mode(self) -> str:
        """Who spawns the runs and what ends them with the launcher, for the start line:
        `spawners+idle-loop` (the default on Linux), `spawners`, `threads+guardian`,
        `loop+guardian`, `loop+setpriv`, `loop+prctl` or `loop` (no parent-death guarantee;
        `popen` instead of `loop` where os.posix_spawn cannot be used)."""
        if self._remote is not None:
            return "spawners+idle-loop" if self.idle_on_loop else "spawners"
        where = (
            "threads"
            if self.spawn_off_loop
            else "loop"
            if self._posix_spawn_ok and self._spawn_pool is None
            else "popen"
        )
        return where if self.pdeathsig_mode == "none" else f"{where}+{self.pdeathsig_mode}"

    def running_count(self) -> int:
        return len(self._live)

    def running(self) -> list[Execution]:
        return list(self._live.values())

    def log_path(self, run_id: str, attempt: int) -> Path:
        return self.log_dir / f"{run_id}.{attempt}.log"

    @property
    def spawner_pids(self) -> list[int]:
        """The pids of the spawner processes that run now."""
        return self._remote.pids if self._remote is not None else []

    @property
    def guardian_pid(self) -> int | None:
        """The pid of the guardian process, while one runs."""
        return self._guardian.pid if self._guardian is not None else None

    def close(self) -> None:
        """Release the executor's own file descriptors and stop its guardian (after `shutdown`:
        runs still live then are killed by the guardian on its way out)."""
        if self._guardian is not None:
            self._guardian.close()
        if self._remote is not None:
            self._remote.close()
        if self._spawn_pool is not None:
            # Waits for a spawn in progress (well under a millisecond) before the descriptors
            # it uses are closed.
            self._spawn_pool.shutdown()
        self._spawner.close()
        self._closed = True
        if not self._live:  # else when the last live run has been seen to end (forget)
            self.watcher.close()

    def forget(self, child: Child | RemoteChild) -> None:
        key = (child.spec.run_id, child.spec.attempt)
        live = self._live.get(key)
        if live is not None and live.handle is child:
            del self._live[key]
        if self._closed and not self._live:
            self.watcher.close()
        if child.params_dir is not None:
            shutil.rmtree(child.params_dir, ignore_errors=True)


Spawned = tuple[int, Process, BoundedLog]
# A spawn done on a worker thread, and what `Guardian.announce` returned for it there.
Announced = tuple[Spawned, object | None]
_SpawnJob = tuple[asyncio.Future[Announced], Callable[[], Spawned]]


class SpawnThreads:
    """A few threads that run spawns for the event loop and hand their results back in batches.

    `submit(spawn)` returns a future of the loop's that gets `spawn()`'s result: what
    `run_in_executor` would do, with less per spawn on the loop thread — a C queue in, one
    wake-up of the loop for all the spawns that end before it looks (not one each), and no
    concurrent.futures.Future to chain. A spawn whose future was cancelled meanwhile (its start
    was) is ended when its result arrives: its group SIGKILLed, reaped, its pipe and log closed.
    """

    def __init__(self, threads: int, guardian: Guardian | None = None) -> None:
        self._queue: queue.SimpleQueue[_SpawnJob | None] = queue.SimpleQueue()
        self._done: collections.deque[tuple[asyncio.Future[Announced], Announced | Exception]] = (
            collections.deque()
        )
        # Each spawn's group is announced to the guardian on the thread that spawned it, before
        # the loop hears of it: a launcher killed meanwhile leaves no run unguarded.
        self._guardian = guardian
        self._lock = threading.Lock()
        self._woken = False  # a drain is on its way to the loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._count = threads
        self._threads: list[threading.Thread] = []

    def submit(self, spawn: Callable[[], Spawned]) -> asyncio.Future[Announced]:
        loop = asyncio.get_running_loop()
        self._loop = loop
        if not self._threads:
            self._threads = [
                threading.Thread(target=self._work, name=f"runlane-spawn_{i}", daemon=True)
                for i in range(self._count)
            ]
            for thread in self._threads:
                thread.start()
        future: asyncio.Future[Announced] = loop.create_future()
        self._queue.put((future, spawn))
        return future

    def _work(self) -> None:
        get = self._queue.get
        while (job := get()) is not None:
            future, spawn = job
            outcome: Announced | Exception
            try:
                spawned = spawn()
            except Exception as exc:  # noqa: BLE001 - raised from the future, on the loop
                outcome = exc
            else:
                guardian = self._guardian
                token = None if guardian is None else guardian.announce(spawned[1].pid)
                outcome = (spawned, token)
            self._done.append((future, outcome))
            with self._lock:
                if self._woken:
                    continue
                self._woken = True
            loop = self._loop
            try:
                if loop is None:
                    raise RuntimeError("no loop")
                loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop closed under us: end what nobody will watch
                self._discard_done()

    def _drain(self) -> None:
        with self._lock:
            self._woken = False
        done = self._done
        while done:
            future, outcome = done.popleft()
            if future.cancelled():
                if not isinstance(outcome, Exception):
                    _discard_spawned(outcome[0], self._guardian)
            elif isinstance(outcome, Exception):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

    def _discard_done(self) -> None:
        while self._done:
            _, outcome = self._done.popleft()
            if not isinstance(outcome, Exception):
                _discard_spawned(outcome[0], self._guardian)

    def shutdown(self) -> None:
        """Stop the threads, after any spawn in progress (well under a millisecond)."""
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join()
        self._threads = []


def _discard_spawned(spawned: Spawned, guardian: Guardian | None) -> None:
    """A spawn whose start was cancelled: SIGKILL its group, take it back from the guardian,
    reap it (after, so the pgid cannot name anybody else yet), close its pipe and log."""
    read_fd, proc, log = spawned
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # our unreaped child: the group is still its own
    if guardian is not None:
        guardian.withdraw(proc.pid)
    proc.wait()
    os.close(read_fd)
    log.close()


def spawner_available() -> bool:
    """Whether runs can be spawned by spawner processes here (Linux: epoll, posix_spawn)."""
    return (
        sys.platform.startswith("linux") and hasattr(select, "epoll") and hasattr(os, "posix_spawn")
    )


def _child_of(execution: Execution) -> Child | RemoteChild:
    child = execution.handle
    if not isinstance(child, Child | RemoteChild):
        raise PermanentExecutorError(
            f"run {execution.run_id} was not started by this inline executor",
            error_code="invalid_spec",
        )
    return child


def _not_started(why: str, params_dir: str, spilled: object) -> TemporaryExecutorError:
    """A start that failed before any process: its spilled params directory removed, and the
    temporary `spawn_failed` it is (the run is tried again)."""
    if spilled:
        shutil.rmtree(params_dir, ignore_errors=True)
    return TemporaryExecutorError(why, error_code="spawn_failed")
