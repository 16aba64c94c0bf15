"""The RabbitMQ topology runlane declares (docs/bus.md#topology): names and arguments.

Declared idempotently at every start. The arguments are set at declare time (`x-` arguments),
because this broker runs without the management plugin and a client cannot set a policy over
AMQP; a later change of one of them makes the broker answer 406 PRECONDITION_FAILED, which
`mismatch_message` turns into one line naming the argument (see docs/bus.md for the migration).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# The ADR's message TTL of a run command waiting in job_runs: 6 h.
DEFAULT_COMMAND_TTL_SECONDS = 6 * 3600.0
# Deliveries of one command before the quorum queue dead-letters it (the research note's 5,
# not RabbitMQ's silent default of 20).
DEFAULT_DELIVERY_LIMIT = 5
# Facts nobody subscribes to land here (job_events' alternate exchange), so a `mandatory`
# publish to job_events is never returned; bounded, oldest dropped first.
UNROUTED_MAX_LENGTH = 10_000


@dataclass(frozen=True, slots=True)
class Topology:
    """Every name runlane uses on the broker. `prefix` namespaces them all (tests, several
    runlane installations on one vhost); empty in production."""

    prefix: str = ""
    command_ttl_seconds: float = DEFAULT_COMMAND_TTL_SECONDS
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT
    event_keys: tuple[str, ...] = field(default=())

    @property
    def job_runs(self) -> str:
        return f"{self.prefix}job_runs"

    @property
    def job_runs_dlq(self) -> str:
        return f"{self.prefix}job_runs.dlq"

    @property
    def job_events(self) -> str:
        return f"{self.prefix}job_events"

    @property
    def unrouted(self) -> str:
        return f"{self.prefix}job_events.unrouted"

    @property
    def events_queue(self) -> str:
        return f"{self.prefix}runlane.events"

    @property
    def events_dlq(self) -> str:
        return f"{self.prefix}runlane.events.dlq"

    def job_runs_arguments(self) -> dict[str, Any]:
        """Quorum, dead-lettered at least once to job_runs.dlq (needs `reject-publish`), with
        the command TTL and the delivery limit."""
        return {
            "x-queue-type": "quorum",
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": self.job_runs_dlq,
            "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish",
            "x-message-ttl": round(self.command_ttl_seconds * 1000),
            "x-delivery-limit": self.delivery_limit,
        }

    def events_arguments(self) -> dict[str, Any]:
        return {
            "x-queue-type": "quorum",
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": self.events_dlq,
            "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish",
            "x-delivery-limit": self.delivery_limit,
        }

    @staticmethod
    def dlq_arguments() -> dict[str, Any]:
        return {"x-queue-type": "quorum"}

    @staticmethod
    def unrouted_arguments() -> dict[str, Any]:
        return {"x-max-length": UNROUTED_MAX_LENGTH, "x-overflow": "drop-head"}


_INEQUIVALENT = re.compile(
    r"inequivalent arg '(?P<arg>[^']+)' for (?P<kind>queue|exchange) '(?P<name>[^']+)'"
    r".*?received (?:(?:the value )?'(?P<ours>[^']*)'|none)(?: of type '[^']*')?"
    r" but current is (?:(?:the value )?'(?P<theirs>[^']*)'|none)",
)


def mismatch_message(reply_text: str) -> str:
    """One line for a 406 PRECONDITION_FAILED on declare: which argument differs, the broker's
    value and runlane's, and what to do."""
    match = _INEQUIVALENT.search(reply_text)
    if match is None:
        return f"RabbitMQ refused runlane's topology: {reply_text}"
    theirs = match["theirs"] if match["theirs"] is not None else "(not set)"
    ours = match["ours"] if match["ours"] is not None else "(not set)"
    return (
        f"RabbitMQ {match['kind']} {match['name']!r} exists with {match['arg']}={theirs}, "
        f"runlane declares {match['arg']}={ours}: delete the {match['kind']} (after draining it) "
        "or align the setting; see docs/bus.md#topology"
    )
