"""What the launcher's identity may do in a namespace, asked with SelfSubjectAccessReview.

The verbs (DESIGN.md, Executors): jobs.batch create/get/list/watch/delete — without them no pod
run can work, so pod runs are refused; pods get/list/watch (diagnosis), pods/log get (log
tail), configmaps create/delete (params too large for the environment) — without them runs
work with less; events list — optional, pod events in start-failure notes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from runlane.adapters.kubernetes.api import ApiStatus, KubeApi

SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


@dataclass(frozen=True, slots=True)
class Permission:
    group: str
    resource: str
    verb: str
    subresource: str = ""
    required: bool = True  # pod runs are refused without it

    @property
    def label(self) -> str:
        """`jobs.batch`, `pods/log`, `configmaps`."""
        base = f"{self.resource}.{self.group}" if self.group else self.resource
        return f"{base}/{self.subresource}" if self.subresource else base


PERMISSIONS: tuple[Permission, ...] = (
    *(Permission("batch", "jobs", v) for v in ("create", "get", "list", "watch", "delete")),
    *(Permission("", "pods", v, required=False) for v in ("get", "list", "watch")),
    Permission("", "pods", "get", subresource="log", required=False),
    Permission("", "configmaps", "create", required=False),
    Permission("", "configmaps", "delete", required=False),
    Permission("", "events", "list", required=False),
)


async def access_allowed(api: KubeApi, namespace: str, perm: Permission) -> bool | None:
    """True/False from the API server; None when the review itself could not be made."""
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "namespace": namespace,
                "verb": perm.verb,
                "group": perm.group,
                "resource": perm.resource,
                **({"subresource": perm.subresource} if perm.subresource else {}),
            }
        },
    }
    try:
        answer = await api.request("POST", SSAR_PATH, body=body)
    except ApiStatus:
        return None
    return bool((answer.get("status") or {}).get("allowed"))


async def check_permissions(api: KubeApi, namespace: str) -> list[tuple[Permission, bool | None]]:
    """The whole review set, sent at once. When a review fails (the API is away: 5xx, timeout,
    throttled), the first error is raised once every review of the set has ended, so none is
    left running behind its caller."""
    answers = await asyncio.gather(
        *(access_allowed(api, namespace, p) for p in PERMISSIONS), return_exceptions=True
    )
    out: list[tuple[Permission, bool | None]] = []
    for perm, answer in zip(PERMISSIONS, answers, strict=True):
        if isinstance(answer, BaseException):
            raise answer
        out.append((perm, answer))
    return out


def missing_required(checks: list[tuple[Permission, bool | None]]) -> list[Permission]:
    """Required permissions the server said no to (an unanswered review does not refuse)."""
    return [p for p, allowed in checks if p.required and allowed is False]


# What a pod run lacks without an optional permission (docs/kubernetes.md, RBAC).
WITHOUT: dict[str, str] = {
    "pods": "no failure diagnosis beyond the Job's conditions",
    "pods/log": "no log tail",
    "configmaps": "runs whose params exceed 64 KiB fail",
    "events": "no pod events in start-failure notes",
}


async def rbac_review(
    namespace: str | None = None,
    *,
    api: KubeApi | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[tuple[Permission, bool | None]]:
    """Each permission with the server's answer (None: the review could not be made), as the
    pod executor itself asks before the first run in a namespace. For `runlane doctor`, which
    must grade them as the launcher does: refusal only for a required one answered no."""
    from runlane.adapters.kubernetes.config import load_cluster_config, resolve_namespace

    ns = resolve_namespace(namespace, environ)
    own = api is None
    client = api if api is not None else KubeApi.from_config(load_cluster_config(environ))
    try:
        return await check_permissions(client, ns)
    finally:
        if own:
            await client.aclose()


async def rbac_report(
    namespace: str | None = None,
    *,
    api: KubeApi | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[tuple[str, str, bool]]:
    """`(resource, verb, allowed)` for every permission the pod executor uses, e.g.
    `("jobs.batch", "create", True)`, `("pods/log", "get", False)`. For `runlane doctor`.

    Uses the configured cluster (in-cluster or kubeconfig) unless `api` is given; the namespace
    resolves as for runs. Raises `ConfigError` when no cluster is configured and
    `TemporaryExecutorError` when the API cannot be reached.
    """
    checks = await rbac_review(namespace, api=api, environ=environ)
    return [(p.label, p.verb, allowed is True) for p, allowed in checks]
