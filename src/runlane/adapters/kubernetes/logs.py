"""A pod run's log read straight from the cluster, for `runlane logs [--follow]` in another
process than the launcher (which holds the run's watch)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from runlane.adapters.kubernetes.api import ApiStatus, Json, KubeApi, close_quietly, pods_path
from runlane.adapters.kubernetes.config import load_cluster_config, resolve_namespace
from runlane.adapters.kubernetes.manifests import CONTAINER
from runlane.adapters.kubernetes.names import job_name
from runlane.errors import NotFound, TemporaryExecutorError

# `--follow` before the pod runs: look again after 0.5 s, doubling up to 5 s.
WAIT_FIRST = 0.5
WAIT_MAX = 5.0


async def pod_log(
    job: str,
    run_id: str,
    attempt: int,
    namespace: str | None,
    *,
    follow: bool,
    active: Callable[[], Awaitable[bool]] | None = None,
    on_wait: Callable[[str], None] | None = None,
    wait_first: float = WAIT_FIRST,
    wait_max: float = WAIT_MAX,
) -> AsyncIterator[str]:
    """The log of the run attempt's newest pod: all of it, or (`follow`) line by line until the
    container ends. `NotFound` when the Job has no pod (yet, or any more), without `follow`.

    With `follow`, a pod that is not there yet or whose container has not started is waited for
    (bounded backoff, `on_wait` told once why) while `active()` says the run goes on; when it
    ends first, this ends without a line (the caller shows what the run saved)."""
    api = KubeApi.from_config(load_cluster_config())
    ns = resolve_namespace(namespace)
    name = job_name(job, run_id, attempt)
    try:
        if not follow:
            pod = await _newest_pod(api, ns, name)
            if pod is None:
                raise NotFound(f"Job {ns}/{name} has no pod: its log is gone or not there yet")
            yield await api.text(_log_path(ns, pod), params={"container": CONTAINER})
            return
        delay = wait_first
        told = False
        while True:
            why = f"waiting for the pod of Job {ns}/{name} to start"
            try:
                pod = await _newest_pod(api, ns, name)
            except TemporaryExecutorError as exc:
                pod, why = None, f"waiting for the Kubernetes API ({exc})"
            if pod is not None and _container_started(pod):
                try:
                    async for line in api.stream_text(
                        _log_path(ns, pod), params={"container": CONTAINER, "follow": True}
                    ):
                        yield line
                    return  # the container ended
                except ApiStatus as exc:
                    if exc.code != 400:  # 400: not started after all (a race); wait again
                        raise
            elif pod is not None:
                why = f"waiting for the pod {pod['metadata']['name']} to start ({_waiting(pod)})"
            if active is not None and not await active():
                return
            if on_wait is not None and not told:
                on_wait(why)
                told = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, wait_max)
    except ApiStatus as exc:
        raise NotFound(f"cannot read the log of Job {ns}/{name}: {exc}") from exc
    finally:
        await close_quietly(api)


async def _newest_pod(api: KubeApi, ns: str, name: str) -> Json | None:
    listed = await api.request(
        "GET", pods_path(ns), params={"labelSelector": f"batch.kubernetes.io/job-name={name}"}
    )
    pods = sorted(
        listed.get("items") or [],
        key=lambda p: str(p.get("metadata", {}).get("creationTimestamp", "")),
    )
    return pods[-1] if pods else None


def _log_path(ns: str, pod: Json) -> str:
    return f"{pods_path(ns, pod['metadata']['name'])}/log"


def _statuses(pod: Json) -> list[Mapping[str, Any]]:
    status: Mapping[str, Any] = pod.get("status") or {}
    return [cs for cs in status.get("containerStatuses") or () if cs.get("name") == CONTAINER]


def _container_started(pod: Json) -> bool:
    """Whether the run's container has a log to read: running, or ended."""
    for cs in _statuses(pod):
        state = cs.get("state") or {}
        if state.get("running") or state.get("terminated"):
            return True
    return False


def _waiting(pod: Json) -> str:
    for cs in _statuses(pod):
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return str(waiting["reason"])
    return str((pod.get("status") or {}).get("phase") or "Pending")
