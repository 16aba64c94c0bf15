"""The lease keeper: renews the leases of every supervised run; a lost lease ends an inline run."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial

import structlog

from runlane.core.runs import Lease
from runlane.errors import DatabaseConflict, DatabaseUnavailable, LeaseLost, StoreError
from runlane.ports import FinishedRun, FinishRequest, Leases
from runlane.service.launcher.supervised import Supervised

log = structlog.get_logger("runlane.launcher")


# Job names saved in one statement at most: a burst of starts is written in a few statements.
EXTERNAL_ID_BATCH_MAX = 256


class LeaseWrites:
    """The launcher's writes that lock several of its run rows: lease renewals, outcome saves
    and pod runs' Job names. They never run at the same time: two such statements racing, each locking rows in
    whatever order its plan visits them, deadlock (PostgreSQL breaks it after deadlock_timeout
    by failing one). Held for one statement at a time, never across a retry's wait. Other
    launchers' rows are disjoint."""

    __slots__ = ("_lock", "_store", "_ttl")

    def __init__(self, store: Leases, lease_ttl: float) -> None:
        self._store = store
        self._ttl = lease_ttl
        self._lock = asyncio.Lock()

    async def renew(self, leases: list[Lease]) -> set[str]:
        """The run ids of `leases` renewed for another lease TTL."""
        async with self._lock:
            return await self._store.renew(leases, self._ttl)

    async def finish_many(self, requests: Sequence[FinishRequest]) -> list[FinishedRun | None]:
        async with self._lock:
            return await self._store.finish_many(requests)

    async def set_external_ids(self, writes: Sequence[tuple[Lease, str]]) -> list[bool]:
        async with self._lock:
            return await self._store.set_external_ids(writes)


class ExternalIdWrites:
    """Saves where each started run lives at its executor (a pod run's namespace/Job name) in
    batches: `save` queues one and waits until it is committed; `run` writes whatever queued up
    while the previous statement was in flight in one fenced statement (one commit for every
    start that ended meanwhile; a burst of 1,000 pod starts wrote 1,000 statements)."""

    def __init__(
        self,
        writes: LeaseWrites,
        write_until_landed: Callable[[Callable[[], Awaitable[list[bool]]]], Awaitable[list[bool]]],
    ) -> None:
        self._writes = writes
        self._write_until_landed = write_until_landed
        self._pending: list[tuple[Lease, str, asyncio.Future[bool]]] = []
        self._wake = asyncio.Event()

    async def save(self, lease: Lease, external_id: str) -> None:
        """Return once `external_id` is committed on the run; `LeaseLost` when its lease is
        gone (nothing written)."""
        saved: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append((lease, external_id, saved))
        self._wake.set()
        if not await saved:
            raise LeaseLost(f"lease on run {lease.run_id} is lost: external id not saved")

    async def run(self) -> None:
        """Write queued external ids in batches, until cancelled."""
        pending = self._pending
        while True:
            while not pending:
                self._wake.clear()
                await self._wake.wait()
            batch = pending[:EXTERNAL_ID_BATCH_MAX]
            del pending[:EXTERNAL_ID_BATCH_MAX]
            writes = [(lease, external_id) for lease, external_id, _ in batch]
            try:
                # Retried through a database outage, as an outcome save.
                results = await self._write_until_landed(
                    partial(self._writes.set_external_ids, writes)
                )
            except Exception as exc:  # noqa: BLE001 - handed to each waiting supervisor
                for _, _, saved in batch:
                    if not saved.done():
                        saved.set_exception(exc)
                continue
            for (_, _, saved), result in zip(batch, results, strict=True):
                if not saved.done():
                    saved.set_result(result)


class LeaseKeeper:
    """Renews every held lease each `renew_interval`; marks the runs whose lease is gone lost and
    kills their inline process (a run's new owner cannot reach it)."""

    def __init__(
        self,
        writes: LeaseWrites,
        active: Mapping[str, Supervised],
        unsaved: Mapping[str, FinishRequest],
        *,
        renew_interval: float,
        database_failed: Callable[[], None],
        database_answered: Callable[[], None],
    ) -> None:
        self._writes = writes
        self._active = active
        self._unsaved = unsaved  # outcomes being saved: their lease is the save's business
        self._renew_interval = renew_interval
        self._database_failed = database_failed
        self._database_answered = database_answered

    async def run(self) -> None:
        while True:
            renewed = await self.renew_leases()
            # After a failed renewal try again soon: the database may be back in a moment, and
            # the leases must be revived before other launchers' hold-off runs out.
            await asyncio.sleep(self._renew_interval if renewed else min(1.0, self._renew_interval))

    async def renew_leases(self) -> bool:
        """Renew every held lease; kill the executions whose lease is gone. False when the
        database could not be reached."""
        held = [s.lease for s in self._active.values() if not s.lost]
        if not held:
            return True
        locked: set[str] = set()
        try:
            try:
                kept = await self._writes.renew(held)
            except DatabaseConflict:
                if len(held) == 1:
                    raise
                # A row another session keeps locked (an operator's open transaction) fails the
                # whole renewal at the lock timeout: renewed one by one, the other leases are
                # kept; the locked one is tried again at the next renewal, not given up.
                kept, locked = await self._renew_each(held)
                log.warning("lease.renew_locked", runs=sorted(locked), leases=len(held))
        except StoreError as exc:
            log.warning("lease.renew_failed", error=str(exc), leases=len(held))
            if isinstance(exc, DatabaseUnavailable):
                self._database_failed()
            return False
        self._database_answered()
        for lease in held:
            if lease.run_id not in kept and lease.run_id not in locked:
                sup = self._active.get(lease.run_id)
                if sup is None or sup.lost or sup.lease != lease:
                    # (Gone, or released and claimed again while this renewal was in flight:
                    # the new lease is not the one that failed.)
                    continue
                if lease.run_id in self._unsaved:
                    # Its outcome is being saved: that write commits the run (so it is no
                    # longer `running` for the renewal to find), or finds the lease lost itself.
                    continue
                sup.lost = True  # logged once, when its supervision ends
                if sup.executor.name == "inline":
                    await sup.cancel_execution(grace=0.0)
        return True

    async def _renew_each(self, held: list[Lease]) -> tuple[set[str], set[str]]:
        """Renew `held` one lease at a time: the leases renewed, and those whose row was locked."""
        kept: set[str] = set()
        locked: set[str] = set()
        for lease in held:
            try:
                kept |= await self._writes.renew([lease])
            except DatabaseConflict:
                locked.add(lease.run_id)
        return kept, locked
