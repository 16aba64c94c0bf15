"""A faithful local Kubernetes API server for tests, `runlane.testing.kube`.

For runlane's own tests and benchmarks of pod runs (`PodExecutor`, the launcher, `runlane doctor`)
and for anyone who needs a Kubernetes API on loopback in a test: it runs in-process (a thread) or
standalone, needs no cluster, container runtime or network, and is never used by runlane at run time.

It speaks the real REST API on loopback (discovery, batch/v1 Jobs, v1 Pods, ConfigMaps, Secrets,
Events, Namespaces, list + watch with bookmarks and 410 Expired, pods/log, SelfSubjectAccessReview),
runs a Job controller, garbage collector, TTL controller and a fake kubelet, and lets tests inject
faults. Any client works against it: lightkube, the official `kubernetes` package, `kubectl`.

    from runlane.testing.kube import run_server

    with run_server() as kube:          # kube.url, kube.kubeconfig_path, kube.state
        ...

Standalone: `python -m runlane.testing.kube --port 8001 --kubeconfig ./kubeconfig`.

Container images choose what the fake kubelet does (see `kubelet.Script`):

| image | pod |
|---|---|
| `fake/succeed` (and any other image) | runs, exits 0: Succeeded, terminated `Completed` |
| `fake/exit:N` | exits N: Failed, terminated `Error`, exitCode N |
| `fake/oom` | Failed, terminated `OOMKilled`, exitCode 137 |
| `fake/sleep:S` | Running for S seconds of cluster clock (`state.advance(S)`), then exit 0 |
| `fake/hang` | Running until deleted (or the Job's activeDeadlineSeconds) |
| `fake/image-pull-backoff` | Pending, waiting `ImagePullBackOff` (after `ErrImagePull`), events |
| `fake/err-image-pull` | Pending, waiting `ErrImagePull` |
| `fake/invalid-image` (or an unparsable reference) | Pending, waiting `InvalidImageName` |
| `fake/unschedulable` | Pending, PodScheduled False `Unschedulable`, `FailedScheduling` event |
| `fake/config-error` (or a missing Secret/ConfigMap in env/envFrom) | waiting `CreateContainerConfigError` |
| `fake/start-error` | Failed, terminated `StartError`, exitCode 128 |
| `fake/evicted` | Failed, pod reason `Evicted`, DisruptionTarget condition |
| `local` (or any image with `run_local=True`) | runs `command + args` as a local process |

Scripted containers print the `FAKE_OUTPUT` env value as their log. A missing ConfigMap/Secret volume
keeps the pod in `ContainerCreating` with a `FailedMount` event (repeats aggregate into its count)
and is retried with backoff (0.5 s doubling to 8 s, `Timing.mount_retry*`) until it exists. Local containers get the container's
env over the server's own environment and their volumes (ConfigMaps, Secrets, emptyDirs) written
under `$KUBE_FAKE_ROOT/<mountPath>`.

A watch or list from a resourceVersion the server has not reached waits up to
`ApiServer.too_large_wait` (3 s, like the watch cache) and then fails with 504 `Timeout` "Too large
resource version" (cause `ResourceVersionTooLarge`). `state.restart(lose_state=True)` (HTTP:
`POST /fake/restart?loseState=1`) loses every object but the namespaces and sends the
resourceVersion back to 1000, like an API server whose etcd was restored from an old backup.
"""

from __future__ import annotations

from runlane.testing.kube.cluster import Cluster, ConditionStyle
from runlane.testing.kube.fake import DEFAULT_TOKEN, KubeFake, KubeState, resource_type, run_server
from runlane.testing.kube.kubelet import Script, Timing
from runlane.testing.kube.server import AccessRules, ApiServer, RequestRecord
from runlane.testing.kube.store import ApiError, Obj

__all__ = [
    "DEFAULT_TOKEN",
    "AccessRules",
    "ApiError",
    "ApiServer",
    "Cluster",
    "ConditionStyle",
    "KubeFake",
    "KubeState",
    "Obj",
    "RequestRecord",
    "Script",
    "Timing",
    "resource_type",
    "run_server",
]
