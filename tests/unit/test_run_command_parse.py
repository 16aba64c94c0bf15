"""A run command's body as the `job_runs` consumer reads it: what it refuses, and why."""

from __future__ import annotations

import json

import pytest

from runlane.core.runs import Trigger
from runlane.service.launcher.bus_loops import Refused, parse_command


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("{", "not JSON"),
        ("[1]", "not a JSON object"),
        (json.dumps({"job": "a"}), "'run_id' is missing or not a string"),
        (json.dumps({"run_id": "r", "job": 3}), "'job' is missing or not a string"),
        (json.dumps({"run_id": "r", "job": "a", "params": [1]}), "'params' is not a JSON object"),
        (json.dumps({"run_id": "r", "job": "a", "trigger": "cron"}), "'trigger' 'cron' is not"),
        (json.dumps({"run_id": "r", "job": "a", "traceparent": "00-x"}), "'traceparent': is not"),
    ],
)
def test_a_bad_command_is_refused_with_its_reason(body: str, reason: str) -> None:
    with pytest.raises(Refused) as refused:
        parse_command(body)
    assert str(refused.value).startswith(reason)


def test_a_minimal_command_defaults_to_a_manual_run() -> None:
    command = parse_command(json.dumps({"run_id": "r1", "job": "lineup"}))
    assert command.trigger is Trigger.MANUAL
    assert command.params == {}
    assert command.dedupe_key is None
    assert command.requested_by is None
