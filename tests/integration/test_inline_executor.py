"""The inline executor against real subprocesses: outcomes, env, no shell, limits, bounded logs,
launcher death. Waits are on events and outcomes (bounded by timeouts), never on sleeps."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import gc
import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Iterator
from functools import partial
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from runlane.adapters.files.logfile import follow_log
from runlane.adapters.local.executor import InlineExecutor, SpawnThreads
from runlane.adapters.local.guardian import GuardianError
from runlane.adapters.local.pdeathsig import (
    PdeathsigMode,
    prctl_pdeathsig,
    setpriv_supports_pdeathsig,
)
from runlane.adapters.local.process import Child
from runlane.adapters.local.remote import RemoteChild
from runlane.core.runs import Outcome, RunStatus
from runlane.errors import PermanentExecutorError, TemporaryExecutorError
from runlane.ports import Execution, ExecutionSpec
from tests.support.scripts import launched
from tests.support.waiting import eventually, eventually_sync

PY = sys.executable


def make_spec(
    command: list[str],
    *,
    env: dict[str, str] | None = None,
    deadline: float = 30.0,
    grace: float = 5.0,
    run_id: str | None = None,
) -> ExecutionSpec:
    run_id = run_id or str(uuid.uuid4())
    return ExecutionSpec(
        run_id=run_id,
        job="test",
        attempt=1,
        trigger="manual",
        command=command,
        params={},
        env={"RUN_ID": run_id, **(env or {})},
        deadline_seconds=deadline,
        kill_grace_seconds=grace,
    )


def python(code: str) -> list[str]:
    return [PY, "-c", textwrap.dedent(code)]


async def finish(executor: InlineExecutor, execution: Execution, within: float = 15) -> Outcome:
    async def consume() -> Outcome:
        kinds = []
        outcome = None
        async for event in executor.events(execution):
            kinds.append(event.kind)
            outcome = event.outcome
        assert kinds == ["running", "finished"]
        assert outcome is not None
        return outcome

    return await asyncio.wait_for(consume(), within)


async def wait_for_output(path: Path, needle: str, within: float = 10) -> str:
    """Wait until `needle` appears in the log (a condition, not a sleep); return the text."""

    async def scan() -> str:
        seen = ""
        async for text in follow_log(path, poll=0.01):
            seen += text
            if needle in seen:
                return seen
        raise AssertionError("log ended")

    return await asyncio.wait_for(scan(), within)


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting for a reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def command_of(pid: int) -> list[str]:
    """The argv `pid` runs now (empty once it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return []
    return raw.decode(errors="replace").split("\0")[:-1]


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "logs"


@pytest.fixture(params=["thread", "loop", "process", "auto"])
async def executor(log_dir: Path, request: pytest.FixtureRequest) -> AsyncIterator[InlineExecutor]:
    # Every behaviour holds with the spawn on a worker thread, on the loop, in the spawner
    # process, and as the default does it (spawners, an idle executor's run on the loop).
    if request.param == "process":
        ex = InlineExecutor(log_dir, spawn_process=True)
        assert ex.pdeathsig_mode == "spawner"
        assert not ex.idle_on_loop
    elif request.param == "auto":
        ex = InlineExecutor(log_dir)
        assert (ex.pdeathsig_mode, ex.idle_on_loop) == ("spawner", True)
    else:
        ex = InlineExecutor(log_dir, spawn_off_loop=request.param == "thread")
        assert ex.spawn_off_loop == (request.param == "thread")
    yield ex
    await asyncio.wait_for(ex.shutdown(grace=0), 10)
    ex.close()


@pytest.fixture
def stray_pids() -> Iterator[list[int]]:
    """Pids a test leaves behind on purpose; killed at the end whatever happened."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def test_success_records_output_in_log_and_tail(executor: InlineExecutor) -> None:
    spec = make_spec(["sh", "-c", "echo hello; echo world >&2"])
    execution = await executor.start(spec)
    assert execution.external_id.isdigit()
    outcome = await finish(executor, execution)
    assert outcome == Outcome(RunStatus.SUCCESS, "exit", exit_code=0, log_tail="hello\nworld\n")
    assert executor.log_path(spec.run_id, 1).read_text() == "hello\nworld\n"
    assert await executor.logs(execution) == "hello\nworld\n"
    assert executor.running_count() == 0


async def test_a_finished_run_is_freed_without_the_cyclic_collector(
    executor: InlineExecutor,
) -> None:
    """A launcher under load finishes hundreds of runs a second: what a run leaves behind must
    be freed by reference counting when the launcher drops its Execution, not pile up as
    reference cycles until the cyclic collector walks them (that walk was ~10 us a run)."""
    execution = await executor.start(make_spec(["true"]))
    outcome = await finish(executor, execution)
    assert outcome.status is RunStatus.SUCCESS
    assert executor.running() == []
    child = weakref.ref(execution.handle)
    gc.disable()
    try:
        del execution
        assert child() is None, "the finished run's objects are only freed by the collector"
    finally:
        gc.enable()


async def test_non_zero_exit_is_failure_with_exit_code(executor: InlineExecutor) -> None:
    outcome = await finish(executor, await executor.start(make_spec(["sh", "-c", "exit 7"])))
    assert outcome.status is RunStatus.FAILURE
    assert (outcome.end_reason, outcome.exit_code, outcome.error_code) == ("exit", 7, "exit_code")


async def test_signal_death_is_named(executor: InlineExecutor) -> None:
    spec = make_spec(["sh", "-c", "kill -SEGV $$"])
    outcome = await finish(executor, await executor.start(spec))
    assert outcome.status is RunStatus.FAILURE
    assert (outcome.exit_code, outcome.error_code) == (-signal.SIGSEGV, "signal_sigsegv")


async def test_env_is_launcher_env_plus_spec_env(
    log_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The launcher's environment is read when the executor is made (once, not per run).
    monkeypatch.setenv("LAUNCHER_ONLY", "from-launcher")
    monkeypatch.setenv("OVERRIDDEN", "launcher")
    executor = InlineExecutor(log_dir)
    spec = make_spec(
        python(
            """
            import json, os
            keys = ["RUN_ID", "RUNLANE_PARAM_WEEK", "LAUNCHER_ONLY", "OVERRIDDEN"]
            print(json.dumps({k: os.environ.get(k) for k in keys}))
            """
        ),
        env={"RUNLANE_PARAM_WEEK": "12", "OVERRIDDEN": "spec"},
    )
    outcome = await finish(executor, await executor.start(spec))
    assert outcome.status is RunStatus.SUCCESS
    assert outcome.log_tail is not None
    assert eval(outcome.log_tail.replace("null", "None")) == {
        "RUN_ID": spec.run_id,
        "RUNLANE_PARAM_WEEK": "12",
        "LAUNCHER_ONLY": "from-launcher",
        "OVERRIDDEN": "spec",
    }
    await executor.shutdown(1.0)
    executor.close()


async def test_argv_stays_literal_no_shell(executor: InlineExecutor, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    tricky = ["a b", '"quoted"', "it's", "$(touch " + str(marker) + ")", "`id`", "; exit 9", "*"]
    spec = make_spec([PY, "-c", "import sys; print(repr(sys.argv[1:]))", *tricky])
    outcome = await finish(executor, await executor.start(spec))
    assert outcome.status is RunStatus.SUCCESS
    assert outcome.log_tail == repr(tricky) + "\n"
    assert not marker.exists()


async def test_stdin_is_dev_null(executor: InlineExecutor) -> None:
    spec = make_spec(python("import sys; print(repr(sys.stdin.read()))"))
    outcome = await finish(executor, await executor.start(spec))
    assert outcome.log_tail == "''\n"


@pytest.mark.parametrize(
    "command", [["runlane-no-such-command-xyz"], ["/nonexistent/dir/tool", "--flag"]]
)
async def test_command_not_found_is_permanent(executor: InlineExecutor, command: list[str]) -> None:
    with pytest.raises(PermanentExecutorError) as info:
        await executor.start(make_spec(command))
    assert info.value.code == "command_not_found"
    assert command[0] in str(info.value)
    assert executor.running_count() == 0


@pytest.mark.parametrize("kind", ["component-is-a-file", "symlink-loop", "name-too-long"])
async def test_a_command_path_that_can_name_no_file_is_permanent(
    executor: InlineExecutor, tmp_path: Path, kind: str
) -> None:
    """ENOTDIR, ELOOP and ENAMETOOLONG from exec are a command that cannot be found, for good:
    not a temporary `spawn_failed` the launcher would retry every few seconds until the run's
    queue TTL."""
    if kind == "component-is-a-file":
        (tmp_path / "tool").write_text("")
        program = str(tmp_path / "tool" / "bin")
    elif kind == "symlink-loop":
        (tmp_path / "loop").symlink_to("loop")
        program = str(tmp_path / "loop")
    else:
        program = str(tmp_path / ("x" * 300))
    with pytest.raises(PermanentExecutorError) as info:
        await executor.start(make_spec([program]))
    assert info.value.code == "command_not_found"
    assert program in str(info.value)
    assert executor.running_count() == 0


def open_fds() -> int:
    return sum(1 for _ in Path("/proc/self/fd").iterdir())


@pytest.mark.parametrize(
    ("command", "env"),
    [
        (["true"], {"RUNLANE_PARAM_X": "a\x00b"}),  # NUL: no process can be given it
        (["true"], {"RUNLANE_PARAM_X": "\ud800"}),  # an unpaired surrogate cannot be encoded
        (["echo", "a\x00b"], {}),
    ],
    ids=["nul-in-env", "surrogate-in-env", "nul-in-argv"],
)
async def test_unpassable_characters_are_permanent_and_leak_nothing(
    executor: InlineExecutor, command: list[str], env: dict[str, str]
) -> None:
    """A catalog `env` or command can hold what no exec can pass on (YAML escapes): the run
    fails for good with the reason instead of crashing its supervisor, and no descriptor of
    its output pipe or log is left open."""
    # The guardian, the fd watcher and the spawners exist already: the default mode spawns an
    # idle executor's run on the loop and gives one started beside it to a spawner.
    first = await executor.start(make_spec(["sleep", "60"]))
    second = await executor.start(make_spec(["true"]))
    executor.kill_now(first)
    for execution in (first, second):
        await finish(executor, execution)
    before = open_fds()
    for _ in range(5):
        with pytest.raises(PermanentExecutorError) as info:
            await executor.start(make_spec(command, env=env))
        assert info.value.code == "invalid_spec"
        assert "NUL byte or an unpaired surrogate" in str(info.value)
    assert open_fds() <= before


async def test_not_executable_is_permanent(executor: InlineExecutor, tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    with pytest.raises(PermanentExecutorError) as info:
        await executor.start(make_spec([str(script)]))
    assert info.value.code == "permission_denied"
    assert str(script) in str(info.value)


async def test_deadline_sends_term_first_and_ends_timeout(executor: InlineExecutor) -> None:
    spec = make_spec(
        python(
            """
            import signal, sys, time
            def on_term(signum, frame):
                print("got TERM", flush=True)
                sys.exit(0)
            signal.signal(signal.SIGTERM, on_term)
            print("ready", flush=True)
            time.sleep(60)
            """
        ),
        deadline=1.0,
        grace=10,
    )
    started = time.monotonic()
    outcome = await finish(executor, await executor.start(spec))
    assert outcome.status is RunStatus.TIMEOUT
    assert (outcome.end_reason, outcome.error_code) == ("deadline", "deadline")
    assert outcome.log_tail == "ready\ngot TERM\n"
    assert outcome.exit_code == 0  # it exited cleanly on TERM, yet the run timed out
    assert time.monotonic() - started < 8  # well before the 10 s grace


async def test_term_ignoring_child_is_killed_after_grace(executor: InlineExecutor) -> None:
    spec = make_spec(
        python(
            """
            import signal, time
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            print("ready", flush=True)
            time.sleep(60)
            """
        ),
        deadline=1.0,
        grace=0.3,
    )
    outcome = await finish(executor, await executor.start(spec))
    assert outcome.status is RunStatus.TIMEOUT
    assert outcome.exit_code == -signal.SIGKILL
    assert outcome.log_tail == "ready\n"


async def test_deadline_kills_the_whole_group(
    executor: InlineExecutor, stray_pids: list[int]
) -> None:
    # The leader dies on TERM; one grandchild ignores TERM, so only the group SIGKILL that
    # follows the leader's exit can end it (the grace is far longer than the test).
    spec = make_spec(
        [
            "sh",
            "-c",
            "sleep 60 & echo $!; (trap '' TERM; exec sleep 61) & echo $!; echo ready; wait",
        ],
        deadline=1.0,
        grace=60,
    )
    execution = await executor.start(spec)
    text = await wait_for_output(executor.log_path(spec.run_id, 1), "ready")
    grandchildren = [int(line) for line in text.split()[:2]]
    stray_pids.extend(grandchildren)
    outcome = await finish(executor, execution)
    assert outcome.status is RunStatus.TIMEOUT
    for pid in grandchildren:
        eventually_sync(
            lambda pid=pid: not alive(pid), f"grandchild {pid} gone after the deadline", within=5
        )


async def test_cancel_terms_and_is_idempotent(executor: InlineExecutor) -> None:
    spec = make_spec(["sleep", "60"])
    execution = await executor.start(spec)
    events = executor.events(execution)
    first = await anext(events)
    assert first.kind == "running"
    await executor.cancel(execution, grace=5)
    await executor.cancel(execution, grace=5)
    finished = await asyncio.wait_for(anext(events), 10)
    assert finished.outcome is not None
    assert finished.outcome.status is RunStatus.CANCELLED
    assert finished.outcome.end_reason == "cancelled"
    assert finished.outcome.exit_code == -signal.SIGTERM
    await executor.cancel(execution, grace=5)  # finished: a no-op
    assert executor.running_count() == 0


async def test_kill_now_ends_cancelled_with_given_reason(executor: InlineExecutor) -> None:
    spec = make_spec(
        python("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)")
    )
    execution = await executor.start(spec)
    executor.kill_now(execution, end_reason="lease_lost")
    outcome = await finish(executor, execution)
    assert (outcome.status, outcome.end_reason) == (RunStatus.CANCELLED, "lease_lost")
    assert outcome.exit_code == -signal.SIGKILL


async def test_shutdown_ends_every_live_run(log_dir: Path) -> None:
    ex = InlineExecutor(log_dir)
    executions = [await ex.start(make_spec(["sleep", "60"])) for _ in range(3)]
    assert ex.running_count() == 3
    assert {e.run_id for e in ex.running()} == {e.run_id for e in executions}
    await asyncio.wait_for(ex.shutdown(grace=5), 10)
    assert ex.running_count() == 0
    for execution in executions:
        outcome = await finish(ex, execution)
        assert (outcome.status, outcome.end_reason) == (RunStatus.CANCELLED, "launcher_shutdown")
    ex.close()


def _on_a_full_disk(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to("/dev/full")


async def test_a_log_file_that_cannot_be_written_loses_no_tail_and_says_so(
    executor: InlineExecutor, log_dir: Path
) -> None:
    # A full disk: the run's log file is /dev/full, where every write fails with ENOSPC.
    spec = make_spec(
        python(
            """
        import sys
        for i in range(200):
            print(f"line {i}", flush=True)
        """
        )
    )
    _on_a_full_disk(executor.log_path(spec.run_id, 1))
    errors: list[dict[str, object]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    try:
        outcome = await finish(executor, await executor.start(spec))
    finally:
        loop.set_exception_handler(None)
    assert errors == []  # no error per output chunk reported by the loop
    assert (outcome.status, outcome.exit_code) == (RunStatus.SUCCESS, 0)
    assert outcome.log_tail is not None
    assert outcome.log_tail.endswith("line 198\nline 199\n")  # the tail is whole
    assert outcome.note is not None
    assert "is incomplete" in outcome.note
    assert "No space left on device" in outcome.note


@pytest.mark.parametrize("ending", ["deadline", "cancel", "kill_now"])
async def test_a_run_ended_early_keeps_the_note_that_its_log_file_is_incomplete(
    executor: InlineExecutor, ending: str, tmp_path: Path
) -> None:
    # Whatever ends the run (and whatever note that adds) must not erase the incomplete-log
    # note: the CLI finds it there to show the saved tail in place of the cut-off file.
    printed = tmp_path / "printed"  # the log is /dev/full: this says the output is on its way
    spec = make_spec(
        python(
            f"""
            import time
            print("ready", flush=True)
            open({str(printed)!r}, "w").close()
            time.sleep(60)
            """
        ),
        deadline=1.0 if ending == "deadline" else 30.0,
        grace=5,
    )
    log_path = executor.log_path(spec.run_id, 1)
    _on_a_full_disk(log_path)
    execution = await executor.start(spec)
    events = executor.events(execution)
    assert (await anext(events)).kind == "running"
    await eventually(printed.exists, f"{printed} written")
    if ending == "cancel":
        await executor.cancel(execution, grace=5)
    elif ending == "kill_now":
        executor.kill_now(execution, end_reason="lease_lost", note="the lease was lost")
    finished = await asyncio.wait_for(anext(events), 15)
    outcome = finished.outcome
    assert outcome is not None
    assert outcome.status is (RunStatus.TIMEOUT if ending == "deadline" else RunStatus.CANCELLED)
    incomplete = (
        f"the log file {log_path} is incomplete: writing it failed (No space left on device); "
        "the tail here is complete"
    )
    ended = "the lease was lost; " if ending == "kill_now" else ""
    assert outcome.note == ended + incomplete
    assert outcome.log_tail == "ready\n"


async def test_log_is_bounded_and_keeps_the_tail(log_dir: Path) -> None:
    max_bytes, tail_bytes = 1024 * 1024, 65536
    ex = InlineExecutor(log_dir, log_max_bytes=max_bytes, tail_bytes=tail_bytes)
    # 500,000 lines of 10 bytes: 5,000,000 bytes, lines numbered so the tail can be checked.
    spec = make_spec(
        python(
            """
            import sys
            out = sys.stdout
            for i in range(500_000):
                out.write(f"{i:09d}\\n")
            """
        )
    )
    outcome = await finish(ex, await ex.start(spec), within=60)
    assert outcome.status is RunStatus.SUCCESS
    data = ex.log_path(spec.run_id, 1).read_bytes()
    assert len(data) <= max_bytes + tail_bytes + 300
    expected = b"".join(b"%09d\n" % i for i in range(500_000))
    assert data.startswith(expected[:max_bytes])
    marker = b"\n[runlane: output truncated after 1048576 bytes; last bytes kept below]\n"
    assert data[max_bytes : max_bytes + len(marker)] == marker
    dropped = len(expected) - max_bytes - tail_bytes
    assert f"[runlane: {dropped} bytes dropped]\n".encode() in data
    assert data.endswith(expected[-tail_bytes:])
    assert outcome.log_tail is not None
    lines = outcome.log_tail.splitlines()
    assert len(lines) == 100
    assert lines[-1] == "000499999"
    assert lines[0] == "000499900"
    ex.close()


async def test_the_specs_log_cap_wins_over_the_executors(executor: InlineExecutor) -> None:
    # The catalog's `log_max_bytes` reaches the executor in the spec: a 4 KiB cap under the
    # executor's 10 MiB default cuts a 20,000-byte output at 4096 bytes and keeps its tail.
    spec = dataclasses.replace(
        make_spec(
            python(
                """
                import sys
                for i in range(2000):
                    sys.stdout.write(f"{i:09d}\\n")
                """
            )
        ),
        log_max_bytes=4096,
    )
    outcome = await finish(executor, await executor.start(spec))
    assert outcome.status is RunStatus.SUCCESS
    data = executor.log_path(spec.run_id, 1).read_bytes()
    expected = b"".join(b"%09d\n" % i for i in range(2000))
    assert data.startswith(expected[:4096] + b"\n[runlane: output truncated after 4096 bytes;")
    # The tail (64 KiB by default) is longer than the part dropped: all of it comes back.
    assert data.endswith(b"[runlane: 0 bytes dropped]\n" + expected[4096:])


async def test_what_the_command_leaves_in_its_group_ends_with_it(
    executor: InlineExecutor, stray_pids: list[int]
) -> None:
    # A background child in the run's process group, holding the output pipe: killed when the
    # command exits (the run is over), so the pipe closes and nothing outlives the run.
    spec = make_spec(["sh", "-c", "sleep 60 & echo $!"])
    started = time.monotonic()
    outcome = await finish(executor, await executor.start(spec), within=10)
    assert outcome.log_tail is not None
    left = int(outcome.log_tail.split()[0])
    stray_pids.append(left)
    assert outcome.status is RunStatus.SUCCESS
    assert outcome.note is None  # the pipe closed: nothing was cut
    eventually_sync(lambda: not alive(left), f"background child {left} gone with its run", within=5)
    assert time.monotonic() - started < 5


async def test_a_process_that_left_the_group_holding_the_pipe_does_not_hang_the_run(
    executor: InlineExecutor, stray_pids: list[int]
) -> None:
    # The child leaves the run's group (setsid) before the command exits, then holds the pipe.
    spec = make_spec(
        python("""
        import os, sys, time
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.setsid()
            os.write(w, b"x")
            time.sleep(60)
            os._exit(0)
        os.read(r, 1)
        print(pid, flush=True)
    """)
    )
    started = time.monotonic()
    outcome = await finish(executor, await executor.start(spec), within=10)
    assert outcome.log_tail is not None
    stray_pids.append(int(outcome.log_tail.split()[0]))
    assert outcome.status is RunStatus.SUCCESS
    assert outcome.note is not None
    assert "kept the output pipe open" in outcome.note
    assert time.monotonic() - started < 5


async def test_start_is_idempotent_while_running(executor: InlineExecutor) -> None:
    spec = make_spec(["sleep", "60"])
    first = await executor.start(spec)
    again = await executor.start(spec)
    assert again is first
    assert executor.running_count() == 1
    assert await executor.reattach(spec) is first
    executor.kill_now(first)
    await finish(executor, first)
    assert await executor.reattach(spec) is None


async def test_two_starts_of_one_attempt_at_once_spawn_one_process(
    executor: InlineExecutor,
) -> None:
    """The launcher may ask again while a start is under way (a retried call): one process."""
    spec = make_spec(["sleep", "60"])
    first, second = await asyncio.gather(executor.start(spec), executor.start(spec))
    assert second is first
    assert executor.running_count() == 1
    executor.kill_now(first)
    await finish(executor, first)


async def test_reattach_unknown_run_is_none(executor: InlineExecutor) -> None:
    assert await executor.reattach(make_spec(["true"])) is None


async def test_follow_log_streams_until_the_run_ends(executor: InlineExecutor) -> None:
    spec = make_spec(python("import time\nfor i in range(3):\n    print(i, flush=True)\n"))
    execution = await executor.start(spec)
    outcome_task = asyncio.ensure_future(finish(executor, execution))

    async def ended() -> bool:
        return outcome_task.done()

    chunks = [
        text async for text in follow_log(executor.log_path(spec.run_id, 1), poll=0.01, stop=ended)
    ]
    assert "".join(chunks) == "0\n1\n2\n"
    assert (await outcome_task).status is RunStatus.SUCCESS


LAUNCHER = """
import asyncio, sys
from runlane.adapters.local.executor import InlineExecutor
from runlane.ports import ExecutionSpec

async def main():
    if sys.argv[2] == "spawner":
        ex = InlineExecutor(sys.argv[1], spawn_process=True)
    else:
        ex = InlineExecutor(sys.argv[1], pdeathsig=sys.argv[2])
    spec = ExecutionSpec("r1", "j", 1, "manual", ["sleep", "60"], {}, {}, 120, 1)
    execution = await ex.start(spec)
    print(execution.external_id, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


AUTO_LAUNCHER = """
import asyncio, sys
from runlane.adapters.local.executor import InlineExecutor
from runlane.ports import ExecutionSpec

async def main():
    ex = InlineExecutor(sys.argv[1])
    for run_id in ("r1", "r2"):  # r1 on the idle loop, r2 (r1 live) in a spawner
        spec = ExecutionSpec(run_id, "j", 1, "manual", ["sleep", "60"], {}, {}, 120, 1)
        execution = await ex.start(spec)
        print(type(execution.handle).__name__, execution.external_id, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def test_the_defaults_runs_die_with_their_launcher_whichever_way_they_started(
    log_dir: Path, stray_pids: list[int]
) -> None:
    """The default mode's two kinds of run: the idle one's guardian and the busy one's spawner
    each kill theirs when the launcher is SIGKILLed."""
    with launched(AUTO_LAUNCHER, str(log_dir)) as launcher:
        assert launcher.stdout is not None
        kinds, pids = [], []
        for _ in range(2):
            kind, pid = launcher.stdout.readline().split()
            kinds.append(kind)
            pids.append(int(pid))
        stray_pids.extend(pids)
        assert kinds == ["Child", "RemoteChild"]
        for pid in pids:
            eventually_sync(
                lambda pid=pid: command_of(pid) == ["sleep", "60"], f"{pid} runs its command"
            )
        launcher.kill()
        launcher.wait(timeout=10)
        for pid in pids:
            eventually_sync(
                lambda pid=pid: not alive(pid), f"child {pid} gone with its launcher", within=10
            )


MODES: list[str] = ["guardian", "prctl", "spawner"]
if setpriv_supports_pdeathsig():
    MODES.insert(1, "setpriv")


@pytest.mark.parametrize("mode", MODES)
def test_child_dies_with_its_launcher(log_dir: Path, mode: str, stray_pids: list[int]) -> None:
    with launched(LAUNCHER, str(log_dir), mode) as launcher:
        assert launcher.stdout is not None
        child_pid = int(launcher.stdout.readline())
        stray_pids.append(child_pid)
        assert alive(child_pid)
        # setpriv sets the signal in the child, then execs the command: a launcher killed before
        # that is a known gap (docs/limits.md). The claim here is about a child that runs.
        eventually_sync(
            lambda: command_of(child_pid) == ["sleep", "60"],
            f"{mode}: child {child_pid} runs its command",
            within=10,
        )
        launcher.kill()
        launcher.wait(timeout=10)
        eventually_sync(
            lambda: not alive(child_pid),
            f"{mode}: child {child_pid} gone with its launcher",
            within=10,
        )


async def test_the_default_spawns_an_idle_executors_run_on_the_loop_and_a_busy_ones_in_a_spawner(
    log_dir: Path, stray_pids: list[int]
) -> None:
    """The default mode: a run an idle executor starts is spawned on the loop and guarded by
    the guardian (no hop to a spawner: a lower pickup); one started while another is live goes
    to a spawner; once nothing is live, the next is the loop's again."""
    ex = InlineExecutor(log_dir)
    try:
        first = await ex.start(make_spec(["sleep", "60"]))
        stray_pids.append(int(first.external_id))
        assert isinstance(first.handle, Child)
        assert ex.spawner_pids == []  # none was needed
        assert ex.guardian_pid is not None
        assert ex._guardian is not None
        assert int(first.external_id) in ex._guardian.groups
        second = await ex.start(make_spec(["sleep", "60"]))
        stray_pids.append(int(second.external_id))
        assert isinstance(second.handle, RemoteChild)
        assert len(ex.spawner_pids) == 2
        assert int(second.external_id) not in ex._guardian.groups  # its spawner guards it
        for execution in (first, second):
            ex.kill_now(execution)
            assert (await finish(ex, execution)).status is RunStatus.CANCELLED
        await eventually(lambda: ex.running_count() == 0, "both runs forgotten")
        third = await ex.start(make_spec(["true"]))
        assert isinstance(third.handle, Child)
        assert (await finish(ex, third)).status is RunStatus.SUCCESS
        assert not ex._guardian.groups  # each group taken back as its leader was reaped
        # A batch started at once (a claim's runs) goes to the spawners whole, its first run
        # included: the loop is not held for a spawn while the others wait.
        await eventually(lambda: ex.running_count() == 0, "the third run forgotten")
        batch = await asyncio.gather(*(ex.start(make_spec(["true"])) for _ in range(3)))
        assert [type(e.handle) for e in batch] == [RemoteChild] * 3
        for execution in batch:
            assert (await finish(ex, execution)).status is RunStatus.SUCCESS
    finally:
        await asyncio.wait_for(ex.shutdown(grace=0), 10)
        ex.close()


async def test_a_busy_start_replaces_a_guardian_that_died_holding_an_idle_run(
    log_dir: Path, stray_pids: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default mode: the guardian of a run spawned on the loop dies and cannot be replaced
    at once; a busy executor makes no idle start that would replace it, so the next start (a
    spawner's) does, and the run is guarded again: the new guardian kills it at its EOF."""
    ex = InlineExecutor(log_dir)
    guardian = ex._guardian
    assert guardian is not None
    first = await ex.start(make_spec(["sleep", "60"]))
    pid = int(first.external_id)
    stray_pids.append(pid)
    old = guardian.pid
    assert old is not None
    real_start = guardian._start

    def refuse() -> None:
        raise GuardianError("not now")

    monkeypatch.setattr(guardian, "_start", refuse)
    os.kill(old, signal.SIGKILL)
    await eventually(lambda: guardian.pid is None, "the guardian's death seen")
    monkeypatch.setattr(guardian, "_start", real_start)
    second = await ex.start(make_spec(["sleep", "60"]))
    stray_pids.append(int(second.external_id))
    assert isinstance(second.handle, RemoteChild)
    assert guardian.pid not in (None, old)
    assert pid in guardian.groups
    ex.close()  # the guardian's EOF: it kills what it holds
    eventually_sync(lambda: not alive(pid), f"run {pid} killed by the new guardian", within=10)


@pytest.mark.parametrize("refusing", ["ensure", "register"])
async def test_an_idle_run_goes_to_a_spawner_when_the_guardian_cannot_take_it(
    log_dir: Path, monkeypatch: pytest.MonkeyPatch, refusing: str
) -> None:
    """An idle spawn needs the guardian. When it cannot start (`ensure`), or refuses the run's
    group (`register`: it died just then), the default mode gives the run to a spawner instead
    of failing it; a process spawned for it is killed and reaped, and its group dropped."""
    ex = InlineExecutor(log_dir)
    guardian = ex._guardian
    assert guardian is not None
    refused: list[int] = []

    def refuse(*args: object, **kwargs: object) -> None:
        if args and isinstance(args[0], int):  # register(pgid): the group stays in the set
            refused.append(args[0])
            guardian.groups.add(args[0])
        raise GuardianError("no guardian today")

    monkeypatch.setattr(guardian, refusing, refuse)
    try:
        execution = await ex.start(make_spec(["sleep", "60"]))
        assert isinstance(execution.handle, RemoteChild)
        if refusing == "register":
            [pid] = refused
            assert pid != int(execution.external_id)
            assert pid not in guardian.groups
            assert not alive(pid)
            with pytest.raises(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222 - WNOHANG: reaped already
        ex.kill_now(execution)
        assert (await finish(ex, execution)).status is RunStatus.CANCELLED
    finally:
        await asyncio.wait_for(ex.shutdown(grace=0), 10)
        ex.close()


async def test_prepare_starts_the_spawners_and_the_guardian_before_the_first_run(
    log_dir: Path,
) -> None:
    """`prepare` (the launcher's, at its start) starts the helpers the first runs would
    otherwise wait for; the runs then use those processes, and a second `prepare` starts none."""
    ex = InlineExecutor(log_dir)
    try:
        assert ex.spawner_pids == []
        assert ex.guardian_pid is None
        ex.prepare()
        spawners, guardian = ex.spawner_pids, ex.guardian_pid
        assert len(spawners) == 2
        assert guardian is not None
        assert all(alive(pid) for pid in [*spawners, guardian])
        ex.prepare()
        assert (ex.spawner_pids, ex.guardian_pid) == (spawners, guardian)
        batch = await asyncio.gather(*(ex.start(make_spec(["true"])) for _ in range(3)))
        assert [type(e.handle) for e in batch] == [RemoteChild] * 3
        for execution in batch:
            assert (await finish(ex, execution)).status is RunStatus.SUCCESS
        await eventually(lambda: ex.running_count() == 0, "the batch forgotten")
        idle = await ex.start(make_spec(["true"]))
        assert isinstance(idle.handle, Child)
        assert (await finish(ex, idle)).status is RunStatus.SUCCESS
        assert ex._remote is not None
        assert ex._remote.starts == 2  # the two prepare started, no more
        assert (ex.spawner_pids, ex.guardian_pid) == (spawners, guardian)
    finally:
        await asyncio.wait_for(ex.shutdown(grace=0), 10)
        ex.close()


async def test_prepare_logs_a_helper_that_cannot_start_and_the_first_start_tries_again(
    log_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`prepare` never raises: a spawner or guardian that cannot start is logged, and the
    first run that needs it starts it then."""
    ex = InlineExecutor(log_dir)
    remote, guardian = ex._remote, ex._guardian
    assert remote is not None
    assert guardian is not None

    def refuse() -> None:
        raise GuardianError("no guardian today")

    monkeypatch.setattr(remote, "argv", [str(tmp_path / "no-such-python")])
    monkeypatch.setattr(guardian, "ensure", refuse)
    try:
        with capture_logs() as entries:
            ex.prepare()
        failed = [e for e in entries if e["event"] == "inline.prepare_failed"]
        assert [e["helper"] for e in failed] == ["spawners", "guardian"]
        assert "no-such-python" in failed[0]["error"]
        assert failed[1]["error"] == "no guardian today"
        assert ex.spawner_pids == []
        monkeypatch.undo()
        batch = await asyncio.gather(*(ex.start(make_spec(["true"])) for _ in range(2)))
        assert len(ex.spawner_pids) == 2
        for execution in batch:
            assert (await finish(ex, execution)).status is RunStatus.SUCCESS
        assert ex.guardian_pid is None
        await eventually(lambda: ex.running_count() == 0, "the batch forgotten")
        idle = await ex.start(make_spec(["true"]))  # an idle start: the guardian's
        assert isinstance(idle.handle, Child)
        assert ex.guardian_pid is not None
        assert (await finish(ex, idle)).status is RunStatus.SUCCESS
    finally:
        await asyncio.wait_for(ex.shutdown(grace=0), 10)
        ex.close()


async def test_prepare_at_the_descriptor_limit_logs_it_and_leaks_no_descriptor(
    log_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pipes a helper needs failing (EMFILE) are a helper that cannot start, not an error
    out of `prepare`; a spawner whose second pipe failed closes its first."""
    ex = InlineExecutor(log_dir)
    real_pipe2 = os.pipe2
    calls = 0

    def second_pipe2_fails(flags: int) -> tuple[int, int]:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        return real_pipe2(flags)

    def pipe_fails() -> tuple[int, int]:
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    try:
        before = open_fds()
        monkeypatch.setattr(os, "pipe2", second_pipe2_fails)
        monkeypatch.setattr(os, "pipe", pipe_fails)
        with capture_logs() as entries:
            ex.prepare()
        monkeypatch.undo()
        assert open_fds() == before
        failed = [e for e in entries if e["event"] == "inline.prepare_failed"]
        assert [e["helper"] for e in failed] == ["spawners", "guardian"]
        assert all("Too many open files" in e["error"] for e in failed), failed
        assert (ex.spawner_pids, ex.guardian_pid) == ([], None)
        ex.prepare()  # the limit gone: both start
        assert len(ex.spawner_pids) == 2
        assert ex.guardian_pid is not None
    finally:
        await asyncio.wait_for(ex.shutdown(grace=0), 10)
        ex.close()


@pytest.mark.parametrize("mode", ["loop", "thread", "auto"])
async def test_a_start_at_the_descriptor_limit_is_a_temporary_spawn_failure(
    log_dir: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The output pipe failing (EMFILE) is a start to try again later (`spawn_failed`), as the
    spawn itself failing is: not a bare OSError that crashes the run's supervisor and leaves
    the run `running` until its lease expires. Nothing is leaked, and the next start works."""
    if mode == "auto":
        ex = InlineExecutor(log_dir)  # an idle executor's run: spawned on the loop
    else:
        ex = InlineExecutor(log_dir, spawn_off_loop=mode == "thread")
    try:
        ex.prepare()
        await finish(ex, await ex.start(make_spec(["true"])))
        before = open_fds()

        def pipe2_fails(flags: int) -> tuple[int, int]:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

        monkeypatch.setattr(os, "pipe2", pipe2_fails)
        with pytest.raises(TemporaryExecutorError) as info:
            await ex.start(make_spec(["true"]))
        monkeypatch.undo()
        assert info.value.code == "spawn_failed"
        assert "Too many open files" in str(info.value)
        assert ex.running_count() == 0
        assert open_fds() == before
        assert (await finish(ex, await ex.start(make_spec(["true"])))).status is RunStatus.SUCCESS
    finally:
        await asyncio.wait_for(ex.shutdown(grace=0), 10)
        ex.close()


@pytest.mark.parametrize("mode", ["loop", "auto"])
async def test_a_first_run_at_the_descriptor_limit_is_not_left_unwatched(
    log_dir: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The epoll set that watches the runs is made at the first one: failing there (EMFILE) is
    a temporary `spawn_failed` before any process starts, not a bare OSError with the process
    left live and unwatched (never ended at its deadline, hanging the shutdown)."""
    if mode == "auto":
        ex = InlineExecutor(log_dir)  # an idle executor's run: spawned and watched on the loop
    else:
        ex = InlineExecutor(log_dir, spawn_off_loop=False)
    try:
        ex.prepare()

        def epoll_fails(*args: object) -> object:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

        monkeypatch.setattr(select, "epoll", epoll_fails)
        spec = make_spec(["sleep", "60"])
        with pytest.raises(TemporaryExecutorError) as info:
            await ex.start(spec)
        monkeypatch.undo()
        assert info.value.code == "spawn_failed"
        assert "Too many open files" in str(info.value)
        assert ex.running_count() == 0
        assert await ex.reattach(spec) is None
        outcome = await finish(ex, await ex.start(make_spec(["true"])))
        assert outcome.status is RunStatus.SUCCESS
    finally:
        await asyncio.wait_for(ex.shutdown(grace=0), 10)
        ex.close()


def test_spawner_processes_are_the_default_on_linux(log_dir: Path) -> None:
    ex = InlineExecutor(log_dir)
    assert ex.pdeathsig_mode == "spawner"
    assert ex.spawner_pids == []  # started lazily, on the first run
    assert ex.guardian_pid is None
    assert ex._spawn_pool is None  # no spawn threads: the spawners spawn
    ex.close()


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"pdeathsig": "prctl"}, "no other pdeathsig"),
        ({"spawn_off_loop": True}, "no other pdeathsig or spawn mode"),
    ],
)
def test_spawner_processes_refuse_another_mode_beside_them(
    log_dir: Path, kwargs: dict[str, object], words: str
) -> None:
    with pytest.raises(PermanentExecutorError, match=words) as caught:
        InlineExecutor(log_dir, spawn_process=True, **kwargs)  # type: ignore[arg-type]
    assert caught.value.code == "config_error"


def test_the_guardian_with_spawn_threads_stays_selectable(log_dir: Path) -> None:
    ex = InlineExecutor(log_dir, spawn_off_loop=True)
    assert ex.pdeathsig_mode == "guardian"
    assert ex.guardian_pid is None  # started lazily, on the first spawn
    # The guardian alone: no preexec_fn (it would force fork() instead of vfork()), and spawns
    # use glibc's posix_spawn (vfork) on worker threads, the GIL released while the child execs.
    assert ex._preexec is None
    assert ex._posix_spawn_ok
    assert ex.spawn_off_loop
    assert ex._spawn_pool is not None
    ex.close()


def test_spawning_on_the_loop_stays_selectable(log_dir: Path) -> None:
    ex = InlineExecutor(log_dir, spawn_off_loop=False)
    assert ex.pdeathsig_mode == "guardian"
    assert not ex.spawn_off_loop
    assert ex._spawn_pool is None
    ex.close()


def test_spawning_off_the_loop_needs_the_guardian(log_dir: Path) -> None:
    with pytest.raises(PermanentExecutorError, match="needs the guardian") as caught:
        InlineExecutor(log_dir, pdeathsig="none", spawn_off_loop=True)
    assert caught.value.code == "config_error"


async def test_runs_spawn_on_worker_threads_off_the_loop(log_dir: Path) -> None:
    import threading

    from runlane.adapters.local import process

    ex = InlineExecutor(log_dir, spawn_off_loop=True)
    threads: list[str] = []
    spawn = ex._spawner._libc
    assert spawn is not None
    real = spawn.spawn

    def recording(*args: object, **kwargs: object) -> int:
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    spawn.spawn = recording  # type: ignore[method-assign]
    try:
        # Idle: the first spawn is on the loop thread (no hop to add to its pickup latency).
        first = await ex.start(make_spec(["sleep", "30"]))
        assert threads == [threading.current_thread().name]
        # Busy (a run is live): the others go to the spawn threads.
        outcomes = await asyncio.gather(
            *[finish(ex, await ex.start(make_spec(["true"]))) for _ in range(4)]
        )
        assert [o.exit_code for o in outcomes] == [0, 0, 0, 0]
        assert len(threads) == 5
        assert all(name.startswith("runlane-spawn") for name in threads[1:]), threads
        assert threading.current_thread().name not in threads[1:]
        await ex.cancel(first, grace=0)
        assert (await finish(ex, first)).status == RunStatus.CANCELLED
        assert process.RESTORED_SIGNALS  # what the child is given back, as with os.posix_spawn
    finally:
        await asyncio.wait_for(ex.shutdown(grace=0), 10)
        ex.close()


async def test_a_start_cancelled_during_the_spawn_leaves_no_process(log_dir: Path) -> None:
    ex = InlineExecutor(log_dir, spawn_off_loop=True)
    spawn = ex._spawner._libc
    assert spawn is not None
    real = spawn.spawn
    pids: list[int] = []

    def recording(*args: object, **kwargs: object) -> int:
        pid = real(*args, **kwargs)  # type: ignore[arg-type]
        pids.append(pid)
        return pid

    spawn.spawn = recording  # type: ignore[method-assign]
    busy = await ex.start(make_spec(["sleep", "30"]))  # so that the next spawn goes to a thread
    task = asyncio.create_task(ex.start(make_spec(["sleep", "30"])))
    await asyncio.sleep(0)  # the spawn is on its worker thread now
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ex._spawn_pool is not None
    await asyncio.get_running_loop().run_in_executor(None, ex._spawn_pool.shutdown)
    assert len(pids) == 2  # it was spawned...
    # ... and then killed and reaped, once the loop saw its result come back cancelled.
    await eventually(
        lambda: not Path(f"/proc/{pids[1]}").exists(), "the cancelled start's process to end"
    )
    assert ex.running_count() == 1  # the busy one alone
    ex.kill_now(busy)
    await finish(ex, busy)
    assert ex.running_count() == 0
    ex.close()


@pytest.mark.parametrize("mode", ["setpriv", "prctl", "none"])
def test_other_modes_stay_selectable(log_dir: Path, mode: PdeathsigMode) -> None:
    if mode == "setpriv" and not setpriv_supports_pdeathsig():
        pytest.skip("no setpriv with --pdeathsig here")
    ex = InlineExecutor(log_dir, pdeathsig=mode)
    assert ex.pdeathsig_mode == mode
    assert ex.guardian_pid is None
    ex.close()


async def test_without_pidfd_a_waiter_thread_reports_the_exit(
    log_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    ex = InlineExecutor(log_dir, spawn_off_loop=True)
    ok = await finish(ex, await ex.start(make_spec(["sh", "-c", "echo fine"])))
    assert (ok.status, ok.log_tail) == (RunStatus.SUCCESS, "fine\n")
    spec = make_spec(["sh", "-c", "sleep 60 & echo $!; echo ready; wait"], deadline=0.5, grace=60)
    execution = await ex.start(spec)
    text = await wait_for_output(ex.log_path(spec.run_id, 1), "ready")
    timed_out = await finish(ex, execution)
    assert timed_out.status is RunStatus.TIMEOUT
    child = int(text.split()[0])
    eventually_sync(lambda: not alive(child), f"process {child} gone", within=5)
    ex.close()


@pytest.mark.parametrize("mode", ["thread", "process", "auto"])
async def test_a_run_starts_like_popen_would_start_it(log_dir: Path, mode: str) -> None:
    # posix_spawn, not Popen: the child still gets SIGPIPE at its default, its own process group,
    # /dev/null for stdin, and no descriptor of ours, not even one this process inherited. In
    # the default mode (`auto`: an idle executor's run, spawned on the loop) it is also in a
    # session of its own, without the launcher's terminal, as a spawner's runs are.
    inherited = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(inherited, True)
    ex = (
        InlineExecutor(log_dir)
        if mode == "auto"
        else InlineExecutor(log_dir, spawn_process=mode == "process")
    )
    try:
        script = (
            "grep SigIgn /proc/self/status; ls /proc/self/fd | tr '\\n' ' '; echo; "
            "ps -o pgid= -p $$; readlink /proc/self/fd/0; ps -o sid= -p $$"
        )
        execution = await ex.start(make_spec(["sh", "-c", script]))
        assert isinstance(execution.handle, RemoteChild if mode == "process" else Child)
        outcome = await finish(ex, execution)
        assert outcome.status is RunStatus.SUCCESS
        assert outcome.log_tail is not None
        sig_ign, fds, pgid, stdin, sid = outcome.log_tail.splitlines()
        assert not int(sig_ign.split()[1], 16) & (1 << (signal.SIGPIPE - 1))
        # 0-2 and the listing's own descriptor (ls opens /proc/self/fd as 3)
        assert fds.split() == ["0", "1", "2", "3"]
        assert int(pgid) == int(execution.external_id)
        assert stdin == "/dev/null"
        if mode == "auto":
            assert int(sid) == int(execution.external_id)  # its own session
        elif mode == "thread":
            assert int(sid) == os.getsid(0)  # the launcher's
        else:
            assert int(sid) not in (os.getsid(0), int(execution.external_id))  # the spawner's
    finally:
        ex.close()
        os.close(inherited)


async def test_a_failing_descriptor_callback_does_not_starve_the_others() -> None:
    """The executor watches every run's pipe and pidfd through one level-triggered epoll set,
    polled in the same order each time: a callback that raises (and leaves its descriptor
    readable) is reported like asyncio reports a reader's error, and the rest still run."""
    from runlane.adapters.local.fdwatch import FdWatcher

    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    watcher = FdWatcher()
    a_read, a_write = os.pipe()
    b_read, b_write = os.pipe()
    b_called = asyncio.Event()

    def broken() -> None:
        raise RuntimeError("this callback is broken")

    try:
        watcher.add(a_read, broken)
        os.write(a_write, b"x")  # A is ready first and stays ready: its callback never reads
        watcher.add(b_read, b_called.set)
        os.write(b_write, b"y")
        await asyncio.wait_for(b_called.wait(), 5)
    finally:
        watcher.remove(a_read)
        watcher.remove(b_read)
        watcher.close()
        loop.set_exception_handler(None)
        for fd in (a_read, a_write, b_read, b_write):
            os.close(fd)
    assert reported
    assert isinstance(reported[0]["exception"], RuntimeError)


def test_prctl_mode_never_starts_a_command_whose_launcher_is_gone(tmp_path: Path) -> None:
    """The `prctl` mode's child checks, after setting the signal, that its parent is still the
    launcher: a launcher that died between the fork and the `prctl` would never send it, so
    the child exits before its command. Here the expected parent is another pid, as if the
    launcher had died and the child had been adopted."""
    marker = tmp_path / "ran"
    preexec = prctl_pdeathsig(parent=os.getpid() + 1_000_000)
    assert preexec is not None
    child = subprocess.run(
        ["touch", str(marker)],
        preexec_fn=preexec,
        check=False,
        timeout=30,
    )
    assert child.returncode == 1
    assert not marker.exists()
    # With the right parent the command runs.
    ok = subprocess.run(
        ["touch", str(marker)], preexec_fn=prctl_pdeathsig(), check=False, timeout=30
    )
    assert ok.returncode == 0
    assert marker.exists()


# A stand-in guardian process: every line it is sent, appended to the file named first.
RECORDER = (
    "import sys\n"
    "with open(sys.argv[1], 'ab', buffering=0) as out:\n"
    "    for line in sys.stdin.buffer:\n"
    "        out.write(line)\n"
)


async def test_a_spawn_thread_hands_its_group_to_the_guardian_before_the_loop_sees_it(
    log_dir: Path, tmp_path: Path, stray_pids: list[int]
) -> None:
    """With spawns on worker threads, the thread that spawned a run writes its `+pgid` to the
    guardian itself, before the spawn is handed to the event loop (a launcher killed in the
    hop to the loop leaves no run unguarded); the loop's registration then writes nothing
    more, and the run's end takes it back (`-pgid`)."""
    record = tmp_path / "guardian-lines"
    ex = InlineExecutor(log_dir, spawn_off_loop=True)
    assert ex._guardian is not None
    ex._guardian.argv = [PY, "-c", RECORDER, str(record)]
    announced: list[tuple[int, str]] = []
    announce = ex._guardian.announce

    def recording(pgid: int) -> object | None:
        announced.append((pgid, threading.current_thread().name))
        return announce(pgid)

    ex._guardian.announce = recording  # type: ignore[method-assign]
    try:
        first = await ex.start(make_spec(["sleep", "60"], run_id="first"))  # idle: on the loop
        second = await ex.start(make_spec(["sleep", "60"], run_id="second"))  # on a thread
        pids = [int(e.external_id) for e in (first, second)]
        stray_pids.extend(pids)
        assert [(pid, name.startswith("runlane-spawn_")) for pid, name in announced] == [
            (pids[1], True)
        ]
        lines = await eventually(
            lambda: record.exists() and len(record.read_bytes().splitlines()) >= 2 and record,
            "both groups sent to the guardian",
        )
        assert sorted(lines.read_bytes().splitlines()) == sorted(b"+%d" % p for p in pids)
        for execution in (first, second):
            ex.kill_now(execution)
            await finish(ex, execution)
        sent = await eventually(
            lambda: len(record.read_bytes().splitlines()) >= 4 and record.read_bytes(),
            "both groups taken back",
        )
        assert sorted(sent.splitlines()) == sorted(
            [b"+%d" % p for p in pids] + [b"-%d" % p for p in pids]
        )
    finally:
        await ex.shutdown(grace=0)
        ex.close()


async def test_a_start_given_up_on_its_thread_is_taken_back_from_the_guardian(
    log_dir: Path, stray_pids: list[int]
) -> None:
    """A spawn whose start was cancelled while its thread ran it: announced, then withdrawn
    before it is reaped (the guardian must not keep a pgid that may soon name another group),
    and killed."""
    calls: list[tuple[str, int]] = []

    class Recorder:
        def announce(self, pgid: int) -> object | None:
            calls.append(("announce", pgid))
            return self

        def withdraw(self, pgid: int) -> None:
            calls.append(("withdraw", pgid))

    ex = InlineExecutor(log_dir, pdeathsig="none", spawn_off_loop=False)
    pool = SpawnThreads(1, Recorder())  # type: ignore[arg-type]
    try:
        spawn = partial(ex._spawn, ["sleep", "60"], dict(os.environ), str(log_dir / "x.log"))
        future = pool.submit(spawn)
        future.cancel()
        await eventually(lambda: len(calls) == 2, "the spawn announced and withdrawn")
        (_, pid), _ = calls
        stray_pids.append(pid)
        assert calls == [("announce", pid), ("withdraw", pid)]
        assert not alive(pid)
    finally:
        pool.shutdown()
        ex.close()
