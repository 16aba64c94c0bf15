"""The RabbitMQ bus's command consumer (`CommandConsumer`, docs/bus.md "Run commands") over each
store, with a scripted bus in the broker's place: a batch of deliveries is decided with one read
of the runs' statuses, the held ones are settled with one read, and a second delivery of a
command already held is acked at once instead of taking the first one's place (which was never
acked: it kept a prefetch slot until the connection closed). The broker itself is
tests/integration/rabbitmq/test_commands.py's."""

from __future__ import annotations

import functools
import json
import secrets
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from runlane.catalog import parse_catalog_text
from runlane.core.runs import AcceptResult, RunStatus
from runlane.ports import Delivery, OutboxMessage, RunFilter, Store
from runlane.service.accept import MAX_KEY_BYTES, RunRequest, accept_run
from runlane.service.launcher.bus_loops import CommandConsumer
from tests.conformance.conftest import StoreHarness
from tests.conformance.test_store_contract import claim_all, new_run


class ScriptedBus:
    """`receive` hands out what the test put in `inbox`; acks and dead letters are recorded."""

    name = "rabbitmq"

    def __init__(self) -> None:
        self.inbox: list[Delivery] = []
        self.acked: list[str] = []
        self.dead: list[tuple[str, str]] = []

    async def receive(self, topic: str, *, limit: int, max_wait: float) -> list[Delivery]:
        out, self.inbox = self.inbox[:limit], self.inbox[limit:]
        return out

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        self.acked.extend(d.message.message_id for d in deliveries)

    async def reject(self, deliveries: Sequence[Delivery], *, requeue: bool) -> None:
        raise AssertionError("nothing here is rejected")

    async def dead_letter(self, delivery: Delivery, reason: str) -> bool:
        self.dead.append((delivery.message.message_id, reason))
        return True


class CountingStore:
    """The store, with every `run_statuses` call's ids recorded."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.reads: list[list[str]] = []

    async def run_statuses(self, run_ids: Sequence[str]) -> dict[str, RunStatus]:
        self.reads.append(list(run_ids))
        return await self._store.run_statuses(run_ids)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def command(message_id: str, payload: object) -> Delivery:
    body = payload if isinstance(payload, str) else json.dumps(payload)
    return Delivery(OutboxMessage(message_id, "job_runs", body, datetime.now(UTC)))


async def refuse(request: RunRequest) -> AcceptResult:
    raise AssertionError(f"no command here is another service's: {request}")


async def test_a_batch_of_commands_is_decided_and_settled_with_one_read_each(
    harness: StoreHarness,
) -> None:
    store = harness.store
    runs = [(await store.accept(new_run("nightly"))).run for _ in range(5)]
    [claimed] = await claim_all(store, limit=1)  # the oldest: no longer queued
    assert claimed.run.id == runs[0].id
    bus = ScriptedBus()
    counting = CountingStore(store)
    woken: list[int] = []
    consumer = CommandConsumer(
        store=counting,  # type: ignore[arg-type]
        bus=bus,  # type: ignore[arg-type]
        catalog=None,  # type: ignore[arg-type]
        accept=refuse,
        free_slots=lambda: 16,
        wake=lambda: woken.append(1),
    )
    bus.inbox = [
        *(command(f"m{n}", {"run_id": run.id, "job": run.job}) for n, run in enumerate(runs)),
        command("again", {"run_id": runs[1].id, "job": "nightly"}),  # a second delivery
        command("poison", "{not json"),
    ]
    await consumer.consume_once()

    # One read for the whole batch (the poison never reached the database).
    assert counting.reads == [[run.id for run in runs] + [runs[1].id]]
    assert consumer.held == 4  # the four queued runs wait for their claim
    # The run already claimed and the second delivery of a held command are acked at once.
    assert bus.acked == ["m0", "again"]
    assert [message_id for message_id, _ in bus.dead] == ["poison"]
    assert "not JSON" in bus.dead[0][1]
    assert woken == [1]  # the claim loop is woken once for the batch
    assert consumer.stats.dropped == 2

    # Two of the held runs are claimed; the next round settles them with one read.
    claimed_now = await claim_all(store, limit=2)
    await consumer.consume_once()
    assert len(counting.reads) == 2
    assert sorted(counting.reads[1]) == sorted(run.id for run in runs[1:])
    assert consumer.held == 2
    settled = {f"m{n}" for n, run in enumerate(runs) if run.id in {c.run.id for c in claimed_now}}
    assert set(bus.acked[2:]) == settled
    assert consumer.stats.acked == 4

    # A held run whose row is gone (deleted under the consumer) is settled, not an error.
    gone = next(run.id for run in runs[1:] if run.id not in {c.run.id for c in claimed_now})
    harness.query("DELETE FROM run_log WHERE id = :id", {"id": gone})
    await consumer.consume_once()
    assert consumer.held == 1
    assert consumer.stats.acked == 5


async def test_an_unknown_run_id_goes_to_the_accept_path(harness: StoreHarness) -> None:
    """A command for a run with no row (another service's) is the accept path's, once per
    delivery, while the known runs of the same batch are decided by the one read."""
    store = harness.store
    known = (await store.accept(new_run("nightly"))).run
    accepted: list[RunRequest] = []

    async def accept(request: RunRequest) -> AcceptResult:
        accepted.append(request)
        return await store.accept(new_run("nightly", dedupe_key=request.dedupe_key))

    bus = ScriptedBus()
    consumer = CommandConsumer(
        store=store,
        bus=bus,  # type: ignore[arg-type]
        catalog=None,  # type: ignore[arg-type]
        accept=accept,
        free_slots=lambda: 16,
        wake=lambda: None,
    )
    foreign = str(uuid.uuid4())
    bus.inbox = [
        command("mine", {"run_id": known.id, "job": "nightly"}),
        command("theirs", {"run_id": foreign, "job": "nightly", "requested_by": "billing"}),
        command("malformed-id", {"run_id": "billing-42", "job": "nightly"}),
    ]
    await consumer.consume_once()
    assert consumer.held == 1
    assert [r.dedupe_key for r in accepted] == [f"bus:{foreign}", "bus:billing-42"]
    assert accepted[0].requested_by == "billing"
    assert bus.acked == ["theirs", "malformed-id"]
    assert consumer.stats.accepted == 2


def nightly_consumer(store: Store) -> tuple[ScriptedBus, CommandConsumer]:
    """A consumer of a scripted bus accepting through the one accept path, with a catalog of
    one job, `nightly` (`overlap: allow`)."""
    catalog = parse_catalog_text(
        "version: 1\ndefaults: {executor: inline}\njobs:\n"
        "  nightly: {command: ['true'], overlap: allow}\n"
    )
    bus = ScriptedBus()
    consumer = CommandConsumer(
        store=store,
        bus=bus,  # type: ignore[arg-type]
        catalog=catalog,
        accept=functools.partial(accept_run, store, catalog),
        free_slots=lambda: 16,
        wake=lambda: None,
    )
    return bus, consumer


async def test_a_command_cannot_take_the_dedupe_key_of_a_retry(harness: StoreHarness) -> None:
    """Attempt n of a run is written under `<first key>#n`: a command whose dedupe key (given,
    or `bus:<run id>`) ends that way is written with a `~` after it, so it can neither take a
    retry's row nor be answered with one; it is still one run however often it comes. A `#`
    elsewhere is a key's own."""
    store = harness.store
    bus, consumer = nightly_consumer(store)
    bus.inbox = [
        command("first", {"run_id": "c1", "job": "nightly", "dedupe_key": "build-7"}),
        command("forged", {"run_id": "c2", "job": "nightly", "dedupe_key": "build-7#2"}),
        command("again", {"run_id": "c2", "job": "nightly", "dedupe_key": "build-7#2"}),
        command("by-id", {"run_id": "c3#2", "job": "nightly"}),
        command("own-hash", {"run_id": "c4", "job": "nightly", "dedupe_key": "build#7a"}),
        command("tilde", {"run_id": "c5", "job": "nightly", "dedupe_key": "build-7#2~"}),
    ]
    await consumer.consume_once()
    assert sorted(bus.acked) == ["again", "by-id", "first", "forged", "own-hash", "tilde"]
    assert bus.dead == []
    assert await store.run_by_dedupe_key("build-7#2") is None  # the retry's, still free
    assert await store.run_by_dedupe_key("bus:c3#2") is None
    forged = await store.run_by_dedupe_key("build-7#2~")
    assert forged is not None
    assert await store.run_by_dedupe_key("bus:c3#2~") is not None
    assert await store.run_by_dedupe_key("build#7a") is not None
    # `build-7#2~` given is not `build-7#2` given: each is its own run.
    tilde = await store.run_by_dedupe_key("build-7#2~~")
    assert tilde is not None
    assert tilde.id != forged.id
    runs = await store.list_runs(RunFilter(job="nightly"))
    assert len(runs) == 5  # the repeated command is the same run


async def test_a_command_with_text_no_store_can_keep_is_dead_lettered_on_each(
    harness: StoreHarness,
) -> None:
    """A NUL (PostgreSQL refuses it) or a lone surrogate (no UTF-8 form: JSON's `\\udcff`) in a
    command's `requested_by` or `dedupe_key` is refused the same on each store
    (`invalid_argument`, dead-lettered): SQLite took the NUL and raised a foreign error for
    the surrogate, out of the consumer."""
    store = harness.store
    bus, consumer = nightly_consumer(store)
    bus.inbox = [
        command("nul-by", '{"run_id": "c1", "job": "nightly", "requested_by": "a\\u0000b"}'),
        command("nul-key", '{"run_id": "c2", "job": "nightly", "dedupe_key": "k\\u0000"}'),
        command("surrogate-by", '{"run_id": "c3", "job": "nightly", "requested_by": "\\udcff"}'),
        command("surrogate-key", '{"run_id": "c4", "job": "nightly", "dedupe_key": "\\ud800"}'),
        command("fine", {"run_id": "c5", "job": "nightly", "requested_by": "billing"}),
    ]
    await consumer.consume_once()
    assert bus.acked == ["fine"]
    assert [message_id for message_id, _ in bus.dead] == [
        "nul-by",
        "nul-key",
        "surrogate-by",
        "surrogate-key",
    ]
    for _, reason in bus.dead:
        assert reason.startswith("invalid_argument: ")
    assert [r.requested_by for r in await store.list_runs(RunFilter())] == ["billing"]


async def test_a_command_with_a_key_or_requester_too_long_to_index_is_refused_on_each(
    harness: StoreHarness,
) -> None:
    """PostgreSQL cannot index a `dedupe_key` or `requested_by` of a few KB that does not
    compress, and SQLite took any length: a command's was queued on one store and dead-lettered
    on the other. Past `MAX_KEY_BYTES` each refuses it (`invalid_argument`); at it, each takes it."""
    store = harness.store
    bus, consumer = nightly_consumer(store)
    long_text = secrets.token_hex(2000)  # 4000 bytes that do not compress
    at_limit = secrets.token_hex(MAX_KEY_BYTES // 2)
    bus.inbox = [
        command("long-key", {"run_id": "c1", "job": "nightly", "dedupe_key": long_text}),
        command("long-by", {"run_id": "c2", "job": "nightly", "requested_by": long_text}),
        command("long-id", {"run_id": long_text, "job": "nightly"}),
        command("at-limit", {"run_id": "c4", "job": "nightly", "dedupe_key": at_limit}),
    ]
    await consumer.consume_once()
    assert bus.acked == ["at-limit"]
    assert [message_id for message_id, _ in bus.dead] == ["long-key", "long-by", "long-id"]
    for _, reason in bus.dead:
        assert reason.startswith("invalid_argument: ")
        assert f"at most {MAX_KEY_BYTES} bytes" in reason
    assert await store.run_by_dedupe_key(at_limit) is not None
