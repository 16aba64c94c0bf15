"""What the launcher takes from a broker bus: the dead-letter depth the alert rule reads."""

from __future__ import annotations

from typing import Any, cast

from runlane.ports import Bus, QueueDepths
from runlane.service.runtime import dlq_depth_of


class FakeBroker:
    name = "rabbitmq"

    def __init__(self, depths: QueueDepths | None) -> None:
        self._depths = depths

    async def depths(self) -> QueueDepths | None:
        return self._depths


async def test_the_dlq_depth_is_job_runs_dlq_and_none_while_the_broker_is_down() -> None:
    up = dlq_depth_of(cast("Bus", FakeBroker(QueueDepths(job_runs=3, job_runs_dlq=2))))
    down = dlq_depth_of(cast("Bus", FakeBroker(None)))
    assert up is not None
    assert down is not None
    assert await up() == 2
    assert await down() is None


def test_the_database_bus_has_no_dlq_depth() -> None:
    database: Any = type("DatabaseBusLike", (), {"name": "database"})()
    assert dlq_depth_of(database) is None
