"""`runlane doctor`'s reading of job_runs' policy in the policy mode (docs/bus.md#topology)."""

from __future__ import annotations

from runlane.ports import QueuePolicy
from runlane.service.doctor import policy_finding

WANTED = "runlane.job_runs"


def test_runlanes_policy_on_job_runs_is_ok_with_its_values() -> None:
    finding = policy_finding(
        QueuePolicy(WANTED, WANTED, {"message-ttl": 21600000, "delivery-limit": 5})
    )
    assert finding.level == "ok"
    assert "message-ttl 21600000 ms, delivery-limit 5" in finding.message


def test_another_policy_in_its_place_is_an_error_naming_both() -> None:
    finding = policy_finding(QueuePolicy(WANTED, "catch-all", {"message-ttl": 1000}))
    assert finding.level == "error"
    assert "'catch-all', not runlane's 'runlane.job_runs'" in finding.message


def test_no_policy_reported_yet_is_a_warning_not_an_error() -> None:
    finding = policy_finding(QueuePolicy(WANTED, None, {}))
    assert finding.level == "warning"
    assert "run `runlane doctor` again" in finding.message
