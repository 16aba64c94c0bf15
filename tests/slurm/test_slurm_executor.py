"""The Slurm executor on a real one-node Slurm (slurmctld + slurmd, no accounting): what the
conformance suite does not cover — pending past start_timeout, a request that can never run, a
refused submission, a lost sbatch answer, slurmctld restarted mid-run, a job cancelled by
someone else, a name collision, large params, and one poll for many runs."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from runlane.adapters.slurm.commands import POLL_ARGV, Answer, job_name, run_tool
from runlane.adapters.slurm.executor import SlurmExecutor
from runlane.core.runs import EndReason, Outcome, RunStatus
from runlane.errors import PermanentExecutorError, TemporaryExecutorError
from runlane.ports import Execution, ExecutionEvent, ExecutionSpec
from tests.support.slurm import SlurmCluster
from tests.support.waiting import eventually

from .conftest import make_executor, python_spec

pytestmark = pytest.mark.timeout(60)

WITHIN = 20.0
HANG = "import signal; print('up', flush=True); signal.pause()"


async def finish(executor: SlurmExecutor, execution: Execution) -> tuple[list[str], Outcome]:
    async def collect() -> list[ExecutionEvent]:
        return [event async for event in executor.events(execution)]

    events = await asyncio.wait_for(collect(), WITHIN)
    assert events[-1].kind == "finished"
    assert events[-1].outcome is not None
    return [e.kind for e in events], events[-1].outcome


async def taken_over(slurm: SlurmCluster, log_dir: Path, spec: ExecutionSpec) -> Outcome:
    """The run's outcome as another launcher's executor sees it, reattached to its job."""
    other = make_executor(slurm, log_dir)
    try:
        found = await other.reattach(spec)
        assert found is not None
        _, outcome = await finish(other, found)
    finally:
        await other.aclose()
    return outcome


def leftover_params(log_dir: Path) -> list[Path]:
    return list(log_dir.glob("*.params"))


def squeue(cluster: SlurmCluster, name: str) -> list[str]:
    out = cluster.tool("squeue", f"--name={name}", "-h", "-t", "all", "-o", "%i|%T|%r", check=True)
    return [line for line in out.splitlines() if line]


async def test_pending_past_start_timeout_saves_the_reason_and_cancels_the_job(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    executor = make_executor(slurm, tmp_path, start_timeout=1.5)
    spec = python_spec("print('never')", slurm={"extra_args": ["--begin=now+3600"]})
    try:
        execution = await executor.start(spec)
        kinds, outcome = await finish(executor, execution)
    finally:
        await executor.aclose()
    assert kinds == ["pending", "finished"]
    assert (outcome.status, outcome.end_reason, outcome.error_code) == (
        RunStatus.FAILURE,
        EndReason.START_TIMEOUT,
        "start_timeout",
    )
    assert outcome.note is not None
    assert "BeginTime" in outcome.note
    name = job_name(spec.job, spec.run_id, spec.attempt)
    await eventually(lambda: "CANCELLED" in "".join(squeue(slurm, name)), "the job was cancelled")


async def test_a_request_no_node_can_meet_fails_at_once_with_the_reason(
    executor: SlurmExecutor, slurm: SlurmCluster
) -> None:
    spec = python_spec("print('never')", slurm={"cpus": slurm.cpus * 8})
    execution = await executor.start(spec)  # start_timeout is 10 min: this must not wait it out
    _, outcome = await finish(executor, execution)
    assert (outcome.status, outcome.end_reason, outcome.error_code) == (
        RunStatus.FAILURE,
        EndReason.START_FAILED,
        "slurm_unsatisfiable",
    )
    assert outcome.note is not None
    assert "PartitionConfig" in outcome.note
    assert outcome.retryable is False


async def test_an_invalid_partition_is_refused_at_submit(executor: SlurmExecutor) -> None:
    spec = python_spec("print('never')", slurm={"partition": "no-such-partition"})
    with pytest.raises(PermanentExecutorError) as err:
        await executor.start(spec)
    assert err.value.code == "slurm_refused"
    assert "Invalid partition" in str(err.value)


async def test_a_lost_sbatch_answer_adopts_the_job_it_submitted(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    lost: list[str] = []

    async def losing_runner(
        argv: Sequence[str], env: Mapping[str, str] | None, limit: float
    ) -> Answer:
        answer = await run_tool(argv, env, limit)
        if argv[0] == "sbatch" and not lost:
            lost.append(answer.stdout.strip())  # submitted; the answer never arrives
            raise TemporaryExecutorError("sbatch: Socket timed out", error_code="slurm_timeout")
        return answer

    starts = tmp_path / "starts"
    executor = make_executor(slurm, tmp_path / "logs", runner=losing_runner)
    spec = python_spec(f"open({str(starts)!r}, 'a').write('started\\n')")
    try:
        execution = await executor.start(spec)
        again = await executor.start(spec)
        _, outcome = await finish(executor, execution)
    finally:
        await executor.aclose()
    assert lost
    assert execution.external_id == lost[0] == again.external_id
    assert outcome.status == RunStatus.SUCCESS
    assert len(squeue(slurm, job_name(spec.job, spec.run_id, spec.attempt))) == 1
    assert starts.read_text() == "started\n"


async def test_a_slurmctld_restart_mid_run_is_not_a_final_state(
    executor: SlurmExecutor, slurm: SlurmCluster, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    code = (
        "import os, time\n"
        f"while not os.path.exists({str(gate)!r}): time.sleep(0.05)\n"
        "print('through the restart')\n"
    )
    execution = await executor.start(python_spec(code))
    events = executor.events(execution)
    first = await asyncio.wait_for(anext(events), WITHIN)
    while first.kind != "running":
        first = await asyncio.wait_for(anext(events), WITHIN)
    waiting = asyncio.ensure_future(anext(events))
    slurm.stop_daemon("slurmctld")
    try:
        await eventually(lambda: executor.poll.failures >= 2, "polls failed", within=WITHIN)
        assert not waiting.done()  # a failed poll never ends the run
    finally:
        slurm.start_ctld()
        slurm.wait_up()
    gate.write_text("open")
    finished = await asyncio.wait_for(waiting, WITHIN)
    assert finished.kind == "finished"
    assert finished.outcome is not None
    assert finished.outcome.status == RunStatus.SUCCESS
    assert "through the restart" in await executor.logs(execution)
    await events.aclose()


async def test_a_job_cancelled_by_someone_else_is_a_failure(
    executor: SlurmExecutor, slurm: SlurmCluster
) -> None:
    execution = await executor.start(python_spec(HANG))
    await eventually(
        lambda: (
            executor.poll.job(execution.external_id) is not None
            and "RUNNING" in executor.poll.job(execution.external_id).state
        ),  # type: ignore[union-attr]
        "the job runs",
        within=WITHIN,
    )
    slurm.tool("scancel", execution.external_id, check=True)
    _, outcome = await finish(executor, execution)
    assert (outcome.status, outcome.error_code) == (RunStatus.FAILURE, "cancelled_externally")


async def test_a_foreign_job_of_the_runs_name_is_never_adopted(
    executor: SlurmExecutor, slurm: SlurmCluster, tmp_path: Path
) -> None:
    spec = python_spec("print('mine')")
    name = job_name(spec.job, spec.run_id, spec.attempt)
    slurm.tool("sbatch", "--parsable", f"--job-name={name}", "--comment=someone-else",
         f"--output={tmp_path}/foreign.out", "--wrap=sleep 30", check=True)  # fmt: skip
    with pytest.raises(PermanentExecutorError) as err:
        await executor.start(spec)
    assert err.value.code == "name_collision"
    slurm.tool("scancel", f"--name={name}", check=True)


async def test_params_too_large_for_the_environment_reach_the_job_as_a_private_file(
    executor: SlurmExecutor,
) -> None:
    params = {"blob": "x" * 100_000}
    code = (
        "import json, os\n"
        "path = os.environ['RUNLANE_PARAMS_FILE']\n"
        "print(len(json.load(open(path))['blob']), oct(os.stat(os.path.dirname(path)).st_mode & 0o777))\n"
    )
    execution = await executor.start(python_spec(code, params=params))
    _, outcome = await finish(executor, execution)
    assert outcome.status == RunStatus.SUCCESS, outcome
    assert "100000 0o700" in await executor.logs(execution)
    assert not leftover_params(Path(executor.log_dir))  # removed once the run ended


async def test_one_poll_serves_every_run(executor: SlurmExecutor) -> None:
    specs = [
        python_spec("print('later')", slurm={"extra_args": ["--begin=now+3600"]}) for _ in range(8)
    ]
    executions = [await executor.start(spec) for spec in specs]
    poll = executor.poll
    await eventually(lambda: all(poll.job(e.external_id) for e in executions), "all polled")
    before, started = poll.calls, asyncio.get_running_loop().time()
    await eventually(lambda: poll.calls >= before + 5, "five more polls", within=WITHIN)
    elapsed = asyncio.get_running_loop().time() - started
    # Five polls for eight runs took five intervals, not five per run.
    assert elapsed >= 4 * executor.poll_interval * 0.9
    for execution in executions:
        await executor.cancel(execution, grace=0)
        _, outcome = await finish(executor, execution)
        assert outcome.status == RunStatus.CANCELLED


async def test_a_new_executor_reattaches_to_a_job_that_ended_unwatched(
    executor: SlurmExecutor, slurm: SlurmCluster, tmp_path: Path
) -> None:
    spec = python_spec("import sys; print('bye'); sys.exit(4)")
    await executor.start(spec)
    await executor.aclose()  # the launcher goes away; the job runs and ends without it
    name = job_name(spec.job, spec.run_id, spec.attempt)
    await eventually(lambda: "FAILED" in "".join(squeue(slurm, name)), "the job ended")
    outcome = await taken_over(slurm, executor.log_dir, spec)
    assert (outcome.status, outcome.exit_code) == (RunStatus.FAILURE, 4)
    assert outcome.log_tail is not None
    assert "bye" in outcome.log_tail


async def test_a_start_while_slurmctld_is_down_is_a_temporary_error(
    executor: SlurmExecutor, slurm: SlurmCluster
) -> None:
    spec = python_spec("print('later')")
    slurm.stop_daemon("slurmctld")
    try:
        with pytest.raises(TemporaryExecutorError) as err:
            await executor.start(spec)
    finally:
        slurm.start_ctld()
        slurm.wait_up()
    assert err.value.code in ("slurm_unavailable", "slurm_timeout")
    execution = await executor.start(spec)  # the launcher's retry, once slurmctld is back
    _, outcome = await finish(executor, execution)
    assert outcome.status == RunStatus.SUCCESS


async def test_a_job_slurmctld_forgot_is_read_from_the_job_completion_log(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    # As if MinJobAge had passed: slurmctld's answer leaves the job out once it has ended, so
    # the poll must find its end in the jobcomp/filetxt log (no accounting on this cluster).
    forgotten: set[str] = set()

    async def forgetful_runner(
        argv: Sequence[str], env: Mapping[str, str] | None, limit: float
    ) -> Answer:
        answer = await run_tool(argv, env, limit)
        if tuple(argv) == POLL_ARGV:
            kept = []
            for line in answer.stdout.splitlines():
                if any(line.startswith(f"{job_id}|FAILED|") for job_id in forgotten):
                    continue
                kept.append(line)
            answer = Answer(answer.argv, answer.returncode, "\n".join(kept), answer.stderr)
        return answer

    executor = make_executor(slurm, tmp_path / "logs", runner=forgetful_runner)
    spec = python_spec("import sys; print('gone'); sys.exit(6)")
    try:
        execution = await executor.start(spec)
        forgotten.add(execution.external_id)
        _, outcome = await finish(executor, execution)
    finally:
        await executor.aclose()
    assert (outcome.status, outcome.exit_code) == (RunStatus.FAILURE, 6)
    comp = (slurm.root / "jobcomp.log").read_text()
    assert f"JobId={execution.external_id} " in comp


async def test_a_launcher_that_takes_a_job_over_removes_its_spilled_params_at_its_end(
    executor: SlurmExecutor, slurm: SlurmCluster
) -> None:
    # The params that did not fit the environment are the run's, not the submitting launcher's:
    # whoever follows the job to its end removes them.
    spec = python_spec("print('read them')", params={"blob": "x" * 100_000})
    execution = await executor.start(spec)
    assert leftover_params(Path(executor.log_dir))
    executor.stop_following(execution)  # its lease went to another launcher
    outcome = await taken_over(slurm, executor.log_dir, spec)
    assert outcome.status == RunStatus.SUCCESS, outcome
    assert not leftover_params(Path(executor.log_dir))


async def test_another_jobs_text_never_stands_for_a_watched_jobs_state(
    executor: SlurmExecutor, slurm: SlurmCluster, tmp_path: Path
) -> None:
    # Any user of the cluster chooses their jobs' comments (and names, commands, paths), and
    # scontrol prints them as they are, newlines included: a forged `JobId=<ours>` record there
    # must not end our run.
    execution = await executor.start(python_spec(HANG))
    job_id = execution.external_id
    await eventually(
        lambda: "RUNNING" in getattr(executor.poll.job(job_id), "state", ""),
        "the job runs",
        within=WITHIN,
    )
    forged = f"x\nJobId={job_id} JobName=forged JobState=COMPLETED Reason=None ExitCode=0:0"
    slurm.tool("sbatch", "--parsable", "--job-name=forger", f"--comment={forged}",
               f"--output={tmp_path}/forger.out", "--wrap=sleep 30", check=True)  # fmt: skip
    try:
        before = executor.poll.calls
        await eventually(lambda: executor.poll.calls >= before + 2, "a poll saw the forger")
        await executor.cancel(execution, grace=0)
        _, outcome = await finish(executor, execution)
    finally:
        slurm.tool("scancel", "--name=forger")
    assert outcome.status == RunStatus.CANCELLED, outcome


async def test_a_log_directory_with_a_percent_sign_keeps_the_runs_output(
    slurm: SlurmCluster, tmp_path: Path
) -> None:
    # sbatch expands `%j`, `%x`… in --output: the job wrote to another file than the one the
    # launcher reads, and the run's log and tail were empty.
    executor = make_executor(slurm, tmp_path / "100%j logs")
    try:
        execution = await executor.start(python_spec("print('percent kept')"))
        _, outcome = await finish(executor, execution)
    finally:
        await executor.aclose()
    assert outcome.status == RunStatus.SUCCESS, outcome
    assert "percent kept" in (outcome.log_tail or "")
