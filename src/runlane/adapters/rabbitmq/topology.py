"""The RabbitMQ topology runlane declares (docs/bus.md#topology): names and arguments.

Declared idempotently at every start, in one of two modes (docs/bus.md#topology):

- arguments (no management URL): the TTL, dead-lettering and delivery limit are `x-` queue
  arguments set at declare time; a later change of one of them makes the broker answer 406
  PRECONDITION_FAILED, which `mismatch_message` turns into one line naming the argument;
- policies (`RUNLANE_RABBITMQ_MANAGEMENT_URL` set): the same values are a policy per queue
  (`policies`, PUT through the management API, adapters/rabbitmq/policy.py) and the queues are
  declared with `x-queue-type` only, so changing a value changes a policy, never a queue.
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
# The priority of runlane's policies: above an operator's catch-all (priority 0) policy, which
# would otherwise take their place (one policy applies to a queue, the highest priority's).
POLICY_PRIORITY = 10


@dataclass(frozen=True, slots=True)
class Topology:
    """Every name runlane uses on the broker. `prefix` namespaces them all (tests, several
    runlane installations on one vhost); empty in production."""

    prefix: str = ""
    command_ttl_seconds: float = DEFAULT_COMMAND_TTL_SECONDS
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT
    event_keys: tuple[str, ...] = field(default=())
    # True: the TTL, dead-lettering and delivery limit are policies (`policies`), the queues
    # carry `x-queue-type` only.
    use_policies: bool = False

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

    def job_runs_definition(self) -> dict[str, Any]:
        """Dead-lettered at least once to job_runs.dlq (needs `reject-publish`), with the command
        TTL and the delivery limit: the keys of a policy definition (no `x-` prefix)."""
        ttl = {"message-ttl": round(self.command_ttl_seconds * 1000)}
        return self._dead_lettered(self.job_runs_dlq) | ttl

    def events_definition(self) -> dict[str, Any]:
        return self._dead_lettered(self.events_dlq)

    def _dead_lettered(self, dlq: str) -> dict[str, Any]:
        return {
            "dead-letter-exchange": "",
            "dead-letter-routing-key": dlq,
            "dead-letter-strategy": "at-least-once",
            "overflow": "reject-publish",
            "delivery-limit": self.delivery_limit,
        }

    def policies(self) -> dict[str, dict[str, Any]]:
        """The policies of the policy mode, by name: each anchored to one queue of runlane's own
        (the two queues dead-letter to different queues, so they cannot share one)."""
        return {
            self.job_runs_policy: _policy(self.job_runs, self.job_runs_definition()),
            self.events_policy: _policy(self.events_queue, self.events_definition()),
        }

    @property
    def job_runs_policy(self) -> str:
        return f"{self.prefix}runlane.job_runs"

    @property
    def events_policy(self) -> str:
        return f"{self.prefix}runlane.events"

    def job_runs_arguments(self) -> dict[str, Any]:
        """Quorum; in the arguments mode also the policy's values as `x-` arguments."""
        if self.use_policies:
            return {"x-queue-type": "quorum"}
        return {"x-queue-type": "quorum", **_x_arguments(self.job_runs_definition())}

    def events_arguments(self) -> dict[str, Any]:
        if self.use_policies:
            return {"x-queue-type": "quorum"}
        return {"x-queue-type": "quorum", **_x_arguments(self.events_definition())}

    @staticmethod
    def dlq_arguments() -> dict[str, Any]:
        return {"x-queue-type": "quorum"}

    @staticmethod
    def unrouted_arguments() -> dict[str, Any]:
        return {"x-max-length": UNROUTED_MAX_LENGTH, "x-overflow": "drop-head"}


def _policy(queue: str, definition: dict[str, Any]) -> dict[str, Any]:
    return {
        "pattern": f"^{re.escape(queue)}$",
        "apply-to": "queues",
        "priority": POLICY_PRIORITY,
        "definition": definition,
    }


def _x_arguments(definition: dict[str, Any]) -> dict[str, Any]:
    return {f"x-{key}": value for key, value in definition.items()}


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
