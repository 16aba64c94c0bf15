"""Store contract, both dialects: pruning dead launchers' heartbeat rows, and the write probe."""

from __future__ import annotations

from datetime import UTC, datetime

from runlane.ports import Heartbeat
from runlane.testing.clock import FixedClock
from tests.conformance.conftest import StoreHarness

T0 = datetime(2031, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)


async def test_prune_launchers_deletes_only_rows_silent_longer_than_the_bound(
    harness: StoreHarness,
) -> None:
    clock = FixedClock(T0)
    store = await harness.make_store(clock=clock)
    await store.beat(Heartbeat("dead", "host-a", 1, "0.1.0", T0, running={"inline": 1}))
    await store.beat(Heartbeat("also-dead", "host-b", 2, "0.1.0", T0))
    clock.advance(3000)
    await store.beat(Heartbeat("alive", "host-c", 3, "0.1.0", T0))
    clock.advance(700)  # dead rows: 3700 s silent; alive: 700 s

    assert await store.prune_launchers(3600) == ["also-dead", "dead"]
    assert [h.launcher_id for h in await store.launchers()] == ["alive"]
    assert await store.prune_launchers(3600) == []
    assert await store.prune_launchers(600) == ["alive"]
    assert await store.launchers() == []


async def test_prune_launchers_keeps_a_launcher_live_by_its_own_interval(
    harness: StoreHarness,
) -> None:
    # A launcher that beats every two hours is live for six (three intervals): another
    # launcher's one-hour bound must not delete its row in between beats.
    clock = FixedClock(T0)
    store = await harness.make_store(clock=clock)
    await store.beat(Heartbeat("slow", "host-a", 1, "0.1.0", T0, heartbeat_interval=7200.0))
    await store.beat(Heartbeat("quick", "host-b", 2, "0.1.0", T0, heartbeat_interval=15.0))
    await store.beat(Heartbeat("old", "host-c", 3, "0.1.0", T0))  # an older runlane: no interval
    clock.advance(3700)
    assert await store.prune_launchers(3600) == ["old", "quick"]
    assert [h.launcher_id for h in await store.launchers()] == ["slow"]
    clock.advance(10 * 7200 - 3700 - 1)
    assert await store.prune_launchers(3600) == []
    clock.advance(2)  # ten of its intervals silent: gone
    assert await store.prune_launchers(3600) == ["slow"]


async def test_check_writable_passes_and_writes_nothing(harness: StoreHarness) -> None:
    store = harness.store
    await store.check_writable()
    await store.check_writable()
    assert await store.launchers() == []


async def test_a_heartbeat_carries_the_catalog_its_launcher_runs(harness: StoreHarness) -> None:
    clock = FixedClock(T0)
    store = await harness.make_store(clock=clock)
    loaded = datetime(2031, 3, 4, 5, 0, 1, 654321, tzinfo=UTC)
    digest = "sha256:" + "ab" * 32
    await store.beat(
        Heartbeat(
            "L1",
            "host-a",
            1,
            "0.1.0",
            T0,
            catalog_digest=digest,
            catalog_loaded_at=loaded,
            catalog_jobs=("alpha", "beta"),
            catalog_path="/etc/runlane/catalog.yaml",
            catalog_chains=("nightly",),
            heartbeat_interval=60.0,
            log_dir="/srv/runlane/logs",
        )
    )
    await store.beat(
        Heartbeat(
            "L2",
            "host-b",
            2,
            "0.1.0",
            T0,
            catalog_digest=digest,
            catalog_jobs=(),
            catalog_chains=(),
        )
    )
    l1, l2 = await store.launchers()
    assert (l1.catalog_digest, l1.catalog_loaded_at, l1.catalog_jobs) == (
        digest,
        loaded,
        ("alpha", "beta"),
    )
    assert (l1.catalog_path, l1.catalog_chains) == ("/etc/runlane/catalog.yaml", ("nightly",))
    assert (l1.heartbeat_interval, l2.heartbeat_interval) == (60.0, None)
    assert (l1.log_dir, l2.log_dir) == ("/srv/runlane/logs", None)
    # An empty catalog is a known empty job (and chain) list, not an unknown one.
    assert (l2.catalog_digest, l2.catalog_loaded_at, l2.catalog_jobs) == (digest, None, ())
    assert (l2.catalog_path, l2.catalog_chains) == (None, ())

    # The next beat replaces what the row says (a launcher restarted under the same id).
    clock.advance(5)
    newer = "sha256:" + "cd" * 32
    await store.beat(
        Heartbeat(
            "L1",
            "host-a",
            1,
            "0.1.0",
            T0,
            catalog_digest=newer,
            catalog_loaded_at=clock.at,
            catalog_jobs=("gamma",),
            catalog_path="/srv/other.yaml",
            catalog_chains=None,
            log_dir="/tmp/logs",
        )
    )
    l1 = (await store.launchers())[0]
    assert (l1.catalog_digest, l1.catalog_loaded_at, l1.catalog_jobs) == (
        newer,
        clock.at,
        ("gamma",),
    )
    assert (l1.catalog_path, l1.catalog_chains, l1.log_dir) == (
        "/srv/other.yaml",
        None,
        "/tmp/logs",
    )


async def test_a_heartbeat_row_of_an_older_runlane_reads_as_catalog_unknown(
    harness: StoreHarness,
) -> None:
    # What a launcher of a runlane without migration 0003 writes: the old columns only.
    harness.query(
        "INSERT INTO launcher_heartbeat (launcher_id, host, pid, version, started_at, beat_at,"
        " queue_depth, running) VALUES ('old', 'h', 1, '0.0.9', :t, :t, 0, '{}')",
        {"t": T0.isoformat() if harness.dialect == "postgresql" else "2031-03-04T05:06:07.123456Z"},
    )
    (old,) = await harness.store.launchers()
    assert (old.launcher_id, old.catalog_digest, old.catalog_loaded_at, old.catalog_jobs) == (
        "old",
        None,
        None,
        None,
    )
    assert (old.catalog_path, old.catalog_chains, old.heartbeat_interval) == (None, None, None)
    assert old.log_dir is None
