"""`ScriptedExecutor`: an `Executor` with no process behind it, whose runs do what a test scripts,
so the launcher's behaviour can be tested without spawning anything.

    executor = ScriptedExecutor()
    executor.script(Script(outcome=None), job="slow")      # runs until released or cancelled
    executor.script(Script(start_errors=(TemporaryExecutorError("busy"),)), job="flaky")
    ...
    executor.release(run_id, exited(3))                    # ends a held run now
    assert executor.started(run_id) == 1                   # started once, never twice
    assert [c.run_id for c in executor.calls_to("cancel")] == [run_id]

It keeps the `Executor` contract (tests/conformance/executor runs it with the others): `start` is
idempotent for (run_id, attempt) while the execution lives, `events` ends after one `finished`,
`cancel` ends a live execution `cancelled`, the deadline ends one `timeout`. `reattach` finds only
this executor's own live executions (as the inline executor does).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

from runlane.core.runs import EndReason, Outcome, RunStatus
from runlane.ports import Execution, ExecutionEvent, ExecutionSpec

SUCCEEDED = Outcome(RunStatus.SUCCESS, EndReason.EXIT, exit_code=0)


def exited(code: int, output: str | None = None) -> Outcome:
    """The outcome of a process that exited with `code` (0: success) after printing `output`."""
    status = RunStatus.SUCCESS if code == 0 else RunStatus.FAILURE
    return Outcome(status, EndReason.EXIT, exit_code=code, log_tail=output)


@dataclass(frozen=True, slots=True)
class Script:
    """What one run does at the executor.

    - `start_errors`: raised by the run attempt's first `start` calls, one each, in order (a
      `TemporaryExecutorError` has the launcher release the run and try again later, a
      `PermanentExecutorError` ends it); the next `start` starts it.
    - `states`: the events it goes through before `finished`.
    - `outcome`: how it ends, right after its states; None: it runs until `release`, `cancel`
      or its deadline (`spec.deadline_seconds` on the event loop's clock).
    - `output`: what it printed, as `logs` (its tail) and the tail of a cancel or timeout show.
    """

    start_errors: tuple[Exception, ...] = ()
    states: tuple[Literal["pending", "running"], ...] = ("running",)
    outcome: Outcome | None = SUCCEEDED
    output: str = ""


@dataclass(frozen=True, slots=True)
class Call:
    """One call the executor received, in order (`grace` for `cancel`, `tail_bytes` for `logs`)."""

    method: Literal["start", "reattach", "events", "cancel", "logs", "stop_following"]
    run_id: str
    attempt: int
    grace: float | None = None
    tail_bytes: int | None = None


@dataclass(slots=True)
class _Live:
    spec: ExecutionSpec
    script: Script
    execution: Execution
    ended: asyncio.Future[Outcome]
    deadline: asyncio.TimerHandle | None = None

    def end(self, outcome: Outcome) -> bool:
        """End the execution with `outcome` unless it has ended; True if this ended it."""
        if self.ended.done():
            return False
        if self.deadline is not None:
            self.deadline.cancel()
        self.ended.set_result(outcome)
        return True


@dataclass
class ScriptedExecutor:
    """An `Executor` whose runs follow `Script`s: by run id first, then by job, else `default`.
    Every call is recorded in `calls`. Use it from one event loop."""

    default: Script = field(default_factory=Script)
    name: str = "scripted"
    calls: list[Call] = field(default_factory=list, init=False)
    prepared: int = field(default=0, init=False)  # `prepare` calls (the launcher's, at its start)
    _by_run: dict[str, Script] = field(default_factory=dict, init=False)
    _by_job: dict[str, Script] = field(default_factory=dict, init=False)
    _live: dict[tuple[str, int], _Live] = field(default_factory=dict, init=False)
    _start_calls: dict[tuple[str, int], int] = field(default_factory=dict, init=False)
    _started: dict[tuple[str, int], list[ExecutionSpec]] = field(default_factory=dict, init=False)

    # -- scripting and looking ------------------------------------------------------------------

    def script(self, script: Script, *, run_id: str | None = None, job: str | None = None) -> None:
        """What the run `run_id`, or every run of `job`, does from its next `start` on."""
        if (run_id is None) == (job is None):
            raise ValueError("script a run_id or a job, one of them")
        if run_id is not None:
            self._by_run[run_id] = script
        else:
            assert job is not None
            self._by_job[job] = script

    def release(self, run_id: str, outcome: Outcome = SUCCEEDED, *, attempt: int = 1) -> None:
        """End the live execution of (`run_id`, `attempt`) now with `outcome`."""
        live = self._live.get((run_id, attempt))
        if live is None:
            raise KeyError(f"no live execution of run {run_id} attempt {attempt}")
        live.end(outcome)

    def started(self, run_id: str, attempt: int = 1) -> int:
        """How many executions of (`run_id`, `attempt`) were started (an adopted one is not)."""
        return len(self._started.get((run_id, attempt), []))

    def spec_of(self, run_id: str, attempt: int = 1) -> ExecutionSpec:
        """The spec the last execution of (`run_id`, `attempt`) was started with."""
        return self._started[(run_id, attempt)][-1]

    def calls_to(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    def running(self) -> list[str]:
        """The run ids of the executions that have not ended."""
        return [run_id for (run_id, _), live in self._live.items() if not live.ended.done()]

    # -- the Executor protocol ------------------------------------------------------------------

    async def start(self, spec: ExecutionSpec) -> Execution:
        key = (spec.run_id, spec.attempt)
        self.calls.append(Call("start", *key))
        live = self._live.get(key)
        if live is not None and not live.ended.done():
            return live.execution  # the same run and attempt: adopted, never started twice
        script = self._by_run.get(spec.run_id) or self._by_job.get(spec.job) or self.default
        tries = self._start_calls.get(key, 0)
        self._start_calls[key] = tries + 1
        if tries < len(script.start_errors):
            raise script.start_errors[tries]
        loop = asyncio.get_running_loop()
        execution = Execution(spec.run_id, spec.attempt, f"scripted/{spec.run_id}/{spec.attempt}")
        live = _Live(spec, script, execution, loop.create_future())
        execution.handle = live
        self._live[key] = live
        self._started.setdefault(key, []).append(spec)
        if script.outcome is not None:
            live.end(script.outcome)
        else:
            timeout = Outcome(
                RunStatus.TIMEOUT,
                EndReason.DEADLINE,
                error_code="deadline",
                log_tail=script.output or None,
            )
            live.deadline = loop.call_later(max(spec.deadline_seconds, 0.0), live.end, timeout)
        return execution

    async def reattach(self, spec: ExecutionSpec) -> Execution | None:
        key = (spec.run_id, spec.attempt)
        self.calls.append(Call("reattach", *key))
        live = self._live.get(key)
        return live.execution if live is not None and not live.ended.done() else None

    async def events(self, execution: Execution) -> AsyncIterator[ExecutionEvent]:
        live = self._of(execution)
        self.calls.append(Call("events", execution.run_id, execution.attempt))
        for state in live.script.states:
            yield ExecutionEvent(state)
        outcome = await asyncio.shield(live.ended)
        yield ExecutionEvent("finished", outcome)

    def stop_following(self, execution: Execution) -> None:
        self.calls.append(Call("stop_following", execution.run_id, execution.attempt))

    def prepare(self) -> None:
        self.prepared += 1

    async def cancel(self, execution: Execution, *, grace: float) -> None:
        live = self._of(execution)
        self.calls.append(Call("cancel", execution.run_id, execution.attempt, grace=grace))
        live.end(
            Outcome(RunStatus.CANCELLED, EndReason.CANCELLED, log_tail=live.script.output or None)
        )

    async def logs(self, execution: Execution, *, tail_bytes: int = 65536) -> str:
        live = self._of(execution)
        self.calls.append(Call("logs", execution.run_id, execution.attempt, tail_bytes=tail_bytes))
        output = live.script.output.encode()
        return output[-tail_bytes:].decode(errors="replace") if tail_bytes > 0 else ""

    def _of(self, execution: Execution) -> _Live:
        live = execution.handle
        if not isinstance(live, _Live):
            raise TypeError(f"not an execution of this executor: {execution.external_id}")
        return live

    def taken_over(self) -> ScriptedExecutor:
        """Another executor with the same scripts and none of this one's executions or calls:
        what a second launcher has after a takeover."""
        other = ScriptedExecutor(self.default, self.name)
        other._by_run = dict(self._by_run)
        other._by_job = dict(self._by_job)
        return other
