"""The chaos suite's checks catch what they claim to catch (fed with known-bad data)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from runlane.testing.broker_faults import BrokerState, broker_violations, vhost_of
from runlane.testing.chaos import (
    attempt_violations,
    audit_violations,
    chaos_crons,
    chaos_window_end,
    ledger_violations,
    limit_violations,
)

T = datetime(2026, 11, 29, tzinfo=UTC)


def row(key: str, attempt: int, status: str, **kw: Any) -> dict[str, Any]:
    base = {
        "id": f"{key}-{attempt}",
        "job": "ok",
        "dedupe_key": key if attempt == 1 else f"{key}#{attempt}",
        "attempt": attempt,
        "status": status,
        "max_attempts": 3,
        "error_code": None,
        "started_at": T,
        "finished_at": T + timedelta(seconds=1),
        "deadline_seconds": 30.0,
        "kill_grace_seconds": 1.0,
    }
    base.update(kw)
    return base


def test_attempts_clean_history_passes() -> None:
    runs = [row("a", 1, "failure"), row("a", 2, "success"), row("b", 1, "success")]
    assert attempt_violations(runs) == []


def test_attempts_catch_duplicates_gaps_and_missing_retries() -> None:
    assert attempt_violations([row("a", 1, "failure"), row("a", 1, "failure")])
    assert attempt_violations([row("a", 1, "failure"), row("a", 3, "success")])
    assert attempt_violations([row("a", 1, "success"), row("a", 2, "success")])
    assert attempt_violations([row("a", 1, "failure")])  # attempts left, no retry
    assert attempt_violations([row("a", 1, "failure", max_attempts=1)]) == []


def test_limits_catch_unfinished_and_overlong_runs() -> None:
    assert limit_violations([row("a", 1, "running")], slack=10)
    long = row("a", 1, "timeout", finished_at=T + timedelta(seconds=100))
    assert limit_violations([long], slack=10)
    assert limit_violations([row("a", 1, "success")], slack=10) == []


def test_ledger_catches_double_execution_and_phantom_success() -> None:
    runs = [row("a", 1, "success")]
    assert ledger_violations(["a-1 1"], runs) == []
    assert ledger_violations(["a-1 1", "a-1 1"], runs)
    assert ledger_violations([], runs)


def test_audit_catches_a_write_under_someone_elses_lease() -> None:
    good = {
        "writer": "runlane-launcher:B",
        "old_status": "running",
        "new_status": "success",
        "lease_owner": "B",
        "end_reason": "exit",
        "run_id": "r",
        "new_generation": 2,
    }
    stale = dict(good, writer="runlane-launcher:A")
    sweep = dict(stale, end_reason="orphaned")
    person = dict(stale, writer="runlane")
    assert audit_violations([good, sweep, person]) == []
    assert len(audit_violations([stale])) == 1


def test_the_drain_waits_for_the_end_of_the_crons_last_minute() -> None:
    # The crons fire in whole UTC minutes: a run log that is quiet at 12:01:40 is not drained
    # while the 12:01 minute still has slots to fire (a chain started then was never finished).
    start = datetime(2026, 11, 29, 12, 0, 50, tzinfo=UTC)
    assert chaos_crons(start, 32) == ("*/2 0,1 * * * *", "*/5 0,1 * * * *")
    assert chaos_window_end(start, 32) == datetime(2026, 11, 29, 12, 2, tzinfo=UTC)
    assert chaos_window_end(start, 5) == datetime(2026, 11, 29, 12, 1, tzinfo=UTC)


def outbox_row(i: int, *, published: bool, event_id: str | None = None) -> dict[str, Any]:
    topic = "job_runs" if event_id is None else "event:run.ok.success"
    return {"id": i, "topic": topic, "event_id": event_id, "published": published}


def test_broker_checks_pass_a_drained_outbox_and_empty_queues() -> None:
    outbox = [outbox_row(1, published=True), outbox_row(2, published=True, event_id="r:success")]
    assert broker_violations(outbox, BrokerState(facts=Counter({"r:success": 2}))) == []


def test_broker_checks_catch_unpublished_rows_lost_facts_and_leftover_commands() -> None:
    outbox = [
        outbox_row(1, published=False),
        outbox_row(2, published=True, event_id="r:running"),
        outbox_row(3, published=True, event_id="r:success"),
    ]
    state = BrokerState(facts=Counter({"r:running": 1}), job_runs=2, job_runs_dlq=1, events_dlq=1)
    found = broker_violations(outbox, state)
    assert len(found) == 5, found
    assert "1 of 3 outbox rows were never published" in found[0]
    assert "['r:success']" in found[1]
    assert found[2:] == [
        "2 run commands left in job_runs (not absorbed)",
        "1 run commands dead-lettered in job_runs.dlq",
        "1 events dead-lettered in runlane.events.dlq",
    ]
    assert broker_violations([], BrokerState()) == [
        "the outbox recorded no rows: the runs did not go through the bus"
    ]


def test_the_faults_close_the_connections_of_the_urls_vhost() -> None:
    assert vhost_of("amqp://guest:guest@127.0.0.1:5672/") == "/"
    assert vhost_of("amqp://guest:guest@127.0.0.1:5672") == "/"
    assert vhost_of("amqp://guest:guest@127.0.0.1:5672/runlane-test-ab12") == "runlane-test-ab12"
    assert vhost_of("amqp://h/%2Fodd%20name") == "/odd name"
