"""The heartbeat: this launcher's `launcher_heartbeat` row, written every `heartbeat_interval`."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from pathlib import Path

import structlog

from runlane import __version__
from runlane.catalog import Catalog
from runlane.errors import StoreError
from runlane.ports import Heartbeat, HeartbeatStore, QueueDepths
from runlane.service.catalog_stamp import CatalogStamp, stamp_catalog
from runlane.service.config import Settings
from runlane.service.launcher.supervised import Supervised

log = structlog.get_logger("runlane.launcher")

QueueDepthsReader = Callable[[], Awaitable[QueueDepths | None]]
# A broker slow to answer delays a beat by at most this (the depths are then not recorded).
DEPTHS_WITHIN = 2.0


class HeartbeatWriter:
    """Says who this launcher is, what it runs and how busy it is; prunes launchers that died
    without removing their row."""

    def __init__(
        self,
        store: HeartbeatStore,
        catalog: Catalog,
        settings: Settings,
        active: Mapping[str, Supervised],
        *,
        queue_depths: QueueDepthsReader | None = None,
    ) -> None:
        self._store = store
        self._queue_depths = queue_depths
        self._catalog = catalog
        self._settings = settings
        self._active = active
        self.started_at = datetime.now().astimezone()
        # Absolute, symlinks and `..` resolved, so the CLI can tell it is the file it reads
        # itself (on the same host).
        self.catalog_path = str(Path(settings.catalog_path).resolve())
        # Absolute as the inline executor makes it (symlinks kept), so a CLI started elsewhere
        # finds the runs' log files.
        self._log_dir = str(Path(settings.log_dir).absolute())
        self._stamp: CatalogStamp | None = None

    def stamp(self) -> CatalogStamp:
        """The digest and job names of the catalog this launcher runs (worked out once: the
        catalog never changes under a launcher)."""
        if self._stamp is None:
            self._stamp = stamp_catalog(self._catalog)
        return self._stamp

    async def read_depths(self) -> QueueDepths | None:
        """The broker's queue depths, or None (no broker, or it did not answer in time: a beat
        is never held up by the broker for longer than DEPTHS_WITHIN)."""
        if self._queue_depths is None:
            return None
        try:
            async with asyncio.timeout(DEPTHS_WITHIN):
                return await self._queue_depths()
        except TimeoutError:
            log.warning("heartbeat.bus_depths_timeout", within=DEPTHS_WITHIN)
            return None

    async def run(self) -> None:
        while True:
            try:
                await self.beat()
            except StoreError as exc:
                log.warning("heartbeat.failed", error=str(exc))
            await asyncio.sleep(self._settings.heartbeat_interval)

    async def beat(self) -> None:
        store, settings = self._store, self._settings
        running: dict[str, int] = {}
        for sup in self._active.values():
            running[sup.executor.name] = running.get(sup.executor.name, 0) + 1
        stamp = self.stamp()
        depths = await self.read_depths()
        await store.beat(
            Heartbeat(
                launcher_id=settings.launcher_id,
                host=socket.gethostname(),
                pid=os.getpid(),
                version=__version__,
                started_at=self.started_at,
                queue_depth=await store.count_queued(),
                running=running,
                catalog_digest=stamp.digest,
                catalog_loaded_at=self.started_at,
                catalog_jobs=stamp.jobs,
                catalog_path=self.catalog_path,
                heartbeat_interval=settings.heartbeat_interval,
                catalog_chains=stamp.chains,
                log_dir=self._log_dir,
                bus_queue_depth=None if depths is None else depths.job_runs,
                bus_dlq_depth=None if depths is None else depths.job_runs_dlq,
            )
        )
        # A launcher that died without removing its row (SIGKILL, lost host) goes after a while.
        for gone in await store.prune_launchers(settings.launcher_prune_after):
            log.info("launcher.pruned", launcher=gone)
