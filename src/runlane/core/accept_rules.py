"""Decisions about run rows that every store makes the same way: overlap at accept, how a
cancel applies, which note a finished run keeps. Pure: the store adapters execute them (in SQL
where the decision must be atomic with the write, and then the SQL cites the rule here)."""

from __future__ import annotations

from typing import Literal

from runlane.core.runs import EndReason, OverlapAction, RunStatus, can_transition
from runlane.errors import InvalidTransition, NotFound, OverlapRefused, RunlaneError

# --- overlap at accept ---------------------------------------------------------------------------


def needs_overlap_check(action: OverlapAction, status: RunStatus) -> bool:
    """Whether accepting a row needs the job's active run: not for `none`, and not for a row
    recorded `skipped` already (it starts nothing, so it overlaps nothing)."""
    return action != "none" and status != RunStatus.SKIPPED


def overlap_decision(
    action: OverlapAction,
    job: str,
    status: RunStatus,
    end_reason: str | None,
    active_run_id: str | None,
) -> tuple[RunStatus, str | None]:
    """The (status, end reason) a new row of `job` is written with, given the job's active
    (queued or running) run, if any: as asked when nothing overlaps (or no check is needed);
    `skipped`/`overlap` under `skip`; `OverlapRefused` naming the active run under `refuse`.
    The store reads the active run and inserts in one atomic step."""
    if active_run_id is None or not needs_overlap_check(action, status):
        return status, end_reason
    if action == "refuse":
        raise OverlapRefused(f"job {job} already has an active run {active_run_id}", active_run_id)
    return RunStatus.SKIPPED, EndReason.OVERLAP.value


# --- cancel ------------------------------------------------------------------------------------

CancelAction = Literal["cancel", "request", "refuse"]


def cancel_action(status: RunStatus) -> CancelAction:
    """What a cancel does to a run in `status`: a queued run is cancelled at once (nobody runs
    it); a running one gets `cancel_requested_at` for its launcher, which stops the execution
    and records `cancelled`; a final one cannot be cancelled. The stores execute this as two
    conditional statements (`cancel_queued`, then `cancel_running`), so a run claimed between
    the two is still asked to stop."""
    if status == RunStatus.QUEUED:
        return "cancel"
    if status == RunStatus.RUNNING:
        return "request"
    return "refuse"


def cancelled_note(by: str | None) -> str:
    """The note of a run cancelled while queued."""
    return f"cancelled by {by}" if by else "cancelled"


def cancel_refusal(run_id: str, status: str | None) -> RunlaneError:
    """The error for a cancel that changed nothing: `NotFound` for an unknown run (`status`
    None), else `InvalidTransition` saying how it ended."""
    if status is None:
        return NotFound(f"no run {run_id}")
    return InvalidTransition(f"run {run_id} already ended as {status}")


# --- finishing through a lease ------------------------------------------------------------------


def check_finish(run_id: str, status: RunStatus) -> None:
    """`InvalidTransition` unless a running run may finish as `status` (a final status that
    `running` can move to): what every store checks before it writes an outcome."""
    if not status.is_final or not can_transition(RunStatus.RUNNING, status):
        raise InvalidTransition(f"run {run_id} cannot finish as {status.value}")


def check_unleased_finish(run_id: str, expected: RunStatus, status: RunStatus) -> None:
    """`InvalidTransition` unless a run nobody leases may go from `expected` to `status` (a
    final status): what `RunLog.finish_unleased` checks before it writes."""
    if not status.is_final or not can_transition(expected, status):
        raise InvalidTransition(f"run {run_id}: {expected.value} → {status.value} is not allowed")


def unleased_finish_refusal(
    run_id: str, expected: RunStatus, current: RunStatus, lease_owner: str | None, *, leased: bool
) -> InvalidTransition:
    """Why `finish_unleased` matched no row of an existing run: it is leased (finish it
    through its lease), or it is no longer in `expected`."""
    if current == expected and leased:
        return InvalidTransition(
            f"run {run_id} is leased by {lease_owner}: finish it through its lease"
        )
    return InvalidTransition(f"run {run_id} is {current.value}, not {expected.value}")


# --- the note a finished run keeps ---------------------------------------------------------------

# The note of a run `Sweeps.sweep_orphans` ends as `timeout`/`orphaned`.
ORPHANED_NOTE = "nobody supervised this run past its deadline"


def finish_note(
    outcome_note: str | None, row_note: str | None, row_error_code: str | None
) -> str | None:
    """The note a run keeps when it finishes through its lease: the outcome's note; else the
    note it was accepted with (e.g. `no_cluster_fallback`), unless the row holds the note of a
    temporary error it was released with (`error_code` set): that one is over.

    Executed in SQL by the `finish` statements (it reads the row as the update writes it);
    this function is the rule they follow, checked against them by the store conformance
    suite."""
    if outcome_note is not None:
        return outcome_note
    if row_error_code is not None:
        return None
    return row_note
