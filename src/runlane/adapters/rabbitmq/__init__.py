"""RabbitMQ adapter: the `Bus` over aio-pika (`RUNLANE_BUS=rabbitmq`, docs/bus.md)."""

from __future__ import annotations

from runlane.adapters.rabbitmq.bus import (
    FACT_TOPIC_PREFIX,
    REASON_HEADER,
    TOPIC_EVENTS,
    QueueDepths,
    RabbitBus,
    declare_topology,
)
from runlane.adapters.rabbitmq.topology import Topology, mismatch_message

__all__ = [
    "FACT_TOPIC_PREFIX",
    "REASON_HEADER",
    "TOPIC_EVENTS",
    "QueueDepths",
    "RabbitBus",
    "Topology",
    "declare_topology",
    "mismatch_message",
]
