"""The executor's shared watch after the API server lost its state (its resourceVersion went
backwards): it must list again and reconcile, never stay blind. The lost Job's run is reported,
and runs started afterwards get their outcomes (no spurious start_timeout)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator

import pytest

from runlane.adapters.kubernetes.executor import PodExecutor
from runlane.adapters.kubernetes.watch import NamespaceWatch, WatchStats
from runlane.core.runs import RunStatus
from runlane.testing.kube import KubeFake, KubeState, run_server
from tests.integration.test_pod_executor import NS, finish, make_executor, outcome_of, spec, until


@pytest.fixture
def kube() -> Iterator[KubeFake]:
    with run_server() as fake:
        yield fake


async def stats_reach(
    watch: NamespaceWatch, predicate: Callable[[WatchStats], bool], within: float = 20.0
) -> None:
    async with asyncio.timeout(within):
        await watch.wait_stats(predicate)


async def fake_reaches(
    kube: KubeFake, predicate: Callable[[KubeState], bool], within: float = 20.0
) -> None:
    await asyncio.to_thread(kube.state.wait_for, predicate, within)


async def _new_runs_end(executor: PodExecutor) -> None:
    ok = await executor.start(spec("fake/succeed"))
    bad = await executor.start(spec("fake/exit:3"))
    (_, ok_outcome), (_, bad_outcome) = await asyncio.gather(
        outcome_of(executor, ok), outcome_of(executor, bad)
    )
    assert ok_outcome.status == RunStatus.SUCCESS, ok_outcome
    assert (bad_outcome.status, bad_outcome.exit_code) == (RunStatus.FAILURE, 3), bad_outcome


async def test_state_lost_in_a_restart_relists_and_reports_the_lost_job(kube: KubeFake) -> None:
    executor = make_executor(kube, start_timeout=15.0)
    try:
        execution = await executor.start(spec("fake/hang", deadline=600))
        events = executor.events(execution)
        await until(events, "running")
        watch = executor.watches[NS]
        await fake_reaches(kube, lambda st: st.open_watches == 2)
        held = kube.state.resource_version
        lists, gone = watch.stats.lists, watch.stats.gone
        # etcd restored from nothing: every object is gone, the resourceVersion back to 1000. The
        # watch's resume from `held` (now from the server's future) is answered 504 Too large.
        kube.state.restart(lose_state=True)
        assert kube.state.resource_version < held
        await stats_reach(watch, lambda st: st.lists >= lists + 2)  # both kinds listed again
        assert watch.stats.gone > gone or watch.stats.errors > 0
        await fake_reaches(kube, lambda st: st.open_watches == 2)
        # The Job the running run watched no longer exists: reported, not left running forever.
        outcome = await finish(events)
        assert outcome.status == RunStatus.FAILURE, outcome
        assert outcome.error_code == "deleted_externally", outcome
        # Runs started after the restart get their outcomes from the watch.
        await _new_runs_end(executor)
    finally:
        await executor.aclose()


async def test_fake_server_restarted_on_the_same_port(tmp_path: object) -> None:
    # The standalone case: the fake process ends and a new one starts on the same port, with
    # a fresh store (resourceVersion 1000). Connections are refused for a while, then every
    # resume is from the future.
    first = run_server()
    kube = first.__enter__()
    port = kube.port
    executor = make_executor(kube, start_timeout=15.0)
    second = None
    try:
        for _ in range(5):  # push the versions the executor holds well past a fresh store's
            done = await executor.start(spec("fake/succeed"))
            assert (await outcome_of(executor, done))[1].status == RunStatus.SUCCESS
        execution = await executor.start(spec("fake/hang", deadline=600))
        events = executor.events(execution)
        await until(events, "running")
        watch = executor.watches[NS]
        lists = watch.stats.lists
        first.__exit__(None, None, None)
        second = run_server(port=port, kubeconfig_path=kube.kubeconfig_path)
        fresh = second.__enter__()
        await stats_reach(watch, lambda st: st.lists >= lists + 2, within=30)
        outcome = await finish(events, within=30)
        assert (outcome.status, outcome.error_code) == (RunStatus.FAILURE, "deleted_externally"), (
            outcome
        )
        await fake_reaches(fresh, lambda st: st.open_watches == 2)
        await _new_runs_end(executor)
    finally:
        await executor.aclose()
        if second is not None:
            second.__exit__(None, None, None)
        else:
            first.__exit__(None, None, None)


async def test_a_resume_that_fails_again_lists_again(kube: KubeFake) -> None:
    executor = make_executor(kube)
    try:
        execution = await executor.start(spec("fake/hang", deadline=5))
        events = executor.events(execution)
        await until(events, "running")
        watch = executor.watches[NS]
        await fake_reaches(kube, lambda st: st.open_watches == 2)
        lists, gone = watch.stats.lists, watch.stats.gone
        # The pods watch drops, and its resume from the last version fails too: list again
        # rather than keep resuming (no 410 was ever sent).
        kube.state.fail_next(1, 503, method="GET", path=f"/api/v1/namespaces/{NS}/pods")
        kube.state.end_watches(abort=True)
        await stats_reach(watch, lambda st: st.lists > lists)
        assert watch.stats.gone == gone
        await fake_reaches(kube, lambda st: st.open_watches == 2)
        kube.state.advance(10)
        assert (await finish(events)).status == RunStatus.TIMEOUT
        await _new_runs_end(executor)
    finally:
        await executor.aclose()


async def test_large_params_without_a_scheduling_delay(kube: KubeFake) -> None:
    # Not a watch case, but the same bug hunt: with the fake's default timing the pod is scheduled
    # before the params ConfigMap (created just after its Job) exists; the fake kubelet retries the
    # mount, as a real one does, instead of leaving the pod in ContainerCreating until start_timeout.
    executor = make_executor(kube, start_timeout=15.0)
    try:
        s = spec(env={"RUNLANE_PARAMS": json.dumps({"blob": "x" * 100_000})})
        execution = await executor.start(s)
        _, outcome = await outcome_of(executor, execution)
        assert outcome.status == RunStatus.SUCCESS, outcome
    finally:
        await executor.aclose()


class HeldList:
    """An API whose list answers only when released, with the page the test sets by then."""

    def __init__(self) -> None:
        self.sent = asyncio.Event()
        self.release = asyncio.Event()
        self.page: dict[str, object] = {}

    async def request(self, method: str, path: str, **kwargs: object) -> dict[str, object]:
        self.sent.set()
        await self.release.wait()
        return self.page


def job_at(name: str, version: str) -> dict[str, object]:
    return {"metadata": {"name": name, "resourceVersion": version, "uid": f"uid-{name}"}}


@pytest.mark.parametrize(
    ("seeded_at", "listed_at", "kept"),
    [
        ("5", "7", False),  # it existed at the list's version and the list has it not: deleted
        ("9", "7", True),  # created after the list's snapshot: the watch's ADDED follows
        ("7", "7", False),
        ("a5", "7", True),  # versions that are not revisions are never compared
    ],
)
async def test_a_job_seeded_while_a_list_is_in_flight_is_dropped_if_the_list_saw_it_deleted(
    seeded_at: str, listed_at: str, kept: bool
) -> None:
    """A Job created (and seeded into the cache) while the watch's list was in flight, then
    deleted before the server took the list's snapshot: the list has it not, and the watch's
    events start after the snapshot, so nothing else would ever remove it (the run's deletion
    would go unseen until the next relist, minutes later)."""
    api = HeldList()
    watch = NamespaceWatch(api, NS)  # type: ignore[arg-type]
    listing = asyncio.create_task(watch._list("jobs", "/jobs"))
    await asyncio.wait_for(api.sent.wait(), 5)
    watch.seed(job_at("seeded", seeded_at))
    api.page = {"items": [job_at("listed", "6")], "metadata": {"resourceVersion": listed_at}}
    api.release.set()
    assert await asyncio.wait_for(listing, 5) == listed_at
    assert watch.job("listed") is not None
    assert (watch.job("seeded") is not None) is kept
