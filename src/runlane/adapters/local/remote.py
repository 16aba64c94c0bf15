"""The launcher's side of the spawner process (`spawner`): `SpawnerClient` sends it runs and
signals and reads back what became of them; `RemoteChild` is one run there, with the deadline,
the TERM → KILL grace and the outcome kept here, on the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import weakref
from functools import partial
from pathlib import Path
from typing import Protocol

from runlane.adapters.files.logfile import read_log_tail
from runlane.adapters.local import spawner as proto
from runlane.adapters.local.process import (
    KillClock,
    Termination,
    run_outcome,
    spawn_error,
    unpassable_error,
)
from runlane.core.runs import EndReason, Outcome, RunStatus
from runlane.errors import TemporaryExecutorError
from runlane.ports import ExecutionSpec

# This many spawner deaths within the window means it cannot run here: stop starting more.
_MAX_DEATHS = 5
_START_WINDOW_SECONDS = 10.0
_CLOSE_WAIT_SECONDS = 5.0
_READ_BYTES = 1 << 20


class SpawnerError(OSError):
    """The spawner process could not be started: new runs cannot start."""


def spawner_argv() -> list[str]:
    """How to start the spawner with this interpreter: by path, isolated and without site."""
    module = Path(proto.__file__).absolute()
    root = module.parents[3]  # .../runlane/adapters/local/spawner.py -> the import root
    return [sys.executable, "-I", "-S", str(module), str(os.getpid()), str(root)]


class RemoteOwner(Protocol):
    """What a `RemoteChild` needs of the executor that started it."""

    def forget(self, child: RemoteChild) -> None:
        """The run has ended: it is no longer live."""


class RemoteChild:
    """One run in the spawner: what `Child` is for a run the launcher spawns itself."""

    __slots__ = (
        "__weakref__",
        "_deadline_timer",
        "_kill_clock",
        "client",
        "finished",
        "log_path",
        "loop",
        "owner",
        "params_dir",
        "pid",
        "proc",
        "spec",
        "started",
        "tag",
        "termination",
    )

    def __init__(
        self, owner: RemoteOwner, client: SpawnerClient, spec: ExecutionSpec, log_path: str
    ) -> None:
        self.owner = owner
        self.client = client
        self.spec = spec
        self.log_path = log_path
        self.loop = asyncio.get_running_loop()
        self.tag = 0
        self.pid = 0
        self.proc: _Process | None = None  # the spawner it was sent to
        self.started: asyncio.Future[int] = self.loop.create_future()
        self.finished: asyncio.Future[Outcome] = self.loop.create_future()
        self.termination: Termination | None = None
        # The termination stands only if a signal reached the command while it ran: a deadline,
        # cancel or kill that finds it exited (reaped in the spawner, its end on its way) leaves
        # its exit as the outcome, as `Child` does.
        self.params_dir: Path | None = None
        self._deadline_timer: asyncio.TimerHandle | None = None
        # Made by the first terminate or kill (most runs end on their own), dropped at the end.
        self._kill_clock: KillClock | None = None

    def arm_deadline(self) -> None:
        if not self.finished.done():
            self._deadline_timer = self.loop.call_later(
                max(0.0, self.spec.deadline_seconds), self._on_deadline
            )

    def _on_deadline(self) -> None:
        self._deadline_timer = None
        self.terminate(
            Termination(RunStatus.TIMEOUT, EndReason.DEADLINE, error_code="deadline"),
            self.spec.kill_grace_seconds,
        )

    def terminate(self, termination: Termination, grace: float) -> None:
        """SIGTERM the group, SIGKILL it after `grace`. The first reason given is kept; a later
        call whose grace ends sooner brings the SIGKILL forward (as `Child.terminate`)."""
        if self.finished.done():
            return
        if self.termination is not None:
            self._killer().kill_by(grace)
            return
        self.termination = termination
        if grace > 0:
            self.client.signal(self, signal.SIGTERM)
        self._killer().kill_by(grace)

    def _killer(self) -> KillClock:
        if self._kill_clock is None:
            self._kill_clock = KillClock(
                self.loop, partial(self.client.signal, self, signal.SIGKILL)
            )
        return self._kill_clock

    def kill(self, termination: Termination) -> None:
        """SIGKILL the group now; `termination` replaces an earlier reason."""
        if self.finished.done():
            return
        self.termination = termination
        self._killer().kill_by(0.0)

    def ended(
        self, rc: int, tail: str, drain_cut: bool, write_error: str | None, signalled: bool
    ) -> None:
        term = self.termination if signalled else None
        self._finish(
            run_outcome(
                rc,
                term,
                tail,
                drain_cut=drain_cut,
                log_write_error=write_error,
                log_path=self.log_path,
            )
        )

    def lost(self, why: str) -> None:
        """The spawner died under this run: its group was SIGKILLed from here."""
        self._finish(
            Outcome(
                RunStatus.FAILURE,
                EndReason.ORPHANED,
                error_code="spawner_lost",
                log_tail=read_log_tail(self.log_path, 4096),
                note=f"the spawner process running this run {why}; the run's process group "
                "was killed",
            )
        )

    def _finish(self, outcome: Outcome) -> None:
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        if self._kill_clock is not None:
            self._kill_clock.stop()
            self._kill_clock = None  # (it holds a reference back to this child)
        if not self.finished.done():
            self.owner.forget(self)
            self.finished.set_result(outcome)


class _Process:
    """One spawner process as the launcher holds it."""

    __slots__ = (
        "flush_soon",
        "inbox",
        "live",
        "loop",
        "outbox",
        "popen",
        "rfd",
        "wfd",
        "writing",
    )

    def __init__(
        self, popen: subprocess.Popen[bytes], wfd: int, rfd: int, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.popen = popen
        self.loop = loop
        self.wfd = wfd  # its commands
        self.rfd = rfd  # its reports
        self.outbox = bytearray()
        self.inbox = bytearray()
        self.live = 0  # runs sent to it and not yet ended
        self.flush_soon = False  # a flush is scheduled on the loop
        self.writing = False  # a writer callback is armed (the pipe was full)


class SpawnerClient:
    """The launcher's handle on its spawner processes (`processes` of them, each run sent to
    the one with the fewest live runs: one spawner waits out one vfork at a time). Call from
    the event loop's thread."""

    def __init__(
        self, env: dict[str, str], *, processes: int = 2, argv: list[str] | None = None
    ) -> None:
        self.env = env
        self.argv = argv
        self.runs: dict[int, RemoteChild] = {}  # by tag, from the spawn request to its end
        self._procs: list[_Process] = []
        # A client dropped without `close` (a launcher that was never shut down) still stops its
        # spawners, at collection or at exit: EOF, and they end whatever they still hold.
        self._finalizer = weakref.finalize(self, _stop_all, self._procs)
        self._wanted = max(1, processes)
        self._tags = 0
        self._deaths: list[float] = []  # when spawners died, for the give-up rule
        self.starts = 0  # processes started so far, for tests and the bench

    @property
    def pids(self) -> list[int]:
        return [proc.popen.pid for proc in self._procs]

    def ensure(self) -> None:
        """Start the spawners that are not running. Raises SpawnerError when none runs."""
        while len(self._procs) < self._wanted:
            try:
                self._start()
            except SpawnerError:
                if not self._procs:
                    raise
                return  # the ones running will do

    def spawn(
        self,
        child: RemoteChild,
        argv: list[str],
        env: dict[str, str],
        *,
        log_max_bytes: int,
        tail_bytes: int,
        tail_lines: int,
    ) -> None:
        """Ask for `child`'s run; `child.started` gets its pid or the error. `ensure` first."""
        tag = self._tags + 1
        message = (proto.SPAWN, tag, argv, env, child.log_path, log_max_bytes)
        data = proto.frame((*message, tail_bytes, tail_lines))  # first: it may raise
        self._tags = child.tag = tag
        self.runs[tag] = child
        procs = self._procs
        proc = procs[0] if len(procs) == 1 else min(procs, key=_load)
        proc.live += 1
        child.proc = proc
        self._send(proc, data)

    def signal(self, child: RemoteChild, signum: int) -> None:
        proc = child.proc
        if child.tag in self.runs and proc is not None:
            self._send(proc, proto.frame((proto.SIGNAL, child.tag, int(signum))))

    def close(self) -> None:
        """Stop the spawners: EOF, each kills what is still live (normally nothing) and exits;
        what they still held ends here (`lost`, or its start fails)."""
        procs = list(self._procs)
        _stop_all(self._procs)
        for proc in procs:
            self._end_runs_of(proc, "was stopped with the launcher's executor")

    # -- internals --------------------------------------------------------------------------

    def _send(self, proc: _Process, data: bytes) -> None:
        if proc not in self._procs:
            return  # a spawner that died: its runs were ended with it
        proc.outbox += data
        if not proc.flush_soon and not proc.writing:
            proc.flush_soon = True
            asyncio.get_running_loop().call_soon(self._flush, proc)

    def _flush(self, proc: _Process) -> None:
        proc.flush_soon = False
        if proc not in self._procs or not proc.outbox:
            return
        try:
            written = os.write(proc.wfd, proc.outbox)
        except BlockingIOError:
            written = 0
        except OSError:  # it died: its reports' EOF ends what it held
            proc.outbox.clear()
            if proc.writing:
                proc.writing = False
                proc.loop.remove_writer(proc.wfd)
            return
        del proc.outbox[:written]
        if proc.outbox and not proc.writing:
            proc.writing = True
            proc.loop.add_writer(proc.wfd, self._flush, proc)
        elif not proc.outbox and proc.writing:
            proc.writing = False
            proc.loop.remove_writer(proc.wfd)

    def _on_reports(self, proc: _Process) -> None:
        try:
            data = os.read(proc.rfd, _READ_BYTES)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._on_death(proc)
            return
        proc.inbox += data
        runs = self.runs
        for message in proto.unframe(proc.inbox):
            kind, tag = message[0], message[1]
            child = runs.get(tag)
            if kind == proto.ENDED:
                runs.pop(tag, None)
                proc.live -= 1
                if child is not None and child.started.done() and not child.started.cancelled():
                    child.ended(*message[2:])
            elif child is None:
                continue
            elif kind == proto.STARTED:
                child.pid = message[2]
                if child.started.cancelled():  # given up meanwhile: end it
                    self._send(proc, proto.frame((proto.SIGNAL, tag, int(signal.SIGKILL))))
                else:
                    child.started.set_result(message[2])
            elif kind == proto.FAILED:
                runs.pop(tag, None)
                proc.live -= 1
                if not child.started.done():
                    child.started.set_exception(_failure(child.spec.command[0], *message[2:]))

    def _on_death(self, proc: _Process) -> None:
        """A spawner exited (or closed its reports): end what it held, from here."""
        if proc not in self._procs:
            return
        self._procs.remove(proc)
        self._deaths.append(time.monotonic())
        # Its runs are orphans now. They are in its session (it started them there): every
        # process still in it is SIGKILLed, runs it had spawned but not yet reported included.
        # Before it is reaped: until then its pid, the session's id, is nobody else's.
        _kill_session(proc.popen.pid)
        _stop(proc, kill=True)
        self._end_runs_of(proc, _death(proc.popen.returncode))

    def _end_runs_of(self, proc: _Process, why: str) -> None:
        for tag, child in [(tag, child) for tag, child in self.runs.items() if child.proc is proc]:
            del self.runs[tag]
            if child.pid:
                # Killed by group id too, as the guardian would after a launcher death
                # (docs/limits.md: a leader reaped by init meanwhile is a tiny window).
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.pid, signal.SIGKILL)
            if child.started.done() and not child.started.cancelled():
                child.lost(why)
            elif not child.started.done():
                child.started.set_exception(
                    TemporaryExecutorError(
                        f"cannot start the run: the spawner process {why}",
                        error_code="spawn_failed",
                    )
                )

    def _start(self) -> None:
        now = time.monotonic()
        self._deaths = [t for t in self._deaths if now - t < _START_WINDOW_SECONDS]
        if len(self._deaths) >= _MAX_DEATHS:
            raise SpawnerError(
                f"the spawner process exited {len(self._deaths)} times within "
                f"{_START_WINDOW_SECONDS:g}s"
            )
        loop = asyncio.get_running_loop()
        fds: list[int] = []
        try:
            for _ in range(2):  # its commands, its reports
                fds.extend(os.pipe2(os.O_CLOEXEC))
        except OSError as exc:
            for fd in fds:  # a second pipe that failed leaves the first one open
                os.close(fd)
            raise SpawnerError(f"cannot start the spawner process: {exc}") from exc
        cmd_r, cmd_w, rep_r, rep_w = fds
        try:
            popen = subprocess.Popen(
                self.argv or spawner_argv(),
                stdin=cmd_r,
                stdout=rep_w,
                env=self.env,
                start_new_session=True,  # a Ctrl-C or a signal to our group does not reach it
            )
        except (OSError, subprocess.SubprocessError) as exc:
            os.close(cmd_w)
            os.close(rep_r)
            raise SpawnerError(f"cannot start the spawner process: {exc}") from exc
        finally:
            os.close(cmd_r)
            os.close(rep_w)
        import fcntl

        for fd in (cmd_w, rep_r):
            with contextlib.suppress(OSError):  # above pipe-max-size: the default will do
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, proto.PIPE_SIZE)
            os.set_blocking(fd, False)
        proc = _Process(popen, cmd_w, rep_r, loop)
        self._procs.append(proc)
        # The runs' base environment exactly as the launcher has it (the spawner's own may
        # differ: Python's start-up can add LC_CTYPE when it coerces a C locale).
        self._send(proc, proto.frame((proto.ENV, self.env)))
        self.starts += 1
        loop.add_reader(rep_r, self._on_reports, proc)


def _stop_all(procs: list[_Process]) -> None:
    """Stop every spawner in `procs` (emptied): EOF, each ends what it still holds and exits."""
    while procs:
        _stop(procs.pop(), kill=False)


def _stop(proc: _Process, *, kill: bool) -> None:
    loop = proc.loop
    if not loop.is_closed():
        loop.remove_reader(proc.rfd)
        if proc.writing:
            loop.remove_writer(proc.wfd)
    if kill and proc.popen.returncode is None:
        proc.popen.kill()  # our unreaped child: the pid cannot name anyone else
    os.close(proc.wfd)
    os.close(proc.rfd)
    try:
        proc.popen.wait(timeout=_CLOSE_WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        proc.popen.kill()
        proc.popen.wait()


def _kill_session(sid: int) -> None:
    """SIGKILL every process in session `sid` (a dead spawner's: its runs and what they
    started in it), found in /proc."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


def _load(proc: _Process) -> int:
    return proc.live


def _death(returncode: int | None) -> str:
    if returncode is None:
        return "stopped answering"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed ({name})"
    return f"exited with status {returncode}"


def _failure(program: str, code: int, text: str) -> Exception:
    if code == 0:
        return unpassable_error(text)
    return spawn_error(program, OSError(code, text))
