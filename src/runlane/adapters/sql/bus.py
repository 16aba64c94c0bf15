"""The database as the run log's bus (`runlane.ports.Bus`): what both SQL stores do today.

Nothing leaves the database: an accepted run is delivered by being committed (every launcher
claims from the run log), so a publish is confirmed at once and nothing is ever received as a
message. Wake-ups are the store's: PostgreSQL LISTEN/NOTIFY (a NOTIFY sent by the writing
statement), SQLite in-process (this store's own writes; the claim poll finds the rest).
"""

from __future__ import annotations

from collections.abc import Sequence

from runlane.ports.bus import Delivery, OutboxMessage
from runlane.ports.store import Wakeups


class DatabaseBus:
    """`Bus` over a store's wake-ups (either dialect)."""

    name = "database"

    def __init__(self, store: Wakeups) -> None:
        self._store = store

    async def publish(self, messages: Sequence[OutboxMessage], *, within: float) -> list[str]:
        """Every message, at once: its row is committed in the run log, which is this bus."""
        return [m.message_id for m in messages]

    async def wait_for_wakeup(self, max_wait: float) -> bool:
        return await self._store.wait_for_wakeup(max_wait)

    async def receive(self, topic: str, *, limit: int, max_wait: float) -> list[Delivery]:
        """Nothing arrives as a message here (consumers read the rows); waits like
        `wait_for_wakeup`, so a consumer loop written for a broker polls at the same pace."""
        await self._store.wait_for_wakeup(max_wait)
        return []

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Nothing to settle: no delivery comes from this bus."""

    async def reject(self, deliveries: Sequence[Delivery], *, requeue: bool) -> None:
        """Nothing to give back: no delivery comes from this bus."""

    async def close(self) -> None:
        """Nothing of its own to close: the store belongs to whoever opened it."""
