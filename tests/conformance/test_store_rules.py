"""Each store executes the decisions of `runlane.core.accept_rules` (stated once there): the
note a finished run keeps, the overlap decision at accept, and how a cancel applies."""

from __future__ import annotations

import pytest

from runlane.core.accept_rules import cancel_action, cancelled_note, finish_note, overlap_decision
from runlane.core.runs import Outcome, OverlapAction, RunStatus
from runlane.errors import InvalidTransition, OverlapRefused
from runlane.ports import FinishRequest
from tests.conformance.conftest import StoreHarness
from tests.conformance.test_store_contract import _one_claimed, claim_all, new_run, pinned


@pytest.mark.parametrize("batched", [False, True], ids=["finish", "finish_many"])
@pytest.mark.parametrize("released", [False, True], ids=["held", "released"])
@pytest.mark.parametrize("outcome_note", [None, "the outcome's own"])
async def test_the_note_a_finished_run_keeps_is_core_finish_note(
    harness: StoreHarness, batched: bool, released: bool, outcome_note: str | None
) -> None:
    store, clock = await pinned(harness)
    claimed = await _one_claimed(store, note="accepted with this")
    row = claimed.run
    if released:
        await store.release(claimed.lease, retry_after=1, error_code="api_unavailable", note="503")
        clock.advance(1)
        [claimed] = await claim_all(store)
        row = await store.get_run(claimed.run.id)
    outcome = Outcome(RunStatus.SUCCESS, "exit", exit_code=0, note=outcome_note)
    if batched:
        await store.finish_many([FinishRequest(claimed.lease, outcome)])
    else:
        await store.finish(claimed.lease, outcome)
    finished = await store.get_run(claimed.run.id)
    assert finished.note == finish_note(outcome_note, row.note, row.error_code)


@pytest.mark.parametrize("action", ["none", "skip", "refuse"])
async def test_accept_with_an_active_run_follows_core_overlap_decision(
    harness: StoreHarness, action: OverlapAction
) -> None:
    store = harness.store
    active = (await store.accept(new_run("report", overlap="forbid"))).run
    new = new_run("report", overlap="forbid")
    if action == "refuse":
        with pytest.raises(OverlapRefused) as decided:
            overlap_decision(action, "report", new.status, new.end_reason, active.id)
        with pytest.raises(OverlapRefused) as raised:
            await store.accept(new, overlap_action=action)
        assert str(raised.value) == str(decided.value)
        assert raised.value.active_run_id == decided.value.active_run_id == active.id
        return
    expected = overlap_decision(action, "report", new.status, new.end_reason, active.id)
    run = (await store.accept(new, overlap_action=action)).run
    assert (run.status, run.end_reason) == expected


async def test_a_cancel_applies_as_core_cancel_action_says(harness: StoreHarness) -> None:
    store = harness.store
    queued = (await store.accept(new_run())).run
    assert cancel_action(queued.status) == "cancel"
    cancelled = await store.request_cancel(queued.id, by="alice")
    assert (cancelled.status, cancelled.note) == (RunStatus.CANCELLED, cancelled_note("alice"))
    assert cancel_action(cancelled.status) == "refuse"
    with pytest.raises(InvalidTransition):
        await store.request_cancel(queued.id)
    running = await _one_claimed(store)
    assert cancel_action(running.run.status) == "request"
    asked = await store.request_cancel(running.run.id)
    assert asked.status == RunStatus.RUNNING
    assert asked.cancel_requested_at is not None
