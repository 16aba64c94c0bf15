"""RabbitMQ adapter: the `Bus` over aio-pika (`RUNLANE_BUS=rabbitmq`, docs/bus.md)."""

from __future__ import annotations

from runlane.adapters.rabbitmq.bus import REASON_HEADER, RabbitBus, declare_topology
from runlane.adapters.rabbitmq.topology import Topology, mismatch_message

__all__ = [
    "REASON_HEADER",
    "RabbitBus",
    "Topology",
    "declare_topology",
    "mismatch_message",
]
