"""The spawner: a helper process that starts, watches and reaps the inline executor's runs
(`RUNLANE_INLINE_SPAWN=process`), so that none of that costs the launcher's own CPU.

Why: at a thousand runs a second the launcher's share of a run is mostly its process — the
vfork wait of the spawn, the pidfd, the pipe reads, the reaping — not its database work
(docs/performance.md, "Off the event loop"). Here the launcher sends one message per run and
gets one back when it ends; the spawner does the rest on the other core.

The spawner (`Server`, run as `python -I -S spawner.py <launcher pid> <import root>`) imports
only the stdlib and `runlane.adapters.files.bounded` (the bounded log writer, itself `os`
alone). It is the runs' parent, so everything the inline executor promises of a run holds here
as it does in the launcher:

- each run is spawned with `os.posix_spawn` (vfork) as an argv list, never a shell, in a new
  process group, stdin `/dev/null`, stdout and stderr on a pipe the spawner reads into the
  run's bounded log file (`BoundedLog`), the environment = the launcher's plus the run's;
- when a run's command exits, its whole group is SIGKILLed before the leader is reaped (the
  unreaped leader pins the group id, so the kill cannot reach anyone else's processes), and
  output still arriving is read for `DRAIN_AFTER_EXIT_SECONDS`;
- when the launcher is gone (EOF on the command pipe, its pidfd, or a new parent), every live
  run's group is SIGKILLed, the runs are reaped, and the spawner exits: the guardian's duty,
  done by the runs' own parent, so it never races a reaped pid.

It sits in its own session (a Ctrl-C to the launcher's terminal does not reach it). Messages
both ways are frames: a 4-byte little-endian length, then a `marshal`led tuple (the launcher
and the spawner are the same interpreter). Launcher → spawner:

    (SPAWN, tag, argv, env, log_path, log_max_bytes, tail_bytes, tail_lines)
    (SIGNAL, tag, signum)   signal the run's group unless its command has exited
    (ENV, env)              the launcher's environment, the base of every run's (sent first)

Spawner → launcher:

    (STARTED, tag, pid)
    (FAILED, tag, errno, text)        errno 0: a ValueError (a NUL byte, an unpaired surrogate)
    (ENDED, tag, returncode, tail, drain_cut, log_write_error, signalled)

`signalled` says whether a SIGNAL reached the group while its command was still running: a
deadline that fires as the command exits on its own does not turn a success into a timeout.
"""

from __future__ import annotations

import errno
import marshal
import os
import select
import signal
import sys
import time

if __name__ == "__main__":  # run as a script: find runlane where the launcher said it is
    sys.path.insert(0, sys.argv[2])

from runlane.adapters.files.bounded import READ_CHUNK, BoundedLog, tail_text

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the spawner does not import typing
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

SPAWN, SIGNAL, ENV = 0, 1, 2
STARTED, FAILED, ENDED = 0, 1, 2
# After a run's command exits, a descendant may still hold the output pipe open; it is read for
# this long, then closed so the run can end.
DRAIN_AFTER_EXIT_SECONDS = 1.0
PIPE_SIZE = 1 << 20  # both message pipes: room for bursts while the other side is busy
_SIGKILL = 9
# Signals Python ignores that a child must start with at their defaults (Popen's restore_signals).
RESTORED_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, name)
)


def frame(message: tuple[Any, ...]) -> bytes:
    body = marshal.dumps(message)
    return len(body).to_bytes(4, "little") + body


def unframe(buffer: bytearray) -> list[tuple[Any, ...]]:
    """The complete messages at the start of `buffer`, which keeps what is left of it."""
    messages = []
    pos, size = 0, len(buffer)
    while size - pos >= 4:
        end = pos + 4 + int.from_bytes(buffer[pos : pos + 4], "little")
        if end > size:
            break
        # Only ever our own frames, over pipes private to the launcher and its spawner.
        messages.append(marshal.loads(buffer[pos + 4 : end]))  # noqa: S302
        pos = end
    del buffer[:pos]
    return messages


def find_executable(
    program: str, path: str | None, cache: dict[tuple[str, str | None], str]
) -> str:
    """The file `execvpe` would run for `program` on `path` (Popen's lookup), cached per
    (program, PATH); raises the OSError exec would give."""
    if "/" in program:
        return program
    key = (program, path)
    found = cache.get(key)
    if found is not None:
        return found
    denied = False
    for directory in os.get_exec_path({"PATH": path} if path is not None else {}):
        candidate = os.path.join(directory, program)  # noqa: PTH118 - str in, str out
        if os.path.isfile(candidate):  # noqa: PTH113
            if os.access(candidate, os.X_OK):
                cache[key] = candidate
                return candidate
            denied = True
    code = errno.EACCES if denied else errno.ENOENT
    raise OSError(code, os.strerror(code), program)


def posix_spawn_run(
    executable: str,
    argv: list[str],
    env: dict[str, str],
    stdin_fd: int,
    output_fd: int,
    *,
    new_session: bool = False,
) -> int:
    """A run's process: `os.posix_spawn` (vfork) of `argv` in a new process group (with
    `new_session`, a new session and its group: no controlling terminal, as a spawner's runs
    have none), stdin from `stdin_fd`, stdout and stderr to `output_fd`, Python's ignored
    signals back at their defaults. Returns the pid, which is the group's id either way."""
    file_actions = [
        (os.POSIX_SPAWN_DUP2, stdin_fd, 0),
        (os.POSIX_SPAWN_DUP2, output_fd, 1),
        (os.POSIX_SPAWN_DUP2, output_fd, 2),
    ]
    if new_session:  # (setsid and setpgroup together fail: a session leader cannot setpgid)
        return os.posix_spawn(
            executable,
            argv,
            env,
            file_actions=file_actions,
            setsid=True,
            setsigdef=RESTORED_SIGNALS,
        )
    return os.posix_spawn(
        executable, argv, env, file_actions=file_actions, setpgroup=0, setsigdef=RESTORED_SIGNALS
    )


def spawn_found(
    program: str,
    path: str | None,
    cache: dict[tuple[str, str | None], str],
    spawn: Callable[[str], int],
) -> int:
    """`spawn(executable)` for the file `program` names on `path` (`find_executable`); a cached
    location that went away is looked up again, once. Returns the pid."""
    for attempt in (1, 2):
        executable = find_executable(program, path, cache)
        try:
            return spawn(executable)
        except FileNotFoundError:
            if attempt == 2 or cache.pop((program, path), None) is None:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


class _Run:
    __slots__ = ("drain_at", "fd", "log", "pid", "rc", "signalled", "tag", "tail_lines")

    def __init__(self, tag: int, pid: int, fd: int, log: BoundedLog, tail_lines: int) -> None:
        self.tag = tag
        self.pid = pid
        self.fd: int | None = fd
        self.log = log
        self.tail_lines = tail_lines
        self.rc: int | None = None
        self.signalled = False
        self.drain_at = 0.0


class Server:
    """The spawner's loop: commands in on `fd_in`, runs' output and exits, reports out on
    `fd_out`."""

    def __init__(self, launcher_pid: int, fd_in: int = 0, fd_out: int = 1) -> None:
        self.launcher_pid = launcher_pid
        self.fd_in = fd_in
        self.fd_out = fd_out
        self.env = dict(os.environ)  # the launcher's, as it started us
        self.devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        self.resolved: dict[tuple[str, str | None], str] = {}
        self.runs: dict[int, _Run] = {}  # by tag
        self.by_pid: dict[int, _Run] = {}  # not yet reaped
        self.by_fd: dict[int, _Run] = {}  # output pipe still open
        self.draining: dict[int, _Run] = {}  # exited, pipe still open: by tag
        self.out: list[bytes] = []
        self.inbox = bytearray()
        os.set_blocking(fd_in, False)
        self.poller = select.epoll()
        self.poller.register(fd_in, select.EPOLLIN)
        # SIGCHLD wakes the loop through the wake-up pipe (the handler itself does nothing).
        self.wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        self.poller.register(self.wake_r, select.EPOLLIN)
        self.parent_fd = -1
        try:
            self.parent_fd = os.pidfd_open(launcher_pid)
            self.poller.register(self.parent_fd, select.EPOLLIN)
        except (AttributeError, OSError):  # no pidfd here, or the launcher is already gone
            self.parent_fd = -1

    def serve(self) -> None:
        """Until the launcher is gone; then kill and reap every live run."""
        poll = self.poller.poll
        try:
            while os.getppid() == self.launcher_pid:
                timeout = -1.0
                if self.draining:
                    first = min(run.drain_at for run in self.draining.values())
                    timeout = max(0.0, first - time.monotonic())
                for fd, _ in poll(timeout):
                    if fd == self.fd_in:
                        if not self._read_commands():
                            return
                    elif fd == self.wake_r:
                        self._drain_wakeups()
                        self._reap()
                    elif fd == self.parent_fd:
                        return
                    else:
                        self._on_output(fd)
                if self.draining:
                    self._cut_drains()
                if self.out:
                    self._flush()
        except BrokenPipeError:  # the launcher stopped reading: it is gone
            return
        finally:
            self._kill_all()

    # -- commands ---------------------------------------------------------------------------

    def _read_commands(self) -> bool:
        """Read and carry out what is buffered; False at EOF (the launcher is gone: what came
        with the EOF is not carried out, nobody would watch it)."""
        inbox = self.inbox
        while True:
            try:
                data = os.read(self.fd_in, 1 << 20)
            except BlockingIOError:
                break
            if not data:
                return False
            inbox += data
        for message in unframe(inbox):
            if message[0] == SPAWN:
                self._spawn(*message[1:])
            elif message[0] == SIGNAL:
                self._signal(message[1], message[2])
            elif message[0] == ENV:
                self.env = message[1]
        return True

    def _spawn(
        self,
        tag: int,
        argv: list[str],
        env_delta: dict[str, str],
        log_path: str,
        log_max_bytes: int,
        tail_bytes: int,
        tail_lines: int,
    ) -> None:
        env = {**self.env, **env_delta} if env_delta else self.env
        path = env.get("PATH")
        try:
            pid, read_fd = self._posix_spawn(argv, env, path)
        except OSError as exc:
            self.out.append(frame((FAILED, tag, exc.errno or 0, exc.strerror or str(exc))))
            return
        except ValueError as exc:  # a NUL byte, or (UnicodeEncodeError) an unpaired surrogate
            self.out.append(frame((FAILED, tag, 0, str(exc))))
            return
        run = _Run(tag, pid, read_fd, BoundedLog(log_path, log_max_bytes, tail_bytes), tail_lines)
        self.runs[tag] = run
        self.by_pid[pid] = run
        self.by_fd[read_fd] = run
        self.poller.register(read_fd, select.EPOLLIN)
        self.out.append(frame((STARTED, tag, pid)))

    def _posix_spawn(
        self, argv: list[str], env: dict[str, str], path: str | None
    ) -> tuple[int, int]:
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)

        def spawn(executable: str) -> int:
            return posix_spawn_run(executable, argv, env, self.devnull, write_fd)

        try:
            pid = spawn_found(argv[0], path, self.resolved, spawn)
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        os.set_blocking(read_fd, False)
        return pid, read_fd

    def _signal(self, tag: int, signum: int) -> None:
        run = self.runs.get(tag)
        if run is None or run.rc is not None:
            return
        try:
            exited = os.waitid(os.P_PID, run.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # pragma: no cover - only we reap our children
            return
        if exited is not None:
            return  # its command is over; the reap ends the group
        try:
            os.killpg(run.pid, signum)  # our unreaped child: the group is still its own
        except (ProcessLookupError, PermissionError):
            return
        run.signalled = True

    # -- runs ---------------------------------------------------------------------------------

    def _drain_wakeups(self) -> None:
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _reap(self) -> None:
        by_pid = self.by_pid
        while by_pid:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None:
                return
            pid = info.si_pid
            # What the command left in its group ends with it, killed while its leader's zombie
            # still pins the group id.
            try:  # noqa: SIM105 - contextlib would cost the spawner's startup an import
                os.killpg(pid, _SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            _, status = os.waitpid(pid, 0)
            run = by_pid.pop(pid, None)
            if run is None:  # pragma: no cover - every child of ours is a run
                continue
            run.rc = os.waitstatus_to_exitcode(status)
            if run.fd is None:
                self._end(run, drain_cut=False)
            else:
                run.drain_at = time.monotonic() + DRAIN_AFTER_EXIT_SECONDS
                self.draining[run.tag] = run

    def _on_output(self, fd: int) -> None:
        run = self.by_fd.get(fd)
        if run is None:  # pragma: no cover - unregistered when closed
            return
        try:
            data = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            run.log.feed(data)
            return
        self._close_pipe(run)
        if run.rc is not None:
            del self.draining[run.tag]
            self._end(run, drain_cut=False)

    def _close_pipe(self, run: _Run) -> None:
        fd = run.fd
        if fd is not None:
            self.poller.unregister(fd)
            del self.by_fd[fd]
            os.close(fd)
            run.fd = None

    def _cut_drains(self) -> None:
        now = time.monotonic()
        for run in [run for run in self.draining.values() if run.drain_at <= now]:
            del self.draining[run.tag]
            fd = run.fd
            try:
                while fd is not None and (data := os.read(fd, READ_CHUNK)):
                    run.log.feed(data)
            except OSError:
                pass
            self._close_pipe(run)
            self._end(run, drain_cut=True)

    def _end(self, run: _Run, *, drain_cut: bool) -> None:
        del self.runs[run.tag]
        log = run.log
        log.close()
        tail = tail_text(bytes(log.ring), run.tail_lines)
        self.out.append(
            frame((ENDED, run.tag, run.rc, tail, drain_cut, log.write_error, run.signalled))
        )

    def _flush(self) -> None:
        data = b"".join(self.out)
        self.out.clear()
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd_out, view) :]

    def _kill_all(self) -> None:
        """The launcher is gone: end every live run's group and reap it."""
        for pid in self.by_pid:
            try:  # noqa: SIM105
                os.killpg(pid, _SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in list(self.by_pid):
            try:  # noqa: SIM105
                os.waitpid(pid, 0)
            except ChildProcessError:  # pragma: no cover
                pass
        self.by_pid.clear()
        for run in self.runs.values():
            run.log.close()


def main(argv: list[str]) -> int:
    Server(int(argv[1])).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
