"""A run's process: how it is spawned (os.posix_spawn or Popen, its output on a pipe) and the
state machine that watches it to its end (`Child`: output, exit, deadline, termination)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Protocol

from runlane.adapters.files.logfile import READ_CHUNK, BoundedLog, tail_text
from runlane.adapters.local.fdwatch import FdWatcher
from runlane.adapters.local.guardian import Guardian, GuardianError
from runlane.adapters.local.libcspawn import LibcSpawn
from runlane.adapters.local.spawner import DRAIN_AFTER_EXIT_SECONDS as _DRAIN_AFTER_EXIT_SECONDS
from runlane.adapters.local.spawner import RESTORED_SIGNALS as RESTORED_SIGNALS  # re-exported
from runlane.adapters.local.spawner import posix_spawn_run, spawn_found
from runlane.core.runs import EndReason, Outcome, RunStatus, joined_notes
from runlane.errors import PermanentExecutorError, TemporaryExecutorError
from runlane.ports import ExecutionSpec

_TEMPORARY_SPAWN_ERRNOS = frozenset({errno.EAGAIN, errno.EMFILE, errno.ENFILE, errno.ENOMEM})
_UNRESOLVABLE_PATH_ERRNOS = frozenset({errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG})


def signal_error_code(signum: int) -> str:
    """`signal_sigsegv` for 11; `signal_<n>` for a number with no name."""
    try:
        return f"signal_{signal.Signals(signum).name.lower()}"
    except ValueError:
        return f"signal_{signum}"


class Process(Protocol):
    """What `Child` needs of a spawned process: `subprocess.Popen` or `SpawnedProcess`."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...


class SpawnedProcess:
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


class KillClock:
    """When a run's process group gets its SIGKILL: the soonest of the graces asked for. A
    later, shorter grace (a shutdown or a lost lease hurrying a run already in the grace of its
    deadline or of a cancel) brings the SIGKILL forward; a longer one changes nothing."""

    __slots__ = ("_at", "_kill", "_loop", "_timer")

    def __init__(self, loop: asyncio.AbstractEventLoop, kill: Callable[[], None]) -> None:
        self._loop = loop
        self._kill = kill  # sends the SIGKILL
        self._at: float | None = None  # loop time the group is (to be) killed
        self._timer: asyncio.TimerHandle | None = None

    def kill_by(self, grace: float) -> None:
        """SIGKILL the group `grace` seconds from now (at once when ≤ 0), unless sooner."""
        at = self._loop.time() + max(0.0, grace)
        if self._at is not None and self._at <= at:
            return
        self._at = at
        self.stop()
        if grace <= 0:
            self._kill()
        else:
            self._timer = self._loop.call_later(grace, self._fire)

    def stop(self) -> None:
        """No SIGKILL pending any more (the process has been reaped)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        self._kill()


class ChildOwner(Protocol):
    """What a `Child` needs of the executor that started it."""

    tail_lines: int  # lines of output kept as the run's log tail
    watcher: FdWatcher

    def forget(self, child: Child) -> None:
        """The child has ended: it is no longer live."""


@dataclass(slots=True)
class Termination:
    status: RunStatus
    end_reason: str
    error_code: str | None = None
    note: str | None = None


class Child:
    """One live (or just finished) subprocess and everything that watches it."""

    def __init__(
        self,
        owner: ChildOwner,
        spec: ExecutionSpec,
        proc: Process,
        pipe_fd: int,
        log: BoundedLog,
        log_path: str,
        guardian: Guardian | None,
    ) -> None:
        self.owner = owner
        self.guardian = guardian  # the group is registered with it, if any
        self.spec = spec
        self.proc = proc
        self.pid = proc.pid
        self.loop = asyncio.get_running_loop()
        self.log = log
        self.log_path = log_path
        self.pipe_fd: int | None = pipe_fd
        self.pidfd: int | None = None
        self.returncode: int | None = None
        self.termination: Termination | None = None
        self.drain_cut = False
        self.params_dir: Path | None = None  # spilled params, removed when the run ends
        self.finished: asyncio.Future[Outcome] = self.loop.create_future()
        self._deadline_timer: asyncio.TimerHandle | None = None
        # Made by the first terminate or kill (most runs end on their own), dropped at the end.
        self._kill_clock: KillClock | None = None
        self._drain_timer: asyncio.TimerHandle | None = None

    # -- watching -----------------------------------------------------------------------------

    def watch(self) -> None:
        loop = self.loop
        watcher = self.owner.watcher
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
            data = os.read(fd, READ_CHUNK)
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
            self.owner.watcher.remove(self.pipe_fd)
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
        guardian = self.guardian
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
            self.owner.watcher.remove(self.pidfd)
            os.close(self.pidfd)
            self.pidfd = None
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        if self._kill_clock is not None:
            self._kill_clock.stop()
            self._kill_clock = None  # (it holds a reference back to this child)
        if self.pipe_fd is not None:
            self._drain_timer = self.loop.call_later(_DRAIN_AFTER_EXIT_SECONDS, self._cut_drain)
        self._maybe_finish()

    def _cut_drain(self) -> None:
        self._drain_timer = None
        fd = self.pipe_fd
        if fd is None:
            return
        with contextlib.suppress(OSError):
            while data := os.read(fd, READ_CHUNK):
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
            self.owner.forget(self)
            self.finished.set_result(self._outcome(self.returncode))

    def _outcome(self, rc: int) -> Outcome:
        return run_outcome(
            rc,
            self.termination,
            tail_text(bytes(self.log.ring), self.owner.tail_lines),
            drain_cut=self.drain_cut,
            log_write_error=self.log.write_error,
            log_path=self.log_path,
        )

    # -- ending it ----------------------------------------------------------------------------

    def _on_deadline(self) -> None:
        self._deadline_timer = None
        if self._has_exited():
            return  # the exit is already on its way to `_on_exit`
        self.terminate(
            Termination(RunStatus.TIMEOUT, EndReason.DEADLINE, error_code="deadline"),
            self.spec.kill_grace_seconds,
        )

    def terminate(self, termination: Termination, grace: float) -> None:
        """SIGTERM the group, SIGKILL it after `grace`. The first reason given is kept; a later
        call whose grace ends sooner brings the SIGKILL forward (a shutdown or a lost lease
        hurrying a run already in the grace of its deadline or of a cancel)."""
        if self.returncode is not None:
            return
        if self.termination is not None:
            self._killer().kill_by(grace)
            return
        self.termination = termination
        if grace > 0:
            self._signal_group(signal.SIGTERM)
        self._killer().kill_by(grace)

    def _killer(self) -> KillClock:
        if self._kill_clock is None:
            self._kill_clock = KillClock(self.loop, partial(self._signal_group, signal.SIGKILL))
        return self._kill_clock

    def kill(self, termination: Termination) -> None:
        """SIGKILL the group now; `termination` replaces an earlier reason."""
        if self.returncode is not None:
            return
        self.termination = termination
        self._killer().kill_by(0.0)

    def _signal_group(self, signum: int) -> None:
        # Only called before the leader is reaped: until then no other process can get its id,
        # so the group id cannot name someone else's processes.
        if self.returncode is not None:
            return
        try:  # noqa: SIM105 - not contextlib.suppress: this runs for every run that ends
            os.killpg(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def run_outcome(
    rc: int,
    term: Termination | None,
    tail: str,
    *,
    drain_cut: bool,
    log_write_error: str | None,
    log_path: str,
) -> Outcome:
    """What a run that exited with `rc` ended as: `term` (why it was ended) when it was ended,
    else by its exit; with notes for output not read and a log file left incomplete."""
    notes = []
    if drain_cut:
        notes.append(
            "a descendant process kept the output pipe open after the command exited; "
            f"output after {_DRAIN_AFTER_EXIT_SECONDS:g}s was not read"
        )
    if log_write_error is not None:
        notes.append(
            f"the log file {log_path} is incomplete: writing it failed "
            f"({log_write_error}); the tail here is complete"
        )
    note = joined_notes(*notes)
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


def unpassable_error(exc: ValueError | str) -> PermanentExecutorError:
    """A command or environment holding a NUL byte or an unpaired surrogate."""
    return PermanentExecutorError(
        "the run's command or environment holds a character no process can be given "
        f"(a NUL byte or an unpaired surrogate): {exc}",
        error_code="invalid_spec",
    )


class Spawner:
    """Starts a run's process in a new process group, stdin `/dev/null`, stdout and stderr on a
    pipe, with its log file opened: `os.posix_spawn` (vfork in glibc) where it can, else Popen
    (for a `preexec_fn`, or where there is no posix_spawn). With `libc`, glibc's posix_spawn
    through ctypes instead of `os.posix_spawn`: the same call, with the GIL released while the
    child execs, for spawns on worker threads (`libcspawn`)."""

    __slots__ = (
        "_libc",
        "_resolved",
        "devnull",
        "log_max_bytes",
        "new_session",
        "posix_spawn_ok",
        "preexec",
        "setpriv",
        "tail_bytes",
    )

    def __init__(
        self,
        *,
        log_max_bytes: int,
        tail_bytes: int,
        setpriv: str | None,
        preexec: Callable[[], None] | None,
        libc: LibcSpawn | None = None,
        new_session: bool = False,
    ) -> None:
        self.log_max_bytes = log_max_bytes
        # Each run in a session of its own (no controlling terminal), as a spawner's runs are:
        # the runs an executor with spawners spawns itself when idle.
        self.new_session = new_session
        self.tail_bytes = tail_bytes
        self.setpriv = setpriv  # argv is prefixed with `setpriv --pdeathsig KILL --`
        self.preexec = preexec
        self.devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        self._resolved: dict[tuple[str, str | None], str] = {}  # see spawner.find_executable
        self.posix_spawn_ok = preexec is None and hasattr(os, "posix_spawn")
        self._libc = libc if self.posix_spawn_ok else None
        if self.posix_spawn_ok:
            no_inherited_descriptors()

    def close(self) -> None:
        if self.devnull >= 0:
            os.close(self.devnull)
            self.devnull = -1

    def spawn(
        self, argv: list[str], env: dict[str, str], log_path: str, log_max_bytes: int | None = None
    ) -> tuple[int, Process, BoundedLog]:
        """Open the log, make the output pipe and spawn; blocking, so maybe on a worker thread.
        `log_max_bytes` is the run's cap on its log file (default: the spawner's)."""
        program = argv[0] if self.setpriv is None else argv[4]
        try:
            read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        except OSError as exc:  # EMFILE/ENFILE at the descriptor limit: temporary
            raise spawn_error(program, exc) from exc
        try:
            log = BoundedLog(log_path, log_max_bytes or self.log_max_bytes, self.tail_bytes)
        except OSError as exc:
            os.close(read_fd)
            os.close(write_fd)
            raise TemporaryExecutorError(
                f"cannot open the log file {log_path}: {exc.strerror}", error_code="spawn_failed"
            ) from exc
        proc: Process
        try:
            if self.posix_spawn_ok and min(write_fd, self.devnull) > 2:
                proc = self._posix_spawn(argv, env, write_fd)
            else:
                # Popen returns once the child has exec'd (vfork without a preexec_fn).
                proc = subprocess.Popen(
                    argv,
                    stdin=self.devnull,
                    stdout=write_fd,
                    stderr=subprocess.STDOUT,
                    env=env,
                    process_group=None if self.new_session else 0,
                    start_new_session=self.new_session,
                    preexec_fn=self.preexec,
                )
        except OSError as exc:
            os.close(read_fd)
            log.close()
            raise spawn_error(program, exc) from exc
        except ValueError as exc:  # a NUL byte, or (UnicodeEncodeError) an unpaired surrogate
            os.close(read_fd)
            log.close()
            raise unpassable_error(exc) from exc
        except BaseException:
            os.close(read_fd)
            log.close()
            raise
        finally:
            os.close(write_fd)
        return read_fd, proc, log

    def _posix_spawn(self, argv: list[str], env: dict[str, str], write_fd: int) -> Process:
        """What `Popen(argv, stdin=devnull, stdout=write_fd, stderr=STDOUT, env=env,
        process_group=0)` does, through glibc's vfork-based posix_spawn without Popen's Python
        machinery. The launcher's own descriptors are all close-on-exec (Python's default), so
        nothing else reaches the child."""
        program = argv[0]
        path = env.get("PATH")
        libc = self._libc

        def spawn(executable: str) -> int:
            if libc is not None:
                return libc.spawn(executable, argv, env, self.devnull, write_fd)
            return posix_spawn_run(
                executable, argv, env, self.devnull, write_fd, new_session=self.new_session
            )

        return SpawnedProcess(spawn_found(program, path, self._resolved, spawn))


def no_inherited_descriptors() -> None:
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


def check_command(program: str, path: str | None) -> None:
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


def spawn_error(program: str, exc: OSError) -> Exception:
    if exc.errno == errno.ENOENT:
        return PermanentExecutorError(
            f"command {program!r} not found", error_code="command_not_found"
        )
    if exc.errno in _UNRESOLVABLE_PATH_ERRNOS:
        # A path that can name no file (a component that is a file, a symlink loop, a name too
        # long): as permanent as a missing one, not a start to try again every few seconds.
        return PermanentExecutorError(
            f"command {program!r} not found ({errno.errorcode[exc.errno]}: {exc.strerror})",
            error_code="command_not_found",
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
