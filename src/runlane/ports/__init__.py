"""The ports: the protocols between runlane's services and the outside world (the run log,
executors, the clock, the bus, notifiers) and the records they exchange.

Internal and unstable: do not implement them outside runlane. The adapters in
`runlane.adapters` implement them; the conformance suites under `tests/conformance/` state the
contracts in executable form (every Store adapter passes the same tests).

- `store`: the run log, cut into roles (`RunLog`, `Leases`, `Sweeps`, `Launchers`,
  `Overrides`, `Schedules`, `ChainRuns`, `Events`, `EventHistory`, `Wakeups`, `Tokens`,
  `Audit`, `Idempotency`, `WebSessions`, `Schema`);
  `Store` is all of them.
- `executor`: where a run executes. `clock`: where time comes from.
- `bus`: the run log's transport (outbox out, wake-ups, commands in). `notifier`: alerts out.
"""

from __future__ import annotations

from runlane.core.records import (
    AuditEntry,
    ChainRun,
    Event,
    EventFact,
    EventLink,
    FinishedRun,
    FinishRequest,
    Heartbeat,
    IdempotencyRecord,
    NewChainRun,
    Override,
    RunFilter,
    TokenRecord,
    WebSession,
)
from runlane.ports.bus import BrokerBus, Bus, Delivery, OutboxMessage, QueueDepths, QueuePolicy
from runlane.ports.clock import Clock, SystemClock
from runlane.ports.executor import Execution, ExecutionEvent, ExecutionSpec, Executor
from runlane.ports.notifier import Notification, Notifier
from runlane.ports.store import (
    Audit,
    ChainLog,
    ChainRuns,
    ChainStore,
    EventHistory,
    Events,
    EventStore,
    ExplainStore,
    HeartbeatStore,
    Idempotency,
    Launchers,
    Leases,
    Overrides,
    RunLog,
    SchedulerStore,
    Schedules,
    Schema,
    Store,
    SupervisorStore,
    Sweeps,
    Tokens,
    Wakeups,
    WebSessions,
)

__all__ = [
    "Audit",
    "AuditEntry",
    "BrokerBus",
    "Bus",
    "ChainLog",
    "ChainRun",
    "ChainRuns",
    "ChainStore",
    "Clock",
    "Delivery",
    "Event",
    "EventFact",
    "EventHistory",
    "EventLink",
    "EventStore",
    "Events",
    "Execution",
    "ExecutionEvent",
    "ExecutionSpec",
    "Executor",
    "ExplainStore",
    "FinishRequest",
    "FinishedRun",
    "Heartbeat",
    "HeartbeatStore",
    "Idempotency",
    "IdempotencyRecord",
    "Launchers",
    "Leases",
    "NewChainRun",
    "Notification",
    "Notifier",
    "OutboxMessage",
    "Override",
    "Overrides",
    "QueueDepths",
    "QueuePolicy",
    "RunFilter",
    "RunLog",
    "SchedulerStore",
    "Schedules",
    "Schema",
    "Store",
    "SupervisorStore",
    "Sweeps",
    "SystemClock",
    "TokenRecord",
    "Tokens",
    "Wakeups",
    "WebSession",
    "WebSessions",
]
