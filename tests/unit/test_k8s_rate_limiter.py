"""The Kubernetes client's token bucket (adapters/kubernetes/api.py `RateLimiter`): reservations
at `qps` after the burst, no tokens lost when a sleeper wakes late, a cancelled waiter's slot
given back (a virtual clock: no real time passes); and the bound on requests in flight."""

from __future__ import annotations

import asyncio

import httpx2 as httpx
import pytest

from runlane.adapters.kubernetes.api import KubeApi, RateLimiter


class VirtualTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)


def limiter(qps: float, burst: int) -> tuple[RateLimiter, VirtualTime]:
    vt = VirtualTime()
    return RateLimiter(qps, burst, clock=vt.clock, sleep=vt.sleep), vt


async def test_the_burst_goes_at_once_then_each_caller_waits_for_its_own_slot() -> None:
    bucket, vt = limiter(qps=100, burst=3)
    for _ in range(6):
        await bucket.acquire()
    # Three from the burst, then the 4th, 5th, 6th wait 10, 20, 30 ms from now.
    assert vt.sleeps == pytest.approx([0.01, 0.02, 0.03])


async def test_a_late_wake_loses_no_tokens() -> None:
    bucket, vt = limiter(qps=100, burst=1)
    await bucket.acquire()
    vt.now = 0.5  # the loop was busy for half a second: 50 tokens accrued, capped at the burst
    await bucket.acquire()
    assert vt.sleeps == []
    await bucket.acquire()  # the bucket is empty now: the next slot is 10 ms away
    assert vt.sleeps == pytest.approx([0.01])


async def test_the_rate_holds_over_many_reservations() -> None:
    bucket, vt = limiter(qps=200, burst=400)
    for _ in range(1400):
        await bucket.acquire()
    # 400 from the burst; the last of the other 1,000 waits 1000 / 200 = 5 s.
    assert len(vt.sleeps) == 1000
    assert vt.sleeps[-1] == pytest.approx(5.0)


async def test_a_cancelled_waiter_gives_its_slot_back() -> None:
    gate = asyncio.Event()

    async def blocked(seconds: float) -> None:
        await gate.wait()

    vt = VirtualTime()
    bucket = RateLimiter(10, 1, clock=vt.clock, sleep=blocked)
    await bucket.acquire()
    waiter = asyncio.create_task(bucket.acquire())
    await asyncio.sleep(0)  # it reserved the next slot and waits for it
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    vt.now = 0.1  # one slot later: the returned one is free, so nobody waits
    bucket._sleep = vt.sleep
    await bucket.acquire()
    assert vt.sleeps == []


async def test_no_limit_when_qps_is_zero() -> None:
    bucket, vt = limiter(qps=0, burst=1)
    for _ in range(100):
        await bucket.acquire()
    assert vt.sleeps == []


async def test_requests_in_flight_are_bounded() -> None:
    in_flight = 0
    most = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        for _ in range(3):  # stay on the wire for a few loop steps
            await asyncio.sleep(0)
        in_flight -= 1
        return httpx.Response(201, json={"kind": "Job"})

    client = httpx.AsyncClient(base_url="http://kube.test", transport=httpx.MockTransport(handler))
    api = KubeApi(client, qps=0, max_in_flight=8)
    try:
        answers = await asyncio.gather(
            *(api.request("POST", "/apis/batch/v1/namespaces/ns/jobs", body={}) for _ in range(100))
        )
    finally:
        await api.aclose()
    assert len(answers) == 100
    assert most == 8  # the other 92 waited their turn in the client, not in the pool
    assert api.counts["POST jobs"] == 100
