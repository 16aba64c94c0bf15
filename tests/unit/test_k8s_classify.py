"""The pure classifier against one JSON fixture per reason (tests/fixtures/k8s)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from runlane.adapters.kubernetes.diagnose import (
    diagnose,
    diagnose_deleted,
    is_suspended,
    true_condition,
    waiting_since,
)
from runlane.core.runs import RunStatus

FIXTURES = Path(__file__).parent.parent / "fixtures" / "k8s"
CASES = sorted(p.stem for p in FIXTURES.glob("*.json"))


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def test_there_is_a_fixture_for_every_reason() -> None:
    codes = {load(c)["expect"].get("error_code") for c in CASES}
    for code in (
        "oom_killed",
        "exit_code",
        "evicted",
        "image_pull",
        "invalid_image",
        "unschedulable",
        "config_error",
        "deadline",
        "start_error",
        "job_failed",
    ):
        assert code in codes


@pytest.mark.parametrize("case", CASES)
def test_fixture(case: str) -> None:
    data = load(case)
    expect = data["expect"]
    got = diagnose(data["job"], data["pods"])
    assert got.phase == expect["phase"], data["description"]
    assert (got.status.value if got.status else None) == expect["status"]
    assert got.error_code == expect["error_code"]
    if "exit_code" in expect:
        assert got.exit_code == expect["exit_code"]
    if "end_reason" in expect:
        assert got.end_reason == expect["end_reason"]
    if "fail_now" in expect:
        assert got.fail_now is expect["fail_now"]
    if "message_contains" in expect:
        assert expect["message_contains"] in (got.message or "")
    if got.final:
        outcome = got.outcome(log_tail="tail", note="n")
        assert outcome.status == got.status
        assert outcome.log_tail == "tail"
    else:
        with pytest.raises(ValueError):
            got.outcome()


def test_condition_status_is_the_string_true() -> None:
    job = {"status": {"conditions": [{"type": "Complete", "status": "False"}]}}
    assert true_condition(job, "Complete") is None
    job["status"]["conditions"][0]["status"] = "True"
    assert true_condition(job, "Complete") is not None
    assert true_condition(None, "Complete") is None


def test_suspended_by_spec_alone() -> None:
    assert is_suspended({"spec": {"suspend": True}})
    assert not is_suspended({"spec": {"suspend": False}})


def test_pods_are_read_newest_first() -> None:
    data = load("exit_code")
    old = json.loads(json.dumps(data["pods"][0]))
    old["metadata"]["creationTimestamp"] = "2026-05-01T09:00:00Z"
    old["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = 9
    got = diagnose(data["job"], [old, data["pods"][0]])
    assert got.exit_code == 3


def test_invalid_image_is_not_retryable() -> None:
    from runlane.adapters.kubernetes.diagnose import Diagnosis

    d = Diagnosis("failed", RunStatus.FAILURE, "start_failed", error_code="invalid_image")
    assert d.outcome().retryable is False
    assert diagnose(load("exit_code")["job"], load("exit_code")["pods"]).outcome().retryable


def test_deleted_before_the_end_is_a_failure() -> None:
    running = load("running")
    got = diagnose_deleted(running["job"], running["pods"])
    assert got.status == RunStatus.FAILURE
    assert got.error_code == "deleted_externally"
    assert diagnose_deleted(None).error_code == "deleted_externally"


def test_deleted_after_the_end_keeps_the_end() -> None:
    done = load("success")
    assert diagnose_deleted(done["job"], done["pods"]).status == RunStatus.SUCCESS


def test_summary_reads_well() -> None:
    data = load("image_pull")
    got = diagnose(data["job"], data["pods"])
    assert got.summary().startswith("image_pull (ImagePullBackOff: Back-off pulling image")
    assert diagnose({"status": {}}).summary() == "pending"


def test_job_without_pods_but_ready_is_running() -> None:
    assert diagnose({"status": {"active": 1, "ready": 1}}).phase == "running"
    assert diagnose({"status": {"active": 1}}).phase == "pending"


def test_ended_at_reads_the_completion_time_then_the_condition_then_the_pod() -> None:
    from datetime import UTC, datetime

    from runlane.adapters.kubernetes.diagnose import ended_at

    done = {
        "status": {
            "completionTime": "2031-03-04T05:06:07Z",
            "conditions": [
                {"type": "Complete", "status": "True", "lastTransitionTime": "2031-03-04T05:06:09Z"}
            ],
        }
    }
    assert ended_at(done, []) == datetime(2031, 3, 4, 5, 6, 7, tzinfo=UTC)
    failed = {
        "status": {
            "conditions": [
                {"type": "Failed", "status": "False", "lastTransitionTime": "2031-03-04T05:00:00Z"},
                {
                    "type": "FailureTarget",
                    "status": "True",
                    "lastTransitionTime": "2031-03-04T05:06:08Z",
                },
            ]
        }
    }
    assert ended_at(failed, []) == datetime(2031, 3, 4, 5, 6, 8, tzinfo=UTC)
    pod = {
        "metadata": {"creationTimestamp": "2031-03-04T05:00:00Z"},
        "status": {
            "containerStatuses": [
                {"state": {"terminated": {"exitCode": 1, "finishedAt": "2031-03-04T05:06:05Z"}}},
                {"state": {"terminated": {"exitCode": 0, "finishedAt": "2031-03-04T05:06:06.5Z"}}},
            ]
        },
    }
    older = {
        "metadata": {"creationTimestamp": "2031-03-04T04:00:00Z"},
        "status": {
            "containerStatuses": [{"state": {"terminated": {"finishedAt": "2031-03-04T06:00:00Z"}}}]
        },
    }
    # The Job says nothing (deleted before its condition was written): its newest pod does.
    assert ended_at(None, [older, pod]) == datetime(2031, 3, 4, 5, 6, 6, 500000, tzinfo=UTC)
    garbled = {
        "status": {
            "completionTime": "yesterday",
            "conditions": [
                {"type": "Complete", "status": "True", "lastTransitionTime": "2031-03-04T05:06:09"}
            ],
        }
    }
    assert ended_at(garbled, []) is None  # not a time, and one without a zone: nothing said


def test_waiting_since_reads_the_newest_pod_then_the_job_start_then_its_creation() -> None:
    job = {
        "metadata": {"creationTimestamp": "2031-03-04T05:00:00Z"},
        "status": {"startTime": "2031-03-04T05:10:00Z"},  # resumed from suspension at 05:10
    }
    old = {"metadata": {"creationTimestamp": "2031-03-04T05:10:01Z"}}
    new = {"metadata": {"creationTimestamp": "2031-03-04T05:10:02Z"}}
    assert waiting_since(job, [old, new]) == datetime(2031, 3, 4, 5, 10, 2, tzinfo=UTC)
    assert waiting_since(job, []) == datetime(2031, 3, 4, 5, 10, tzinfo=UTC)
    assert waiting_since({"metadata": job["metadata"]}, []) == datetime(2031, 3, 4, 5, tzinfo=UTC)
    assert waiting_since(None, []) is None
