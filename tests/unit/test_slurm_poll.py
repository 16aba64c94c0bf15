"""The Slurm executor's shared poll and reattach against recorded client answers, for a cluster
with an accounting database (slurmdbd), which the test cluster does not run: a job slurmctld has
forgotten is found in `sacct`, and an accounting database that does not answer never loses a
run. And the poll's own answer read as it is (`squeue -O`), whatever other jobs hold."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from runlane.adapters.slurm.commands import (
    POLL_ARGV,
    Answer,
    job_comment,
    job_name,
    parse_poll,
)
from runlane.adapters.slurm.executor import SlurmExecutor
from runlane.adapters.slurm.poll import ClusterPoll
from runlane.core.runs import RunStatus
from runlane.errors import PermanentExecutorError, TemporaryExecutorError
from runlane.ports import ExecutionEvent, ExecutionSpec

SLURMDBD_CONFIG = (
    "Configuration data as of 2026-12-07T18:00:00\n"
    "AccountingStorageType   = accounting_storage/slurmdbd\n"
    "JobCompType             = jobcomp/none\n"
    "MinJobAge               = 300 sec\n"
)
SACCT_DOWN = (
    "sacct: error: slurm_persist_conn_open_without_init: failed to open persistent connection "
    "to host:dbd:6819: Connection refused\n"
    "sacct: error: Problem talking to the database: Connection refused\n"
)


class Cluster:
    """Recorded answers of a cluster whose slurmctld no longer lists the job (MinJobAge passed)
    and whose accounting database has it, or is down."""

    def __init__(self, sacct: str | None) -> None:
        self.sacct = sacct  # None: slurmdbd does not answer
        self.calls: list[tuple[str, ...]] = []

    async def __call__(
        self, argv: Sequence[str], env: Mapping[str, str] | None, limit: float
    ) -> Answer:
        argv = tuple(argv)
        self.calls.append(argv)
        if argv == POLL_ARGV or argv[0] == "squeue":
            return Answer(argv, 0, "", "")
        if argv[:3] == ("scontrol", "show", "config"):
            return Answer(argv, 0, SLURMDBD_CONFIG, "")
        if argv[0] == "sacct":
            if self.sacct is None:
                return Answer(argv, 1, "", SACCT_DOWN)
            return Answer(argv, 0, self.sacct, "")
        raise AssertionError(f"unexpected call {argv}")


def spec() -> ExecutionSpec:
    return ExecutionSpec(
        run_id="r1",
        job="nightly",
        attempt=1,
        trigger="manual",
        command=["true"],
        params={},
        env={},
        deadline_seconds=600.0,
        kill_grace_seconds=1.0,
    )


async def test_a_job_slurmctld_forgot_is_reattached_from_the_accounting_database(
    tmp_path: Path,
) -> None:
    # The launcher was down longer than MinJobAge: slurmctld forgot the job, slurmdbd has it.
    name = job_name("nightly", "r1", 1)
    cluster = Cluster(f"4242|{name}|FAILED|3:0|{job_comment('r1', 1)}\n")
    executor = SlurmExecutor(tmp_path, runner=cluster, poll_interval=0.05)
    try:
        execution = await executor.reattach(spec())
        assert execution is not None
        events = [event async for event in executor.events(execution)]
    finally:
        await executor.aclose()
    assert execution.external_id == "4242"
    outcome = events[-1].outcome
    assert outcome is not None
    assert (outcome.status, outcome.exit_code) == (RunStatus.FAILURE, 3)
    assert any(c[0] == "sacct" and f"--name={name}" in c for c in cluster.calls)


async def test_reattach_while_the_accounting_database_is_down_is_temporary(
    tmp_path: Path,
) -> None:
    executor = SlurmExecutor(tmp_path, runner=Cluster(None), poll_interval=0.05)
    try:
        with pytest.raises(TemporaryExecutorError):
            await executor.reattach(spec())
    finally:
        await executor.aclose()


async def test_an_accounting_database_that_does_not_answer_never_loses_a_job() -> None:
    poll = ClusterPoll(Cluster(None), None, interval=60.0)
    poll.watch("4242")
    try:
        for _ in range(5):
            await poll.poll_once()
        assert poll.missing("4242") == 0  # not "found nowhere": nowhere was asked
    finally:
        await poll.aclose()


def test_the_polls_answer_is_read_field_by_field() -> None:
    # squeue -h -t all -O JobID:|,State:|,Reason:|,exit_code:|,SubmitTime:|,EndTime:| on the
    # test cluster (22.05).
    t, e = "2026-12-07T18:28:24", "2026-12-07T18:28:31"
    jobs = parse_poll(
        f"7|CANCELLED|None|15|{t}|{e}|\n1|COMPLETED|None|0|{t}|{e}|\n"
        f"4|FAILED|NonZeroExitCode|768|{t}|{e}|\n5|FAILED|JobLaunchFailure|9|{t}|{e}|\n"
        f"6|PENDING|BeginTime|0|{t}|N/A|\n8|PENDING|PartitionConfig|0|{t}|Unknown|\n"
    )
    assert {k: (j.state, j.reason, j.exit_code) for k, j in jobs.items()} == {
        "7": ("CANCELLED", "None", "0:15"),
        "1": ("COMPLETED", "None", "0:0"),
        "4": ("FAILED", "NonZeroExitCode", "3:0"),
        "5": ("FAILED", "JobLaunchFailure", "0:9"),
        "6": ("PENDING", "BeginTime", "0:0"),
        "8": ("PENDING", "PartitionConfig", "0:0"),
    }
    assert jobs["6"].submit_time == t
    assert (jobs["1"].end_time, jobs["6"].end_time) == (e, "N/A")


class PendingCluster:
    """A job still pending (its begin time far ahead) that was submitted two hours ago, by a
    launcher that has gone: the one taking the run over finds it by name."""

    def __init__(self, comment: str) -> None:
        self.comment = comment
        self.submitted = (datetime.now() - timedelta(hours=2)).isoformat(timespec="seconds")

    async def __call__(
        self, argv: Sequence[str], env: Mapping[str, str] | None, limit: float
    ) -> Answer:
        argv = tuple(argv)
        if argv == POLL_ARGV:
            return Answer(argv, 0, f"4242|PENDING|BeginTime|0|{self.submitted}|N/A|\n", "")
        if argv[0] == "squeue":  # the lookup by name
            return Answer(argv, 0, f"4242|{self.comment}\n", "")
        if argv[0] == "scancel":
            return Answer(argv, 0, "", "")
        raise AssertionError(f"unexpected call {argv}")


async def test_a_pending_job_taken_over_counts_its_start_timeout_from_its_submission(
    tmp_path: Path,
) -> None:
    executor = SlurmExecutor(
        tmp_path, runner=PendingCluster(job_comment("r1", 1)), start_timeout=600.0
    )
    try:
        execution = await executor.reattach(spec())
        assert execution is not None

        async def collect() -> list[ExecutionEvent]:
            return [event async for event in executor.events(execution)]

        # Pending for two hours already: not another ten minutes from the takeover.
        events = await asyncio.wait_for(collect(), 5.0)
    finally:
        await executor.aclose()
    outcome = events[-1].outcome
    assert outcome is not None
    assert (outcome.status, outcome.error_code) == (RunStatus.FAILURE, "start_timeout")


class SharedCluster:
    """A cluster where another user (uid 4321) has a job named as ours, with our comment: what
    anyone can copy from `squeue`. squeue and sacct list every user's jobs unless `--user`
    narrows them, as the real tools do for root."""

    FOREIGN_UID = 4321

    def __init__(self, name: str, comment: str) -> None:
        self.name, self.comment = name, comment
        self.calls: list[tuple[str, ...]] = []

    def _rows(self, argv: tuple[str, ...]) -> list[str]:
        users = [a.removeprefix("--user=") for a in argv if a.startswith("--user=")]
        if users and users != [str(self.FOREIGN_UID)]:
            return []
        return ["777"]

    async def __call__(
        self, argv: Sequence[str], env: Mapping[str, str] | None, limit: float
    ) -> Answer:
        argv = tuple(argv)
        self.calls.append(argv)
        if argv == POLL_ARGV:
            return Answer(argv, 0, "", "")
        if argv[0] == "squeue":
            out = "".join(f"{job}|{self.comment}\n" for job in self._rows(argv))
            return Answer(argv, 0, out, "")
        if argv[:3] == ("scontrol", "show", "config"):
            return Answer(argv, 0, SLURMDBD_CONFIG, "")
        if argv[0] == "sacct":
            out = "".join(
                f"{job}|{self.name}|RUNNING|0:0|{self.comment}\n" for job in self._rows(argv)
            )
            return Answer(argv, 0, out, "")
        raise AssertionError(f"unexpected call {argv}")


async def test_another_users_job_with_the_runs_name_and_comment_is_never_adopted(
    tmp_path: Path,
) -> None:
    # The launcher submits as itself: a job of another user is never this run's, whatever it
    # is named and whatever its comment says.
    cluster = SharedCluster(job_name("nightly", "r1", 1), job_comment("r1", 1))
    executor = SlurmExecutor(tmp_path, runner=cluster, poll_interval=0.05)
    try:
        # Nothing of ours: the run is reported gone, never adopted as someone else's job.
        with pytest.raises(PermanentExecutorError) as refused:
            await executor.reattach(spec())
    finally:
        await executor.aclose()
    assert refused.value.code == "deleted_externally"
    assert any(c[0] == "squeue" and f"--user={os.getuid()}" in c for c in cluster.calls)


class EndedCluster:
    """A job that ended ten minutes ago, while no launcher watched (slurmctld still holds it)."""

    def __init__(self, comment: str) -> None:
        self.comment = comment
        now = datetime.now()
        self.submitted = (now - timedelta(minutes=30)).isoformat(timespec="seconds")
        self.ended = (now - timedelta(minutes=10)).isoformat(timespec="seconds")

    async def __call__(
        self, argv: Sequence[str], env: Mapping[str, str] | None, limit: float
    ) -> Answer:
        argv = tuple(argv)
        if argv == POLL_ARGV:
            line = f"4242|COMPLETED|None|0|{self.submitted}|{self.ended}|\n"
            return Answer(argv, 0, line, "")
        if argv[0] == "squeue":  # the lookup by name
            return Answer(argv, 0, f"4242|{self.comment}\n", "")
        raise AssertionError(f"unexpected call {argv}")


async def test_a_job_that_ended_while_no_launcher_watched_says_when(tmp_path: Path) -> None:
    # Its outcome carries the job's EndTime, which the launcher records as the run's end
    # (instead of when it saw the job ended).
    cluster = EndedCluster(job_comment("r1", 1))
    executor = SlurmExecutor(tmp_path, runner=cluster, poll_interval=0.05)
    try:
        execution = await executor.reattach(spec())
        assert execution is not None
        events = [event async for event in executor.events(execution)]
    finally:
        await executor.aclose()
    last = events[-1]
    assert last.outcome is not None
    assert last.outcome.status == RunStatus.SUCCESS
    assert last.ended_at == datetime.fromisoformat(cluster.ended).astimezone()
