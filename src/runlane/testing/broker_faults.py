"""Broker faults for the chaos harness (runlane.testing.chaos) on the RabbitMQ bus: the broker app
stopped and started (`rabbitmqctl stop_app`/`start_app`, the VM staying up) and the launchers'
connections on the vhost closed; and what is checked afterwards.

- every outbox row was marked published (after its confirm): a trigger records each row at its
  insert and again when `published_at` is set, so a pruned row still counts;
- every fact the outbox held reached the broker at least once: a durable tap queue of the
  harness's own, bound to `job_events` before the launchers start, is read at the end (its
  persistent messages outlive `stop_app`), and every fact's CloudEvent id must be in it;
- every run command was consumed, duplicates included: `job_runs` ends empty and nothing is
  in `job_runs.dlq` or the events' dead-letter queue (a redelivered or duplicate command for a
  run that already started is acked and dropped, never dead-lettered).

The caller must hold the broker exclusively (tests/support/rabbitmq.py `broker_lock`): a
stopped broker affects every other user of it.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import aio_pika

from runlane.adapters.rabbitmq import Topology, declare_topology

TAP_QUEUE = "chaos.tap"
CTL_TIMEOUT = 60.0

OUTBOX_AUDIT_SQL = """
CREATE TABLE IF NOT EXISTS chaos_outbox (
    id bigint PRIMARY KEY,
    topic text NOT NULL,
    event_id text,
    published boolean NOT NULL DEFAULT false
);
CREATE OR REPLACE FUNCTION chaos_outbox_fn() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO chaos_outbox (id, topic, event_id)
        VALUES (NEW.id, NEW.topic, NEW.payload -> 'cloudevent' ->> 'id');
    ELSIF NEW.published_at IS NOT NULL THEN
        UPDATE chaos_outbox SET published = true WHERE id = NEW.id;
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS chaos_outbox ON outbox;
CREATE TRIGGER chaos_outbox AFTER INSERT OR UPDATE OF published_at ON outbox FOR EACH ROW
    EXECUTE FUNCTION chaos_outbox_fn();
"""


def rabbitmqctl(*args: str) -> str:
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        raise RuntimeError("broker faults need rabbitmqctl on PATH")
    done = subprocess.run(
        [ctl, *args], capture_output=True, text=True, timeout=CTL_TIMEOUT, check=True
    )
    return done.stdout


def vhost_of(amqp_url: str) -> str:
    path = urlsplit(amqp_url).path
    return unquote(path[1:]) if len(path) > 1 else "/"


@dataclass
class BrokerState:
    """What the broker holds at the end: the tap's facts and the queues' depths."""

    facts: Counter[str] = field(default_factory=Counter)  # CloudEvent id -> times seen
    job_runs: int = 0
    job_runs_dlq: int = 0
    events_dlq: int = 0


class BrokerFaults:
    """The broker side of a chaos run on `amqp_url` (a vhost of the run's own)."""

    def __init__(self, amqp_url: str) -> None:
        self.url = amqp_url
        self.vhost = vhost_of(amqp_url)
        self.topology = Topology()  # what `runlane serve` declares (no prefix)

    async def prepare(self) -> None:
        """Declare runlane's topology and the tap bound to every run fact, before any launcher
        publishes."""
        connection = await aio_pika.connect(self.url, timeout=10)
        async with connection:
            channel = await connection.channel()
            await declare_topology(channel, self.topology)
            tap = await channel.declare_queue(TAP_QUEUE, durable=True)
            await tap.bind(self.topology.job_events, "run.#")

    def stop_app(self) -> None:
        rabbitmqctl("stop_app")

    def start_app(self) -> None:
        rabbitmqctl("start_app")
        rabbitmqctl("await_startup")

    def close_connections(self) -> int:
        """Close every client connection on the vhost (the launchers'); how many."""
        listed = rabbitmqctl("-q", "list_connections", "--no-table-headers", "pid", "vhost")
        closed = 0
        for line in listed.splitlines():
            pid, _, vhost = line.partition("\t")
            if vhost.strip() != self.vhost:
                continue
            # A connection may close by itself between the listing and this.
            with contextlib.suppress(subprocess.CalledProcessError):
                rabbitmqctl("close_connection", pid.strip(), "chaos: connection closed")
                closed += 1
        return closed

    async def job_runs_depth(self) -> int | None:
        """Messages ready in job_runs, None while the broker cannot be read."""
        try:
            connection = await aio_pika.connect(self.url, timeout=5)
        except (OSError, aio_pika.exceptions.AMQPError, TimeoutError):
            return None
        async with connection:
            channel = await connection.channel()
            return await _depth(channel, self.topology.job_runs)

    async def collect(self) -> BrokerState:
        """Read the tap to the end and the depths of the queues that must end empty."""
        state = BrokerState()
        connection = await aio_pika.connect(self.url, timeout=10)
        async with connection:
            channel = await connection.channel()
            tap = await channel.get_queue(TAP_QUEUE, ensure=False)
            while (message := await tap.get(no_ack=True, fail=False)) is not None:
                state.facts[str(message.headers.get("cloudEvents_id", ""))] += 1
            state.job_runs = await _depth(channel, self.topology.job_runs)
            state.job_runs_dlq = await _depth(channel, self.topology.job_runs_dlq)
            state.events_dlq = await _depth(channel, self.topology.events_dlq)
        return state


async def _depth(channel: Any, queue: str) -> int:
    declared = await channel.declare_queue(queue, passive=True)
    return int(declared.declaration_result.message_count or 0)


def broker_violations(outbox: list[dict[str, Any]], state: BrokerState) -> list[str]:
    """Every outbox row published, every fact on the broker, every command consumed."""
    v: list[str] = []
    if not outbox:
        v.append("the outbox recorded no rows: the runs did not go through the bus")
    unpublished = [r for r in outbox if not r["published"]]
    if unpublished:
        v.append(
            f"{len(unpublished)} of {len(outbox)} outbox rows were never published, e.g. "
            + ", ".join(f"{r['id']} ({r['topic']})" for r in unpublished[:5])
        )
    missing = [
        r["event_id"]
        for r in outbox
        if r["event_id"] is not None and r["published"] and r["event_id"] not in state.facts
    ]
    if missing:
        v.append(
            f"{len(missing)} facts marked published never reached the broker, e.g. {missing[:5]}"
        )
    if state.job_runs:
        v.append(f"{state.job_runs} run commands left in job_runs (not absorbed)")
    if state.job_runs_dlq:
        v.append(f"{state.job_runs_dlq} run commands dead-lettered in job_runs.dlq")
    if state.events_dlq:
        v.append(f"{state.events_dlq} events dead-lettered in runlane.events.dlq")
    return v
