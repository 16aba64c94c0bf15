"""The guardian: a tiny helper process that kills the inline executor's runs when the launcher dies.

Why: a kernel parent-death signal (`PR_SET_PDEATHSIG`) must be set inside the child, which costs
either a second exec (`setpriv --pdeathsig KILL --`) or a `preexec_fn` (which forces `fork()`
instead of `vfork()`). Both roughly halve spawn throughput. With a guardian the executor spawns
runs with a plain vfork spawn (`os.posix_spawn`) and tells the guardian about each run's
process group instead. It also guards more: the whole group dies, grandchildren included, where
PDEATHSIG reaches only the direct child.

The guardian (`serve`, run as `python -I -S guardian.py <launcher pid>`) is stdlib-only and
imports nothing of runlane, so it starts in ~10 ms and stays small. It sits in its own session
(a Ctrl-C or a signal to the launcher's process group does not reach it), stdout/stderr go to
/dev/null, and stdin is the command pipe from the launcher:

    +<pgid>\\n   a run's process group to kill if the launcher dies (written right after spawn)
    -<pgid>\\n   forget it (written when the leader has exited, just before it is reaped, so the
                pgid cannot yet belong to anybody else)

Each line is far below PIPE_BUF, so each write is atomic. When the launcher dies, the kernel
closes its end of the pipe: the guardian reads every line still buffered, sees EOF, SIGKILLs each
registered group and exits. Two backstops cover a write end kept open elsewhere (a forked
copy of the launcher): a pidfd on the launcher, and a check of `getppid()` on every wake-up.

A write does not wake the guardian: it polls the pipe for hang-up only (a writer's wake-up
carries POLLIN, which the kernel does not deliver to a POLLHUP-only waiter) and drains what is
buffered every `_DRAIN_SECONDS`, so a run costs the launcher two cheap pipe writes and no context
switch. Nothing is decided from a line until the launcher is gone, and then every buffered line
is read first, so the delay changes nothing about which groups are killed. A guardian never gets a parent-death signal itself: it must
outlive the launcher long enough to do its job.

The launcher side (`Guardian`) starts the process lazily, restarts it when it dies or its pipe
breaks (and re-registers every live group), and closes it cleanly (EOF with nothing registered).

The module imports only `os`, `select`, `sys` and `time` at module level (no
contextlib, no pathlib, nothing of runlane): `python -I -S` does not even load `os` on its own.

Limits, by design:
- Between the spawn returning and the `+pgid` write (microseconds, on the thread that spawned:
  a spawn thread writes it before it hands the spawn to the event loop) a launcher death
  leaves that one run unguarded.
- After the guardian dies and before it is replaced (at once when the loop sees the death via a
  pidfd, else on the next spawn) the live runs are unguarded.
- A run's group is forgotten when its leader is reaped: descendants it left behind are not
  killed later (the same as with PDEATHSIG, which never reached them at all).
- SIGKILL of the whole cgroup (systemd's default stop) kills the guardian too, and the runs
  with it; nothing to do there.
"""

from __future__ import annotations

import os
import select
import sys
import time

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: the guardian does not import typing
if TYPE_CHECKING:
    import asyncio
    import subprocess
    import weakref

# POSIX fixes SIGKILL at 9; the `signal` module would cost the guardian 4 ms of imports (enum).
_SIGKILL = 9
# How often the guardian drains its pipe (it is never woken by a write) and checks its parent.
_DRAIN_SECONDS = 0.1
_READ_CHUNK = 65536
_PIPE_SIZE = 1 << 20  # room for ~65,000 pending lines if the guardian falls behind
# More starts than this within the window means the guardian cannot run here: stop trying.
_MAX_STARTS = 5
_START_WINDOW_SECONDS = 10.0
_CLOSE_WAIT_SECONDS = 5.0


# -- the guardian process -------------------------------------------------------------------------


def _apply(groups: set[int], data: bytes) -> None:
    for line in data.split(b"\n"):
        if len(line) < 2:
            continue
        try:
            pgid = int(line[1:])
        except ValueError:
            continue
        if pgid <= 1:  # never killpg(0) (our own group) or anything at or below init
            continue
        if line[:1] == b"+":
            groups.add(pgid)
        elif line[:1] == b"-":
            groups.discard(pgid)


def serve(launcher_pid: int, fd: int = 0) -> set[int]:
    """Read commands from `fd` until the launcher is gone; return the groups still registered.

    The launcher is gone on EOF, when its pidfd becomes readable, or when our parent changes.
    Whatever is already buffered in the pipe is read first, so a `-pgid` written just before the
    launcher died is honoured.
    """
    os.set_blocking(fd, False)
    groups: set[int] = set()
    pending = b""
    poller = select.poll()
    # Hang-up only: the launcher's writes must not wake us (see the module docstring).
    poller.register(fd, select.POLLHUP)
    parent_fd = -1
    try:
        parent_fd = os.pidfd_open(launcher_pid)
        poller.register(parent_fd, select.POLLIN)
    except (AttributeError, OSError):  # no pidfd here, or the launcher is already gone
        parent_fd = -1
    drain_ms = int(_DRAIN_SECONDS * 1000)
    while True:
        # Checked after the pidfd was opened, so a launcher that died before that is seen here.
        gone = os.getppid() != launcher_pid
        events = [] if gone else poller.poll(drain_ms)
        gone = gone or any(efd == parent_fd for efd, _ in events)
        eof = False
        while True:
            try:
                data = os.read(fd, _READ_CHUNK)
            except BlockingIOError:
                break
            except InterruptedError:  # pragma: no cover - PEP 475 retries for us
                continue
            if not data:
                eof = True
                break
            pending += data
            cut = pending.rfind(b"\n") + 1
            if cut:
                _apply(groups, pending[:cut])
                pending = pending[cut:]
        if eof or gone:
            return groups


def kill_groups(groups: set[int]) -> None:
    for pgid in groups:
        try:  # noqa: SIM105 - contextlib would cost the guardian's startup an import
            os.killpg(pgid, _SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def main(argv: list[str]) -> int:
    # No SIGINT handling needed: in its own session no terminal sends it one.
    launcher_pid = int(argv[1]) if len(argv) > 1 else os.getppid()
    kill_groups(serve(launcher_pid))
    return 0


# -- the launcher side ----------------------------------------------------------------------------


class GuardianError(OSError):
    """The guardian could not be started or reached: new runs would be unguarded."""


def guardian_argv() -> list[str] | None:
    """How to start the guardian with this interpreter, or None when it cannot be started."""
    if not sys.executable:
        return None
    path = os.path.abspath(__file__)  # noqa: PTH100 - no pathlib in the guardian module
    if os.path.isfile(path):  # noqa: PTH113
        # By path, isolated and without site: nothing but the stdlib is looked at or imported.
        return [sys.executable, "-I", "-S", path]
    return [sys.executable, "-m", __name__]  # pragma: no cover - zipped installs


class _Process:
    """One guardian process as the launcher holds it. `lock` guards `wfd` for writers on other
    threads (`Guardian.announce`): the descriptor is closed under it, so such a write never
    lands in a file that has since taken the same number."""

    __slots__ = ("lock", "loop", "pidfd", "popen", "wfd")

    def __init__(self, popen: subprocess.Popen[bytes], wfd: int) -> None:
        import threading

        self.popen = popen
        self.wfd = wfd
        self.pidfd = -1
        self.loop: asyncio.AbstractEventLoop | None = None
        self.lock = threading.Lock()

    def write(self, line: bytes) -> bool:
        """Write `line` (< PIPE_BUF: all or nothing) unless our end is closed; False when it
        could not be written (closed, dead or stuck)."""
        with self.lock:
            if self.wfd < 0:
                return False
            try:
                os.write(self.wfd, line)
            except OSError:
                return False
            return True

    def stop(self, *, kill: bool) -> None:
        """Close our end and reap it. `kill` first when replacing it: a live guardian that saw
        EOF would kill every group it holds, and the replacement holds them now."""
        popen = self.popen
        if kill and popen.returncode is None:
            popen.kill()  # our unreaped child: the pid cannot name anyone else
        if self.pidfd >= 0:
            if self.loop is not None:
                self.loop.remove_reader(self.pidfd)  # a no-op once the loop is closed
            os.close(self.pidfd)
            self.pidfd = -1
        with self.lock:
            if self.wfd >= 0:
                os.close(self.wfd)
                self.wfd = -1
        import subprocess

        try:
            popen.wait(timeout=_CLOSE_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()


class Guardian:
    """The launcher's handle on its guardian: `register`/`unregister` process groups.

    The set of registered groups lives here; the process only mirrors it, so a replacement
    process is simply sent the whole set. Call from one thread (the event loop's), except
    `announce` and `withdraw`, which any thread may call.
    """

    def __init__(self, argv: list[str] | None = None) -> None:
        self.argv = argv or guardian_argv()
        self.groups: set[int] = set()
        self._proc: _Process | None = None
        self._finalizer: weakref.finalize[..., Guardian] | None = None
        self._starts: list[float] = []
        self.starts = 0  # processes started so far, for tests and the bench

    @property
    def pid(self) -> int | None:
        return self._proc.popen.pid if self._proc is not None else None

    def ensure(self) -> None:
        """Start the guardian if none is running (as far as we know). Raises GuardianError."""
        if self._proc is None:
            self._start()

    def announce(self, pgid: int) -> object | None:
        """From any thread, right after a spawn: tell the running guardian process about `pgid`
        at once, before the event loop has seen the spawn (a spawn on a worker thread reaches
        the loop a little later). Returns a token for `register(pgid, announced=…)`, or None
        when nothing was written (no guardian, or it died: `register` starts another). The
        loop's `register` (or `withdraw`, for a start given up) must follow."""
        proc = self._proc
        if proc is not None and proc.write(b"+%d\n" % pgid):
            return proc
        return None

    def withdraw(self, pgid: int) -> None:
        """From any thread: take back an `announce` that no `register` follows (a start given
        up), before the group's leader is reaped. Never raises."""
        proc = self._proc
        if proc is not None:
            proc.write(b"-%d\n" % pgid)

    def register(self, pgid: int, *, announced: object | None = None) -> None:
        """Guard `pgid`. Raises GuardianError if no guardian holds it now (it stays in the set
        and is sent to the next guardian started). `announced`: what `announce` returned; when
        it is the running process, the line is there already and is not written again."""
        self.groups.add(pgid)
        if announced is not None and announced is self._proc:
            return
        self._send(b"+%d\n" % pgid)

    def unregister(self, pgid: int) -> None:
        """Forget `pgid`: call once its leader has exited, before it is reaped. Never raises."""
        if pgid in self.groups:
            self.groups.discard(pgid)
            if self._proc is None:
                return  # nothing to tell: the next guardian is sent the set
            try:  # noqa: SIM105
                self._send(b"-%d\n" % pgid)
            except GuardianError:
                pass  # the set no longer holds it; the next guardian is sent the set

    def close(self) -> None:
        """Stop the guardian: EOF, it kills what is still registered (normally nothing)."""
        proc = self._drop()
        if proc is not None:
            proc.stop(kill=False)

    # -- internals --------------------------------------------------------------------------

    def _drop(self) -> _Process | None:
        """Let go of the current process (the caller stops it) and of its finalizer."""
        proc, self._proc = self._proc, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        return proc

    def _send(self, line: bytes) -> None:
        proc = self._proc
        if proc is None:
            self._start()  # sends the whole set, `line` included in effect
            return
        # Non-blocking and < PIPE_BUF: all or nothing. EAGAIN means ~65,000 lines are
        # waiting, so the guardian is stuck: replace it like a dead one (EPIPE: it died).
        if not proc.write(line):
            self._start()

    def _start(self) -> None:
        old = self._drop()
        if old is not None:
            old.stop(kill=True)
        now = time.monotonic()
        self._starts = [t for t in self._starts if now - t < _START_WINDOW_SECONDS]
        if len(self._starts) >= _MAX_STARTS:
            raise GuardianError(
                f"the guardian process exited {len(self._starts)} times within "
                f"{_START_WINDOW_SECONDS:g}s"
            )
        if self.argv is None:
            raise GuardianError("no Python interpreter to run the guardian with")
        self._starts.append(now)
        import subprocess
        import weakref

        try:
            rfd, wfd = os.pipe()
        except OSError as exc:
            raise GuardianError(f"cannot start the guardian process: {exc}") from exc
        try:
            popen = subprocess.Popen(
                [*self.argv, str(os.getpid())],
                stdin=rfd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            os.close(wfd)
            raise GuardianError(f"cannot start the guardian process: {exc}") from exc
        finally:
            os.close(rfd)
        proc = _Process(popen, wfd)
        self._proc = proc
        self._finalizer = weakref.finalize(self, proc.stop, kill=False)
        self.starts += 1
        self._watch(proc)
        import fcntl

        if hasattr(fcntl, "F_SETPIPE_SZ"):  # Linux
            try:  # noqa: SIM105
                fcntl.fcntl(wfd, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
            except OSError:
                pass  # above /proc/sys/fs/pipe-max-size: the default 64 KiB will do
        # Under the process's lock: a spawn thread's `announce` must not cut into the set's
        # lines (this write may take several chunks), nor write before the pipe is non-blocking.
        with proc.lock:
            error = self._send_set(wfd)
        if error is not None:
            self._drop()
            proc.stop(kill=True)
            raise GuardianError(f"cannot reach the guardian process: {error}") from error

    def _send_set(self, wfd: int) -> OSError | None:
        """Write every registered group to a fresh pipe, then make it non-blocking."""
        if self.groups:
            # A fresh pipe is empty and the guardian reads it as soon as it runs: a blocking
            # write of the whole set returns quickly even when it exceeds the pipe's size.
            payload = b"".join(b"+%d\n" % pgid for pgid in self.groups)
            try:
                view = memoryview(payload)
                while view:
                    view = view[os.write(wfd, view) :]
            except OSError as exc:
                return exc
        os.set_blocking(wfd, False)
        return None

    def _watch(self, proc: _Process) -> None:
        """Replace the guardian as soon as it dies while groups are registered (needs a pidfd and
        a running event loop; without them it is replaced on the next spawn)."""
        import asyncio

        try:
            loop = asyncio.get_running_loop()
            proc.pidfd = os.pidfd_open(proc.popen.pid)
        except (AttributeError, OSError, RuntimeError):
            return
        proc.loop = loop
        loop.add_reader(proc.pidfd, self._on_exit, proc)

    def _on_exit(self, proc: _Process) -> None:
        if proc is not self._proc:
            return
        self._drop()
        proc.stop(kill=True)
        if self.groups:
            try:  # noqa: SIM105
                self._start()
            except GuardianError:
                pass  # the next spawn tries again, and fails with the reason


if __name__ == "__main__":
    sys.exit(main(sys.argv))
