"""The launcher's batched Job-name writes: starts that end together share one statement, a lost
lease fails only its own run, and an outage is retried until the write lands."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import pytest

from runlane.core.runs import Lease
from runlane.errors import DatabaseUnavailable, LeaseLost
from runlane.service.launcher.leases import ExternalIdWrites, LeaseWrites


class RecordingLeases:
    """The one `Leases` call ExternalIdWrites makes, recorded; `lost` run ids are refused and
    the first `outages` calls fail as a database that is down."""

    def __init__(self, lost: frozenset[str] = frozenset(), outages: int = 0) -> None:
        self.batches: list[list[tuple[str, str]]] = []
        self.lost = lost
        self.outages = outages

    async def set_external_ids(self, writes: Sequence[tuple[Lease, str]]) -> list[bool]:
        if self.outages:
            self.outages -= 1
            raise DatabaseUnavailable("the database is down")
        self.batches.append([(lease.run_id, external_id) for lease, external_id in writes])
        await asyncio.sleep(0)  # a statement in flight: later starts queue behind it
        return [lease.run_id not in self.lost for lease, _ in writes]


async def until_landed(op: Callable[[], Awaitable[list[bool]]]) -> list[bool]:
    while True:
        try:
            return await op()
        except DatabaseUnavailable:
            await asyncio.sleep(0)


def lease(n: int) -> Lease:
    return Lease(f"run-{n}", "L1", f"token-{n}", 1)


async def started(leases: RecordingLeases, count: int) -> list[BaseException | None]:
    writer = ExternalIdWrites(LeaseWrites(leases, 30.0), until_landed)  # type: ignore[arg-type]
    task = asyncio.create_task(writer.run())
    try:
        return await asyncio.gather(
            *(writer.save(lease(n), f"ns/job-{n}") for n in range(count)), return_exceptions=True
        )
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_starts_that_end_together_share_one_statement() -> None:
    leases = RecordingLeases()
    assert await started(leases, 300) == [None] * 300
    written = [write for batch in leases.batches for write in batch]
    assert written == [(f"run-{n}", f"ns/job-{n}") for n in range(300)]
    assert [len(batch) for batch in leases.batches] == [256, 44]  # EXTERNAL_ID_BATCH_MAX


async def test_a_lost_lease_fails_only_its_own_run() -> None:
    results = await started(RecordingLeases(lost=frozenset({"run-1"})), 3)
    assert results[0] is None
    assert results[2] is None
    assert isinstance(results[1], LeaseLost)
    assert "run-1" in str(results[1])


async def test_a_database_outage_is_retried_until_the_batch_lands() -> None:
    leases = RecordingLeases(outages=2)
    assert await started(leases, 5) == [None] * 5
    assert leases.outages == 0
    assert len(leases.batches) == 1
