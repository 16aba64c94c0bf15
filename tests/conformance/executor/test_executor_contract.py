"""The `Executor` contract (runlane.ports), the same tests for every executor: idempotent start,
reattach after a takeover, one `finished` event carrying the outcome, exit codes, cancel,
deadline, log tail, params in the environment. Waits are on events (bounded), never on sleeps."""

from __future__ import annotations

import asyncio
import json

import pytest

from runlane.core.runs import Outcome, RunStatus
from runlane.errors import PermanentExecutorError
from runlane.ports import Execution, ExecutionEvent, ExecutionSpec, Executor
from tests.support.waiting import eventually

from .conftest import Behaviour, ExecutorHarness

WITHIN = 10.0  # no test waits longer for an execution's end

pytestmark = pytest.mark.timeout(30)  # a hard stop for a hang no wait above bounds

HANG = Behaviour(hang=True)


async def all_events(
    executor: Executor, execution: Execution, within: float = WITHIN
) -> list[ExecutionEvent]:
    """Every event of `execution`, until `events` ends (bounded)."""

    async def collect() -> list[ExecutionEvent]:
        return [event async for event in executor.events(execution)]

    return await asyncio.wait_for(collect(), within)


async def began(harness: ExecutorHarness, spec: ExecutionSpec) -> None:
    """Until the run's command began (bounded); a timeout says what the provider holds."""
    await eventually(
        lambda: harness.starts(spec) >= 1,
        "the run's command began",
        explain=lambda: harness.explain(spec),
    )


def outcome_of(events: list[ExecutionEvent]) -> Outcome:
    """The outcome of a finished event stream, checking its shape: states, then one `finished`
    (the last event) that carries the outcome."""
    kinds = [event.kind for event in events]
    assert kinds.count("finished") == 1, kinds
    assert kinds[-1] == "finished", kinds
    assert set(kinds[:-1]) <= {"pending", "running"}, kinds
    outcome = events[-1].outcome
    assert outcome is not None
    return outcome


async def test_a_zero_exit_is_success_with_exit_code_0(harness: ExecutorHarness) -> None:
    ex = harness.executor
    execution = await ex.start(harness.make_spec(Behaviour(output="done\n")))
    outcome = outcome_of(await all_events(ex, execution))
    assert (outcome.status, outcome.exit_code) == (RunStatus.SUCCESS, 0)


async def test_a_non_zero_exit_is_failure_with_its_exit_code(harness: ExecutorHarness) -> None:
    ex = harness.executor
    execution = await ex.start(harness.make_spec(Behaviour(exit_code=3)))
    outcome = outcome_of(await all_events(ex, execution))
    assert (outcome.status, outcome.exit_code) == (RunStatus.FAILURE, 3)


async def test_a_second_start_of_the_same_run_and_attempt_adopts_it(
    harness: ExecutorHarness,
) -> None:
    ex = harness.executor
    spec = harness.make_spec(HANG)
    first = await ex.start(spec)
    second = await ex.start(spec)
    assert second.external_id == first.external_id
    assert (second.run_id, second.attempt) == (spec.run_id, spec.attempt)
    await began(harness, spec)
    await ex.cancel(first, grace=0)
    outcome_of(await all_events(ex, first))
    assert harness.starts(spec) == 1  # the command began once, not twice


async def test_another_attempt_of_the_same_run_is_a_new_execution(
    harness: ExecutorHarness,
) -> None:
    ex = harness.executor
    first_spec = harness.make_spec(Behaviour())
    first = await ex.start(first_spec)
    outcome_of(await all_events(ex, first))
    again = harness.make_spec(Behaviour(exit_code=2), run_id=first_spec.run_id, attempt=2)
    second = await ex.start(again)
    assert second.external_id != first.external_id
    assert outcome_of(await all_events(ex, second)).exit_code == 2
    assert (harness.starts(first_spec), harness.starts(again)) == (1, 1)


async def test_reattach_after_a_takeover_gives_the_executors_documented_answer(
    harness: ExecutorHarness,
) -> None:
    spec = harness.make_spec(HANG)
    first = await harness.executor.start(spec)
    await began(harness, spec)
    other = await harness.takeover()
    found = await other.reattach(spec)
    if harness.reattach_finds_taken_over:
        assert found is not None
        assert found.external_id == first.external_id
        await other.cancel(found, grace=0)
        assert outcome_of(await all_events(other, found)).status == RunStatus.CANCELLED
    else:  # the execution lives only with the executor that started it
        assert found is None
        await harness.executor.cancel(first, grace=0)
        outcome_of(await all_events(harness.executor, first))
    assert harness.starts(spec) == 1


async def test_reattach_of_a_run_never_started_finds_nothing(harness: ExecutorHarness) -> None:
    spec = harness.make_spec(Behaviour())
    if harness.reattach_unknown_error is None:
        assert await harness.executor.reattach(spec) is None
    else:
        with pytest.raises(PermanentExecutorError) as err:
            await harness.executor.reattach(spec)
        assert err.value.code == harness.reattach_unknown_error
    assert harness.starts(spec) == 0


async def test_the_same_executor_reattaches_to_its_own_live_execution(
    harness: ExecutorHarness,
) -> None:
    ex = harness.executor
    spec = harness.make_spec(HANG)
    execution = await ex.start(spec)
    found = await ex.reattach(spec)
    assert found is not None
    assert found.external_id == execution.external_id
    await ex.cancel(execution, grace=0)
    outcome_of(await all_events(ex, execution))


async def test_cancel_ends_a_running_execution_and_the_finished_event_follows(
    harness: ExecutorHarness,
) -> None:
    ex = harness.executor
    spec = harness.make_spec(Behaviour(output="working\n", hang=True))
    execution = await ex.start(spec)
    await began(harness, spec)
    await ex.cancel(execution, grace=spec.kill_grace_seconds)
    outcome = outcome_of(await all_events(ex, execution))
    assert outcome.status == RunStatus.CANCELLED


async def test_cancel_of_an_ended_execution_changes_nothing(harness: ExecutorHarness) -> None:
    ex = harness.executor
    execution = await ex.start(harness.make_spec(Behaviour()))
    outcome = outcome_of(await all_events(ex, execution))
    await ex.cancel(execution, grace=0)
    assert outcome_of(await all_events(ex, execution)) == outcome


async def test_a_passed_deadline_is_a_timeout(harness: ExecutorHarness) -> None:
    ex = harness.executor
    spec = harness.make_spec(HANG, deadline=harness.deadline_to_pass)
    execution = await ex.start(spec)
    await began(harness, spec)
    harness.pass_deadline(execution)
    outcome = outcome_of(await all_events(ex, execution))
    assert (outcome.status, outcome.error_code) == (RunStatus.TIMEOUT, "deadline")


async def test_logs_return_the_tail_of_the_output(harness: ExecutorHarness) -> None:
    ex = harness.executor
    output = "".join(f"line {n:04}\n" for n in range(300))  # 3,000 bytes
    execution = await ex.start(harness.make_spec(Behaviour(output=output)))
    assert outcome_of(await all_events(ex, execution)).status == RunStatus.SUCCESS
    assert await ex.logs(execution) == output
    assert await ex.logs(execution, tail_bytes=500) == output[-500:]


async def test_params_reach_the_process_as_env(harness: ExecutorHarness) -> None:
    ex = harness.executor
    params = {"week": 7, "dry_run": True, "name": "north"}
    spec = harness.make_spec(Behaviour(), params=params)
    execution = await ex.start(spec)
    outcome_of(await all_events(ex, execution))
    env = harness.env_seen(spec)
    assert env["RUN_ID"] == spec.run_id
    assert json.loads(env["RUNLANE_PARAMS"]) == params
    assert (env["RUNLANE_PARAM_WEEK"], env["RUNLANE_PARAM_DRY_RUN"]) == ("7", "true")
    assert env["RUNLANE_PARAM_NAME"] == "north"


async def test_an_execution_no_longer_followed_is_left_running(harness: ExecutorHarness) -> None:
    # `stop_following` (a lost lease, a supervision that ended before reading the events) lets
    # go of what the executor holds for the execution, not of the execution: it runs on, and
    # a launcher that takes the run over finds it.
    ex = harness.executor
    spec = harness.make_spec(HANG)
    execution = await ex.start(spec)
    await began(harness, spec)
    ex.stop_following(execution)
    ex.stop_following(execution)  # idempotent
    found = await ex.reattach(spec)
    assert found is not None
    assert found.external_id == execution.external_id
    await ex.cancel(found, grace=0)
    assert outcome_of(await all_events(ex, found)).status == RunStatus.CANCELLED
    assert harness.starts(spec) == 1


async def test_prepare_never_raises_starts_nothing_twice_and_runs_start_after_it(
    harness: ExecutorHarness,
) -> None:
    """`prepare` (the launcher's, as it starts) is safe to call again, and a run started after
    it behaves as any other."""
    ex = harness.executor
    ex.prepare()
    ex.prepare()
    spec = harness.make_spec(Behaviour(exit_code=0))
    outcome = outcome_of(await all_events(ex, await ex.start(spec)))
    assert (outcome.status, outcome.exit_code) == (RunStatus.SUCCESS, 0)
    assert harness.starts(spec) == 1
