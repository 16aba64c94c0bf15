"""What a Slurm job's state means for its run: the pure classifier of the Slurm executor.

The input is what `scontrol show job` (or the job-completion log, or `sacct`) says of one job:
its `JobState`, `Reason` and `ExitCode` (`<code>:<signal>`). The answer is a phase (pending,
running, final) and, for a final state, the run's outcome fields. Fixtures per state are in
tests/unit/test_slurm_states.py (taken from the test cluster, Slurm 22.05).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Literal

from runlane.core.runs import EndReason, RunStatus

Phase = Literal["pending", "running", "final"]

PENDING_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
RUNNING_STATES = frozenset(
    {"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED", "RESIZING", "SIGNALING",
     "STAGE_OUT", "UPDATE_DB", "POWER_UP_NODE"}
)  # fmt: skip
FINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "TIMEOUT", "DEADLINE", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL",
     "PREEMPTED", "CANCELLED", "REVOKED", "SPECIAL_EXIT"}
)  # fmt: skip

# Pending reasons that never resolve by waiting: the request cannot be met by this partition
# or account as configured. The run fails at once (an operator must change the request).
HOPELESS_REASONS = frozenset(
    {"PartitionConfig", "BadConstraints", "PartitionNodeLimit", "PartitionTimeLimit",
     "AccountNotAllowed", "QOSNotAllowed", "InvalidAccount", "InvalidQOS", "PartitionDown",
     "PartitionInactive", "JobLaunchFailure", "DependencyNeverSatisfied", "FrontEndDown"}
)  # fmt: skip

# Failure codes of final states that are not an exit of the command (run_errors.py explains).
STATE_ERROR_CODES = {
    "OUT_OF_MEMORY": "oom_killed",
    "NODE_FAIL": "node_fail",
    "BOOT_FAIL": "boot_fail",
    "PREEMPTED": "preempted",
    "REVOKED": "preempted",
    "SPECIAL_EXIT": "exit_code",
}


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One job as the cluster reports it."""

    job_id: str
    name: str
    state: str  # JobState, e.g. COMPLETED; a `CANCELLED by 0` is stored as CANCELLED
    reason: str = "None"
    exit_code: str = "0:0"  # `<exit status>:<signal>`
    comment: str = ""
    std_out: str = ""
    submit_time: str = ""  # SubmitTime, the client's local time (2026-12-07T18:28:24); "" unknown
    end_time: str = ""  # EndTime, likewise; of a job that has ended, when it did


@dataclass(frozen=True, slots=True)
class SlurmVerdict:
    """The run's view of a job: its phase and, when final, how the run ends."""

    phase: Phase
    status: RunStatus | None = None
    end_reason: str | None = None
    exit_code: int | None = None
    error_code: str | None = None
    note: str | None = None
    reason: str | None = None  # the pending reason, while pending
    hopeless: bool = False  # pending for a reason waiting cannot cure


def base_state(state: str) -> str:
    """`CANCELLED by 0` → `CANCELLED`; `RUNNING+...` flags dropped."""
    return state.split()[0].split("+")[0].upper() if state.strip() else "UNKNOWN"


def split_exit_code(text: str) -> tuple[int | None, int | None]:
    """`3:0` → (3, None); `0:9` → (None, 9): the exit status, or the signal that ended it."""
    code, _, sig = text.partition(":")
    try:
        status, signum = int(code), int(sig or "0")
    except ValueError:
        return None, None
    if signum:
        return None, signum
    return status, None


def _signal_code(signum: int) -> str:
    try:
        return f"signal_{signal.Signals(signum).name.lower()}"
    except ValueError:
        return f"signal_{signum}"


def classify(
    job: SlurmJob, *, cancel_requested: bool = False, deadline_enforced: bool = False
) -> SlurmVerdict:
    """The verdict on `job`. `cancel_requested`: runlane asked for the cancel (else a
    CANCELLED job was cancelled by someone else); `deadline_enforced`: runlane cancelled it at
    the run's deadline (Slurm's own limit is the deadline rounded up to a minute)."""
    state = base_state(job.state)
    reason = job.reason if job.reason and job.reason != "None" else None
    if state in PENDING_STATES:
        return SlurmVerdict(
            "pending", reason=reason, hopeless=reason is not None and reason in HOPELESS_REASONS
        )
    if state in RUNNING_STATES or state not in FINAL_STATES:
        return SlurmVerdict("running")
    status, signum = split_exit_code(job.exit_code)
    where = f"Slurm job {job.job_id} ended {state}" + (f" ({reason})" if reason else "")
    if state == "COMPLETED":
        return SlurmVerdict("final", RunStatus.SUCCESS, EndReason.EXIT, exit_code=status or 0)
    if state in ("TIMEOUT", "DEADLINE"):
        return SlurmVerdict(
            "final",
            RunStatus.TIMEOUT,
            EndReason.DEADLINE,
            error_code="deadline",
            note=f"{where}: the job reached its time limit",
        )
    if state == "CANCELLED":
        if deadline_enforced:
            return SlurmVerdict(
                "final",
                RunStatus.TIMEOUT,
                EndReason.DEADLINE,
                error_code="deadline",
                note=f"{where}: runlane cancelled it at the run's deadline",
            )
        if cancel_requested:
            return SlurmVerdict(
                "final",
                RunStatus.CANCELLED,
                EndReason.CANCELLED,
                note=f"{where}: cancelled on request",
            )
        return SlurmVerdict(
            "final",
            RunStatus.FAILURE,
            EndReason.CANCELLED,
            error_code="cancelled_externally",
            note=f"{where}: cancelled outside runlane (scancel, an operator or an admin)",
        )
    if state == "FAILED":
        if signum is not None:
            return SlurmVerdict(
                "final",
                RunStatus.FAILURE,
                EndReason.EXIT,
                error_code=_signal_code(signum),
                note=f"{where}: the command was ended by signal {signum}",
            )
        if status:
            return SlurmVerdict(
                "final", RunStatus.FAILURE, EndReason.EXIT, exit_code=status, error_code="exit_code"
            )
        # FAILED with 0:0: the job never ran its command (a launch failure, a bad workdir).
        return SlurmVerdict(
            "final",
            RunStatus.FAILURE,
            EndReason.START_FAILED,
            error_code="start_error",
            note=f"{where}: the job could not run its command",
        )
    code = STATE_ERROR_CODES.get(state, "executor_error")
    return SlurmVerdict(
        "final",
        RunStatus.FAILURE,
        EndReason.EXIT,
        exit_code=status if code == "exit_code" else None,
        error_code=code,
        note=where,
    )
