"""The RabbitMQ topology's arguments and the one line a 406 PRECONDITION_FAILED becomes."""

from __future__ import annotations

import socket

import pytest

from runlane.adapters.rabbitmq import Topology, mismatch_message
from runlane.adapters.rabbitmq.policy import Management, amqp_vhost
from runlane.errors import BusUnavailable


def test_job_runs_is_a_quorum_queue_dead_lettered_at_least_once_with_the_six_hour_ttl() -> None:
    args = Topology().job_runs_arguments()
    assert args["x-queue-type"] == "quorum"
    assert args["x-dead-letter-routing-key"] == "job_runs.dlq"
    assert args["x-dead-letter-strategy"] == "at-least-once"
    assert args["x-overflow"] == "reject-publish"  # at-least-once dead-lettering needs it
    assert args["x-message-ttl"] == 6 * 3600 * 1000
    assert args["x-delivery-limit"] == 5


def test_a_prefix_namespaces_every_name() -> None:
    t = Topology(prefix="t1.")
    names = {t.job_runs, t.job_runs_dlq, t.job_events, t.events_queue, t.events_dlq, t.unrouted}
    assert all(name.startswith("t1.") for name in names)
    assert t.job_runs_arguments()["x-dead-letter-routing-key"] == "t1.job_runs.dlq"


def test_an_inequivalent_argument_is_reported_as_the_difference() -> None:
    text = (
        "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'job_runs' in "
        "vhost '/': received '5000' but current is '21600000'"
    )
    assert mismatch_message(text) == (
        "RabbitMQ queue 'job_runs' exists with x-message-ttl=21600000, runlane declares "
        "x-message-ttl=5000: delete the queue (after draining it) or align the setting; "
        "see docs/bus.md#topology"
    )


def test_an_argument_set_only_on_one_side_is_shown_as_not_set() -> None:
    text = (
        "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'job_runs' in vhost "
        "'/': received the value 'quorum' of type 'longstr' but current is none"
    )
    assert "x-queue-type=(not set), runlane declares x-queue-type=quorum" in mismatch_message(text)


def test_another_refusal_is_passed_on_whole() -> None:
    assert mismatch_message("PRECONDITION_FAILED - odd") == (
        "RabbitMQ refused runlane's topology: PRECONDITION_FAILED - odd"
    )


def test_the_policy_mode_declares_the_queue_type_only_and_puts_the_values_in_policies() -> None:
    t = Topology(prefix="t1.", use_policies=True, command_ttl_seconds=0.5)
    assert t.job_runs_arguments() == {"x-queue-type": "quorum"}
    assert t.events_arguments() == {"x-queue-type": "quorum"}
    policies = t.policies()
    runs = policies["t1.runlane.job_runs"]
    assert runs["pattern"] == r"^t1\.job_runs$"  # anchored: runlane's own queue, nothing else
    assert runs["apply-to"] == "queues"
    assert runs["definition"]["message-ttl"] == 500
    assert runs["definition"]["dead-letter-routing-key"] == "t1.job_runs.dlq"
    events = policies["t1.runlane.events"]
    assert events["pattern"] == r"^t1\.runlane\.events$"
    assert events["definition"]["dead-letter-routing-key"] == "t1.runlane.events.dlq"
    assert "message-ttl" not in events["definition"]


def test_the_arguments_mode_carries_the_same_values_as_the_policies() -> None:
    t = Topology()
    assert t.job_runs_arguments() == {
        "x-queue-type": "quorum",
        **{f"x-{k}": v for k, v in t.job_runs_definition().items()},
    }


def test_the_vhost_of_an_amqp_url() -> None:
    assert amqp_vhost("amqp://guest:guest@127.0.0.1:5672/") == "/"
    assert amqp_vhost("amqp://127.0.0.1") == "/"
    assert amqp_vhost("amqp://h/runlane-test") == "runlane-test"
    assert amqp_vhost("amqp://h/a%2Fb") == "a/b"


async def test_an_unreachable_management_api_is_one_bus_unavailable_line() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m = Management(f"http://guest:s3cret@127.0.0.1:{port}", "/")
    with pytest.raises(BusUnavailable) as caught:
        await m.apply(Topology())
    message = caught.value.message
    assert message.startswith(f"RabbitMQ management API at http://guest:***@127.0.0.1:{port} ")
    assert "ConnectError" in message
    assert "s3cret" not in message
    assert "\n" not in message
