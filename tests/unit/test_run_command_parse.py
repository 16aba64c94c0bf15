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


def test_a_later_version_traceparent_is_stored_as_version_00() -> None:
    # As the API and the CLI store it (docs/monitoring.md: later versions are read as version
    # 00, their extra fields dropped): the run's TRACEPARENT is then always a version-00 one.
    later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-later"
    body = json.dumps({"run_id": "r1", "job": "lineup", "traceparent": later})
    command = parse_command(body)
    assert command.traceparent == "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
