"""What the scripted executor (runlane.testing.fakes) does beyond the Executor contract (which
tests/conformance/executor checks): scripts by run and by job, start errors in order, states,
release, and the calls it records."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runlane.core.runs import Outcome, RunStatus
from runlane.errors import PermanentExecutorError, TemporaryExecutorError
from runlane.ports import Execution, ExecutionSpec
from runlane.testing.fakes import Call, Script, ScriptedExecutor, exited


def spec(run_id: str = "r1", job: str = "job", attempt: int = 1) -> ExecutionSpec:
    return ExecutionSpec(
        run_id=run_id,
        job=job,
        attempt=attempt,
        trigger="manual",
        command=["x"],
        params={},
        env={"RUN_ID": run_id},
        deadline_seconds=60.0,
        kill_grace_seconds=1.0,
    )


async def kinds_and_outcome(ex: ScriptedExecutor, execution: Execution) -> tuple[list[str], object]:
    events = [event async for event in ex.events(execution)]
    return [e.kind for e in events], events[-1].outcome


async def test_start_errors_come_in_order_then_the_run_starts() -> None:
    ex = ScriptedExecutor()
    busy = TemporaryExecutorError("busy")
    refused = PermanentExecutorError("refused")
    ex.script(Script(start_errors=(busy, refused)), job="job")
    with pytest.raises(TemporaryExecutorError):
        await ex.start(spec())
    with pytest.raises(PermanentExecutorError):
        await ex.start(spec())
    execution = await ex.start(spec())
    assert await kinds_and_outcome(ex, execution) == (["running", "finished"], exited(0))
    assert (ex.started("r1"), len(ex.calls_to("start"))) == (1, 3)


async def test_a_run_script_wins_over_its_jobs_and_the_default() -> None:
    ex = ScriptedExecutor(Script(outcome=exited(1)))
    ex.script(Script(outcome=exited(2)), job="job")
    ex.script(Script(outcome=exited(3), states=("pending", "running")), run_id="mine")
    mine = await kinds_and_outcome(ex, await ex.start(spec("mine")))
    of_job = await kinds_and_outcome(ex, await ex.start(spec("other")))
    default = await kinds_and_outcome(ex, await ex.start(spec("third", job="else")))
    assert mine == (["pending", "running", "finished"], exited(3))
    assert (of_job[1], default[1]) == (exited(2), exited(1))


async def test_a_held_run_ends_when_released_and_calls_are_recorded() -> None:
    ex = ScriptedExecutor(Script(outcome=None, output="abcdef"))
    execution = await ex.start(spec())
    assert ex.running() == ["r1"]
    assert await ex.logs(execution, tail_bytes=3) == "def"
    ex.release("r1", exited(4, "def"))
    kinds, outcome = await kinds_and_outcome(ex, execution)
    assert (kinds, outcome) == (["running", "finished"], exited(4, "def"))
    assert ex.running() == []
    await ex.cancel(execution, grace=2.0)  # ended already: stays as it ended
    assert (await kinds_and_outcome(ex, execution))[1] == exited(4, "def")
    assert ex.calls_to("cancel") == [Call("cancel", "r1", 1, grace=2.0)]
    assert [c.method for c in ex.calls] == ["start", "logs", "events", "cancel", "events"]


async def test_a_held_run_ends_at_its_deadline() -> None:
    ex = ScriptedExecutor(Script(outcome=None))
    execution = await ex.start(replace(spec(), deadline_seconds=0.01))
    _, outcome = await kinds_and_outcome(ex, execution)
    assert isinstance(outcome, Outcome)
    assert (outcome.status, outcome.error_code) == (RunStatus.TIMEOUT, "deadline")
