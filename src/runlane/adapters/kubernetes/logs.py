"""A pod run's log read straight from the cluster, for `runlane logs [--follow]` in another
process than the launcher (which holds the run's watch)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from runlane.adapters.kubernetes.api import ApiStatus, KubeApi, close_quietly, pods_path
from runlane.adapters.kubernetes.config import load_cluster_config, resolve_namespace
from runlane.adapters.kubernetes.manifests import CONTAINER
from runlane.core.k8s_names import job_name
from runlane.errors import NotFound


async def pod_log(
    job: str, run_id: str, attempt: int, namespace: str | None, *, follow: bool
) -> AsyncIterator[str]:
    """The log of the run attempt's newest pod: all of it, or (`follow`) line by line until the
    container ends. `NotFound` when the Job has no pod (yet, or any more)."""
    api = KubeApi.from_config(load_cluster_config())
    ns = resolve_namespace(namespace)
    name = job_name(job, run_id, attempt)
    try:
        listed = await api.request(
            "GET", pods_path(ns), params={"labelSelector": f"batch.kubernetes.io/job-name={name}"}
        )
        pods = sorted(
            listed.get("items") or [],
            key=lambda p: str(p.get("metadata", {}).get("creationTimestamp", "")),
        )
        if not pods:
            raise NotFound(f"Job {ns}/{name} has no pod: its log is gone or not there yet")
        path = f"{pods_path(ns, pods[-1]['metadata']['name'])}/log"
        if not follow:
            yield await api.text(path, params={"container": CONTAINER})
            return
        async for line in api.stream_text(path, params={"container": CONTAINER, "follow": True}):
            yield line
    except ApiStatus as exc:
        raise NotFound(f"cannot read the log of Job {ns}/{name}: {exc}") from exc
    finally:
        await close_quietly(api)
