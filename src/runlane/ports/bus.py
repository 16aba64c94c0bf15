"""The `Bus` port: the run log's transport. It carries outbox rows out (run commands, run
events), wake-ups to claimers, and commands or events in, while the run log stays the authority.

Today's implementation is the database itself (`adapters.sql.bus.DatabaseBus`): an accepted row
is already "delivered" (it is in the run log every launcher claims from) and wake-ups are
PostgreSQL NOTIFY or, on SQLite, in-process. The RabbitMQ adapter implements the same port.

Contract, for every adapter:
- **The row is the authority.** A message is a copy of, or a hint about, a committed row; a
  consumer acts on the row (claims it, records the event by its id), never on the message alone.
  A wake-up or delivery with nothing behind it is harmless.
- **At-least-once, never at-most-once.** `publish` reports only what the transport confirmed
  (for RabbitMQ: a publisher confirm of a `mandatory` publish, no return); anything else (a
  nack, a return, a timeout, a dropped connection) is "unknown: publish again", so the same
  `message_id` may arrive twice and consumers dedupe by it (a run's `dedupe_key`, an event id).
- **Bounded in time.** No call waits longer than its `within` / `max_wait` seconds.
- **Settle after the commit.** A consumer `ack`s a delivery only after the row it caused is
  committed, and never holds a delivery while a run executes; `reject` with `requeue=False`
  sends a poison message to the dead-letter route instead of redelivering it for ever.

Internal and unstable: implemented only inside runlane (see `runlane.ports`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

# Outbox topic of a queued run (the payload: run_id, job, executor, attempt as JSON, and the
# run's W3C `traceparent` when it has one: a broker relay sends it as the `traceparent` header).
TOPIC_RUN_QUEUED = "job_runs"


@dataclass(frozen=True, slots=True)
class OutboxMessage:
    """One outbox row to carry: `message_id` is the row's id (the broker's `message_id` and the
    receiver's dedupe key); `key` orders messages that must stay in order (a run id)."""

    message_id: str
    topic: str
    payload: str  # JSON text
    created_at: datetime
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Delivery:
    """A message received from the bus, to `ack` or `reject` once acted on. `attempt` counts
    deliveries of this message (1 on the first; RabbitMQ's `x-delivery-count` + 1), so a
    consumer can give up on a poison message; `tag` is the adapter's own handle."""

    message: OutboxMessage
    attempt: int = 1
    redelivered: bool = False
    tag: object = None
    headers: Mapping[str, object] = field(default_factory=dict)  # the message's own headers


class Bus(Protocol):
    """The transport between the run log and its launchers and outside systems."""

    name: str  # "database" | "rabbitmq"

    async def publish(self, messages: Sequence[OutboxMessage], *, within: float) -> list[str]:
        """Send `messages` in order; return the ids done with, in order: those the transport
        confirmed, and those no transport could ever carry (logged as lost by the bus). The
        caller marks them sent and publishes the rest again later; a batch holds one message
        per key, so none waits on another of the batch. Never raises for a transport fault
        (that is an unconfirmed message); waits at most `within` seconds in all."""
        ...

    async def wait_for_wakeup(self, max_wait: float) -> bool:
        """Wait until a run may be claimable (a new queued run, a released one, a freed slot)
        or `max_wait` seconds pass; True when woken. A hint only: the claim decides."""
        ...

    async def receive(self, topic: str, *, limit: int, max_wait: float) -> list[Delivery]:
        """Up to `limit` deliveries of `topic`, waiting at most `max_wait` seconds for the first
        (then returning what is there). An empty list is normal (nothing came, or the transport
        was down: the caller polls again)."""
        ...

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Settle deliveries whose rows are committed: they are not delivered again. Acking a
        delivery whose channel has closed is a no-op (the message comes again, and is deduped)."""
        ...

    async def reject(self, deliveries: Sequence[Delivery], *, requeue: bool) -> None:
        """Give deliveries back: `requeue=True` to be delivered again (a temporary failure),
        False to dead-letter them (a message that can never be acted on)."""
        ...

    async def close(self) -> None:
        """Release the transport's connections (idempotent)."""
        ...


@dataclass(frozen=True, slots=True)
class QueueDepths:
    """Messages ready in the run-command queue and its dead-letter queue."""

    job_runs: int
    job_runs_dlq: int


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """The policy the broker applies to job_runs (`applied`, None without one), runlane's own
    policy's name (`wanted`) and the effective definition (message-ttl, delivery-limit, ...)."""

    wanted: str
    applied: str | None
    definition: dict[str, Any]


# What `receive` takes besides TOPIC_RUN_QUEUED: the events other services publish on
# job_events with a key the catalog listens to.
TOPIC_EXTERNAL_EVENTS = "events"
# Outbox topics of facts: `event:<routing key>` goes to the job_events exchange with that key.
FACT_TOPIC_PREFIX = "event:"
# The CloudEvents `source` of every fact runlane publishes starts with this (run state changes:
# `runlane://run-log`; emitted events: RUNLANE_EVENT_SOURCE): what a consumer of job_events finds
# with it is runlane's own, never taken back in.
RUNLANE_SOURCE_PREFIX = "runlane://"
RUNLANE_EVENT_SOURCE = "runlane://events"


class BrokerBus(Bus, Protocol):
    """A bus with a broker behind it (RabbitMQ): dead-letter queues, depths, bindings."""

    last_error: str | None  # the broker's last fault, for `runlane doctor`

    async def open(self) -> None:
        """Connect and declare the topology: `BusUnavailable`, `BusTopologyMismatch`."""
        ...

    async def dead_letter(self, delivery: Delivery, reason: str, *, within: float = 5.0) -> bool:
        """Move a delivery that can never be acted on to its dead-letter queue with `reason`
        (a header), then ack it; False when that was not confirmed (it comes again)."""
        ...

    async def depths(self) -> QueueDepths | None:
        """Ready messages of job_runs and job_runs.dlq; None when the broker is down."""
        ...

    async def job_runs_policy(self) -> QueuePolicy | None:
        """job_runs' policy through the management API (`BusUnavailable` when that fails); None
        when the bus has no management API (the values are queue arguments then)."""
        ...

    async def bind_event_keys(self, keys: Sequence[str]) -> None:
        """Receive the external events with these keys (the catalog's `on_event`) and no
        others this process bound before."""
        ...
