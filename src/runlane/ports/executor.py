"""The `Executor` port: where a run executes (a local process, a Kubernetes Job, a Slurm job)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from runlane.core.runs import Outcome


@dataclass(frozen=True, slots=True)
class ExecutionSpec:
    """What an executor needs to run one attempt of one run."""

    run_id: str
    job: str
    attempt: int
    trigger: str
    command: list[str]
    params: dict[str, Any]
    env: dict[str, str]  # RUN_ID, RUN_TRIGGER, RUN_PARENT_ID, RUNLANE_PARAMS, RUNLANE_PARAM_*
    deadline_seconds: float  # remaining time before the run must end as `timeout`
    kill_grace_seconds: float
    parent_run_id: str | None = None
    profile: Mapping[str, Any] = field(default_factory=dict)
    # The job's cap on its log file (catalog `log_max_bytes`), for executors that write the
    # file themselves (inline); None: the executor's own default.
    log_max_bytes: int | None = None


@dataclass(slots=True)
class Execution:
    """A started (or adopted) execution. `external_id` names it at the executor (pid, Job name,
    Slurm job id); `handle` is the executor's own."""

    run_id: str
    attempt: int
    external_id: str
    handle: Any = None


@dataclass(frozen=True, slots=True)
class ExecutionEvent:
    """A state change of an execution; the last one an executor yields is `finished`."""

    kind: Literal["pending", "running", "finished"]
    outcome: Outcome | None = None  # set when kind == "finished"
    # When the execution ended by the provider's clock, if it says (a pod run: its Job's
    # completion time). The launcher records it when the run ended well before it saw it (the
    # Job finished while no launcher watched); None: when the launcher sees the event.
    ended_at: datetime | None = None


class Executor(Protocol):
    """Where a run executes. Contract:

    - `start` is idempotent for (run_id, attempt): an execution with the run's deterministic
      name that belongs to the same run and attempt is adopted, never started twice. Errors are
      `TemporaryExecutorError` (retry later) or `PermanentExecutorError` (give up with a reason).
    - `reattach` finds the execution of a run taken over from another launcher, or returns None
      when there is none to find (an inline process dies with its launcher).
    - `events` yields state changes and ends after exactly one `finished` event carrying the
      outcome. A dropped connection is never a final state.
    - `cancel` ends the execution (TERM, then KILL after `grace`); the `finished` event follows.
    - `logs` returns the tail of the execution's output.
    - `stop_following` drops an execution this launcher will not follow to its end (its lease went to
      another launcher, or its supervision ended before its events were read): whatever the
      executor holds for it (watch subscriptions, polls, caches) goes; the execution itself is
      left as it is. Idempotent, and a no-op for an execution whose events already ended.
    - `prepare` starts what the executor needs before its first run (an inline executor's
      spawner processes and guardian), so the first runs do not wait for it. Called from the
      event loop when the launcher starts, before its first claim. Never raises: what cannot
      start now is logged and left to the first `start`, which tries again and reports it.
    """

    name: str

    async def start(self, spec: ExecutionSpec) -> Execution: ...

    async def reattach(self, spec: ExecutionSpec) -> Execution | None: ...

    def events(self, execution: Execution) -> AsyncIterator[ExecutionEvent]: ...

    async def cancel(self, execution: Execution, *, grace: float) -> None: ...

    async def logs(self, execution: Execution, *, tail_bytes: int = 65536) -> str: ...

    def stop_following(self, execution: Execution) -> None: ...

    def prepare(self) -> None: ...
