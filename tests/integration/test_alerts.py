"""The alert rules, incidents and notifications on SQLite and PostgreSQL with an injected clock:
one firing and one resolve per incident across launchers and restarts, storms folded into one
message, retried sends, paused slots silent (docs/alerts.md)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from runlane.catalog import Catalog
from runlane.catalog.loader import parse_catalog_text
from runlane.core.records import Heartbeat, NewChainRun
from runlane.core.runs import NewRun, Outcome, RunStatus, Trigger
from runlane.ports import Store
from runlane.ports.notifier import NotifyPermanentError, NotifyTemporaryError
from runlane.service.alerts import engine as engine_module
from runlane.service.alerts.engine import AlertEngine
from runlane.service.alerts.stats import AlertStats
from runlane.service.alerts.targets import Target
from runlane.service.wiring import store_from_url
from runlane.testing.clock import FixedClock
from runlane.testing.notify import RecordingNotifier

T0 = datetime(2031, 3, 4, 5, 6, 7, tzinfo=UTC)
CATALOG = """
version: 1
defaults: {executor: inline, overlap: allow}
alerts: {repeat: 1h, ui_url: "https://runlane.example"}
jobs:
  nightly: {command: [x], alert: critical}
  hourly: {command: [x], alert: warning}
  quiet: {command: [x], alert: none}
"""
FAILURE = Outcome(RunStatus.FAILURE, "exit", exit_code=1)
SUCCESS = Outcome(RunStatus.SUCCESS, "exit", exit_code=0)


class World:
    """Stores on one database, all on one clock; engines ("launchers") on them."""

    def __init__(self, url: str, catalog: Catalog) -> None:
        self.url = url
        self.catalog = catalog
        self.clock = FixedClock(T0)
        self.stores: list[Store] = []
        self.recorder = RecordingNotifier(name="rec")

    async def store(self) -> Store:
        store = store_from_url(self.url, clock=self.clock)
        await store.open()
        await store.upgrade()
        self.stores.append(store)
        return store

    async def engine(self, owner: str = "L1", **kw: object) -> AlertEngine:
        target = Target("rec", "recording", ("info", "warning", "critical"), self.recorder)
        return AlertEngine(
            await self.store(), self.catalog, [target], owner=owner, stats=AlertStats(), **kw
        )

    async def finish(self, job: str, outcome: Outcome) -> str:
        store = self.stores[0]
        run_id = str(uuid.uuid4())
        await store.accept(
            NewRun(run_id, job, Trigger.MANUAL, run_id, executor="inline", overlap="allow")
        )
        (claimed,) = await store.claim(
            "runner", limit=1, lease_ttl=30, executors=["inline"], executor_caps={}
        )
        await store.finish(claimed.lease, outcome)
        self.clock.advance(0.001)
        return run_id

    async def skipped(self, job: str, reason: str) -> None:
        run_id = str(uuid.uuid4())
        await self.stores[0].accept(
            NewRun(
                run_id,
                job,
                Trigger.SCHEDULE,
                run_id,
                executor="inline",
                overlap="allow",
                status=RunStatus.SKIPPED,
                end_reason=reason,
            )
        )


@pytest.fixture
async def world(database_url: str) -> AsyncIterator[World]:
    w = World(database_url, parse_catalog_text(CATALOG))
    await w.store()
    yield w
    for store in w.stores:
        await store.close()


async def cycle(*engines: AlertEngine) -> None:
    """Each launcher evaluates then delivers once."""
    for engine in engines:
        await engine.evaluate()
    for engine in engines:
        await engine.deliver()


async def test_a_failure_notifies_once_a_storm_counts_and_a_success_resolves(world: World) -> None:
    engine = await world.engine()
    first = await world.finish("nightly", FAILURE)
    await cycle(engine)
    assert world.recorder.fingerprints() == [("run_failed:nightly", "firing")]
    sent = world.recorder.sent[0]
    assert sent.level == "critical"
    assert sent.run_id == first
    assert sent.link == f"https://runlane.example/runs/{first}"
    for _ in range(1000):
        await world.finish("nightly", FAILURE)
    await cycle(engine)
    assert len(world.recorder.sent) == 1  # the storm is one message
    (incident,) = await world.stores[0].open_incidents()
    assert incident.count == 1001
    await world.finish("nightly", SUCCESS)
    await cycle(engine)
    await cycle(engine)
    assert world.recorder.fingerprints() == [
        ("run_failed:nightly", "firing"),
        ("run_failed:nightly", "resolved"),
    ]
    assert await world.stores[0].open_incidents() == []
    assert engine.stats.notifications_sent() == {"rec": 2}


async def test_a_failure_behind_more_successes_than_an_evaluation_reads_still_alerts(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy launcher finishes more runs within the late-commit grace than one evaluation may
    read (PAGE x MAX_PAGES; shrunk here to 4 x 2). Successes are not read at all, so they can
    neither hide a failure behind them nor hold the cursor still."""
    monkeypatch.setattr(engine_module, "PAGE", 4)
    monkeypatch.setattr(engine_module, "MAX_PAGES", 2)
    engine = await world.engine()
    await world.finish("nightly", FAILURE)
    await cycle(engine)
    for _ in range(12):
        await world.finish("nightly", SUCCESS)
    await cycle(engine)
    assert world.recorder.fingerprints() == [
        ("run_failed:nightly", "firing"),
        ("run_failed:nightly", "resolved"),
    ]
    for _ in range(12):
        await world.finish("nightly", SUCCESS)
    failed = await world.finish("nightly", FAILURE)
    report = await engine.evaluate()
    await engine.deliver()
    assert [i.run_id for i in report.opened] == [failed]
    # The two failures within the grace and the job's last success: none of the 24 others.
    assert report.runs_read == 3
    assert world.recorder.fingerprints()[-1] == ("run_failed:nightly", "firing")


async def test_a_storm_longer_than_an_evaluation_reads_is_counted_to_its_end(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine_module, "PAGE", 4)
    monkeypatch.setattr(engine_module, "MAX_PAGES", 2)
    engine = await world.engine()
    for _ in range(21):
        await world.finish("nightly", FAILURE)
    counts = []
    for _ in range(3):
        await engine.evaluate()
        (incident,) = await world.stores[0].open_incidents()
        counts.append(incident.count)
    assert counts == [8, 16, 21]  # 8 a evaluation, each going on where the last one stopped
    await engine.evaluate()
    (incident,) = await world.stores[0].open_incidents()
    assert incident.count == 21  # read again from the cursor less the grace: nothing twice


async def test_a_failure_saved_long_after_it_ended_still_alerts(world: World) -> None:
    """A pod run that failed while no launcher watched (a restart), or an outcome saved after a
    database outage or from the outcome journal, is saved with the time the run ended: minutes
    before the cursor less its grace. The launcher that saved it tells the rule when it ended
    (as its finisher does), and the rule reads back to it."""
    engine = await world.engine()
    store = world.stores[0]
    run_id = str(uuid.uuid4())
    await store.accept(
        NewRun(run_id, "nightly", Trigger.MANUAL, run_id, executor="inline", overlap="allow")
    )
    (claimed,) = await store.claim(
        "runner", limit=1, lease_ttl=3600, executors=["inline"], executor_caps={}
    )
    await cycle(engine)
    world.clock.advance(600)
    await cycle(engine)  # the cursor is at T0 + 600 s
    ended = time.monotonic() - 300  # the run ended 5 minutes before its outcome is saved
    await store.finish(claimed.lease, FAILURE, ended_monotonic=ended)
    run = await store.get_run(run_id)
    assert run.finished_at is not None
    assert (await store.now() - run.finished_at).total_seconds() >= 299
    engine.nudge(ended)
    report = await engine.evaluate()
    await engine.deliver()
    assert [i.run_id for i in report.opened] == [run_id]
    assert world.recorder.fingerprints() == [("run_failed:nightly", "firing")]
    await cycle(engine)  # read once: counted once
    (incident,) = await store.open_incidents()
    assert incident.count == 1


async def test_two_launchers_and_a_restart_send_each_message_once(world: World) -> None:
    a, b = await world.engine("A"), await world.engine("B")
    await world.finish("nightly", FAILURE)
    await cycle(a, b)
    await cycle(b, a)
    restarted = await world.engine("A2")  # A stopped; a new launcher process took its place
    await cycle(restarted, b)
    assert world.recorder.fingerprints() == [("run_failed:nightly", "firing")]
    await world.finish("nightly", SUCCESS)
    await cycle(b, restarted)
    await cycle(restarted, b)
    assert world.recorder.fingerprints() == [
        ("run_failed:nightly", "firing"),
        ("run_failed:nightly", "resolved"),
    ]


async def test_paused_slots_alert_nothing_and_other_skips_do(world: World) -> None:
    engine = await world.engine()
    for _ in range(3):
        await world.skipped("nightly", "paused")
    await world.finish("quiet", FAILURE)  # alert: none
    await cycle(engine)
    assert world.recorder.sent == []
    await world.skipped("nightly", "missed")
    await cycle(engine)
    assert world.recorder.fingerprints() == [("run_failed:nightly", "firing")]
    assert world.recorder.sent[0].title == "nightly was skipped"


async def test_temporary_failures_are_retried_after_their_backoff(world: World) -> None:
    engine = await world.engine()
    world.recorder.fail_next(
        NotifyTemporaryError("rec: HTTP 429", retry_after=30), NotifyTemporaryError("rec: HTTP 500")
    )
    await world.finish("nightly", FAILURE)
    await cycle(engine)
    assert world.recorder.sent == []
    await engine.deliver()  # paused by the 429
    assert world.recorder.sent == []
    assert len(world.recorder.withins) == 1
    world.clock.advance(30)
    await engine.deliver()  # the 500
    world.clock.advance(300)
    await engine.deliver()
    assert world.recorder.fingerprints() == [("run_failed:nightly", "firing")]
    assert engine.stats.notifications_failed() == {"rec": 2}
    (health,) = await world.stores[0].alert_targets()
    assert health.failures == 0
    assert health.last_error == "rec: HTTP 500"


async def test_a_429_pauses_the_target_for_every_launcher(world: World) -> None:
    """Launcher A's send is answered 429 (Retry-After 30 s): launcher B on the same database,
    and a launcher started after it, send that target nothing (another incident included)
    until the 30 s have passed."""
    a, b = await world.engine("A"), await world.engine("B")
    world.recorder.fail_next(NotifyTemporaryError("rec: HTTP 429", retry_after=30))
    await world.finish("nightly", FAILURE)
    await cycle(a)
    assert len(world.recorder.withins) == 1
    await world.finish("hourly", FAILURE)  # another incident, owed to the same target
    await b.evaluate()
    assert 29 <= await b.deliver() <= 30  # the pause left
    restarted = await world.engine("A2")
    await restarted.deliver()
    assert len(world.recorder.withins) == 1  # neither tried to send
    (health,) = await world.stores[0].alert_targets()
    assert health.paused_until is not None
    world.clock.advance(29)
    await b.deliver()
    assert world.recorder.sent == []
    world.clock.advance(1.5)
    await b.deliver()
    assert sorted(world.recorder.fingerprints()) == [
        ("run_failed:hourly", "firing"),
        ("run_failed:nightly", "firing"),
    ]


async def test_an_incident_that_resolves_during_a_long_outage_of_the_target_is_still_sent(
    world: World,
) -> None:
    """The webhook is down for 90 minutes; meanwhile a job fails and succeeds again. Once the
    webhook answers, it gets the firing, then the resolve: the person hears of the failure."""
    engine = await world.engine()
    world.recorder.fail_next(*[NotifyTemporaryError("rec: HTTP 503")] * 100)
    await world.finish("nightly", FAILURE)
    await cycle(engine)
    world.clock.advance(600)
    await world.finish("nightly", SUCCESS)
    await cycle(engine)  # resolved; its firing still owed
    for _ in range(18):
        world.clock.advance(300)
        await engine.deliver()
    assert world.recorder.sent == []
    world.recorder.failures.clear()  # the webhook is back
    world.clock.advance(300)
    await engine.deliver()
    assert world.recorder.fingerprints() == [
        ("run_failed:nightly", "firing"),
        ("run_failed:nightly", "resolved"),
    ]
    world.clock.advance(300)
    await engine.deliver()
    assert len(world.recorder.sent) == 2
    # A healthy target is not sent what resolved more than an hour ago (a new target, say).
    late = RecordingNotifier(name="late")
    target = Target("late", "recording", ("critical",), late)
    newcomer = AlertEngine(world.stores[0], world.catalog, [target], owner="L2", stats=AlertStats())
    await newcomer.deliver()
    assert late.sent == []


async def test_a_permanent_refusal_is_not_retried(world: World) -> None:
    engine = await world.engine()
    world.recorder.fail_next(NotifyPermanentError("rec: HTTP 401"))
    await world.finish("nightly", FAILURE)
    await cycle(engine)
    world.clock.advance(3600)
    await engine.deliver()
    assert world.recorder.sent == []
    assert len(world.recorder.withins) == 1


async def test_a_long_open_incident_is_repeated(world: World) -> None:
    engine = await world.engine()
    await world.finish("nightly", FAILURE)
    await cycle(engine)
    world.clock.advance(1800)
    await cycle(engine)
    assert len(world.recorder.sent) == 1
    world.clock.advance(1801)
    await cycle(engine)
    assert world.recorder.fingerprints() == [("run_failed:nightly", "firing")] * 2
    assert world.recorder.sent[1].text.startswith("still open since")


async def test_a_stale_launcher_notifies_and_resolves_when_it_beats(world: World) -> None:
    engine = await world.engine("watcher")
    store = world.stores[0]
    other = Heartbeat("other", "host-b", 42, "0", started_at=T0, heartbeat_interval=15.0)
    await store.beat(other)
    world.clock.advance(299)
    await cycle(engine)
    assert world.recorder.sent == []
    world.clock.advance(2)  # past heartbeat_stale (5m)
    await cycle(engine)
    await cycle(engine)
    assert world.recorder.fingerprints() == [("launcher_stale:other", "firing")]
    await store.beat(other)
    await cycle(engine)
    await cycle(engine)
    assert world.recorder.fingerprints()[-1] == ("launcher_stale:other", "resolved")
    assert len(world.recorder.sent) == 2


async def test_a_chain_past_its_max_duration_notifies_until_it_ends(world: World) -> None:
    engine = await world.engine()
    store = world.stores[0]
    chain_run, _ = await store.create_chain_run(
        NewChainRun(
            str(uuid.uuid4()), "weekly", str(uuid.uuid4()), "manual", max_duration_seconds=60
        )
    )
    await cycle(engine)
    assert world.recorder.sent == []
    world.clock.advance(61)
    await cycle(engine)
    assert world.recorder.fingerprints() == [(f"chain_overdue:{chain_run.id}", "firing")]
    await store.finish_chain_run(chain_run.id, "failure", "deadline")
    await cycle(engine)
    await cycle(engine)
    assert world.recorder.fingerprints()[-1] == (f"chain_overdue:{chain_run.id}", "resolved")


async def test_a_chain_that_overran_and_ended_between_evaluations_notifies_once(
    world: World,
) -> None:
    """At max_duration a chain with no running step skips the rest and ends within a second:
    no evaluation sees it running late. Its `overrun_at` still opens the incident (then its
    resolve), once, for every launcher and restart."""
    engine = await world.engine()
    store = world.stores[0]
    chain_run, _ = await store.create_chain_run(
        NewChainRun(
            str(uuid.uuid4()), "weekly", str(uuid.uuid4()), "manual", max_duration_seconds=60
        )
    )
    await cycle(engine)
    world.clock.advance(61)
    await store.mark_chain_overrun(chain_run.id)
    await store.finish_chain_run(chain_run.id, "failure", "chain_timeout")
    world.clock.advance(1)
    await cycle(engine)
    fingerprint = f"chain_overdue:{chain_run.id}"
    assert world.recorder.fingerprints() == [(fingerprint, "firing")]
    assert world.recorder.sent[0].level == "warning"
    other = await world.engine("B")
    for _ in range(3):
        await cycle(engine, other)
        world.clock.advance(10)
    await cycle(await world.engine("A2"))  # a launcher started later: its first look back
    assert world.recorder.fingerprints() == [(fingerprint, "firing"), (fingerprint, "resolved")]
    # A chain run that ended within its max_duration is no incident.
    on_time, _ = await store.create_chain_run(
        NewChainRun(
            str(uuid.uuid4()), "weekly", str(uuid.uuid4()), "manual", max_duration_seconds=60
        )
    )
    await store.finish_chain_run(on_time.id, "success")
    await cycle(engine)
    assert len(world.recorder.sent) == 2


async def test_a_dead_letter_read_that_hangs_does_not_hold_up_the_evaluation(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker hook never answers (a broker that accepts and stays silent): each evaluation
    waits for it at most DLQ_TIMEOUT (shrunk here), the other rules are evaluated, and the read
    still under way is waited on again rather than started twice."""
    monkeypatch.setattr(engine_module, "DLQ_TIMEOUT", 0.05)
    calls = 0
    answer = asyncio.Event()

    async def dlq() -> int | None:
        nonlocal calls
        calls += 1
        await answer.wait()
        return 2

    engine = await world.engine(dlq_depth=dlq)
    await world.finish("nightly", FAILURE)
    async with asyncio.timeout(2):
        report = await engine.evaluate()
    assert [i.fingerprint for i in report.opened] == ["run_failed:nightly"]
    async with asyncio.timeout(2):
        await engine.evaluate()
    assert calls == 1
    answer.set()
    report = await engine.evaluate()
    assert [i.fingerprint for i in report.opened] == ["dlq_depth:job_runs.dlq"]
    await engine.evaluate()
    assert calls == 2


async def test_the_dead_letter_hook_opens_and_resolves_and_none_is_inert(world: World) -> None:
    depth: list[int | None] = [None]

    async def dlq() -> int | None:
        return depth[0]

    engine = await world.engine(dlq_depth=dlq)
    await cycle(engine)
    assert world.recorder.sent == []
    depth[0] = 3
    await cycle(engine)
    depth[0] = 0
    await cycle(engine)
    await cycle(engine)
    assert world.recorder.fingerprints() == [
        ("dlq_depth:job_runs.dlq", "firing"),
        ("dlq_depth:job_runs.dlq", "resolved"),
    ]
