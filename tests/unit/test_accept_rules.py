"""The run-row decisions every store executes (`runlane.core.accept_rules`)."""

from __future__ import annotations

import pytest

from runlane.core.accept_rules import (
    cancel_action,
    cancel_refusal,
    cancelled_note,
    check_finish,
    check_unleased_finish,
    finish_note,
    needs_overlap_check,
    overlap_decision,
    unleased_finish_refusal,
)
from runlane.core.runs import RunStatus
from runlane.errors import InvalidTransition, NotFound, OverlapRefused


def test_nothing_active_means_the_row_is_written_as_asked() -> None:
    for action in ("none", "skip", "refuse"):
        assert overlap_decision(action, "j", RunStatus.QUEUED, None, None) == (
            RunStatus.QUEUED,
            None,
        )


def test_an_active_run_skips_or_refuses_the_new_row_as_the_action_says() -> None:
    assert overlap_decision("none", "j", RunStatus.QUEUED, None, "r1") == (RunStatus.QUEUED, None)
    assert overlap_decision("skip", "j", RunStatus.QUEUED, None, "r1") == (
        RunStatus.SKIPPED,
        "overlap",
    )
    with pytest.raises(OverlapRefused, match="job j already has an active run r1") as refused:
        overlap_decision("refuse", "j", RunStatus.QUEUED, None, "r1")
    assert refused.value.active_run_id == "r1"


def test_a_row_recorded_skipped_overlaps_nothing() -> None:
    assert not needs_overlap_check("refuse", RunStatus.SKIPPED)
    assert not needs_overlap_check("none", RunStatus.QUEUED)
    assert needs_overlap_check("skip", RunStatus.QUEUED)
    assert overlap_decision("refuse", "j", RunStatus.SKIPPED, "paused", "r1") == (
        RunStatus.SKIPPED,
        "paused",
    )


def test_a_queued_run_is_cancelled_a_running_one_asked_a_final_one_refused() -> None:
    assert cancel_action(RunStatus.QUEUED) == "cancel"
    assert cancel_action(RunStatus.RUNNING) == "request"
    for status in RunStatus:
        if status.is_final:
            assert cancel_action(status) == "refuse"


def test_a_cancel_that_changed_nothing_names_why() -> None:
    assert cancelled_note("alice") == "cancelled by alice"
    assert cancelled_note(None) == "cancelled"
    assert isinstance(cancel_refusal("r1", None), NotFound)
    refusal = cancel_refusal("r1", "success")
    assert isinstance(refusal, InvalidTransition)
    assert str(refusal) == "run r1 already ended as success"


def test_a_finished_run_keeps_the_outcomes_note_else_its_accept_note_unless_released() -> None:
    assert finish_note("outcome", "accepted", None) == "outcome"
    assert finish_note("outcome", "503", "api_unavailable") == "outcome"
    assert finish_note(None, "accepted", None) == "accepted"
    assert finish_note(None, "503", "api_unavailable") is None
    assert finish_note(None, None, None) is None


def test_a_running_run_finishes_only_as_a_final_status() -> None:
    check_finish("r1", RunStatus.SUCCESS)
    check_finish("r1", RunStatus.CANCELLED)
    for status in (RunStatus.RUNNING, RunStatus.QUEUED):
        with pytest.raises(InvalidTransition, match=f"run r1 cannot finish as {status.value}"):
            check_finish("r1", status)


def test_an_unleased_finish_is_checked_against_the_expected_status() -> None:
    check_unleased_finish("r1", RunStatus.QUEUED, RunStatus.CANCELLED)
    with pytest.raises(InvalidTransition, match="queued → running is not allowed"):
        check_unleased_finish("r1", RunStatus.QUEUED, RunStatus.RUNNING)
    with pytest.raises(InvalidTransition, match="success → failure is not allowed"):
        check_unleased_finish("r1", RunStatus.SUCCESS, RunStatus.FAILURE)


def test_an_unleased_finish_that_matched_nothing_says_why() -> None:
    leased = unleased_finish_refusal("r1", RunStatus.RUNNING, RunStatus.RUNNING, "L1", leased=True)
    assert str(leased) == "run r1 is leased by L1: finish it through its lease"
    moved = unleased_finish_refusal("r1", RunStatus.QUEUED, RunStatus.SUCCESS, None, leased=False)
    assert str(moved) == "run r1 is success, not queued"
