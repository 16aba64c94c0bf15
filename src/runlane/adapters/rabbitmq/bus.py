"""RabbitMQ as the run log's bus (`runlane.ports.Bus`), over aio-pika.

Outbox rows go out with publisher confirms, pipelined: every message of a batch is written before
the first confirm is awaited, and each is `mandatory` on a channel that raises returns, so an
unroutable command is a failure, not a silent ack. Every call is bounded by its `within` /
`max_wait`. The connection is plain (not aio-pika's robust one, whose restores go through weak
references): a fault drops it, and the next call connects again, at most once per
`reconnect_interval`, and declares the topology again (a connection the broker closed is
noticed by its `connected` event, as aio-pika leaves `is_closed` False). Wake-ups stay the
database's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import aio_pika
import aiormq
import structlog
from aio_pika.abc import (
    AbstractChannel,
    AbstractConnection,
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractQueue,
    DeliveryMode,
    ExchangeType,
)

from runlane.adapters.rabbitmq.policy import Management, amqp_vhost
from runlane.adapters.rabbitmq.topology import Topology, mismatch_message
from runlane.core.secrets import mask_url
from runlane.errors import BusTopologyMismatch, BusUnavailable
from runlane.ports.bus import (
    FACT_TOPIC_PREFIX,
    TOPIC_EXTERNAL_EVENTS,
    TOPIC_RUN_QUEUED,
    Delivery,
    OutboxMessage,
    QueueDepths,
    QueuePolicy,
)
from runlane.ports.store import Wakeups

log = structlog.get_logger("runlane.bus")

# The header a dead-lettered message carries to say why runlane refused it.
REASON_HEADER = "x-runlane-reason"
# Connecting, opening the publishing channel and declaring the topology, all together: a broker
# that completes the handshake and then stops answering (an outage, a partition) holds no caller
# (the alert rules' dead-letter read, the heartbeat's depths, a publish) beyond it.
CONNECT_TIMEOUT = 5.0
CLOSE_TIMEOUT = 2.0  # closing a connection the broker may not answer
_FAULTS = (aiormq.exceptions.AMQPError, ConnectionError, OSError, RuntimeError, TimeoutError)
SHORTSTR_MAX = 255  # the bytes of an AMQP 0-9-1 short string: a routing key, a message id


class Unpublishable(ValueError):
    """An outbox row no AMQP frame can carry: publishing it again can only fail again."""


class RabbitBus:
    """`Bus` over one RabbitMQ connection: a confirming channel to publish, one per consumed
    queue (its prefetch the consumer's bound)."""

    name = "rabbitmq"

    def __init__(
        self,
        url: str,
        wakeups: Wakeups | None = None,
        *,
        topology: Topology | None = None,
        prefetch: int = 16,
        reconnect_interval: float = 1.0,
        confirm_window: int = 256,
        connection_name: str = "runlane",
        management_url: str = "",
    ) -> None:
        """`connection_name`: how the broker names this connection (the management UI,
        `rabbitmqctl list_connections client_properties`), e.g. "runlane <launcher id>".
        `management_url`: the management API, which makes the TTL, dead-lettering and delivery
        limit policies, PUT before every declare (docs/bus.md#topology)."""
        self.url = url
        self.connection_name = connection_name
        self.connects = 0  # connections made (1 + reconnects), for tests and stats
        self.topology = topology or Topology()
        self.management: Management | None = None
        if management_url:
            self.management = Management(management_url, amqp_vhost(url))
            self.topology = replace(self.topology, use_policies=True)
        self._wakeups = wakeups
        self._prefetch = max(1, prefetch)
        self._reconnect_interval = self._base_reconnect = reconnect_interval
        self._window = max(1, confirm_window)
        self._connection: AbstractConnection | None = None
        self._publish_channel: AbstractChannel | None = None
        self._events_exchange: AbstractExchange | None = None
        self._default_exchange: AbstractExchange | None = None
        self._consumers: dict[str, tuple[AbstractChannel, AbstractQueue]] = {}
        self._inbox: dict[str, asyncio.Queue[AbstractIncomingMessage]] = {}
        self._lock = asyncio.Lock()
        self._last_attempt = -1e9
        self._bound_keys: set[str] = set()
        self.last_error: str | None = None

    # --- connection -----------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect and declare the topology now: `BusUnavailable` when the broker cannot be
        reached, `BusTopologyMismatch` when it holds a queue or exchange with other arguments."""
        self._last_attempt = -1e9
        await self._ensure(raise_errors=True)

    async def _ensure(self, *, raise_errors: bool = False) -> bool:
        """Connected, with the topology declared: True; False when the broker is down now (a
        reconnect is tried at most once per `reconnect_interval`)."""
        if _live(self._connection):
            return True
        async with self._lock:
            if _live(self._connection):
                return True
            now = time.monotonic()
            if not raise_errors and now - self._last_attempt < self._reconnect_interval:
                return False
            self._last_attempt = now
            await self._drop()
            connection: AbstractConnection | None = None
            try:
                if self.management is not None:
                    await self.management.apply(self.topology)
                deadline = asyncio.get_running_loop().time() + CONNECT_TIMEOUT
                connection = await aio_pika.connect(
                    self.url,
                    timeout=CONNECT_TIMEOUT,
                    client_properties={"connection_name": self.connection_name},
                )
                # aio-pika bounds the handshake only: the channel and the declares wait for
                # the broker's answers without end. TimeoutError is one of the faults below.
                async with asyncio.timeout_at(deadline):
                    channel = await connection.channel(
                        publisher_confirms=True, on_return_raises=True
                    )
                    await declare_topology(channel, self.topology)
                    events_exchange = await channel.get_exchange(
                        self.topology.job_events, ensure=False
                    )
                self._publish_channel = channel
                self._default_exchange = channel.default_exchange
                self._events_exchange = events_exchange
                self._bound_keys = set(self.topology.event_keys)
                self._connection = connection  # last: connected means ready to publish
                connection = None
            except aiormq.exceptions.ChannelPreconditionFailed as exc:
                await _close_quietly(connection)
                message = mismatch_message(_reply_text(exc))
                self.last_error = message
                # Retried, but not every second: an operator has to act first.
                self._reconnect_interval = max(self._reconnect_interval, 60.0)
                if raise_errors:
                    raise BusTopologyMismatch(message) from None
                log.error("bus.topology_mismatch", error=message)
                return False
            except BusUnavailable as exc:  # the management API's policies
                self.last_error = exc.message
                # A wrong password or URL waits for an operator: not tried every second.
                self._reconnect_interval = max(self._reconnect_interval, 10.0)
                if raise_errors:
                    raise
                log.warning("bus.unavailable", error=exc.message)
                return False
            except (*_FAULTS, aiormq.exceptions.AMQPError) as exc:
                await _close_quietly(connection)
                self.last_error = _describe(exc)
                if raise_errors:
                    raise BusUnavailable(
                        f"RabbitMQ at {mask_url(self.url)} is unavailable: {self.last_error}"
                    ) from None
                log.warning("bus.unavailable", url=mask_url(self.url), error=self.last_error)
                return False
            self.last_error = None
            self._reconnect_interval = self._base_reconnect
            self.connects += 1
            log.info("bus.connected", url=mask_url(self.url), connects=self.connects)
            return True

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        self._publish_channel = self._events_exchange = self._default_exchange = None
        self._consumers.clear()
        await _close_quietly(connection)

    async def close(self) -> None:
        await self._drop()

    # --- publish --------------------------------------------------------------------------------

    async def publish(self, messages: Sequence[OutboxMessage], *, within: float) -> list[str]:
        """Pipelined confirms, in windows of `confirm_window`: the ids done with, in order. A
        message the broker refused (returned, nacked) or did not confirm in time ends the batch
        after its window and is not done with. One no AMQP frame can carry (a routing key or
        message id past 255 bytes: `Unpublishable`, an event fact written before `emit` refused
        such keys) is done with too, logged at error as lost (`bus.publish_impossible`):
        trying it again could only fail again, and left pending it would head every batch."""
        if not messages:
            return []
        deadline = time.monotonic() + within
        if not await self._ensure():
            return []
        confirmed: list[str] = []
        for start in range(0, len(messages), self._window):
            window = messages[start : start + self._window]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            done, go_on = await self._publish_window(window, remaining)
            confirmed.extend(done)
            if not go_on:
                break
        return confirmed

    async def _publish_window(
        self, window: Sequence[OutboxMessage], within: float
    ) -> tuple[list[str], bool]:
        """(the confirmed ids, whether the next window may follow)."""
        tasks = [asyncio.ensure_future(self._publish_one(m, within)) for m in window]
        done: list[str] = []
        go_on = True
        try:
            async with asyncio.timeout(within):
                results = await asyncio.gather(*tasks, return_exceptions=True)
        except TimeoutError:
            for task in tasks:
                task.cancel()
            results = [
                t.result() if t.done() and not t.cancelled() and t.exception() is None else False
                for t in tasks
            ]
            log.warning("bus.publish_timeout", within=within)
        dropped = False
        for message, result in zip(window, results, strict=True):
            if result is True:
                done.append(message.message_id)
                continue
            if isinstance(result, Unpublishable):
                log.error(
                    "bus.publish_impossible",
                    message_id=message.message_id,
                    topic=message.topic,
                    error=str(result),
                    note="not published, and never will be: marked done",
                )
                done.append(message.message_id)
                continue
            go_on = False
            if isinstance(result, BaseException):
                self.last_error = _describe(result)
                log.warning(
                    "bus.publish_unconfirmed",
                    message_id=message.message_id,
                    error=self.last_error,
                )
                if (
                    not dropped
                    and isinstance(result, _FAULTS)
                    and not isinstance(result, aiormq.exceptions.PublishError)
                ):
                    dropped = True
                    await self._drop()
        return done, go_on

    async def _publish_one(self, message: OutboxMessage, within: float) -> bool:
        exchange, routing_key = self._route(message.topic)
        amqp = to_amqp(message)
        for what, text in (("routing key", routing_key), ("message id", amqp.message_id or "")):
            if len(text.encode()) > SHORTSTR_MAX:
                raise Unpublishable(
                    f"the {what} is {len(text.encode())} bytes as UTF-8; AMQP allows "
                    f"{SHORTSTR_MAX}: {text[:60]!r}..."
                )
        await exchange.publish(amqp, routing_key, mandatory=True, timeout=within)
        return True

    def _route(self, topic: str) -> tuple[AbstractExchange, str]:
        if self._default_exchange is None or self._events_exchange is None:
            raise ConnectionError("not connected")
        if topic == TOPIC_RUN_QUEUED:
            return self._default_exchange, self.topology.job_runs
        if topic.startswith(FACT_TOPIC_PREFIX):
            return self._events_exchange, topic[len(FACT_TOPIC_PREFIX) :]
        return self._default_exchange, self.topology.prefix + topic

    async def dead_letter(self, delivery: Delivery, reason: str, *, within: float = 5.0) -> bool:
        """Copy a refused delivery to its dead-letter queue with `x-runlane-reason`, confirmed,
        then ack it; False (nothing acked: it comes again) when the copy was not confirmed."""
        incoming = delivery.tag
        if not isinstance(incoming, AbstractIncomingMessage):
            return False
        queue = (
            self.topology.events_dlq
            if delivery.message.topic == TOPIC_EXTERNAL_EVENTS
            else self.topology.job_runs_dlq
        )
        if not await self._ensure() or self._default_exchange is None:
            return False
        headers = dict(incoming.headers or {})
        headers[REASON_HEADER] = reason[:1000]
        copy = aio_pika.Message(
            incoming.body,
            headers=headers,
            content_type=incoming.content_type,
            message_id=incoming.message_id,
            delivery_mode=DeliveryMode.PERSISTENT,
            timestamp=incoming.timestamp,
            type=incoming.type,
        )
        try:
            await self._default_exchange.publish(copy, queue, mandatory=True, timeout=within)
        except (*_FAULTS, aiormq.exceptions.AMQPError) as exc:
            log.warning("bus.dead_letter_failed", queue=queue, error=_describe(exc))
            return False
        await self.ack([delivery])
        log.warning("bus.dead_lettered", queue=queue, reason=reason, message_id=incoming.message_id)
        return True

    # --- consume --------------------------------------------------------------------------------

    async def wait_for_wakeup(self, max_wait: float) -> bool:
        if self._wakeups is not None:
            return await self._wakeups.wait_for_wakeup(max_wait)
        await asyncio.sleep(max_wait)
        return False

    def set_prefetch_hint(self, prefetch: int) -> None:
        """The consumer's bound (the launcher's concurrency); applies from the next connect."""
        self._prefetch = max(1, prefetch)

    async def _consumer(self, topic: str) -> asyncio.Queue[AbstractIncomingMessage] | None:
        if not await self._ensure() or self._connection is None:
            return None
        inbox = self._inbox.setdefault(topic, asyncio.Queue())
        if topic in self._consumers:
            if not self._consumers[topic][0].is_closed:
                return inbox
            del self._consumers[topic]  # the broker closed the channel: consume anew
        name = self.topology.job_runs if topic == TOPIC_RUN_QUEUED else self.topology.events_queue
        try:
            channel = await self._connection.channel(publisher_confirms=False)
            await channel.set_qos(prefetch_count=self._prefetch)
            queue = await channel.get_queue(name, ensure=False)
            # A fresh consumer: deliveries of the old channel were requeued when it closed, so
            # whatever still waits in the inbox can no longer be settled; drop it.
            while not inbox.empty():
                inbox.get_nowait()
            await queue.consume(inbox.put, no_ack=False)
        except _FAULTS as exc:
            self.last_error = _describe(exc)
            await self._drop()
            return None
        self._consumers[topic] = (channel, queue)
        return inbox

    async def receive(self, topic: str, *, limit: int, max_wait: float) -> list[Delivery]:
        deadline = time.monotonic() + max_wait
        inbox = await self._consumer(topic)
        if inbox is None:
            await asyncio.sleep(max(0.0, min(deadline - time.monotonic(), 1.0)))
            return []
        out: list[Delivery] = []
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                out.append(from_amqp(await inbox.get(), topic))
        while out and len(out) < limit and not inbox.empty():
            out.append(from_amqp(inbox.get_nowait(), topic))
        return out

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        for delivery in deliveries:
            incoming = delivery.tag
            if isinstance(incoming, AbstractIncomingMessage):
                with contextlib.suppress(*_FAULTS, aio_pika.exceptions.MessageProcessError):
                    await incoming.ack()

    async def reject(self, deliveries: Sequence[Delivery], *, requeue: bool) -> None:
        for delivery in deliveries:
            incoming = delivery.tag
            if isinstance(incoming, AbstractIncomingMessage):
                with contextlib.suppress(*_FAULTS, aio_pika.exceptions.MessageProcessError):
                    await incoming.reject(requeue=requeue)

    # --- topology and depths --------------------------------------------------------------------

    async def bind_event_keys(self, keys: Sequence[str]) -> None:
        """Bind runlane's event queue to `keys` and unbind the keys this process bound before
        that are gone (the catalog changed)."""
        wanted = set(keys)
        if not await self._ensure() or self._publish_channel is None:
            return
        queue = await self._publish_channel.get_queue(self.topology.events_queue, ensure=False)
        for key in sorted(wanted - self._bound_keys):
            await queue.bind(self.topology.job_events, key)
        for key in sorted(self._bound_keys - wanted):
            await queue.unbind(self.topology.job_events, key)
        self._bound_keys = wanted

    async def job_runs_policy(self) -> QueuePolicy | None:
        """The policy the broker applies to job_runs, through the management API
        (`BusUnavailable` when it fails); None without a management URL."""
        if self.management is None:
            return None
        applied, definition = await self.management.queue_policy(self.topology.job_runs)
        return QueuePolicy(self.topology.job_runs_policy, applied, definition)

    async def depths(self) -> QueueDepths | None:
        """Ready messages in job_runs and job_runs.dlq (a passive declare each); None when the
        broker is down."""
        if not await self._ensure() or self._connection is None:
            return None
        try:
            async with asyncio.timeout(5.0):
                channel = await self._connection.channel(publisher_confirms=False)
                try:
                    runs = await channel.declare_queue(self.topology.job_runs, passive=True)
                    dlq = await channel.declare_queue(self.topology.job_runs_dlq, passive=True)
                finally:
                    await channel.close()
        except _FAULTS as exc:
            self.last_error = _describe(exc)
            return None
        return QueueDepths(
            job_runs=runs.declaration_result.message_count or 0,
            job_runs_dlq=dlq.declaration_result.message_count or 0,
        )


async def declare_topology(channel: AbstractChannel, topology: Topology) -> None:
    """Declare every queue, exchange and binding (idempotent: the same arguments again)."""
    unrouted = await channel.declare_exchange(topology.unrouted, ExchangeType.FANOUT, durable=True)
    unrouted_queue = await channel.declare_queue(
        topology.unrouted, durable=True, arguments=topology.unrouted_arguments()
    )
    await unrouted_queue.bind(unrouted, "")
    await channel.declare_exchange(
        topology.job_events,
        ExchangeType.TOPIC,
        durable=True,
        arguments={"alternate-exchange": topology.unrouted},
    )
    await channel.declare_queue(
        topology.job_runs_dlq, durable=True, arguments=topology.dlq_arguments()
    )
    await channel.declare_queue(
        topology.job_runs, durable=True, arguments=topology.job_runs_arguments()
    )
    await channel.declare_queue(
        topology.events_dlq, durable=True, arguments=topology.dlq_arguments()
    )
    events = await channel.declare_queue(
        topology.events_queue, durable=True, arguments=topology.events_arguments()
    )
    for key in topology.event_keys:
        await events.bind(topology.job_events, key)


def to_amqp(message: OutboxMessage) -> aio_pika.Message:
    """The AMQP message of an outbox row: persistent, `message_id` = the run id for a command
    (its dedupe key at the receiver) or the row id, JSON body, `traceparent` header. A fact's
    payload carries its CloudEvents attributes under `cloudevent` (sent as `cloudEvents_*`
    headers, binary content mode) and its data under `data`."""
    body: Any = json.loads(message.payload)
    headers: dict[str, Any] = {}
    message_id = message.message_id
    content_type = "application/json"
    if isinstance(body, dict) and isinstance(body.get("cloudevent"), dict):
        attributes: dict[str, Any] = body["cloudevent"]
        for name, value in attributes.items():
            headers[f"cloudEvents_{name}"] = value
        content_type = str(attributes.get("datacontenttype", content_type))
        message_id = str(attributes.get("id", message_id))
        body = body.get("data")
    else:
        if isinstance(body, dict):
            message_id = str(body.get("run_id", message_id))
            if isinstance(body.get("traceparent"), str):
                headers["traceparent"] = body["traceparent"]
        # A command goes out as the outbox holds it (JSON already): no second encoding.
        return aio_pika.Message(
            message.payload.encode(),
            headers=headers,
            content_type=content_type,
            message_id=message_id,
            delivery_mode=DeliveryMode.PERSISTENT,
            timestamp=message.created_at,
        )
    return aio_pika.Message(
        json.dumps(body, separators=(",", ":")).encode(),
        headers=headers,
        content_type=content_type,
        message_id=message_id,
        delivery_mode=DeliveryMode.PERSISTENT,
        timestamp=message.created_at,
    )


def from_amqp(incoming: AbstractIncomingMessage, topic: str) -> Delivery:
    headers = incoming.headers or {}
    count = headers.get("x-delivery-count")
    attempt = (count if isinstance(count, int) else 0) + 1
    try:
        payload = incoming.body.decode()
    except UnicodeDecodeError:
        payload = incoming.body.decode("utf-8", errors="replace")
    created = incoming.timestamp or datetime.now(UTC)
    return Delivery(
        message=OutboxMessage(
            message_id=incoming.message_id or "",
            topic=topic,
            payload=payload,
            created_at=created,
            key=incoming.routing_key,
        ),
        attempt=attempt,
        redelivered=bool(incoming.redelivered),
        tag=incoming,
        headers=dict(headers),
    )


def _live(connection: AbstractConnection | None) -> bool:
    """Open and usable. A plain aio-pika connection the broker closed (`close_connection`, a
    restart, a missed heartbeat) keeps `is_closed` False until it is closed here; only its
    `connected` event tells: without this check a quiet launcher, with nothing to publish,
    would keep a dead consumer for ever."""
    return connection is not None and not connection.is_closed and connection.connected.is_set()


async def _close_quietly(connection: AbstractConnection | None) -> None:
    if connection is not None:
        with contextlib.suppress(*_FAULTS, asyncio.CancelledError):
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await connection.close()


def _reply_text(exc: BaseException) -> str:
    args = getattr(exc, "args", ())
    for arg in args:
        reply = getattr(arg, "reply_text", None)
        if isinstance(reply, str):
            return reply
        if "inequivalent" in str(arg) or "PRECONDITION" in str(arg):
            return str(arg)
    return str(exc)


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
