"""Executor conformance fixtures: every contract test runs against each executor through an
`ExecutorHarness` — the inline executor (local processes), the pod executor on the local fake
Kubernetes API (`runlane.testing.kube`, whose kubelet runs pods as local processes), the Slurm
executor on a real one-node Slurm cluster (`tests.support.slurm`), and the scripted fake (`runlane.testing.fakes`). A new executor joins by adding one harness here.

A test says what the run's command does (`Behaviour`); each harness turns that into what its
executor runs: a Python command for a process, a `Script` for the fake.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from runlane.adapters.kubernetes.executor import PodExecutor
from runlane.adapters.kubernetes.names import job_name
from runlane.adapters.local.executor import InlineExecutor
from runlane.adapters.slurm.executor import SlurmExecutor
from runlane.ports import Execution, ExecutionSpec, Executor
from runlane.testing.fakes import Script, ScriptedExecutor, exited
from runlane.testing.kube import KubeFake, run_server
from tests.integration.test_pod_executor import NS, make_executor
from tests.support.slurm import SlurmCluster, slurm_cluster

E = TypeVar("E", bound=Executor)

KILL_GRACE = 0.5  # seconds from TERM to KILL: short, every test is bounded

# What a process-backed run does: note that it began (one line per start, so a test counts the
# starts), record the environment it sees, print, then exit or wait to be stopped.
PROGRAM = """
import json, os, signal, sys
b = json.loads(sys.argv[1])
with open(b["starts"], "a") as f:
    f.write("started\\n")
with open(b["env"] + ".part", "w") as f:
    json.dump(dict(os.environ), f)
os.replace(b["env"] + ".part", b["env"])
sys.stdout.write(b["print"])
sys.stdout.flush()
if b["hang"]:
    signal.pause()
sys.exit(b["exit"])
"""


@dataclass(frozen=True, slots=True)
class Behaviour:
    """What a run's command does: print `output`, then exit `exit_code`, or (`hang`) run until
    it is cancelled or its deadline passes."""

    output: str = ""
    exit_code: int = 0
    hang: bool = False


@dataclass
class ExecutorHarness:
    """The executor under test plus what a contract test needs around it."""

    name: str
    executor: Executor
    # A spec whose run does `behaviour` (its env as the launcher builds it from `params`).
    make_spec: Callable[..., ExecutionSpec]
    # How many times the run's command began (an adopted execution is not a start).
    starts: Callable[[ExecutionSpec], int]
    # The environment the run's process saw (after it began).
    env_seen: Callable[[ExecutionSpec], dict[str, str]]
    # A second executor on the same provider: what another launcher has after a takeover.
    takeover: Callable[[], Awaitable[Executor]]
    # Whether `reattach` on that second executor finds a run the first one started.
    reattach_finds_taken_over: bool
    # What `reattach` of a run the provider knows nothing of does: None, or the error code of
    # the `PermanentExecutorError` it raises.
    reattach_unknown_error: str | None
    # Make the deadline of a started run pass (virtual time where the provider has a clock).
    pass_deadline: Callable[[Execution], None] = lambda execution: None
    # The deadline (seconds) of a run a test starts, sees begin, then times out: short where
    # only wall time passes deadlines; where `pass_deadline` moves a clock, long enough that
    # wall time cannot pass it first.
    deadline_to_pass: float = 1.0
    # What the provider holds for a run, for the message of a wait on it that timed out.
    explain: Callable[[ExecutionSpec], str] = lambda spec: ""
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)


def params_env(run_id: str, params: dict[str, Any]) -> dict[str, str]:
    """The env the launcher's `build_env` makes of a run's params (RUN_ID and the params)."""
    env = {
        "RUN_ID": run_id,
        "RUN_TRIGGER": "manual",
        "RUNLANE_PARAMS": json.dumps(params, separators=(",", ":"), sort_keys=True),
    }
    for key, value in params.items():
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        env[f"RUNLANE_PARAM_{key.upper()}"] = text
    return env


def spec_for(
    command: list[str],
    *,
    run_id: str | None,
    attempt: int,
    params: dict[str, Any] | None,
    deadline: float,
    profile: dict[str, Any] | None = None,
) -> ExecutionSpec:
    rid = run_id or str(uuid.uuid4())
    return ExecutionSpec(
        run_id=rid,
        job="conform",
        attempt=attempt,
        trigger="manual",
        command=command,
        params=params or {},
        env=params_env(rid, params or {}),
        deadline_seconds=deadline,
        kill_grace_seconds=KILL_GRACE,
        profile=profile or {},
    )


class ProcessRuns:
    """Commands for executors that run a process: files under `root` say what each run did."""

    def __init__(self, root: Path, profile: dict[str, Any] | None = None) -> None:
        self.root = root
        self.profile = profile
        root.mkdir(parents=True, exist_ok=True)

    def _file(self, spec: ExecutionSpec, what: str) -> Path:
        return self.root / f"{spec.run_id}.{spec.attempt}.{what}"

    def make_spec(
        self,
        behaviour: Behaviour,
        *,
        run_id: str | None = None,
        attempt: int = 1,
        params: dict[str, Any] | None = None,
        deadline: float = 30.0,
    ) -> ExecutionSpec:
        rid = run_id or str(uuid.uuid4())
        files = {
            "starts": str(self.root / f"{rid}.{attempt}.starts"),
            "env": str(self.root / f"{rid}.{attempt}.env"),
        }
        args = {"print": behaviour.output, "exit": behaviour.exit_code, "hang": behaviour.hang}
        command = [sys.executable, "-c", PROGRAM, json.dumps({**files, **args})]
        return spec_for(
            command,
            run_id=rid,
            attempt=attempt,
            params=params,
            deadline=deadline,
            profile=self.profile,
        )

    def starts(self, spec: ExecutionSpec) -> int:
        path = self._file(spec, "starts")
        return len(path.read_text().splitlines()) if path.exists() else 0

    def env_seen(self, spec: ExecutionSpec) -> dict[str, str]:
        env: dict[str, str] = json.loads(self._file(spec, "env").read_text())
        return env


def process_harness(
    name: str,
    runs: ProcessRuns,
    make: Callable[[int], E],
    close: Callable[[E], Awaitable[None]],
    **answers: Any,
) -> ExecutorHarness:
    """A harness over executors `make(n)` makes (the n-th of the test), closed by `close`."""
    executors: list[E] = []

    def new_executor() -> E:
        executor = make(len(executors))
        executors.append(executor)
        return executor

    async def takeover() -> Executor:
        return new_executor()

    async def close_all() -> None:
        for executor in executors:
            await close(executor)

    return ExecutorHarness(
        name=name,
        executor=new_executor(),
        make_spec=runs.make_spec,
        starts=runs.starts,
        env_seen=runs.env_seen,
        takeover=takeover,
        closers=[close_all],
        **answers,
    )


async def close_inline(executor: InlineExecutor) -> None:
    await executor.shutdown(grace=0)
    executor.close()


async def close_pod(executor: PodExecutor) -> None:
    await executor.aclose()


def inline_harness(tmp_path: Path) -> ExecutorHarness:
    return process_harness(
        "inline",
        ProcessRuns(tmp_path / "runs"),
        lambda n: InlineExecutor(tmp_path / f"logs{n}"),
        close_inline,
        reattach_finds_taken_over=False,  # the process dies with its launcher
        reattach_unknown_error=None,
    )


# The deadline of a pod run the contract test times out. Not 1 s: the cluster clock runs with
# wall time, and a Job's startTime has whole seconds (as in Kubernetes), so activeDeadlineSeconds=1
# can pass well under a second after the Job starts — the Job then fails and its pod is killed
# before the command began (a flaky "not within 10 s: the run's command began" under load).
POD_DEADLINE = 30.0


def pod_harness(tmp_path: Path, kube: KubeFake) -> ExecutorHarness:
    def pass_deadline(execution: Execution) -> None:
        kube.state.advance(2 * POD_DEADLINE)  # the cluster clock passes activeDeadlineSeconds

    def explain(spec: ExecutionSpec) -> str:
        return kube.state.explain_job(job_name(spec.job, spec.run_id, spec.attempt), NS)

    return process_harness(
        "pod",
        ProcessRuns(tmp_path / "runs", profile={"image": "local"}),
        lambda n: make_executor(kube),
        close_pod,
        reattach_finds_taken_over=True,  # the Job runs on without its launcher
        reattach_unknown_error="deleted_externally",
        pass_deadline=pass_deadline,
        deadline_to_pass=POD_DEADLINE,
        explain=explain,
    )


async def close_slurm(executor: SlurmExecutor) -> None:
    await executor.aclose()


def slurm_harness(tmp_path: Path, cluster: SlurmCluster) -> ExecutorHarness:
    return process_harness(
        "slurm",
        ProcessRuns(tmp_path / "runs"),
        lambda n: SlurmExecutor(
            tmp_path / "slurm-logs", poll_interval=0.2, cancel_wait=10.0, slurm_env=cluster.env
        ),
        close_slurm,
        reattach_finds_taken_over=True,  # the Slurm job runs on without its launcher
        reattach_unknown_error="deleted_externally",
    )


def scripted_harness() -> ExecutorHarness:
    executor = ScriptedExecutor()
    others: list[ScriptedExecutor] = []

    def make_spec(
        behaviour: Behaviour,
        *,
        run_id: str | None = None,
        attempt: int = 1,
        params: dict[str, Any] | None = None,
        deadline: float = 30.0,
    ) -> ExecutionSpec:
        spec = spec_for(
            ["scripted"], run_id=run_id, attempt=attempt, params=params, deadline=deadline
        )
        outcome = None if behaviour.hang else exited(behaviour.exit_code, behaviour.output or None)
        executor.script(Script(outcome=outcome, output=behaviour.output), run_id=spec.run_id)
        return spec

    async def takeover() -> Executor:
        other = executor.taken_over()
        others.append(other)
        return other

    def starts(spec: ExecutionSpec) -> int:
        return executor.started(spec.run_id, spec.attempt) + sum(
            other.started(spec.run_id, spec.attempt) for other in others
        )

    return ExecutorHarness(
        name="scripted",
        executor=executor,
        make_spec=make_spec,
        starts=starts,
        env_seen=lambda spec: executor.spec_of(spec.run_id, spec.attempt).env,
        takeover=takeover,
        reattach_finds_taken_over=False,
        reattach_unknown_error=None,
    )


@pytest.fixture
def kube() -> Iterator[KubeFake]:
    with run_server(run_local=True) as fake:
        yield fake


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmCluster]:
    """A one-node Slurm cluster for the session (skipped without Slurm; a failure in CI)."""
    with slurm_cluster() as cluster:
        yield cluster


@pytest.fixture(params=["inline", "pod", "slurm", "scripted"])
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ExecutorHarness]:
    if request.param == "inline":
        made = inline_harness(tmp_path)
    elif request.param == "pod":
        made = pod_harness(tmp_path, request.getfixturevalue("kube"))
    elif request.param == "slurm":
        made = slurm_harness(tmp_path, request.getfixturevalue("slurm"))
    else:
        made = scripted_harness()
    try:
        yield made
    finally:
        for close in made.closers:
            await close()
