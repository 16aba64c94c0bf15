"""The guardian against real processes: launcher death kills whole run groups, a killed guardian
is replaced with every live group, reaped runs are forgotten, a clean close leaves nothing.

A small launcher process is driven line by line over stdin, so each step waits for its answer,
never for a sleep; "is this pid gone" is bounded polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runlane.adapters.local.executor import InlineExecutor
from runlane.adapters.local.guardian import Guardian, guardian_argv
from runlane.core.runs import RunStatus
from tests.support.waiting import eventually_sync

from .test_inline_executor import alive, finish, make_spec

PY = sys.executable

LAUNCHER = """
import asyncio, json, sys
from runlane.adapters.local import guardian
from runlane.adapters.local.executor import InlineExecutor
from runlane.ports import ExecutionSpec

if sys.argv[2] == "lazy":  # no pidfd watch: a dead guardian is replaced on the next spawn
    guardian.Guardian._watch = lambda self, proc: None

async def main():
    ex = InlineExecutor(sys.argv[1], pdeathsig="guardian")
    loop = asyncio.get_running_loop()
    runs = {}
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "start":
            run_id = f"r{len(runs)}"
            spec = ExecutionSpec(run_id, "j", 1, "manual", json.loads(arg), {}, {}, 120, 1)
            runs[run_id] = await ex.start(spec)
            print(run_id, runs[run_id].external_id, flush=True)
        elif cmd == "finish":
            async for event in ex.events(runs[arg]):
                pass
            print(event.outcome.status.value, flush=True)
        elif cmd == "guardian":
            print(ex.guardian_pid, ex._guardian.starts, sorted(ex._guardian.groups), flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


class Launcher:
    def __init__(self, log_dir: Path, watch: str = "pidfd") -> None:
        self.proc = subprocess.Popen(
            [PY, "-c", LAUNCHER, str(log_dir), watch],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, line: str) -> str:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        assert answer, f"the launcher died on {line!r}"
        return answer.strip()

    def start(self, command: list[str]) -> tuple[str, int]:
        run_id, pid = self.ask("start " + json.dumps(command)).split()
        return run_id, int(pid)

    def guardian(self) -> tuple[int | None, int, list[int]]:
        pid, starts, groups = self.ask("guardian").split(" ", 2)
        return (None if pid == "None" else int(pid)), int(starts), json.loads(groups)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "logs"


@pytest.fixture
def stray_pids() -> Iterator[list[int]]:
    """Pids a test may leave behind; killed at the end whatever happened."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def launchers() -> Iterator[list[Launcher]]:
    started: list[Launcher] = []
    yield started
    for launcher in started:
        launcher.close()


def read_pids(path: Path, count: int, within: float = 10) -> list[int]:
    """The first `count` numbers a run wrote to its log (bounded polling for the file)."""

    def listed() -> list[int] | None:
        words = path.read_text().split() if path.exists() else []
        return [int(w) for w in words[:count]] if len(words) > count else None  # pids, "ready"

    return eventually_sync(listed, f"{path} listing {count} pids", within=within, poll=0.01)


GROUP = [
    "sh",
    "-c",
    "sleep 60 & echo $!; (trap '' TERM HUP; exec sleep 61) & echo $!; echo ready; wait",
]


def test_launcher_death_kills_the_run_and_its_grandchildren(
    log_dir: Path, launchers: list[Launcher], stray_pids: list[int]
) -> None:
    launcher = Launcher(log_dir)
    launchers.append(launcher)
    run_id, leader = launcher.start(GROUP)
    grandchildren = read_pids(log_dir / f"{run_id}.1.log", 2)
    stray_pids.extend([leader, *grandchildren])
    guardian_pid, starts, groups = launcher.guardian()
    assert guardian_pid is not None
    assert (starts, groups) == (1, [leader])
    assert all(alive(pid) for pid in (leader, *grandchildren))
    launcher.kill()
    for pid in (leader, *grandchildren):
        eventually_sync(lambda pid=pid: not alive(pid), f"{pid} gone with its launcher")
    eventually_sync(lambda: not alive(guardian_pid), "the guardian gone after doing its job")


@pytest.mark.parametrize("watch", ["pidfd", "lazy"])
def test_a_killed_guardian_is_replaced_with_every_live_group(
    log_dir: Path, launchers: list[Launcher], stray_pids: list[int], watch: str
) -> None:
    launcher = Launcher(log_dir, watch)
    launchers.append(launcher)
    _, first = launcher.start(["sleep", "60"])
    stray_pids.append(first)
    old_guardian, _, _ = launcher.guardian()
    assert old_guardian is not None
    os.kill(old_guardian, signal.SIGKILL)
    eventually_sync(lambda: not alive(old_guardian), f"process {old_guardian} gone")
    if watch == "pidfd":
        # Replaced at once, with no spawn to prompt it.
        eventually_sync(
            lambda: launcher.guardian()[0] not in (None, old_guardian), "a new guardian", poll=0.01
        )
        new_guardian, starts, groups = launcher.guardian()
        assert (starts, groups) == (2, [first])
    _, second = launcher.start(["sleep", "61"])  # lazy: the broken pipe gets it replaced here
    stray_pids.append(second)
    new_guardian, starts, groups = launcher.guardian()
    assert new_guardian not in (None, old_guardian)
    assert (starts, sorted(groups)) == (2, sorted([first, second]))
    assert alive(first)  # a replaced guardian kills nothing
    launcher.kill()
    eventually_sync(
        lambda: not alive(first), "the run started before the guardian was replaced gone"
    )
    eventually_sync(lambda: not alive(second), f"process {second} gone")


def test_a_reaped_run_is_unregistered(
    log_dir: Path, launchers: list[Launcher], stray_pids: list[int]
) -> None:
    # The run exits and leaves a background child in its group: the executor kills the group
    # as the leader exits, then tells the guardian to forget it before the reap (the guardian
    # never acting on a group it was told to forget is test_the_guardian_kills_only_groups_
    # still_registered).
    launcher = Launcher(log_dir)
    launchers.append(launcher)
    run_id, _leader = launcher.start(["sh", "-c", "sleep 60 & echo $!; echo ready"])
    (leftover,) = read_pids(log_dir / f"{run_id}.1.log", 1)
    stray_pids.append(leftover)
    assert launcher.ask(f"finish {run_id}") == "success"
    guardian_pid, _, groups = launcher.guardian()
    assert guardian_pid is not None
    assert groups == []
    eventually_sync(lambda: not alive(leftover), "the run's background child gone with the run")


def test_the_guardian_kills_only_groups_still_registered(stray_pids: list[int]) -> None:
    kept = subprocess.Popen(["sleep", "60"], process_group=0)
    killed = subprocess.Popen(["sleep", "61"], process_group=0)
    stray_pids.extend([kept.pid, killed.pid])
    argv = guardian_argv()
    assert argv is not None
    guardian = subprocess.Popen([*argv, str(os.getpid())], stdin=subprocess.PIPE)
    assert guardian.stdin is not None
    guardian.stdin.write(f"+{kept.pid}\n+{killed.pid}\n-{kept.pid}\n".encode())
    guardian.stdin.close()  # EOF: as if we had died
    assert guardian.wait(timeout=10) == 0
    assert killed.wait(timeout=10) == -signal.SIGKILL
    assert kept.poll() is None
    kept.kill()
    kept.wait()


HOLDER = """
import os, subprocess, sys
from runlane.adapters.local.guardian import Guardian

g = Guardian()
run = subprocess.Popen(["sleep", "60"], process_group=0)
g.register(run.pid)
# A child that inherits the write end of the guardian's pipe: no EOF when we die.
holder = subprocess.Popen(["sleep", "62"], pass_fds=(g._proc.wfd,), process_group=0)
print(run.pid, holder.pid, g.pid, flush=True)
sys.stdin.read()
"""


def test_launcher_death_is_seen_even_if_the_pipe_stays_open(stray_pids: list[int]) -> None:
    launcher = subprocess.Popen(
        [PY, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert launcher.stdout is not None
        run, holder, guardian_pid = (int(w) for w in launcher.stdout.readline().split())
        stray_pids.extend([run, holder])
        launcher.kill()
        launcher.wait(timeout=10)
        eventually_sync(
            lambda: not alive(run), "the run gone with its launcher (the guardian saw the death)"
        )
        eventually_sync(lambda: not alive(guardian_pid), f"process {guardian_pid} gone")
        assert alive(holder)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        for stream in (launcher.stdin, launcher.stdout):
            if stream is not None:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()


async def test_close_after_shutdown_leaves_nothing_running(log_dir: Path) -> None:
    ex = InlineExecutor(log_dir, pdeathsig="guardian")
    executions = [await ex.start(make_spec(["sleep", "60"])) for _ in range(3)]
    guardian_pid = ex.guardian_pid
    assert guardian_pid is not None
    pids = [int(e.external_id) for e in executions]
    assert ex._guardian is not None
    assert ex._guardian.groups == set(pids)
    await asyncio.wait_for(ex.shutdown(grace=5), 10)
    assert ex._guardian.groups == set()
    assert ex.guardian_pid is None  # closed by shutdown: nothing left to guard
    ex.close()
    assert not any(alive(pid) for pid in (*pids, guardian_pid))
    # Used again after a shutdown, it starts another guardian.
    ex2 = InlineExecutor(log_dir, pdeathsig="guardian")
    ok = await finish(ex2, await ex2.start(make_spec(["true"])))
    assert ok.status is RunStatus.SUCCESS
    assert ex2._guardian is not None
    assert ex2._guardian.groups == set()
    second_guardian = ex2.guardian_pid
    assert second_guardian is not None
    ex2.close()
    assert not alive(second_guardian)


async def test_close_with_runs_still_live_kills_them(log_dir: Path) -> None:
    ex = InlineExecutor(log_dir, pdeathsig="guardian")
    execution = await ex.start(make_spec(["sleep", "60"]))
    ex.close()  # no shutdown first: the guardian takes the run down on its way out
    outcome = await finish(ex, execution)
    assert outcome.exit_code == -signal.SIGKILL


def test_a_garbage_collected_guardian_handle_stops_its_process() -> None:
    g = Guardian()
    g.ensure()
    pid = g.pid
    assert pid is not None
    del g  # the finalizer closes the pipe and reaps the process
    assert not alive(pid)


def test_a_stuck_guardian_is_replaced(stray_pids: list[int]) -> None:
    run = subprocess.Popen(["sleep", "60"], process_group=0)
    stray_pids.append(run.pid)
    g = Guardian()
    try:
        g.register(run.pid)
        stuck = g.pid
        assert stuck is not None
        os.kill(stuck, signal.SIGSTOP)  # reads nothing more: the pipe fills up
        for _ in range(1_000_000):
            g.unregister(run.pid)
            g.register(run.pid)
            if g.starts == 2:
                break
        assert g.starts == 2, "a full pipe never got the guardian replaced"
        assert g.pid not in (None, stuck)
        assert not alive(stuck)  # SIGKILLed (and reaped) before its pipe was closed
        assert g.groups == {run.pid}
        assert run.poll() is None  # the stuck one went without killing anything
    finally:
        g.close()  # EOF: the replacement kills what is still registered
    assert run.wait(timeout=10) == -signal.SIGKILL
