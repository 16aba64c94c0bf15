"""The launcher's loops around a broker bus (`RUNLANE_BUS=rabbitmq`, docs/bus.md).

- `OutboxRelay` publishes the outbox in bounded, leased batches (safe in every launcher at once)
  and marks a row sent only after the broker confirmed it; a crash between the confirm and that
  mark re-sends the row once its lease lapses, and the receiver absorbs the duplicate.
- `CommandConsumer` takes run commands from `job_runs`, never more than the launcher's free
  slots, and settles each one only once the row behind it is decided: claimed (or otherwise no
  longer queued), accepted through the one accept path (a command another service published for
  a run with no row), or dead-lettered with the reason. It never holds a delivery while a run
  executes: the claim is the database's, and a command is acked once its run left `queued` (or
  after `hold_seconds`, the row being the authority the claim loop finds anyway).
- `EventConsumer` takes the events other services publish on `job_events` with a key the
  catalog listens to, exactly as `runlane emit` does; an invalid one is dead-lettered.

A database fault settles nothing: the delivery stays unacked and is tried again, so an outage
of the database never spends a command's delivery limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from runlane.catalog import Catalog
from runlane.core.runs import AcceptResult, RunStatus, Trigger
from runlane.core.trace import parse_traceparent
from runlane.errors import RunlaneError, RunRefused, StoreError
from runlane.ports import BrokerBus, Delivery, Store
from runlane.ports.bus import RUNLANE_SOURCE_PREFIX, TOPIC_EXTERNAL_EVENTS, TOPIC_RUN_QUEUED
from runlane.service.accept import RunRequest
from runlane.service.events import BadEvent, emit_event

log = structlog.get_logger("runlane.bus")

AcceptFn = Callable[[RunRequest], Awaitable[AcceptResult]]


async def _pause(stopping: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stopping.wait()


@dataclass
class RelayStats:
    published: int = 0
    unconfirmed: int = 0
    pruned: int = 0
    batches: int = 0


@dataclass
class OutboxRelay:
    """Publishes the outbox through `bus`: lease a batch, publish it (pipelined confirms), mark
    the confirmed prefix sent, free the rest, back off while the broker is down."""

    store: Store
    bus: BrokerBus
    owner: str
    batch: int = 500
    within: float = 10.0  # the bound on one batch's publishes and confirms
    lease_seconds: float = 30.0  # > within: a live relay never loses its batch to another
    keep_seconds: float = 3600.0  # published rows are pruned after this
    idle_poll: float = 0.2
    prune_interval: float = 60.0
    max_backoff: float = 30.0
    # Tests: called with the confirmed ids before they are marked sent (a crash there).
    after_confirm: Callable[[list[str]], Awaitable[None]] | None = None
    stats: RelayStats = field(default_factory=RelayStats)

    async def run(self, stopping: asyncio.Event) -> None:
        backoff = 0.0
        last_prune = 0.0
        facts_on = False
        while not stopping.is_set():
            if not facts_on:
                try:
                    await self.store.set_bus_facts(True)  # run state changes go out too
                    facts_on = True
                except StoreError as exc:
                    log.warning("bus.facts_not_enabled", error=str(exc))
            try:
                if time.monotonic() - last_prune >= self.prune_interval:
                    last_prune = time.monotonic()
                    self.stats.pruned += await self.store.outbox_prune(
                        keep_seconds=self.keep_seconds
                    )
                sent, full = await self.relay_once()
            except StoreError as exc:
                log.warning("bus.relay_database_failed", error=str(exc))
                await _pause(stopping, 1.0)
                continue
            if sent is None:  # the broker confirmed nothing: back off
                backoff = min(self.max_backoff, max(0.5, backoff * 2))
                await _pause(stopping, backoff)
                continue
            backoff = 0.0
            if not full:
                await _pause(stopping, self.idle_poll)

    async def relay_once(self) -> tuple[int | None, bool]:
        """One batch: (rows published, or None when some were not; whether the batch was full)."""
        messages = await self.store.outbox_lease(
            self.owner, limit=self.batch, lease_seconds=self.lease_seconds
        )
        if not messages:
            return 0, False
        self.stats.batches += 1
        confirmed = await self.bus.publish(messages, within=self.within)
        if confirmed and self.after_confirm is not None:
            await self.after_confirm(confirmed)
        await self.store.outbox_mark_sent(confirmed)
        self.stats.published += len(confirmed)
        # Every row done with is marked, not only a prefix: a batch holds one row per key (the
        # lease's "oldest unpublished of its key"), so a row left over holds up nothing of its
        # own key. (A row no frame can carry is done with too: left pending, it would head
        # every batch and make a healthy broker look down.)
        sent = set(confirmed)
        rest = [m.message_id for m in messages if m.message_id not in sent]
        if rest:
            self.stats.unconfirmed += len(rest)
            await self.store.outbox_release(self.owner, rest)
            return (len(confirmed) or None), False  # None: nothing went out, back off
        return len(confirmed), len(messages) >= self.batch


class Refused(Exception):
    """A message that can never be acted on: dead-lettered with this reason."""


@dataclass(frozen=True, slots=True)
class RunCommand:
    """The fields of a run command runlane acts on (the ADR's body; the rest is informative)."""

    run_id: str
    job: str
    params: Mapping[str, Any]
    trigger: Trigger
    requested_by: str | None
    dedupe_key: str | None
    traceparent: str | None


def parse_command(payload: str) -> RunCommand:
    """The command in a `job_runs` body; `Refused` naming what is wrong."""
    try:
        body = json.loads(payload)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past Python's limit
        raise Refused(f"not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise Refused("not a JSON object")
    for name in ("run_id", "job"):
        if not isinstance(body.get(name), str) or not body[name]:
            raise Refused(f"{name!r} is missing or not a string")
    params = body.get("params") or {}
    if not isinstance(params, dict):
        raise Refused("'params' is not a JSON object")
    trigger_text = body.get("trigger") or Trigger.MANUAL.value
    try:
        trigger = Trigger(trigger_text)
    except ValueError:
        raise Refused(f"'trigger' {trigger_text!r} is not one of runlane's triggers") from None
    traceparent = body.get("traceparent")
    if traceparent is not None:
        try:
            # Stored as the API and the CLI store it: a later version read as version 00.
            traceparent = str(parse_traceparent(str(traceparent)))
        except ValueError as exc:
            raise Refused(f"'traceparent': {exc}") from None
    requested_by, dedupe_key = body.get("requested_by"), body.get("dedupe_key")
    return RunCommand(
        run_id=body["run_id"],
        job=body["job"],
        params=params,
        trigger=trigger,
        requested_by=requested_by if isinstance(requested_by, str) else None,
        dedupe_key=dedupe_key if isinstance(dedupe_key, str) and dedupe_key else None,
        traceparent=traceparent,
    )


@dataclass
class ConsumerStats:
    acked: int = 0
    dropped: int = 0  # the run was no longer queued, or its command was already held
    accepted: int = 0  # an external command accepted as a new run
    dead_lettered: int = 0
    own_facts: int = 0  # runlane's own facts heard back on the event queue, dropped


@dataclass
class CommandConsumer:
    """Consumes `job_runs` within the launcher's free capacity (see the module docstring)."""

    store: Store
    bus: BrokerBus
    catalog: Catalog
    accept: AcceptFn
    free_slots: Callable[[], int]
    wake: Callable[[], None]
    hold_seconds: float = 30.0
    max_wait: float = 1.0
    stats: ConsumerStats = field(default_factory=ConsumerStats)

    def __post_init__(self) -> None:
        # Deliveries of queued runs, waiting for the claim: run id -> (delivery, since).
        self._held: dict[str, tuple[Delivery, float]] = {}
        self._retry: list[Delivery] = []  # the database failed: try these again

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                await self.consume_once()
            except StoreError as exc:
                log.warning("bus.consumer_database_failed", error=str(exc))
                await _pause(stopping, 1.0)

    async def consume_once(self) -> None:
        await self._settle_held()
        pending, self._retry = self._retry, []
        if pending:
            await self._handle(pending)
        room = self.free_slots() - len(self._held) - len(self._retry)
        if room <= 0:
            await asyncio.sleep(min(self.max_wait, 0.2))
            return
        deliveries = await self.bus.receive(TOPIC_RUN_QUEUED, limit=room, max_wait=self.max_wait)
        if deliveries:
            await self._handle(deliveries)

    async def _handle(self, deliveries: Sequence[Delivery]) -> None:
        """Decide a batch of deliveries with one read of their runs' statuses."""
        commands: list[tuple[Delivery, RunCommand]] = []
        for delivery in deliveries:
            try:
                commands.append((delivery, parse_command(delivery.message.payload)))
            except Refused as exc:
                await self._dead_letter(delivery, str(exc))
        if not commands:
            return
        try:
            statuses = await self.store.run_statuses([command.run_id for _, command in commands])
        except StoreError as exc:
            log.warning("bus.command_deferred", error=str(exc))
            self._retry.extend(delivery for delivery, _ in commands)
            return
        settled: list[Delivery] = []
        now = time.monotonic()
        held_any = False
        for delivery, command in commands:
            status = statuses.get(command.run_id)
            if status is None:  # no such run: another service's command
                await self._accept_command(delivery, command)
            elif status is RunStatus.QUEUED and command.run_id not in self._held:
                self._held[command.run_id] = (delivery, now)
                held_any = True
            else:  # no longer queued, or another delivery of a command already held
                settled.append(delivery)
                self.stats.dropped += 1
        if settled:
            await self._ack(settled)
        if held_any:
            self.wake()

    async def _accept_command(self, delivery: Delivery, command: RunCommand) -> None:
        """A command for a run with no row: the one accept path, then acked; refused, it is
        dead-lettered; a database fault leaves it to be tried again."""
        request = RunRequest(
            job=command.job,
            trigger=command.trigger,
            params=command.params,
            requested_by=command.requested_by or "bus",
            confirmed=True,  # a service with the broker's credentials vouches for the command
            dedupe_key=command.dedupe_key or f"bus:{command.run_id}",
            traceparent=command.traceparent,
        )
        try:
            result = await self.accept(request)
        except StoreError as exc:
            log.warning("bus.command_deferred", error=str(exc))
            self._retry.append(delivery)
            return
        except RunlaneError as exc:  # RunRefused and every other refusal a person can act on
            await self._dead_letter(delivery, f"{exc.code}: {exc.message}")
            return
        log.info(
            "bus.command_accepted",
            command_run_id=command.run_id,
            run_id=result.run.id,
            created=result.created,
        )
        self.stats.accepted += 1
        await self._ack([delivery])
        self.wake()

    async def _settle_held(self) -> None:
        """Ack the held deliveries whose runs left `queued` (or waited `hold_seconds`), with one
        read of their statuses."""
        if not self._held:
            return
        now = time.monotonic()
        statuses = await self.store.run_statuses(list(self._held))
        settled: list[Delivery] = []
        for run_id, (delivery, since) in list(self._held.items()):
            if statuses.get(run_id) is not RunStatus.QUEUED or now - since >= self.hold_seconds:
                del self._held[run_id]
                settled.append(delivery)
        if settled:
            await self._ack(settled)

    async def _ack(self, deliveries: Sequence[Delivery]) -> None:
        await self.bus.ack(deliveries)
        self.stats.acked += len(deliveries)

    async def _dead_letter(self, delivery: Delivery, reason: str) -> None:
        if await self.bus.dead_letter(delivery, reason):
            self.stats.dead_lettered += 1
        else:
            await self.bus.reject([delivery], requeue=True)

    @property
    def held(self) -> int:
        return len(self._held)


@dataclass
class EventConsumer:
    """Takes external events from runlane's event queue like `runlane emit`."""

    store: Store
    bus: BrokerBus
    catalog: Catalog
    accept: AcceptFn
    max_wait: float = 1.0
    batch: int = 50
    retry_pause: float = 1.0  # after a database fault, before the event is tried again
    stats: ConsumerStats = field(default_factory=ConsumerStats)

    async def run(self, stopping: asyncio.Event) -> None:
        pending: list[Delivery] = []  # taken, not yet settled, in the order they came
        while not stopping.is_set():
            if not pending:
                pending = await self.bus.receive(
                    TOPIC_EXTERNAL_EVENTS, limit=self.batch, max_wait=self.max_wait
                )
            while pending:
                try:
                    await self.take(pending[0])
                except StoreError as exc:
                    # Kept unacked and tried again, in order: requeued, each try would count
                    # against the queue's delivery limit, and an outage of a few seconds would
                    # dead-letter events that were fine. (Held deliveries go back to the queue
                    # if the launcher stops meanwhile.)
                    log.warning("bus.event_deferred", error=str(exc))
                    await _pause(stopping, self.retry_pause)
                    break
                del pending[0]

    async def take(self, delivery: Delivery) -> None:
        headers = delivery.headers
        key = delivery.message.key or ""
        source = str(headers.get("cloudEvents_source") or "")
        if source.startswith(RUNLANE_SOURCE_PREFIX):
            await self.bus.ack([delivery])  # one of runlane's own facts: recorded already
            self.stats.own_facts += 1
            return
        try:
            event_id, data, traceparent = _event_parts(delivery, source)
            emitted = await emit_event(
                self.store,
                self.catalog,
                self.accept,
                key,
                data,
                event_id=event_id,
                traceparent=traceparent,
                external_source=source,  # recorded, never published again (no loop)
            )
        except StoreError:
            raise  # the database failed: tried again, never dead-lettered
        except (RunlaneError, Refused) as exc:  # BadEvent, RunRefused, InvalidArgument, ...
            if isinstance(exc, BadEvent | RunRefused):
                reason = exc.message
            elif isinstance(exc, RunlaneError):
                reason = f"{exc.code}: {exc.message}"
            else:
                reason = str(exc)
            if await self.bus.dead_letter(delivery, reason):
                self.stats.dead_lettered += 1
            else:  # not copied: back to the queue (never left unacked, holding a prefetch slot)
                await self.bus.reject([delivery], requeue=True)
            return
        self.stats.accepted += len(emitted.runs)
        await self.bus.ack([delivery])
        self.stats.acked += 1


def _event_parts(delivery: Delivery, source: str) -> tuple[str, dict[str, Any], str | None]:
    """(event id, data, traceparent) of a CloudEvent in binary mode; `Refused` otherwise."""
    headers = delivery.headers
    ce_id = headers.get("cloudEvents_id") or delivery.message.message_id
    if not ce_id:
        raise Refused("no cloudEvents_id header (nor message_id): the event cannot be deduped")
    if not source:
        raise Refused("no cloudEvents_source header: the event cannot be deduped by source")
    try:
        data = json.loads(delivery.message.payload) if delivery.message.payload.strip() else {}
    except (ValueError, RecursionError) as exc:  # RecursionError: nested past Python's limit
        raise Refused(f"data is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise Refused("data is not a JSON object")
    traceparent = headers.get("cloudEvents_traceparent") or headers.get("traceparent")
    if traceparent is not None:
        try:
            parse_traceparent(str(traceparent))
        except ValueError as exc:
            raise Refused(f"traceparent: {exc}") from None
    return f"{source}#{ce_id}", data, None if traceparent is None else str(traceparent)
