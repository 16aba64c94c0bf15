"""The inline executor: a run as a local subprocess in its own process group, with a bounded log.

Not asyncio's subprocess API: its 3.11 child watcher starts a thread per child. Exit is watched
with a pidfd on the event loop and output is read from a non-blocking pipe, so one launcher can
keep thousands of short runs a minute moving on one thread.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import errno
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import BinaryIO, Literal, Protocol

from runlane.adapters.local.guardian import Guardian, GuardianError, guardian_argv
from runlane.core.envsplit import split_env
from runlane.core.runs import EndReason, Outcome, RunStatus, joined_notes
from runlane.errors import PermanentExecutorError, TemporaryExecutorError
from runlane.ports import Execution, ExecutionEvent, ExecutionSpec

PdeathsigMode = Literal["auto", "guardian", "setpriv", "prctl", "none"]

# Only where spawns use Popen on worker threads (no os.posix_spawn): spawns wait for the child
# to exec (vfork), so several can be in progress at once. RUNLANE_SPAWN_THREADS is read and
# checked by Settings; runlane.service.runtime.build_executors sets this from it.
SPAWN_THREADS = 6

_READ_CHUNK = 65536
# After the main process exits, a descendant may still hold the output pipe open; we read what
# it writes for this long, then stop so the run can end.
_DRAIN_AFTER_EXIT_SECONDS = 1.0
_TEMPORARY_SPAWN_ERRNOS = frozenset({errno.EAGAIN, errno.EMFILE, errno.ENFILE, errno.ENOMEM})
_PR_SET_PDEATHSIG = 1


@cache
def setpriv_supports_pdeathsig() -> str | None:
    """Path of a util-linux `setpriv` that accepts `--pdeathsig`, or None."""
    path = shutil.which("setpriv")
    if path is None:
        return None
    try:
        probe = subprocess.run(
            [path, "--pdeathsig", "KILL", "--", "true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return path if probe.returncode == 0 else None


def _prctl_pdeathsig() -> Callable[[], None] | None:
    """A `preexec_fn` that asks the kernel to SIGKILL the child when its parent thread exits."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    prctl = libc.prctl

    def set_pdeathsig() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    return set_pdeathsig


def signal_error_code(signum: int) -> str:
    """`signal_sigsegv` for 11; `signal_<n>` for a number with no name."""
    try:
        return f"signal_{signal.Signals(signum).name.lower()}"
    except ValueError:
        return f"signal_{signum}"


def _tail_text(data: bytes, tail_lines: int) -> str:
    """The last `tail_lines` lines of `data`, decoded leniently."""
    pos = len(data) - 1 if data.endswith(b"\n") else len(data)
    for _ in range(tail_lines):
        pos = data.rfind(b"\n", 0, pos)
        if pos < 0:
            break
    if pos >= 0:
        data = data[pos + 1 :]
    return data.decode("utf-8", errors="replace")


class _BoundedLog:
    """Writes output to the run's log file up to `max_bytes`, then keeps only a tail in memory.

    The file ends up at most about `max_bytes + tail_bytes` plus two marker lines: writes after
    the limit are dropped, and at close the last `tail_bytes` of the output are appended.
    """

    __slots__ = (
        "_closed",
        "_fd",
        "_last_written",
        "_max",
        "_path",
        "_tail_bytes",
        "dropped",
        "ring",
        "write_error",
        "written",
    )

    def __init__(self, path: str, max_bytes: int, tail_bytes: int) -> None:
        # The file is created on the first byte of output: creating a file costs a journal
        # write, and most short runs print nothing. A run that prints nothing has no log file.
        self._path = path
        self._fd: int | None = None
        self._closed = False
        self._max = max_bytes
        self._tail_bytes = tail_bytes
        self._last_written = b"\n"
        self.written = 0
        self.dropped = 0  # bytes not written to the file
        self.ring = bytearray()  # the last `tail_bytes` bytes of all output
        # Why the file stopped being written (a full disk, a log directory gone): the output
        # still reaches the tail in memory, and the run's note says the file is incomplete.
        self.write_error: str | None = None

    def feed(self, data: bytes) -> None:
        # Local-disk writes are short and synchronous on purpose: a thread hop per chunk would
        # cost more than the write.
        if self.dropped == 0:
            room = self._max - self.written
            if len(data) <= room:
                self._write(data)
                self.written += len(data)
            else:
                self._write(data[:room])
                self.written += room
                self._write_marker(
                    f"[runlane: output truncated after {self._max} bytes; last bytes kept below]\n"
                )
                self.dropped = len(data) - room
        else:
            self.dropped += len(data)
        ring = self.ring
        ring += data
        excess = len(ring) - self._tail_bytes
        if excess > 0:
            del ring[:excess]

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self.dropped:
                kept = bytes(self.ring[-min(self.dropped, len(self.ring)) :]) if self.ring else b""
                self._write_marker(f"[runlane: {self.dropped - len(kept)} bytes dropped]\n")
                self._write(kept)
        finally:
            self._closed = True
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _write_marker(self, line: str) -> None:
        prefix = b"" if self._last_written.endswith(b"\n") else b"\n"
        self._write(prefix + line.encode())

    def _write(self, data: bytes) -> None:
        if not data or self._closed or self.write_error is not None:
            return
        try:
            if self._fd is None:
                # Truncate: the file belongs to this (run, attempt) execution alone, and the
                # bound must hold per file.
                self._fd = os.open(
                    self._path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644
                )
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
        except OSError as exc:
            # Never again for this run: one failed write per output chunk would flood the loop.
            self.write_error = exc.strerror or str(exc)
            return
        self._last_written = data[-1:]


class _Process(Protocol):
    """What `_Child` needs of a spawned process: `subprocess.Popen` or `_SpawnedProcess`."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...


class _SpawnedProcess:
    """A child started with `os.posix_spawn`: the two `Popen` methods the executor uses."""

    __slots__ = ("pid", "returncode")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: what Popen reports too
                self.returncode = 0
            else:
                if pid == self.pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        while self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                self.returncode = 0
            else:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


# Signals Python ignores that a child must start with at their defaults (Popen's restore_signals).
_RESTORED_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, name)
)


_HAS_EPOLL = hasattr(select, "epoll")


class _FdWatcher:
    """Calls a callback when a descriptor is readable: the runs' output pipes and pidfds.

    On Linux one epoll set of its own, registered once with the event loop: adding and removing
    a descriptor is one C call each, and every ready descriptor of a loop iteration is handled
    in one callback. Through `loop.add_reader` each of a run's four registrations cost ~10 us of
    asyncio bookkeeping on the launcher's only busy thread (bench/throughput.py, ~10% of its
    CPU per run). Elsewhere it is `loop.add_reader` itself. Callbacks must not add descriptors.
    """

    __slots__ = ("_callbacks", "_epoll", "_loop")

    def __init__(self) -> None:
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._epoll: select.epoll | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def add(self, fd: int, callback: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        self._callbacks[fd] = callback
        if not _HAS_EPOLL:  # pragma: no cover - Linux has epoll
            loop.add_reader(fd, callback)
            return
        if self._loop is not loop:
            self._attach(loop)
        assert self._epoll is not None
        self._epoll.register(fd, select.EPOLLIN)

    def remove(self, fd: int) -> None:
        """Stop watching `fd`; call before closing it."""
        if self._callbacks.pop(fd, None) is None:
            return
        if self._epoll is not None:
            try:  # noqa: SIM105 - not contextlib.suppress: once per descriptor of every run
                self._epoll.unregister(fd)
            except OSError:  # already closed: the kernel dropped it
                pass
        elif not _HAS_EPOLL:  # pragma: no cover
            asyncio.get_running_loop().remove_reader(fd)

    def close(self) -> None:
        if self._epoll is not None:
            self._detach()
            self._epoll.close()
            self._epoll = None
        self._callbacks.clear()

    def _attach(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._epoll is None:
            self._epoll = select.epoll()
        else:
            self._detach()  # another loop than before (tests): its descriptors stay watched
        loop.add_reader(self._epoll.fileno(), self._dispatch)
        self._loop = loop

    def _detach(self) -> None:
        if self._loop is not None and self._epoll is not None:
            with contextlib.suppress(Exception):  # the old loop may be closed by now
                self._loop.remove_reader(self._epoll.fileno())
        self._loop = None

    def _dispatch(self) -> None:
        assert self._epoll is not None
        callbacks = self._callbacks
        ready = [(fd, callbacks.get(fd)) for fd, _ in self._epoll.poll(0)]
        for fd, callback in ready:
            # Still registered, and to the same callback: an earlier callback of this batch
            # may have removed (and closed) it.
            if callback is None or callbacks.get(fd) is not callback:
                continue
            try:
                callback()
            except Exception as exc:  # noqa: BLE001 - as asyncio does for a reader callback
                # Report it and go on: the set is level-triggered and polled in the same order,
                # so a callback that raises would otherwise starve every descriptor after it.
                assert self._loop is not None
                self._loop.call_exception_handler(
                    {"message": f"error in a run's descriptor callback (fd {fd})", "exception": exc}
                )


@dataclass(slots=True)
class _Termination:
    status: RunStatus
    end_reason: str
    error_code: str | None = None
    note: str | None = None


class _Child:
    """One live (or just finished) subprocess and everything that watches it."""

    def __init__(
        self,
        executor: InlineExecutor,
        spec: ExecutionSpec,
        proc: _Process,
        pipe_fd: int,
        log: _BoundedLog,
        log_path: str,
    ) -> None:
        self.executor = executor
        self.spec = spec
        self.proc = proc
        self.pid = proc.pid
        self.loop = asyncio.get_running_loop()
        self.log = log
        self.log_path = log_path
        self.pipe_fd: int | None = pipe_fd
        self.pidfd: int | None = None
        self.returncode: int | None = None
        self.termination: _Termination | None = None
        self.drain_cut = False
        self.params_dir: Path | None = None  # spilled params, removed when the run ends
        self.finished: asyncio.Future[Outcome] = self.loop.create_future()
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._kill_timer: asyncio.TimerHandle | None = None
        self._drain_timer: asyncio.TimerHandle | None = None

    # -- watching -----------------------------------------------------------------------------

    def watch(self) -> None:
        loop = self.loop
        watcher = self.executor._watcher
        assert self.pipe_fd is not None
        watcher.add(self.pipe_fd, self._on_output)
        try:
            self.pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self.pidfd = None
        if self.pidfd is not None:
            watcher.add(self.pidfd, self._on_exit)
        else:
            # Kernels before 5.3 have no pidfd: a small thread waits without reaping (WNOWAIT),
            # so the process group stays pinned until the loop thread reaps it.
            threading.Thread(
                target=self._wait_in_thread, name=f"runlane-wait-{self.pid}", daemon=True
            ).start()
        self._deadline_timer = loop.call_later(
            max(0.0, self.spec.deadline_seconds), self._on_deadline
        )

    def _wait_in_thread(self) -> None:
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
        with contextlib.suppress(RuntimeError):  # the loop closed under us
            self.loop.call_soon_threadsafe(self._on_exit)

    def _on_output(self) -> None:
        fd = self.pipe_fd
        if fd is None:
            return
        try:
            data = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.log.feed(data)
            return
        self._close_pipe()
        self._maybe_finish()

    def _close_pipe(self) -> None:
        if self.pipe_fd is not None:
            self.executor._watcher.remove(self.pipe_fd)
            os.close(self.pipe_fd)
            self.pipe_fd = None
        if self._drain_timer is not None:
            self._drain_timer.cancel()
            self._drain_timer = None

    def _has_exited(self) -> bool:
        """True once the process has exited, reaped or not (it is never reaped elsewhere)."""
        if self.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def _on_exit(self) -> None:
        if self.returncode is not None:
            return
        # The run is over when its command exits: whatever it left in its process group (a
        # background child, a grandchild holding the output pipe) ends with it, as under
        # systemd's control-group kill mode. The leader is a zombie until reaped, so its pid
        # still names the group and this cannot reach anyone else's processes. (A process that
        # left the group with setsid is out of reach: docs/limits.md.)
        self._signal_group(signal.SIGKILL)
        guardian = self.executor._guardian
        if guardian is not None:
            # Before reaping: until then the pid (= pgid) cannot be given to another process,
            # so the guardian can never be left holding someone else's group.
            guardian.unregister(self.pid)
        rc = self.proc.poll()
        if rc is None:  # spurious wake-up; the pidfd reader stays armed
            if guardian is not None:
                with contextlib.suppress(GuardianError):  # the next spawn retries
                    guardian.register(self.pid)
            return
        self.returncode = rc
        if self.pidfd is not None:
            self.executor._watcher.remove(self.pidfd)
            os.close(self.pidfd)
            self.pidfd = None
        for timer in (self._deadline_timer, self._kill_timer):
            if timer is not None:
                timer.cancel()
        self._deadline_timer = self._kill_timer = None
        if self.pipe_fd is not None:
            self._drain_timer = self.loop.call_later(_DRAIN_AFTER_EXIT_SECONDS, self._cut_drain)
        self._maybe_finish()

    def _cut_drain(self) -> None:
        self._drain_timer = None
        fd = self.pipe_fd
        if fd is None:
            return
        with contextlib.suppress(OSError):
            while data := os.read(fd, _READ_CHUNK):
                self.log.feed(data)
        self.drain_cut = True
        self._close_pipe()
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        if self.returncode is None or self.pipe_fd is not None or self.finished.done():
            return
        try:
            self.log.close()
        finally:
            self.executor._forget(self)
            self.finished.set_result(self._outcome(self.returncode))

    def _outcome(self, rc: int) -> Outcome:
        tail = _tail_text(bytes(self.log.ring), self.executor.tail_lines)
        notes = []
        if self.drain_cut:
            notes.append(
                "a descendant process kept the output pipe open after the command exited; "
                f"output after {_DRAIN_AFTER_EXIT_SECONDS:g}s was not read"
            )
        if self.log.write_error is not None:
            notes.append(
                f"the log file {self.log_path} is incomplete: writing it failed "
                f"({self.log.write_error}); the tail here is complete"
            )
        note = joined_notes(*notes)
        term = self.termination
        if term is not None:
            return Outcome(
                term.status,
                term.end_reason,
                exit_code=rc,
                error_code=term.error_code,
                log_tail=tail,
                # Why it was ended first, then what else is true of it (an incomplete log file).
                note=joined_notes(term.note, note),
            )
        if rc == 0:
            return Outcome(RunStatus.SUCCESS, EndReason.EXIT, exit_code=0, log_tail=tail, note=note)
        error_code = signal_error_code(-rc) if rc < 0 else "exit_code"
        return Outcome(
            RunStatus.FAILURE,
            EndReason.EXIT,
            exit_code=rc,
            error_code=error_code,
            log_tail=tail,
            note=note,
        )

    # -- ending it ----------------------------------------------------------------------------

    def _on_deadline(self) -> None:
        self._deadline_timer = None
        if self._has_exited():
            return  # the exit is already on its way to `_on_exit`
        self.terminate(
            _Termination(RunStatus.TIMEOUT, EndReason.DEADLINE, error_code="deadline"),
            self.spec.kill_grace_seconds,
        )

    def terminate(self, termination: _Termination, grace: float) -> None:
        """SIGTERM the group, SIGKILL it after `grace`. The first reason given is kept."""
        if self.returncode is not None or self.termination is not None:
            return
        self.termination = termination
        if grace <= 0:
            self._signal_group(signal.SIGKILL)
            return
        self._signal_group(signal.SIGTERM)
        self._kill_timer = self.loop.call_later(grace, self._kill_after_grace)

    def kill(self, termination: _Termination) -> None:
        """SIGKILL the group now; `termination` replaces an earlier reason."""
        if self.returncode is not None:
            return
        self.termination = termination
        self._signal_group(signal.SIGKILL)

    def _kill_after_grace(self) -> None:
        self._kill_timer = None
        self._signal_group(signal.SIGKILL)

    def _signal_group(self, signum: int) -> None:
        # Only called before the leader is reaped: until then no other process can get its id,
        # so the group id cannot name someone else's processes.
        if self.returncode is not None:
            return
        try:  # noqa: SIM105 - not contextlib.suppress: this runs for every run that ends
            os.killpg(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


class InlineExecutor:
    """Runs each run's command as a local subprocess (the `inline` executor).

    - `start(spec)` spawns `spec.command` as an argv list (never a shell) in a new process group,
      stdin `/dev/null`, stdout and stderr merged into `<log_dir>/<run_id>.<attempt>.log`
      (bounded: `log_max_bytes`, then only the last `tail_bytes` are kept), environment = the
      launcher's plus `spec.env`. Idempotent while the (run_id, attempt) is running here.
      `external_id` is the pid. The run dies with the launcher: `pdeathsig_mode` says how.
    - `pdeathsig`: `guardian` (the default on Linux) registers each run's process group with a
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

    All methods must be called from the event loop thread: the kernel's parent-death signal fires
    when the *thread* that spawned a child exits, so spawning from a short-lived worker thread
    would kill the child as soon as that thread ended; and the guardian's pipe has one writer.
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
        # the _Child. The child holds no reference back, so a finished run's objects are freed
        # by reference counting as soon as the launcher lets go of its Execution, instead of
        # waiting as a reference cycle for the cyclic collector (8 objects a run).
        self._live: dict[tuple[str, int], Execution] = {}
        self._watcher = _FdWatcher()
        self._closed = False
        # The launcher's environment, read once: copying os.environ per run (encode/decode of
        # every variable) costs more than the rest of starting a run in Python.
        self._base_env = dict(os.environ)
        self._devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        self._resolved: dict[tuple[str, str | None], str] = {}  # see _executable
        self._setpriv: str | None = None
        self._preexec: Callable[[], None] | None = None
        self._guardian: Guardian | None = None
        # bench/spawn.py: the guardian keeps the plain vfork spawn (~1.8x setpriv's rate, as fast
        # as no guarantee at all);
        # setpriv (exec in place, spawned with vfork) is cheaper than fork() + prctl; prctl is
        # the fallback where util-linux setpriv is missing.
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
            self._preexec = _prctl_pdeathsig()
        self.pdeathsig_mode: str = (
            "guardian"
            if self._guardian
            else "setpriv"
            if self._setpriv
            else "prctl"
            if self._preexec
            else "none"
        )
        # Without a preexec_fn, runs start with os.posix_spawn (vfork in glibc) on the loop
        # thread: bench/spawn.py measured it at about half Popen's launcher CPU per run and
        # faster than Popen on worker threads, whose thread hops and Python-level set-up cost more
        # than the child's exec keeps the loop waiting. Popen stays for the preexec_fn (prctl)
        # mode and where there is no posix_spawn; there, in modes without a parent-death signal,
        # spawns go to a few worker threads. PDEATHSIG modes must spawn on the loop thread (the
        # signal fires when the spawning *thread* exits).
        self._posix_spawn_ok = self._preexec is None and hasattr(os, "posix_spawn")
        if self._posix_spawn_ok:
            _no_inherited_descriptors()
        self._spawn_pool: ThreadPoolExecutor | None = None
        # Starts in progress on the spawn pool (the only start path with an await in it), so a
        # second start of the same attempt waits for the first instead of spawning again.
        self._starting: dict[tuple[str, int], asyncio.Future[Execution]] = {}
        if self._setpriv is None and self._preexec is None and not self._posix_spawn_ok:
            self._spawn_pool = ThreadPoolExecutor(
                max_workers=SPAWN_THREADS, thread_name_prefix="runlane-spawn"
            )

    # -- the Executor port --------------------------------------------------------------------

    async def start(self, spec: ExecutionSpec) -> Execution:
        key = (spec.run_id, spec.attempt)
        live = self._live.get(key)
        if live is not None:
            return live
        if self._spawn_pool is None:
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
        if guardian is not None:
            try:
                guardian.ensure()  # started lazily; replaced here if it died
            except GuardianError as exc:
                raise TemporaryExecutorError(
                    f"cannot guard a new run: {exc}", error_code="spawn_failed"
                ) from exc
        # Params too large for the environment (E2BIG past 128 KiB in one variable) go to files
        # in a private directory; RUNLANE_PARAMS_FILE names the JSON one (the SDK reads it).
        # Per-run paths as plain strings: two pathlib joins cost ~10 us a run on the loop thread.
        base = f"{self._log_prefix}{spec.run_id}.{spec.attempt}"
        params_dir = base + ".params"
        run_env, spilled = split_env(spec.env, params_dir)
        if spilled:
            _write_params_dir(Path(params_dir), spilled)
        env = {**self._base_env, **run_env}
        program = spec.command[0]
        if self._setpriv is not None:
            # setpriv reports a missing command as exit 127 after its own exec; check first so
            # the run fails with a clear, permanent reason instead.
            _check_command(program, env.get("PATH"))
            argv = [self._setpriv, "--pdeathsig", "KILL", "--", *spec.command]
        else:
            argv = list(spec.command)
        log_path = base + ".log"  # = self.log_path(spec.run_id, spec.attempt)
        spawn = partial(self._spawn_blocking, argv, env, log_path)
        try:
            if self._spawn_pool is not None:
                read_fd, proc, log = await asyncio.get_running_loop().run_in_executor(
                    self._spawn_pool, spawn
                )
            else:
                # On the event-loop thread (never a worker thread with PDEATHSIG: it fires when
                # the spawning thread exits, not the process).
                read_fd, proc, log = spawn()
        except BaseException:
            if spilled:
                shutil.rmtree(params_dir, ignore_errors=True)
            raise
        if guardian is not None:
            # The child is its own group leader (process_group=0), so pgid == pid. Until this
            # write lands a launcher death would leave this one run unguarded.
            try:
                guardian.register(proc.pid)
            except GuardianError as exc:
                guardian.groups.discard(proc.pid)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                os.close(read_fd)
                log.close()
                if spilled:
                    shutil.rmtree(params_dir, ignore_errors=True)
                raise TemporaryExecutorError(
                    f"cannot guard a new run: {exc}", error_code="spawn_failed"
                ) from exc
        os.set_blocking(read_fd, False)
        child = _Child(self, spec, proc, read_fd, log, log_path)
        child.params_dir = Path(params_dir) if spilled else None
        execution = Execution(spec.run_id, spec.attempt, str(proc.pid), handle=child)
        self._live[key] = execution
        child.watch()
        return execution

    def _spawn_blocking(
        self, argv: list[str], env: dict[str, str], log_path: str
    ) -> tuple[int, _Process, _BoundedLog]:
        """Open the log, make the output pipe and spawn; blocking, so maybe on a worker thread."""
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        try:
            log = _BoundedLog(log_path, self.log_max_bytes, self.tail_bytes)
        except OSError as exc:
            os.close(read_fd)
            os.close(write_fd)
            raise TemporaryExecutorError(
                f"cannot open the log file {log_path}: {exc.strerror}", error_code="spawn_failed"
            ) from exc
        proc: _Process
        try:
            if self._posix_spawn_ok and min(write_fd, self._devnull) > 2:
                proc = self._posix_spawn(argv, env, write_fd)
            else:
                # Popen returns once the child has exec'd (vfork without a preexec_fn).
                proc = subprocess.Popen(
                    argv,
                    stdin=self._devnull,
                    stdout=write_fd,
                    stderr=subprocess.STDOUT,
                    env=env,
                    process_group=0,
                    preexec_fn=self._preexec,
                )
        except OSError as exc:
            os.close(read_fd)
            log.close()
            raise _spawn_error(argv[0] if self._setpriv is None else argv[4], exc) from exc
        except ValueError as exc:  # a NUL byte, or (UnicodeEncodeError) an unpaired surrogate
            os.close(read_fd)
            log.close()
            raise PermanentExecutorError(
                "the run's command or environment holds a character no process can be given "
                f"(a NUL byte or an unpaired surrogate): {exc}",
                error_code="invalid_spec",
            ) from exc
        except BaseException:
            os.close(read_fd)
            log.close()
            raise
        finally:
            os.close(write_fd)
        return read_fd, proc, log

    def _posix_spawn(self, argv: list[str], env: dict[str, str], write_fd: int) -> _Process:
        """What `Popen(argv, stdin=devnull, stdout=write_fd, stderr=STDOUT, env=env,
        process_group=0)` does, through glibc's vfork-based posix_spawn without Popen's Python
        machinery. The launcher's own descriptors are all close-on-exec (Python's default), so
        nothing else reaches the child."""
        program = argv[0]
        path = env.get("PATH")
        file_actions = [
            (os.POSIX_SPAWN_DUP2, self._devnull, 0),
            (os.POSIX_SPAWN_DUP2, write_fd, 1),
            (os.POSIX_SPAWN_DUP2, write_fd, 2),
        ]
        for attempt in (1, 2):
            executable = self._executable(program, path)
            try:
                pid = os.posix_spawn(
                    executable,
                    argv,
                    env,
                    file_actions=file_actions,
                    setpgroup=0,
                    setsigdef=_RESTORED_SIGNALS,
                )
            except FileNotFoundError:
                # A cached location that went away: look the program up again, once.
                if attempt == 2 or self._resolved.pop((program, path), None) is None:
                    raise
                continue
            return _SpawnedProcess(pid)
        raise AssertionError("unreachable")  # pragma: no cover

    def _executable(self, program: str, path: str | None) -> str:
        """The file `execvpe` would run for `program` on the child's PATH (Popen's lookup),
        cached per (program, PATH); raises the OSError exec would give."""
        if "/" in program:
            return program
        key = (program, path)
        found = self._resolved.get(key)
        if found is not None:
            return found
        denied = False
        for directory in os.get_exec_path({"PATH": path} if path is not None else {}):
            candidate = os.path.join(directory, program)  # noqa: PTH118 - str in, str out
            if os.path.isfile(candidate):  # noqa: PTH113
                if os.access(candidate, os.X_OK):
                    self._resolved[key] = candidate
                    return candidate
                denied = True
        code = errno.EACCES if denied else errno.ENOENT
        raise OSError(code, os.strerror(code), program)

    async def reattach(self, spec: ExecutionSpec) -> Execution | None:
        return self._live.get((spec.run_id, spec.attempt))

    async def events(self, execution: Execution) -> AsyncIterator[ExecutionEvent]:
        child = _child_of(execution)
        yield ExecutionEvent("running")
        outcome = await asyncio.shield(child.finished)
        yield ExecutionEvent("finished", outcome)

    async def cancel(self, execution: Execution, *, grace: float) -> None:
        """SIGTERM the group, SIGKILL after `grace`; the run ends `cancelled`. Idempotent; a
        finished execution is left alone. Returns at once: `events` reports the end."""
        _child_of(execution).terminate(
            _Termination(RunStatus.CANCELLED, EndReason.CANCELLED), grace
        )

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
        _child_of(execution).kill(_Termination(RunStatus.CANCELLED, end_reason, note=note))

    async def shutdown(self, grace: float) -> None:
        """End every live run (`cancelled`, `launcher_shutdown`): SIGTERM, SIGKILL after
        `grace`, and wait until each has been reaped and its log closed."""
        children = [_child_of(execution) for execution in self._live.values()]
        for child in children:
            child.terminate(
                _Termination(RunStatus.CANCELLED, EndReason.LAUNCHER_SHUTDOWN),
                grace,
            )
        if children:
            await asyncio.gather(*(asyncio.shield(c.finished) for c in children))
        if self._guardian is not None and not self._live:
            self._guardian.close()  # nothing is registered now; the next spawn starts another

    def running_count(self) -> int:
        return len(self._live)

    def running(self) -> list[Execution]:
        return list(self._live.values())

    def log_path(self, run_id: str, attempt: int) -> Path:
        return self.log_dir / f"{run_id}.{attempt}.log"

    @property
    def guardian_pid(self) -> int | None:
        """The pid of the guardian process, while one runs."""
        return self._guardian.pid if self._guardian is not None else None

    def close(self) -> None:
        """Release the executor's own file descriptors and stop its guardian (after `shutdown`:
        runs still live then are killed by the guardian on its way out)."""
        if self._guardian is not None:
            self._guardian.close()
        if self._spawn_pool is not None:
            self._spawn_pool.shutdown(wait=False)
        if self._devnull >= 0:
            os.close(self._devnull)
            self._devnull = -1
        self._closed = True
        if not self._live:  # else when the last live run has been seen to end (_forget)
            self._watcher.close()

    def _forget(self, child: _Child) -> None:
        key = (child.spec.run_id, child.spec.attempt)
        live = self._live.get(key)
        if live is not None and live.handle is child:
            del self._live[key]
        if self._closed and not self._live:
            self._watcher.close()
        if child.params_dir is not None:
            shutil.rmtree(child.params_dir, ignore_errors=True)


def _no_inherited_descriptors() -> None:
    """Mark every descriptor above stderr close-on-exec, as Popen's close_fds does for its child.

    posix_spawn passes on whatever is not close-on-exec. Everything Python (and libpq) opens is,
    so only descriptors this process inherited from its own parent are left: they are the
    parent's business and must not reach a run either.
    """
    try:
        names = os.listdir("/proc/self/fd")  # noqa: PTH208 - names, not Path objects
    except OSError:  # no /proc: nothing to sweep with
        return
    for name in names:
        fd = int(name)
        if fd > 2:
            with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
                if os.get_inheritable(fd):
                    os.set_inheritable(fd, False)


def _child_of(execution: Execution) -> _Child:
    child = execution.handle
    if not isinstance(child, _Child):
        raise PermanentExecutorError(
            f"run {execution.run_id} was not started by this inline executor",
            error_code="invalid_spec",
        )
    return child


def _check_command(program: str, path: str | None) -> None:
    """Raise the permanent error `exec` would give for `program`, before spawning it."""
    if "/" in program:
        candidates = [Path(program)]
    else:
        candidates = [Path(d or ".", program) for d in (path or os.defpath).split(os.pathsep)]
    found_but_not_executable = False
    for candidate in candidates:
        if candidate.is_file():
            if os.access(candidate, os.X_OK):
                return
            found_but_not_executable = True
    if found_but_not_executable:
        raise PermanentExecutorError(
            f"command {program!r} is not executable", error_code="permission_denied"
        )
    raise PermanentExecutorError(f"command {program!r} not found", error_code="command_not_found")


def _write_params_dir(path: Path, files: dict[str, str]) -> None:
    """The spilled params as files in a fresh directory only this user can read."""
    try:
        shutil.rmtree(path, ignore_errors=True)  # a leftover of a killed launcher
        path.mkdir(mode=0o700)
        for name, content in files.items():
            fd = os.open(path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(content)
    except OSError as exc:
        shutil.rmtree(path, ignore_errors=True)
        raise TemporaryExecutorError(
            f"cannot write the params files in {path}: {exc.strerror}", error_code="spawn_failed"
        ) from exc


def _spawn_error(program: str, exc: OSError) -> Exception:
    if exc.errno == errno.ENOENT:
        return PermanentExecutorError(
            f"command {program!r} not found", error_code="command_not_found"
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return PermanentExecutorError(
            f"command {program!r} is not executable", error_code="permission_denied"
        )
    if exc.errno == errno.E2BIG:
        return PermanentExecutorError(
            f"cannot start {program!r}: its arguments and environment are larger than the "
            "kernel allows (E2BIG); shrink the command or the launcher's environment",
            error_code="env_too_large",
        )
    if exc.errno == errno.ENOEXEC:
        return PermanentExecutorError(
            f"command {program!r} is not a program this system can run",
            error_code="permission_denied",
        )
    reason = errno.errorcode.get(exc.errno or 0, "error")
    if exc.errno in _TEMPORARY_SPAWN_ERRNOS:
        return TemporaryExecutorError(
            f"cannot start {program!r} now ({reason}: {exc.strerror})", error_code="spawn_failed"
        )
    return TemporaryExecutorError(
        f"cannot start {program!r} ({reason}: {exc.strerror})", error_code="spawn_failed"
    )


def read_log_tail(path: str | Path, tail_bytes: int = 65536) -> str:
    """The last `tail_bytes` of a log file, decoded leniently; "" when there is no file."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - tail_bytes))
            return fh.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def _open_if_exists(path: str | Path) -> BinaryIO | None:
    try:
        return open(path, "rb")
    except FileNotFoundError:
        return None


async def follow_log(
    path: str | Path,
    *,
    poll: float = 0.2,
    stop: Callable[[], Awaitable[bool]] | None = None,
) -> AsyncIterator[str]:
    """Yield a log file's text as it grows (from its start), like `tail -f`.

    Ends once `stop()` says the run has ended and the file has been read to its end; without
    `stop` it follows until cancelled. A file that does not exist yet is waited for.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    fh = None
    position = 0
    ended = False
    try:
        while True:
            if fh is None:
                fh = _open_if_exists(path)
            data = b""
            if fh is not None:
                if os.fstat(fh.fileno()).st_size < position:  # rewritten by a new execution
                    fh.seek(0)
                    decoder.reset()
                data = fh.read(_READ_CHUNK)
                position = fh.tell()
            if data:
                text = decoder.decode(data)
                if text:
                    yield text
                continue
            if ended:
                if final := decoder.decode(b"", final=True):
                    yield final
                return
            if stop is not None and await stop():
                # Read to the end once more: the run may have written its last bytes after our
                # previous read but before it ended.
                ended = True
                continue
            await asyncio.sleep(poll)
    finally:
        if fh is not None:
            fh.close()
