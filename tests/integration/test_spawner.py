"""The spawner processes (`RUNLANE_INLINE_SPAWN=process`) against real processes: where runs live,
what a spawner's death does to them, a spawner that cannot start, a start given up, load, and
messages larger than the pipe. The behaviours every inline mode shares run in
test_inline_executor.py (its `executor` fixture has a `process` case)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runlane.adapters.local.executor import InlineExecutor
from runlane.adapters.local.process import Termination
from runlane.adapters.local.remote import RemoteChild, SpawnerClient
from runlane.core.runs import EndReason, RunStatus
from runlane.errors import PermanentExecutorError, TemporaryExecutorError
from tests.support.scripts import launched
from tests.support.waiting import eventually, eventually_sync

from .test_inline_executor import alive, command_of, finish, make_spec, python, wait_for_output

PY = sys.executable


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def children_of(pid: int) -> list[int]:
    """The live processes whose parent is `pid` (this kernel has no /proc/<pid>/.../children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if parent_of(int(entry.name)) == pid and alive(int(entry.name)):
                    found.append(int(entry.name))
            except (FileNotFoundError, ProcessLookupError):
                continue
    return found


def open_fds() -> int:
    return sum(1 for _ in Path("/proc/self/fd").iterdir())


def session_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])


@pytest.fixture
async def executor(tmp_path: Path) -> AsyncIterator[InlineExecutor]:
    ex = InlineExecutor(tmp_path / "logs", spawn_process=True)
    yield ex
    await asyncio.wait_for(ex.shutdown(grace=0), 10)
    ex.close()


async def test_runs_are_children_of_spawners_in_their_own_session(
    executor: InlineExecutor,
) -> None:
    assert executor.spawner_pids == []  # started lazily, on the first run
    execution = await executor.start(make_spec(["sleep", "30"]))
    pid = int(execution.external_id)
    spawners = executor.spawner_pids
    assert len(spawners) == 2
    assert parent_of(pid) in spawners
    # Out of the launcher's session: a Ctrl-C or a signal to the launcher's group misses it.
    assert all(session_of(s) == s for s in spawners)
    assert os.getpgid(pid) == pid  # the run leads its own group, as in every inline mode
    await executor.cancel(execution, grace=0)
    assert (await finish(executor, execution)).status is RunStatus.CANCELLED
    await executor.shutdown(grace=0)
    executor.close()
    for spawner in spawners:  # a clean close leaves no spawner behind
        assert not alive(spawner)


async def test_a_spawners_death_ends_its_runs_and_their_groups_and_the_next_run_starts(
    executor: InlineExecutor, tmp_path: Path
) -> None:
    pidfile = tmp_path / "grandchild"
    # The run leaves a grandchild in its group; both must end with the spawner.
    code = f"""
        import subprocess, sys, time
        child = subprocess.Popen(["sleep", "60"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print("ready", flush=True)
        time.sleep(60)
    """
    spec = make_spec(python(code))
    execution = await executor.start(spec)
    leader = int(execution.external_id)
    # In the log, not only printed: the spawner killed with it still in the pipe would lose it.
    await wait_for_output(executor.log_path(spec.run_id, 1), "ready")
    grandchild = int(pidfile.read_text())
    spawner = parent_of(leader)
    os.kill(spawner, signal.SIGKILL)
    outcome = await finish(executor, execution)
    assert outcome.status is RunStatus.FAILURE
    assert outcome.end_reason == EndReason.ORPHANED
    assert outcome.error_code == "spawner_lost"
    assert outcome.note is not None
    assert "was killed (SIGKILL)" in outcome.note
    assert "ready" in (outcome.log_tail or "")  # what it printed is kept
    eventually_sync(lambda: not alive(leader) and not alive(grandchild), "group killed", within=10)
    assert executor.running_count() == 0
    # The next run starts a new spawner in its place.
    again = await executor.start(make_spec(["true"]))
    assert (await finish(executor, again)).status is RunStatus.SUCCESS
    assert spawner not in executor.spawner_pids


async def test_a_spawner_that_cannot_run_fails_the_start_plainly_then_stops_trying(
    tmp_path: Path,
) -> None:
    ex = InlineExecutor(tmp_path / "logs", spawn_process=True)
    remote = ex._remote
    assert remote is not None
    remote.argv = [PY, "-c", "import sys; sys.exit(3)"]  # what a broken install would do
    try:
        messages = []
        for _ in range(8):
            with pytest.raises(TemporaryExecutorError) as caught:
                await asyncio.wait_for(ex.start(make_spec(["true"])), 10)
            assert caught.value.code == "spawn_failed"
            messages.append(str(caught.value))
        assert "the spawner process exited with status 3" in messages[0]
        # Then it stops starting processes that die at once, and says why.
        assert re.search(r"the spawner process exited [5-9] times within 10s", messages[-1])
        assert ex.running_count() == 0
    finally:
        ex.close()


async def test_a_start_given_up_while_its_spawn_is_under_way_leaves_no_process(
    executor: InlineExecutor, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    spec = make_spec(python(f"open({str(marker)!r}, 'w').write('x'); import time; time.sleep(60)"))
    remote = executor._remote
    assert remote is not None
    task = asyncio.create_task(executor.start(spec))
    await asyncio.sleep(0)  # the request is on its way; cancel before its pid comes back
    assert next(iter(remote.runs.values())).spec is spec
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The spawner started it and is told to kill it: nothing of it is left running.
    await eventually(lambda: not remote.runs, "the given-up run ended in the spawner", within=10)
    assert executor.running_count() == 0
    assert [children_of(spawner) for spawner in executor.spawner_pids] == [[], []]


async def test_many_runs_at_once_all_end_right_and_leak_nothing(executor: InlineExecutor) -> None:
    async def one(i: int) -> None:
        code = f"import sys; print({i}); sys.exit({i % 3})"
        execution = await executor.start(make_spec(python(code)))
        outcome = await finish(executor, execution, within=60)
        assert outcome.exit_code == i % 3
        assert outcome.log_tail == f"{i}\n"

    await executor.start(make_spec(["true"]))  # the spawners run: their pipes are counted
    fds = open_fds()
    sem = asyncio.Semaphore(64)

    async def gated(i: int) -> None:
        async with sem:
            await one(i)

    await asyncio.gather(*(gated(i) for i in range(200)))
    assert executor.running_count() == 0
    assert open_fds() <= fds
    remote = executor._remote
    assert remote is not None
    assert remote.runs == {}


async def test_requests_larger_than_the_pipe_reach_the_spawner_whole(
    executor: InlineExecutor,
) -> None:
    # 100 starts of ~60 KB each in one loop turn: 6 MB for a 1 MiB pipe, so the launcher must
    # queue the rest and write it as the spawner reads (never block, never cut a message).
    big = "x" * 60_000
    code = "import os, sys; sys.exit(0 if os.environ['BIG'] == 'x' * 60000 else 1)"
    specs = [make_spec(python(code), env={"BIG": big}) for _ in range(100)]
    executions = await asyncio.gather(*(executor.start(spec) for spec in specs))
    outcomes = await asyncio.gather(*(finish(executor, e, within=60) for e in executions))
    assert [o.status for o in outcomes] == [RunStatus.SUCCESS] * 100


def test_a_deadline_that_finds_the_command_already_exited_is_not_a_timeout() -> None:
    """The spawner reports whether a signal reached the command while it ran: a deadline that
    fires as the command exits on its own leaves its exit as the outcome."""

    class Owner:
        tail_lines = 10

        def forget(self, child: object) -> None:
            pass

    async def scenario(signalled: bool) -> tuple[RunStatus, str]:
        client = SpawnerClient({})
        child = RemoteChild(Owner(), client, make_spec(["true"]), "/nonexistent.log")  # type: ignore[arg-type]
        child.terminate(
            Termination(RunStatus.TIMEOUT, EndReason.DEADLINE, error_code="deadline"), 1.0
        )
        child.ended(0 if not signalled else -15, "", False, None, signalled)
        outcome = await child.finished
        return outcome.status, outcome.end_reason

    assert asyncio.run(scenario(False)) == (RunStatus.SUCCESS, EndReason.EXIT)
    assert asyncio.run(scenario(True)) == (RunStatus.TIMEOUT, EndReason.DEADLINE)


LAUNCHER = """
import asyncio, sys
from runlane.adapters.local.executor import InlineExecutor
from runlane.ports import ExecutionSpec

async def main():
    ex = InlineExecutor(sys.argv[1], spawn_process=True)
    code = "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    spec = ExecutionSpec("r1", "j", 1, "manual", [sys.executable, "-c", code], {}, {}, 120, 1)
    execution = await ex.start(spec)
    print(execution.external_id, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def test_a_launchers_death_ends_its_runs_groups_and_its_spawners(tmp_path: Path) -> None:
    with launched(LAUNCHER, str(tmp_path / "logs")) as launcher:
        assert launcher.stdout is not None
        leader = int(launcher.stdout.readline())
        spawner = parent_of(leader)

        eventually_sync(lambda: children_of(leader) != [], "the run started its child", within=10)
        grandchild = children_of(leader)[0]
        eventually_sync(lambda: command_of(grandchild) == ["sleep", "60"], "sleep runs", within=10)
        launcher.kill()
        launcher.wait(timeout=10)
        for pid, what in ((leader, "run"), (grandchild, "its child"), (spawner, "spawner")):
            eventually_sync(lambda p=pid: not alive(p), f"{what} {pid} gone", within=10)  # type: ignore[misc]


async def test_a_start_cancelled_in_the_turn_its_pid_arrives_leaves_no_process(
    executor: InlineExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = executor._remote
    assert remote is not None
    tasks: list[asyncio.Task[object]] = []
    read_reports = SpawnerClient._on_reports

    def then_cancel(self: SpawnerClient, proc: object) -> None:
        read_reports(self, proc)  # type: ignore[arg-type]
        # Whatever cancels the start (a shutdown, a lost lease) in the very turn its pid came.
        for task in tasks:
            task.cancel()

    monkeypatch.setattr(SpawnerClient, "_on_reports", then_cancel)
    tasks.append(asyncio.create_task(executor.start(make_spec(["sleep", "31.25"]))))
    with pytest.raises(asyncio.CancelledError):
        await tasks[0]
    await eventually(lambda: not remote.runs, "the run was killed and ended", within=10)
    assert executor.running_count() == 0
    assert processes_running("31.25") == []


def processes_running(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in command_of(int(entry.name)) and alive(int(entry.name)):
                    found.append(int(entry.name))
            except (FileNotFoundError, ProcessLookupError):
                continue
    return found


async def test_a_run_spawned_by_a_spawner_that_died_before_reporting_it_is_killed(
    executor: InlineExecutor,
) -> None:
    # A spawner that dies between a spawn and its report (an OOM kill at the wrong moment): the
    # launcher never learns the pid, so it finds the run by the spawner's session.
    remote = executor._remote
    assert remote is not None
    root = str(Path(__file__).parents[2] / "src")
    wrapper = (
        "import os, sys; sys.path.insert(0, sys.argv[2]);"
        "from runlane.adapters.local import spawner as s;"
        "real = s.Server._spawn;"
        "s.Server._spawn = lambda self, *a: (real(self, *a), os._exit(9));"
        "s.Server(int(sys.argv[1])).serve()"
    )
    remote.argv = [PY, "-I", "-S", "-c", wrapper, str(os.getpid()), root]
    with pytest.raises(TemporaryExecutorError, match="spawner process exited with status 9"):
        await asyncio.wait_for(executor.start(make_spec(["sleep", "31.5"])), 10)
    eventually_sync(lambda: processes_running("31.5") == [], "unreported run killed", within=10)


async def test_closing_the_executor_ends_live_and_starting_runs_with_an_outcome(
    tmp_path: Path,
) -> None:
    ex = InlineExecutor(tmp_path / "logs", spawn_process=True)
    live = await ex.start(make_spec(["sleep", "30"]))
    starting = asyncio.create_task(ex.start(make_spec(["sleep", "30"])))
    await asyncio.sleep(0)
    ex.close()
    outcome = await finish(ex, live, within=10)
    assert (outcome.status, outcome.error_code) == (RunStatus.FAILURE, "spawner_lost")
    with pytest.raises(TemporaryExecutorError):
        await asyncio.wait_for(starting, 10)
    assert ex.running_count() == 0


async def test_a_cancel_that_finds_the_command_exited_leaves_its_exit_as_the_outcome(
    executor: InlineExecutor,
) -> None:
    # The command exits at once; a process that left its group holds the output open, so its
    # end reaches the launcher only after the 1 s drain. A cancel in that second is too late.
    execution = await executor.start(make_spec(["sh", "-c", "setsid sleep 2.75 & exit 0"]))
    pid = int(execution.external_id)
    try:
        eventually_sync(lambda: not alive(pid), "the command exited", within=10)
        await executor.cancel(execution, grace=0)
        outcome = await finish(executor, execution)
        assert (outcome.status, outcome.exit_code) == (RunStatus.SUCCESS, 0)
    finally:
        for stray in processes_running("2.75"):
            os.kill(stray, signal.SIGKILL)


async def test_spawners_stopped_cleanly_are_not_counted_as_deaths(tmp_path: Path) -> None:
    ex = InlineExecutor(tmp_path / "logs", spawn_process=True)
    try:
        for _ in range(8):  # each shutdown stops the spawners; the next start starts two more
            outcome = await finish(ex, await ex.start(make_spec(["true"])))
            assert outcome.status is RunStatus.SUCCESS
            await ex.shutdown(grace=0)
            assert ex.spawner_pids == []
    finally:
        ex.close()


async def test_a_value_that_cannot_travel_to_the_spawner_is_refused_and_leaks_nothing(
    executor: InlineExecutor,
) -> None:
    class Text(str):
        __slots__ = ()

    remote = executor._remote
    assert remote is not None
    with pytest.raises(PermanentExecutorError) as caught:
        await executor.start(make_spec([Text("true")]))
    assert caught.value.code == "invalid_spec"
    assert remote.runs == {}
    assert (await finish(executor, await executor.start(make_spec(["true"])))).exit_code == 0
