"""The RabbitMQ bus (docs/bus.md): confirmed publishes per second from one relay process, one by
one against pipelined, and the time to drain an outbox backlog (a broker outage's) with the
relay's memory. Each repetition uses queues of its own (a unique prefix), deleted afterwards.
Prints one line per repetition and the medians.

    .venv/bin/python bench/bus.py --publishes 20000 --one-by-one 2000 --backlog 100000 --repeat 3
    .venv/bin/python bench/bus.py --quick      # a smoke run: tiny sizes, times nothing

The broker is RUNLANE_TEST_RABBITMQ_URL (default guest on 127.0.0.1:5672), the database
RUNLANE_TEST_POSTGRES_URL (as the other benchmarks).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import aio_pika
import psycopg
from _common import median, rss_mib, scratch_database

from runlane.adapters.rabbitmq import RabbitBus, Topology
from runlane.ports import OutboxMessage
from runlane.service.launcher.bus_loops import OutboxRelay
from runlane.service.wiring import store_from_url

AMQP_URL = os.environ.get("RUNLANE_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")


def commands(n: int) -> list[OutboxMessage]:
    now = datetime.now(UTC)
    return [
        OutboxMessage(
            str(i + 1),
            "job_runs",
            json.dumps({"run_id": f"bench-{i}", "job": "noop", "params": {}, "attempt": 1}),
            now,
        )
        for i in range(n)
    ]


async def delete_topology(topology: Topology) -> None:
    connection = await aio_pika.connect(AMQP_URL, timeout=5)
    async with connection:
        channel = await connection.channel()
        for queue in (
            topology.job_runs,
            topology.job_runs_dlq,
            topology.events_queue,
            topology.events_dlq,
            topology.unrouted,
        ):
            await channel.queue_delete(queue)
        for exchange in (topology.job_events, topology.unrouted):
            await channel.exchange_delete(exchange)


async def publish_rates(pipelined_n: int, one_by_one_n: int) -> tuple[float, float]:
    """(one-by-one msg/s, pipelined msg/s): persistent, mandatory, confirmed, quorum queue."""
    topology = Topology(prefix=f"bench{secrets.token_hex(3)}.")
    bus = RabbitBus(AMQP_URL, topology=topology)
    try:
        await bus.open()
        single = commands(one_by_one_n)
        started = time.perf_counter()
        for message in single:
            assert await bus.publish([message], within=10) == [message.message_id]
        one_by_one = one_by_one_n / (time.perf_counter() - started)
        batch = commands(pipelined_n)
        started = time.perf_counter()
        for i in range(0, len(batch), 500):
            part = batch[i : i + 500]
            assert len(await bus.publish(part, within=30)) == len(part)
        pipelined = pipelined_n / (time.perf_counter() - started)
    finally:
        await bus.close()
        await delete_topology(topology)
    return one_by_one, pipelined


async def drain(url: str, backlog: int) -> tuple[float, float, float]:
    """(seconds to publish a `backlog`-row outbox, RSS MiB before, peak RSS MiB while)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO outbox (topic, payload, created_at, msg_key) "
            "SELECT 'job_runs', jsonb_build_object('run_id', 'bench-' || i, 'job', 'noop', "
            "'params', '{}'::jsonb, 'attempt', 1), now(), 'bench-' || i "
            "FROM generate_series(1, %(n)s) AS i",
            {"n": backlog},
        )
    topology = Topology(prefix=f"bench{secrets.token_hex(3)}.")
    store = store_from_url(url, outbox=True)
    await store.open()
    bus = RabbitBus(AMQP_URL, topology=topology)
    pid = os.getpid()
    try:
        await bus.open()
        relay = OutboxRelay(store, bus, "bench-relay", batch=1000, within=30)
        before = peak = rss_mib(pid)
        started = time.perf_counter()
        while True:
            sent, _full = await relay.relay_once()
            peak = max(peak, rss_mib(pid))
            if sent == 0:
                break
            if sent is None:
                raise RuntimeError(f"the broker confirmed only part of a batch: {bus.last_error}")
        seconds = time.perf_counter() - started
        assert await store.outbox_pending() == 0
    finally:
        await bus.close()
        await store.close()
        await delete_topology(topology)
    return seconds, before, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--publishes", type=int, default=20_000)
    parser.add_argument("--one-by-one", type=int, default=2_000)
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.publishes, args.one_by_one, args.backlog, args.repeat = 500, 50, 2000, 1
    rows: list[tuple[float, float, float, float]] = []
    for i in range(args.repeat):
        one, piped = asyncio.run(publish_rates(args.publishes, args.one_by_one))
        with tempfile.TemporaryDirectory() as tmp, scratch_database("postgres", Path(tmp)) as url:
            store = store_from_url(url)
            asyncio.run(_upgrade(store))
            seconds, before, peak = asyncio.run(drain(url, args.backlog))
        rows.append((one, piped, seconds, peak - before))
        print(
            f"[{i + 1}] confirmed publishes one_by_one={one:.0f}/s pipelined={piped:.0f}/s "
            f"(x{piped / one:.1f}); drain of {args.backlog} rows {seconds:.1f} s "
            f"({args.backlog / seconds:.0f}/s), RSS {before:.1f} -> peak +{peak - before:.1f} MiB"
        )
    one = median([r[0] for r in rows])
    piped = median([r[1] for r in rows])
    seconds = median([r[2] for r in rows])
    grow = median([r[3] for r in rows])
    print(
        f"median of {args.repeat}: one_by_one={one:.0f}/s pipelined={piped:.0f}/s "
        f"drain={seconds:.1f} s for {args.backlog} rows, RSS growth {grow:.1f} MiB"
    )


async def _upgrade(store: object) -> None:
    await store.open()  # type: ignore[attr-defined]
    try:
        await store.upgrade()  # type: ignore[attr-defined]
    finally:
        await store.close()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
