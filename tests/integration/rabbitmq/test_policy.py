"""The policy mode (`RUNLANE_RABBITMQ_MANAGEMENT_URL`, docs/bus.md#topology) on the real broker:
the TTL, dead-lettering and delivery limit are runlane's policies, the queues carry
`x-queue-type` only, so a changed TTL is a changed policy, never a redeclare."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from runlane.adapters.rabbitmq import RabbitBus, Topology
from runlane.adapters.rabbitmq.policy import Management, amqp_vhost
from runlane.errors import BusTopologyMismatch
from tests.acceptance.test_cli import runlane
from tests.integration.rabbitmq.conftest import depth, publish_json, until
from tests.support.rabbitmq import management_url

pytestmark = pytest.mark.usefixtures("broker_shared")


@pytest.fixture
def mgmt_url() -> str:
    return management_url()


@pytest.fixture
async def policy_bus(
    amqp_url: str, prefix: str, mgmt_url: str
) -> AsyncIterator[Callable[..., RabbitBus]]:
    """Buses in the policy mode (their policies deleted at the end: they outlive the queues)."""
    made: list[RabbitBus] = []

    def make(**topology: Any) -> RabbitBus:
        bus = RabbitBus(
            amqp_url,
            topology=Topology(prefix=prefix, **topology),
            reconnect_interval=0.2,
            management_url=mgmt_url,
        )
        made.append(bus)
        return bus

    yield make
    for bus in made:
        await bus.close()
    if made:
        await Management(mgmt_url, amqp_vhost(amqp_url)).delete(made[0].topology)


async def queue_info(mgmt_url: str, amqp_url: str, queue: str) -> dict[str, Any]:
    return await Management(mgmt_url, amqp_vhost(amqp_url)).queue(queue)


async def test_job_runs_follows_runlanes_policy_and_carries_only_its_queue_type(
    policy_bus: Callable[..., RabbitBus], amqp_url: str, mgmt_url: str
) -> None:
    bus = policy_bus()
    await bus.open()
    t = bus.topology
    # The management API reports a new queue's policy with its statistics (every 5 s).
    info, events = await until(
        lambda: _both(
            _with_policy(queue_info(mgmt_url, amqp_url, t.job_runs), t.job_runs_policy),
            _with_policy(queue_info(mgmt_url, amqp_url, t.events_queue), t.events_policy),
        ),
        every=0.25,
    )
    assert info["arguments"] == {"x-queue-type": "quorum"}
    assert info["effective_policy_definition"] == {
        "dead-letter-exchange": "",
        "dead-letter-routing-key": t.job_runs_dlq,
        "dead-letter-strategy": "at-least-once",
        "overflow": "reject-publish",
        "message-ttl": 6 * 3600 * 1000,
        "delivery-limit": 5,
    }
    assert events["effective_policy_definition"]["dead-letter-routing-key"] == t.events_dlq
    status = await bus.job_runs_policy()
    assert status is not None
    assert (status.applied, status.definition["message-ttl"]) == (t.job_runs_policy, 21600000)


async def test_a_ttl_changed_by_the_policy_needs_no_redeclare_and_expires_into_the_dlq(
    policy_bus: Callable[..., RabbitBus], amqp_url: str, mgmt_url: str, amqp: Any
) -> None:
    first = policy_bus()
    await first.open()  # job_runs declared, 6 h TTL
    await first.close()
    second = policy_bus(command_ttl_seconds=0.5)
    await second.open()  # the same queue, a new TTL: no PRECONDITION_FAILED
    t = second.topology
    # The PUT returned: the queue has the policy (its statistics may not say so yet).
    await publish_json(amqp, t.job_runs, {"run_id": "r1"})
    # Nobody consumes job_runs: the command expires after 500 ms into job_runs.dlq.
    await until(lambda: depth(amqp, t.job_runs_dlq), within=15)
    assert await depth(amqp, t.job_runs) == 0


async def test_queues_declared_with_arguments_before_are_a_mismatch_saying_what_to_do(
    policy_bus: Callable[..., RabbitBus], amqp_url: str, prefix: str
) -> None:
    old = RabbitBus(amqp_url, topology=Topology(prefix=prefix))  # the arguments mode
    try:
        await old.open()
    finally:
        await old.close()
    with pytest.raises(BusTopologyMismatch) as caught:
        await policy_bus().open()
    assert "(not set)" in caught.value.message
    assert "delete the queue (after draining it)" in caught.value.message


async def test_doctor_reports_a_wrong_management_password_as_one_plain_error(
    amqp_url: str, mgmt_url: str, prefix: str, tmp_path: Path
) -> None:
    parts = urlsplit(mgmt_url)
    wrong = urlunsplit(parts._replace(netloc=f"guest:wrong-pw@{parts.hostname}:{parts.port}"))
    (tmp_path / "catalog.yaml").write_text("version: 1\njobs: {}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNLANE_")}
    env.update(
        RUNLANE_DATABASE_URL=f"sqlite:///{tmp_path / 'runlane.db'}",
        RUNLANE_CATALOG=str(tmp_path / "catalog.yaml"),
        RUNLANE_BUS="rabbitmq",
        RUNLANE_RABBITMQ_URL=amqp_url,
        RUNLANE_RABBITMQ_MANAGEMENT_URL=wrong,
    )
    assert (await asyncio.to_thread(runlane, "db", "upgrade", env=env)).returncode == 0
    doctor = await asyncio.to_thread(runlane, "doctor", env=env)
    assert doctor.returncode != 0
    out = doctor.stdout + doctor.stderr
    assert "Traceback" not in out
    assert "wrong-pw" not in out
    lines = [ln for ln in doctor.stdout.splitlines() if "management API" in ln]
    assert len(lines) == 1, doctor.stdout
    assert "401 Unauthorized" in lines[0]
    assert "guest:***@" in lines[0]


async def _with_policy(info: Any, policy: str) -> dict[str, Any] | None:
    value: dict[str, Any] = await info
    return value if value.get("policy") == policy else None


async def _both(a: Any, b: Any) -> tuple[Any, Any] | None:
    first, second = await asyncio.gather(a, b)
    return (first, second) if first and second else None
