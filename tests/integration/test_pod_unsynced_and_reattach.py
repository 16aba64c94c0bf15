"""Pod-run defects from an audit of the pod executor: a run whose namespace's Jobs could never be
listed hung (neither the deadline's backstop nor a cancel ended it), a taken-over pod counted its
start timeout from the takeover rather than from its creation, and an evicted pod deleted before
the Job's failure was seen made the run `job_failed`."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from runlane.adapters.kubernetes.manifests import build_job_plan
from runlane.adapters.kubernetes.names import job_name
from runlane.core.runs import RunStatus
from runlane.testing.kube import KubeFake, Timing, run_server
from tests.integration.test_pod_executor import (
    NS,
    fake_reaches,
    finish,
    make_executor,
    outcome_of,
    spec,
    stats_reach,
    until,
)

JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
PODS = f"/api/v1/namespaces/{NS}/pods"
# Every permission the launcher asks for, but listing and watching Jobs.
NO_JOB_LIST = [
    "create,get,delete jobs.batch",
    "get,list,watch pods",
    "get pods/log",
    "create,delete configmaps",
    "list events",
]


@pytest.fixture
def kube() -> Iterator[KubeFake]:
    with run_server() as fake:
        yield fake


# ---------------------------------------------------------------------- a watch never synced


async def test_a_jobs_list_refused_after_the_rbac_answer_still_ends_at_the_backstop(
    kube: KubeFake,
) -> None:
    # The RBAC answer (cached for 10 minutes) said yes; then listing Jobs is refused. The shared
    # watch never lists: the run must still end at the deadline's backstop, saying why.
    ex = make_executor(kube, deadline_slack=0.0)
    try:
        await ex.ensure_allowed(NS)
        kube.state.set_allow(NO_JOB_LIST)
        s = spec("fake/hang", deadline=0.5)  # backstop: 0.5 s + 1 s kill grace
        _, outcome = await outcome_of(ex, await ex.start(s), within=5)
    finally:
        await ex.aclose()
    assert outcome.status == RunStatus.TIMEOUT, outcome
    assert outcome.error_code == "deadline", outcome
    assert outcome.note is not None
    assert "could not list" in outcome.note, outcome.note
    assert "403" in outcome.note, outcome.note


async def test_a_cancel_ends_a_run_whose_jobs_were_never_listed(kube: KubeFake) -> None:
    ex = make_executor(kube, cancel_wait=0.2)
    try:
        kube.state.fail_next(1_000_000, 503, method="GET", path=JOBS)  # the API away for Jobs
        s = spec("fake/hang")
        execution = await ex.start(s)
        events = ex.events(execution)
        await ex.cancel(execution, grace=0)
        outcome = await finish(events, within=5)
        assert outcome.status == RunStatus.CANCELLED, outcome
        assert kube.state.get("jobs", job_name("demo", s.run_id, 1)) is None
    finally:
        await ex.aclose()


async def test_a_short_blip_of_the_jobs_list_ends_no_run_early(kube: KubeFake) -> None:
    ex = make_executor(kube, deadline_slack=0.0, start_timeout=0.2)
    try:
        kube.state.fail_next(2, 503, method="GET", path=JOBS)
        _, outcome = await outcome_of(ex, await ex.start(spec()), within=5)
    finally:
        await ex.aclose()
    assert outcome.status == RunStatus.SUCCESS, outcome


async def test_a_job_that_ended_while_its_watch_was_broken_ends_as_it_did(kube: KubeFake) -> None:
    # The namespace's Jobs and pods were listed once; then both streams drop and every list
    # fails (the API's list verb overloaded, a proxy refusing watches). Meanwhile the Job
    # succeeds. The watch keeps its last view (running); the deadline's backstop must read the
    # Job itself rather than record a `timeout` for a run that succeeded.
    ex = make_executor(kube, deadline_slack=0.0)
    try:
        execution = await ex.start(spec("fake/sleep:1", deadline=2.0))
        events = ex.events(execution)
        await until(events, "running")
        kube.state.fail_next(1_000_000, 503, method="GET", path=JOBS, exact=True)
        kube.state.fail_next(1_000_000, 503, method="GET", path=PODS, exact=True)
        kube.state.end_watches(abort=True)
        kube.state.advance(1)  # the pod's sleep ends: the Job completes in the cluster
        outcome = await finish(events, within=10)
    finally:
        await ex.aclose()
    assert outcome.status == RunStatus.SUCCESS, outcome
    assert outcome.note is not None
    assert "read directly" in outcome.note, outcome.note


# ---------------------------------------------------------------------- start timeout on takeover


async def test_a_taken_over_pending_pod_counts_its_start_timeout_from_its_creation(
    kube: KubeFake,
) -> None:
    # A launcher made the Job 40 s ago and died (or is restarted every few minutes): the pod has
    # waited for its image since. The launcher taking the run over must not start from zero.
    s = spec("fake/image-pull-backoff")
    kube.state.create("jobs", build_job_plan(s, namespace=NS, launcher_env={}).job)
    ex = make_executor(kube, start_timeout=30.0)
    ex.wall_clock = lambda: time.time() + 40.0
    try:
        execution = await ex.reattach(s)
        assert execution is not None
        _, outcome = await outcome_of(ex, execution, within=5)
    finally:
        await ex.aclose()
    assert outcome.end_reason == "start_timeout", outcome
    assert kube.state.get("jobs", job_name("demo", s.run_id, 1)) is None


async def test_a_cluster_clock_ahead_never_makes_the_start_timeout_wait_longer(
    kube: KubeFake,
) -> None:
    # The cluster's clock is an hour ahead: its creationTimestamp is in the launcher's future.
    # The pod has waited at least since the launcher took the run over.
    s = spec("fake/image-pull-backoff")
    kube.state.create("jobs", build_job_plan(s, namespace=NS, launcher_env={}).job)
    ex = make_executor(kube, start_timeout=0.3)
    ex.wall_clock = lambda: time.time() - 3600.0
    try:
        execution = await ex.reattach(s)
        assert execution is not None
        _, outcome = await outcome_of(ex, execution, within=5)
    finally:
        await ex.aclose()
    assert outcome.end_reason == "start_timeout", outcome


# ---------------------------------------------------------------------- eviction


async def test_an_evicted_pod_deleted_before_the_jobs_failure_is_seen_is_evicted() -> None:
    # A node drain: the pod is evicted and deleted; the Jobs stream is behind (reconnecting), so
    # the pod's DELETED comes before the Job's Failed. The pod's last state must still say why.
    with run_server(timing=Timing(run=100.0)) as kube:
        ex = make_executor(kube, settle_seconds=0.05)
        try:
            s = spec("fake/evicted")
            name = job_name("demo", s.run_id, 1)
            execution = await ex.start(s)
            events = ex.events(execution)
            await until(events, "running")
            watch = ex.watches[NS]
            watch.max_backoff = 0.1
            errors = watch.stats.errors
            kube.state.fail_next(1_000_000, 503, method="GET", path=JOBS)
            kube.state.end_watches()
            await stats_reach(watch, lambda st: st.errors > errors)  # the Jobs stream is down
            kube.state.advance(100.0)  # the pod is evicted, the Job fails
            await fake_reaches(kube, lambda st: st.job_condition(name) == "Failed")
            (pod,) = kube.state.pods_of(name)
            kube.state.delete("pods", pod["metadata"]["name"])
            await stats_reach(watch, lambda _: not watch.pods_of(name))
            kube.state.clear_faults()  # the Jobs stream comes back: the Job has failed
            outcome = await finish(events, within=5)
        finally:
            await ex.aclose()
    assert outcome.status == RunStatus.FAILURE, outcome
    assert outcome.error_code == "evicted", outcome
