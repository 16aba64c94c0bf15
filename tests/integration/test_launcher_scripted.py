"""The launcher against the scripted executor (runlane.testing.fakes) on a real SQLite store: what
it does with start errors, cancel requests and outcomes, without spawning anything."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from runlane.catalog import Catalog, load_catalog
from runlane.core.runs import RunStatus, Trigger
from runlane.errors import PermanentExecutorError, TemporaryExecutorError
from runlane.ports import Delivery, Execution, ExecutionSpec, OutboxMessage, RunFilter, Store
from runlane.service.accept import RunRequest, accept_run
from runlane.service.config import Settings
from runlane.service.launcher import Launcher
from runlane.service.wiring import store_from_url
from runlane.testing.fakes import Script, ScriptedExecutor, exited
from tests.support.waiting import eventually

from .conftest import Events, Running


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """SQLite only: what is under test is the launcher, not the store."""
    return f"sqlite:///{tmp_path / 'runlane.db'}"


@pytest.fixture
def executor() -> ScriptedExecutor:
    return ScriptedExecutor()


@pytest.fixture
async def launcher(
    store: Store, catalog: Catalog, settings: Settings, executor: ScriptedExecutor
) -> AsyncIterator[Running]:
    """A launcher whose every job (the catalog's are inline) runs on the scripted executor."""
    running = start_launcher(store, catalog, settings, executor)
    yield running
    if not running.task.done():
        await running.stop()


def start_launcher(
    store: Store, catalog: Catalog, settings: Settings, executor: ScriptedExecutor
) -> Running:
    events = Events()
    launcher = Launcher(
        store=store,
        catalog=catalog,
        executors={"inline": executor},
        settings=settings,
        hook=events,
        retry_base_seconds=0.05,
    )
    return Running(launcher, asyncio.create_task(launcher.run()), events)


async def accept(store: Store, catalog: Catalog, job: str) -> str:
    result = await accept_run(store, catalog, RunRequest(job=job, trigger=Trigger.CLI))
    return result.run.id


async def test_a_temporary_start_error_releases_the_run_with_a_retry_time(
    store: Store, catalog: Catalog, executor: ScriptedExecutor, launcher: Running
) -> None:
    busy = TemporaryExecutorError("the cluster is busy", error_code="busy", retry_after=60)
    executor.script(Script(start_errors=(busy,)), job="hello")
    run_id = await accept(store, catalog, "hello")
    await launcher.events.wait("finished", run_id)  # its supervision ended: released
    run = await store.get_run(run_id)
    assert (run.status, run.error_code, run.lease_owner) == (RunStatus.QUEUED, "busy", None)
    assert run.note == "the cluster is busy"
    now = await store.now()
    assert run.not_before is not None
    assert now + timedelta(seconds=50) < run.not_before <= now + timedelta(seconds=60)
    assert [c.run_id for c in executor.calls_to("start")] == [run_id]
    assert executor.started(run_id) == 0


async def test_a_released_run_is_started_again_once_its_retry_time_comes(
    store: Store, catalog: Catalog, executor: ScriptedExecutor, launcher: Running
) -> None:
    busy = TemporaryExecutorError("the cluster is busy", error_code="busy", retry_after=0.05)
    executor.script(Script(start_errors=(busy,)), job="hello")
    run_id = await accept(store, catalog, "hello")
    await eventually(lambda: executor.started(run_id) == 1, "the second start")

    async def ended() -> bool:
        return (await store.get_run(run_id)).status not in (RunStatus.QUEUED, RunStatus.RUNNING)

    await eventually(ended, "the run's outcome recorded")
    run = await store.get_run(run_id)
    assert (run.status, run.exit_code, run.attempt) == (RunStatus.SUCCESS, 0, 1)
    assert len(executor.calls_to("start")) == 2


async def test_a_permanent_start_error_ends_the_run_with_the_reason(
    store: Store, catalog: Catalog, executor: ScriptedExecutor, launcher: Running
) -> None:
    refused = PermanentExecutorError("no such image: demo:9", error_code="bad_image")
    executor.script(Script(start_errors=(refused,)), job="flaky")  # max_attempts 3
    run_id = await accept(store, catalog, "flaky")
    await launcher.events.wait("finished", run_id)
    run = await store.get_run(run_id)
    assert (run.status, run.end_reason, run.error_code) == (
        RunStatus.FAILURE,
        "start_failed",
        "bad_image",
    )
    assert run.note == "no such image: demo:9"
    assert executor.started(run_id) == 0
    assert [r.id for r in await store.list_runs(RunFilter(job="flaky"))] == [run_id]  # not retried


async def test_a_cancel_request_reaches_the_executor(
    store: Store, catalog: Catalog, executor: ScriptedExecutor, launcher: Running
) -> None:
    executor.script(Script(outcome=None, output="working\n"), job="long")  # until cancelled
    run_id = await accept(store, catalog, "long")
    await launcher.events.wait("started", run_id)
    await store.request_cancel(run_id, by="test")
    await launcher.events.wait("finished", run_id)
    [cancel] = executor.calls_to("cancel")
    assert (cancel.run_id, cancel.attempt, cancel.grace) == (run_id, 1, 1.0)  # kill_grace: 1s
    run = await store.get_run(run_id)
    assert (run.status, run.end_reason) == (RunStatus.CANCELLED, "cancelled")
    assert run.external_id == f"scripted/{run_id}/1"  # a remote execution's id is recorded


async def test_the_outcome_the_executor_reports_is_recorded(
    store: Store, catalog: Catalog, executor: ScriptedExecutor, launcher: Running
) -> None:
    executor.script(Script(outcome=None, states=("pending", "running")), job="hello")
    run_id = await accept(store, catalog, "hello")
    await launcher.events.wait("started", run_id)
    assert executor.spec_of(run_id).env["RUN_ID"] == run_id
    executor.release(run_id, exited(3, "boom\n"))
    await launcher.events.wait("finished", run_id)
    run = await store.get_run(run_id)
    assert (run.status, run.exit_code, run.log_tail) == (RunStatus.FAILURE, 3, "boom\n")


class GatedBus:
    """A `Bus` whose wake-ups the test sends (nothing else about it is used by the launcher)."""

    name = "gated"

    def __init__(self) -> None:
        self.waiting = asyncio.Event()  # the launcher is waiting for a wake-up
        self._wake = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    async def wait_for_wakeup(self, max_wait: float) -> bool:
        self.waiting.set()
        try:
            async with asyncio.timeout(max_wait):
                await self._wake.wait()
        except TimeoutError:
            return False
        self._wake.clear()
        return True

    async def publish(self, messages: Sequence[OutboxMessage], *, within: float) -> list[str]:
        return [m.message_id for m in messages]

    async def receive(self, topic: str, *, limit: int, max_wait: float) -> list[Delivery]:
        return []

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        pass

    async def reject(self, deliveries: Sequence[Delivery], *, requeue: bool) -> None:
        pass

    async def close(self) -> None:
        pass


async def test_the_launcher_claims_when_its_bus_wakes_it(
    store: Store, catalog: Catalog, settings: Settings, executor: ScriptedExecutor
) -> None:
    """Wake-ups come from the launcher's bus: a run accepted through another store (which
    wakes nobody in this process) is claimed at once when the bus says so, not at the next
    claim poll a minute later."""
    bus = GatedBus()
    events = Events()
    launcher = Launcher(
        store=store,
        catalog=catalog,
        executors={"inline": executor},
        settings=replace(settings, claim_interval=60.0),
        hook=events,
        bus=bus,
    )
    running = Running(launcher, asyncio.create_task(launcher.run()), events)
    try:
        await asyncio.wait_for(bus.waiting.wait(), 10)
        other = store_from_url(settings.database_url)
        await other.open()
        try:
            run_id = await accept(other, catalog, "hello")
        finally:
            await other.close()
        bus.wake()
        await asyncio.wait_for(events.wait("claimed", run_id), 10)  # well before the 60 s poll
    finally:
        await running.stop()


class LeaseTakenAtStart(ScriptedExecutor):
    """Its start returns as another launcher takes the run over (the lease moves on): the
    launcher's fenced save of the Job name then finds its lease gone."""

    def __init__(self, database: Path) -> None:
        super().__init__()
        self.database = database
        self.taken = True  # each start's lease moves on while this holds

    async def start(self, spec: ExecutionSpec) -> Execution:
        execution = await super().start(spec)
        if self.taken:
            with contextlib.closing(sqlite3.connect(self.database)) as db, db:
                db.execute(
                    "UPDATE run_log SET lease_generation = lease_generation + 1 WHERE id = ?",
                    (spec.run_id,),
                )
        return execution


async def test_a_run_it_stops_supervising_is_let_go_by_its_executor(
    store: Store, catalog: Catalog, settings: Settings, tmp_path: Path
) -> None:
    # Whatever way a supervision ends, the executor is told to stop following the execution:
    # after its events ended (a no-op there), and when they were never read, as when the lease
    # is lost while the execution's id is being saved (a pod run would otherwise keep its
    # watch subscription, a Slurm job its poll, for the launcher's life).
    executor = LeaseTakenAtStart(tmp_path / "runlane.db")
    running = start_launcher(store, catalog, settings, executor)
    events = running.events
    try:
        lost = await accept(store, catalog, "hello")
        await events.wait("lease_lost", lost)
        await events.wait("finished", lost)
        assert [c.run_id for c in executor.calls_to("stop_following")] == [lost]
        assert executor.calls_to("events") == []  # never followed: let go all the same
        executor.taken = False  # the next start keeps its lease
        done = await accept(store, catalog, "hello")
        await events.wait("finished", done)
        assert (await store.get_run(done)).status == RunStatus.SUCCESS
        assert [c.run_id for c in executor.calls_to("stop_following")] == [lost, done]
    finally:
        await running.stop()


class TakesItsOwnRunOver(ScriptedExecutor):
    """Its first start returns only once the launcher has taken the run over from itself (the
    lease expired under it, as under a loop stalled past the lease), so the first supervision
    then finds its lease gone while a second one follows the same execution."""

    def __init__(self, database: Path) -> None:
        super().__init__()
        self.database = database
        self.reattached = asyncio.Event()

    async def start(self, spec: ExecutionSpec) -> Execution:
        execution = await super().start(spec)
        if len(self.calls_to("start")) == 1:
            with contextlib.closing(sqlite3.connect(self.database)) as db, db:
                db.execute(
                    "UPDATE run_log SET lease_expires_at = '2000-01-01T00:00:00+00:00' "
                    "WHERE id = ?",
                    (spec.run_id,),
                )
            async with asyncio.timeout(10):
                await self.reattached.wait()
        return execution

    async def reattach(self, spec: ExecutionSpec) -> Execution | None:
        found = await super().reattach(spec)
        self.reattached.set()
        return found


async def test_a_run_taken_over_by_its_own_launcher_is_left_to_the_newer_supervision(
    store: Store, catalog: Catalog, settings: Settings, tmp_path: Path
) -> None:
    # The older supervision's lease is lost: it must neither let go of the execution the newer
    # one follows, nor free the newer one's slot; the newer one records the outcome.
    executor = TakesItsOwnRunOver(tmp_path / "runlane.db")
    executor.script(Script(outcome=None), job="hello")  # until released below
    running = start_launcher(store, catalog, settings, executor)
    try:
        run_id = await accept(store, catalog, "hello")
        await running.events.wait("lease_lost", run_id)
        assert executor.calls_to("stop_following") == []
        assert run_id in running.launcher._active  # the newer supervision's, still there
        executor.release(run_id)
        await eventually(lambda: executor.calls_to("stop_following"), "the newer supervision's end")
        assert (await store.get_run(run_id)).status == RunStatus.SUCCESS
        assert [c.run_id for c in executor.calls_to("stop_following")] == [run_id]
        assert [c.method for c in executor.calls_to("reattach")] == ["reattach"]
    finally:
        await running.stop()


class ClaimCounting:
    """A store that counts the launcher's claims and passes everything through."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.claims = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def claim(self, *args: object, **kwargs: object) -> object:
        self.claims += 1
        return await self.inner.claim(*args, **kwargs)  # type: ignore[arg-type]


class OrderedPrepare(ScriptedExecutor):
    """A scripted executor that notes how many claims the launcher had made when it was
    prepared (and can be told to break its `prepare` contract)."""

    store: ClaimCounting | None = None
    claims_before_prepare: int | None = None
    raises: bool = False

    def prepare(self) -> None:
        super().prepare()
        assert self.store is not None
        self.claims_before_prepare = self.store.claims
        if self.raises:
            raise RuntimeError("a prepare that breaks the port's contract")


POD_ONLY = """
version: 1
defaults: {executor: pod, overlap: allow, max_attempts: 1, deadline: 1m}
jobs:
  on-a-cluster: {command: ["true"]}
"""

SLURM_ONLY = POD_ONLY.replace("executor: pod", "executor: slurm")


@pytest.mark.parametrize(
    ("catalog_text", "configured", "prepared", "pod_fallback"),
    [
        # The conftest catalog: inline jobs and one pod job; no job runs on Slurm.
        (None, ["inline", "pod", "slurm"], ["inline", "pod"], "inline"),
        (POD_ONLY, ["inline", "pod"], ["pod"], "inline"),
        # No cluster configured: the pod job runs inline, so inline is prepared for it ...
        (POD_ONLY, ["inline"], ["inline"], "inline"),
        # ... unless pod jobs without a cluster are refused: nothing runs inline then.
        (POD_ONLY, ["inline"], [], "refuse"),
        # No Slurm configured: the Slurm job runs inline.
        (SLURM_ONLY, ["inline", "pod"], ["inline"], "inline"),
    ],
)
async def test_the_launcher_prepares_the_executors_its_jobs_run_on_before_its_first_claim(
    store: Store,
    catalog: Catalog,
    settings: Settings,
    tmp_path: Path,
    catalog_text: str | None,
    configured: list[str],
    prepared: list[str],
    pod_fallback: str,
) -> None:
    if catalog_text is not None:
        path = tmp_path / "one-job.yaml"
        path.write_text(catalog_text)
        catalog = load_catalog(path)
    settings = replace(settings, pod_fallback=pod_fallback)
    counting = ClaimCounting(store)
    executors = {name: OrderedPrepare(name=name) for name in configured}
    for executor in executors.values():
        executor.store = counting
    events = Events()
    launcher = Launcher(
        store=counting,  # type: ignore[arg-type]
        catalog=catalog,
        executors=dict(executors),
        settings=settings,
        hook=events,
    )
    running = Running(launcher, asyncio.create_task(launcher.run()), events)
    try:
        await eventually(lambda: counting.claims > 0, "the launcher's first claim")
        assert sorted(n for n, ex in executors.items() if ex.prepared) == prepared
        for name in prepared:
            assert executors[name].prepared == 1
            assert executors[name].claims_before_prepare == 0
        if pod_fallback == "refuse":
            return
        # A run of the job goes to a prepared executor.
        job = next(iter(catalog.jobs))
        request = RunRequest(job=job, trigger=Trigger.CLI)
        accepted = await accept_run(store, catalog, request, available_executors=configured)
        await events.wait("finished", accepted.run.id)
        started_on = [n for n, ex in executors.items() if ex.calls_to("start")]
        assert started_on == [accepted.run.executor]
        assert started_on[0] in prepared
    finally:
        await running.stop()


async def test_a_launcher_starts_with_no_job_and_with_an_executor_whose_prepare_raises(
    store: Store, catalog: Catalog, settings: Settings, tmp_path: Path
) -> None:
    """An empty catalog prepares nothing; an executor whose `prepare` raises (against the
    port's contract) is logged, and the launcher starts and runs its runs all the same."""
    empty = tmp_path / "empty.yaml"
    empty.write_text("version: 1\njobs: {}\n")
    counting = ClaimCounting(store)
    idle = OrderedPrepare(name="inline")
    idle.store = counting
    launcher = Launcher(
        store=counting,  # type: ignore[arg-type]
        catalog=load_catalog(empty),
        executors={"inline": idle},
        settings=settings,
        hook=Events(),
    )
    running = Running(launcher, asyncio.create_task(launcher.run()), Events())
    try:
        await eventually(lambda: counting.claims > 0, "the launcher's first claim")
        assert idle.prepared == 0
    finally:
        await running.stop()

    broken = OrderedPrepare(name="inline")
    broken.store, broken.raises = counting, True
    with capture_logs() as entries:
        running = start_launcher(counting, catalog, settings, broken)  # type: ignore[arg-type]
        try:
            run_id = await accept(store, catalog, "hello")
            await running.events.wait("finished", run_id)
        finally:
            await running.stop()
    assert broken.prepared == 1
    assert (await store.get_run(run_id)).status is RunStatus.SUCCESS
    failed = [e for e in entries if e["event"] == "launcher.prepare_failed"]
    assert [e["executor"] for e in failed] == ["inline"]
