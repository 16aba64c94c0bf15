"""`run_tool` (how the Slurm executor runs sbatch, squeue, scancel...) on asyncio's loop and on
uvloop, `runlane serve`'s default, whose subprocesses go through libuv: the answer, a tool that
does not answer in time, a missing tool, and a call cancelled while its tool runs. A tool never
outlives its call."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from runlane.adapters.slurm.commands import run_tool
from runlane.errors import TemporaryExecutorError
from tests.support.loops import LOOPS
from tests.support.waiting import eventually


def hanging(pidfile: Path) -> list[str]:
    """A tool that says its pid, then does not answer."""
    code = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    return [sys.executable, "-c", code]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True  # reaped: not even a zombie is left
    return False


@pytest.mark.parametrize("loop", LOOPS)
def test_a_tools_answer_comes_back_whole(loop: str) -> None:
    argv = [
        sys.executable,
        "-c",
        "import sys; print('42|RUNNING'); sys.stderr.write('note'); sys.exit(3)",
    ]
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        answer = runner.run(run_tool(argv, {"PATH": os.environ["PATH"]}, 30))
    assert (answer.returncode, answer.stdout.strip(), answer.stderr) == (3, "42|RUNNING", "note")
    assert answer.argv == tuple(argv)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_tool_that_does_not_answer_in_time_is_killed_and_temporary(
    loop: str, tmp_path: Path
) -> None:
    pidfile = tmp_path / "pid"
    with (
        asyncio.Runner(loop_factory=LOOPS[loop]) as runner,
        pytest.raises(TemporaryExecutorError) as info,
    ):
        runner.run(run_tool(hanging(pidfile), None, 1.0))
    assert info.value.code == "slurm_timeout"
    assert "did not answer within 1s" in str(info.value)
    assert gone(int(pidfile.read_text()))


@pytest.mark.parametrize("loop", LOOPS)
def test_a_missing_tool_is_temporary(loop: str) -> None:
    with (
        asyncio.Runner(loop_factory=LOOPS[loop]) as runner,
        pytest.raises(TemporaryExecutorError) as info,
    ):
        runner.run(run_tool(["runlane-no-such-sbatch"], None, 5))
    assert info.value.code == "slurm_unavailable"
    assert "'runlane-no-such-sbatch' is not installed" in str(info.value)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_call_cancelled_while_its_tool_runs_ends_the_tool(loop: str, tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"

    async def go() -> None:
        call = asyncio.create_task(run_tool(hanging(pidfile), None, 30))
        await eventually(
            lambda: pidfile.exists() and pidfile.read_text() != "", "the tool said its pid"
        )
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        runner.run(go())
    assert gone(int(pidfile.read_text()))
