"""The pod executor's RBAC check is single-flight per namespace: however many starts find no
fresh answer at once, one SelfSubjectAccessReview set reaches the API server (counted by the
local API server, runlane.testing.kube), and every start gets its answer or its error."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runlane.adapters.kubernetes.executor import PodExecutor
from runlane.adapters.kubernetes.rbac import PERMISSIONS
from runlane.errors import PermanentExecutorError, TemporaryExecutorError
from runlane.testing.kube import KubeFake, run_server
from tests.integration.test_pod_executor import NS, make_executor, spec

REVIEW_SET = len(PERMISSIONS)


def reviews(kube: KubeFake) -> int:
    return sum(1 for r in kube.state.requests if r.path.endswith("/selfsubjectaccessreviews"))


def job_creates(kube: KubeFake) -> int:
    return sum(1 for r in kube.state.requests if r.method == "POST" and r.path.endswith("/jobs"))


async def started(ex: PodExecutor, count: int, **kw: Any) -> list[Any]:
    async with asyncio.timeout(60):
        return await asyncio.gather(
            *(ex.start(spec("fake/hang", **kw)) for _ in range(count)), return_exceptions=True
        )


async def test_fifty_concurrent_starts_send_one_review_set() -> None:
    with run_server() as kube:
        ex = make_executor(kube, qps=0)
        try:
            results = await started(ex, 50)
            assert [r for r in results if isinstance(r, BaseException)] == []
            assert reviews(kube) == REVIEW_SET  # not 50 x REVIEW_SET
            assert job_creates(kube) == 50
            assert ex.rbac_reviews == 1
            # Within the cache period, more starts ask nothing.
            assert [r for r in await started(ex, 10) if isinstance(r, BaseException)] == []
            assert reviews(kube) == REVIEW_SET
        finally:
            await ex.aclose()


async def test_an_expired_answer_is_asked_again_once_for_a_burst() -> None:
    with run_server() as kube:
        ex = make_executor(kube, qps=0, rbac_cache_seconds=0.0)  # stale as soon as it lands
        try:
            await started(ex, 20)
            assert reviews(kube) == REVIEW_SET
            await started(ex, 20)
            assert reviews(kube) == 2 * REVIEW_SET
            assert ex.rbac_reviews == 2
        finally:
            await ex.aclose()


async def test_a_refusal_reaches_every_waiter_from_one_review_set() -> None:
    allow = [
        "create,get,list,watch jobs.batch",  # no delete: pod runs are refused
        "get,list,watch pods",
        "create selfsubjectaccessreviews.authorization.k8s.io",
    ]
    with run_server(allow=allow) as kube:
        ex = make_executor(kube, qps=0)
        try:
            results = await started(ex, 30)
            assert all(isinstance(r, PermanentExecutorError) for r in results), results
            assert {r.code for r in results if isinstance(r, PermanentExecutorError)} == {
                "forbidden"
            }
            assert all("delete jobs.batch" in str(r) for r in results)
            assert reviews(kube) == REVIEW_SET
            assert job_creates(kube) == 0
        finally:
            await ex.aclose()


async def test_a_failed_review_set_fails_its_waiters_alike_and_is_not_cached() -> None:
    with run_server() as kube:
        ex = make_executor(kube, qps=0, throttle_retries=0)
        kube.state.fail_next(REVIEW_SET, 503, path="selfsubjectaccessreviews")
        try:
            results = await started(ex, 30)
            assert all(isinstance(r, TemporaryExecutorError) for r in results), results
            assert len({id(r) for r in results}) == 1  # the same error, from the same review
            assert reviews(kube) == REVIEW_SET
            assert job_creates(kube) == 0
            # The error was not cached: the next burst asks again (once) and starts.
            assert [r for r in await started(ex, 30) if isinstance(r, BaseException)] == []
            assert reviews(kube) == 2 * REVIEW_SET
            assert job_creates(kube) == 30
        finally:
            await ex.aclose()


async def test_a_cancelled_start_does_not_cancel_the_review_the_others_await() -> None:
    with run_server() as kube:
        ex = make_executor(kube, qps=0)
        try:
            first = asyncio.create_task(ex.start(spec("fake/hang")))
            await asyncio.sleep(0)  # one step: `first` runs to its first await, the review
            review = ex._rbac_inflight[NS]
            others = [asyncio.create_task(ex.start(spec("fake/hang"))) for _ in range(9)]
            assert not review.done()
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            async with asyncio.timeout(30):
                executions = await asyncio.gather(*others)
            assert len(executions) == 9
            assert review.done()
            assert not review.cancelled()
            assert reviews(kube) == REVIEW_SET
        finally:
            await ex.aclose()
