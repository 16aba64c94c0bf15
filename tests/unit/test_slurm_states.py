"""The Slurm state classifier (core.slurm_states) on a fixture per state, each an
`scontrol -o show job` record as Slurm 22.05 prints it (trimmed to the fields that matter), read
by the adapter's parser; and the parsers of the poll's other sources."""

from __future__ import annotations

import pytest

from runlane.adapters.slurm.commands import (
    job_comment,
    job_name,
    parse_fields,
    parse_jobcomp,
    parse_sacct,
    parse_show_job,
)
from runlane.core.runs import EndReason, RunStatus
from runlane.core.slurm_states import SlurmJob, classify, split_exit_code


def record(state: str, reason: str = "None", exit_code: str = "0:0") -> str:
    return (
        f"JobId=7 JobName=rl-nightly-0a1b2c3d4e5f-a1 UserId=root(0) GroupId=root(0) "
        f"JobState={state} Reason={reason} Dependency=(null) Requeue=0 Restarts=0 "
        f"ExitCode={exit_code} RunTime=00:00:01 TimeLimit=00:01:00 Partition=debug "
        "WorkDir=/srv/jobs/with space Comment=runlane:run=r1:attempt=1  "
        "StdErr=/var/log/runlane/r1.1.log StdIn=/dev/null StdOut=/var/log/runlane/r1.1.log Power="
    )


def job_from(line: str) -> SlurmJob:
    return parse_show_job(line)["7"]


# (scontrol record, cancel requested, deadline enforced) → (status, end_reason, exit, code)
FINAL = {
    "completed": (record("COMPLETED"), {}, (RunStatus.SUCCESS, EndReason.EXIT, 0, None)),
    "failed_exit": (
        record("FAILED", "NonZeroExitCode", "3:0"),
        {},
        (RunStatus.FAILURE, EndReason.EXIT, 3, "exit_code"),
    ),
    "failed_signal": (
        record("FAILED", "NonZeroExitCode", "0:9"),
        {},
        (RunStatus.FAILURE, EndReason.EXIT, None, "signal_sigkill"),
    ),
    "failed_launch": (
        record("FAILED", "JobLaunchFailure", "0:0"),
        {},
        (RunStatus.FAILURE, EndReason.START_FAILED, None, "start_error"),
    ),
    "timeout": (
        record("TIMEOUT", "TimeLimit", "0:15"),
        {},
        (RunStatus.TIMEOUT, EndReason.DEADLINE, None, "deadline"),
    ),
    "deadline": (
        record("DEADLINE", "DeadLine"),
        {},
        (RunStatus.TIMEOUT, EndReason.DEADLINE, None, "deadline"),
    ),
    "out_of_memory": (
        record("OUT_OF_MEMORY", "OutOfMemory", "0:125"),
        {},
        (RunStatus.FAILURE, EndReason.EXIT, None, "oom_killed"),
    ),
    "node_fail": (
        record("NODE_FAIL", "NodeDown"),
        {},
        (RunStatus.FAILURE, EndReason.EXIT, None, "node_fail"),
    ),
    "boot_fail": (
        record("BOOT_FAIL", "NodeDown"),
        {},
        (RunStatus.FAILURE, EndReason.EXIT, None, "boot_fail"),
    ),
    "preempted": (
        record("PREEMPTED"),
        {},
        (RunStatus.FAILURE, EndReason.EXIT, None, "preempted"),
    ),
    "cancelled_by_someone_else": (
        record("CANCELLED", "None", "0:15"),
        {},
        (RunStatus.FAILURE, EndReason.CANCELLED, None, "cancelled_externally"),
    ),
    "cancelled_on_request": (
        record("CANCELLED"),
        {"cancel_requested": True},
        (RunStatus.CANCELLED, EndReason.CANCELLED, None, None),
    ),
    "cancelled_at_the_deadline": (
        record("CANCELLED"),
        {"deadline_enforced": True},
        (RunStatus.TIMEOUT, EndReason.DEADLINE, None, "deadline"),
    ),
}


@pytest.mark.parametrize("case", sorted(FINAL))
def test_each_final_state_gives_its_outcome(case: str) -> None:
    line, flags, expected = FINAL[case]
    verdict = classify(job_from(line), **flags)
    assert verdict.phase == "final"
    assert (verdict.status, verdict.end_reason, verdict.exit_code, verdict.error_code) == expected


def test_a_success_that_came_before_a_cancel_stays_a_success() -> None:
    verdict = classify(job_from(record("COMPLETED")), cancel_requested=True)
    assert verdict.status == RunStatus.SUCCESS


@pytest.mark.parametrize(
    ("reason", "hopeless"),
    [
        ("Resources", False),
        ("Priority", False),
        ("BeginTime", False),
        ("ReqNodeNotAvail,_UnavailableNodes:node1", False),
        ("PartitionConfig", True),
        ("BadConstraints", True),
        ("PartitionTimeLimit", True),
    ],
)
def test_pending_keeps_its_reason_and_says_whether_waiting_can_cure_it(
    reason: str, hopeless: bool
) -> None:
    verdict = classify(job_from(record("PENDING", reason)))
    assert (verdict.phase, verdict.reason, verdict.hopeless) == ("pending", reason, hopeless)


@pytest.mark.parametrize("state", ["RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED"])
def test_live_states_are_running(state: str) -> None:
    assert classify(job_from(record(state))).phase == "running"


def test_an_unknown_state_is_never_final() -> None:
    assert classify(SlurmJob("7", "x", "SOMETHING_NEW")).phase == "running"


def test_exit_codes_split_into_status_or_signal() -> None:
    assert split_exit_code("3:0") == (3, None)
    assert split_exit_code("0:9") == (None, 9)
    assert split_exit_code("garbage") == (None, None)


def test_a_record_keeps_values_with_spaces() -> None:
    fields = parse_fields(record("RUNNING"))
    assert fields["WorkDir"] == "/srv/jobs/with space"
    assert fields["Comment"] == job_comment("r1", 1)
    assert fields["Power"] == ""


def test_the_completion_log_and_sacct_are_read_by_job_id() -> None:
    lines = [
        "JobId=6 UserId=root(0) Name=a JobState=COMPLETED ExitCode=0:0 NodeList=localhost",
        "JobId=7 UserId=root(0) Name=b JobState=FAILED ExitCode=2:0 NodeList=localhost",
        "JobId=70 UserId=root(0) Name=c JobState=COMPLETED ExitCode=0:0 NodeList=localhost",
    ]
    found = parse_jobcomp(lines, {"7"})
    assert list(found) == ["7"]
    assert (found["7"].name, found["7"].state, found["7"].exit_code) == ("b", "FAILED", "2:0")
    sacct = parse_sacct("7|b|OUT_OF_MEMORY|0:125|runlane:run=r:attempt=1\n\n")
    assert classify(sacct["7"]).error_code == "oom_killed"


def test_job_names_are_deterministic_and_differ_per_attempt() -> None:
    first = job_name("nightly report", "r1", 1)
    assert first == job_name("nightly report", "r1", 1)
    assert first != job_name("nightly report", "r1", 2)
    assert first.startswith("rl-nightly-report-")
    assert first.endswith("-a1")
    assert " " not in job_name("a b/c", "r", 1)
