"""`KubeFake`: start the local Kubernetes API server, write a kubeconfig, inspect and break it.

with run_server() as kube:
    client = ...(kube.kubeconfig_path)        # any client: lightkube, kubernetes, kubectl
    kube.state.wait_for(lambda s: s.job_finished("my-job"))
    kube.state.fail_next(3, 429, retry_after=1)
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import yaml

from runlane.testing.kube.cluster import Cluster, ConditionStyle, job_finished
from runlane.testing.kube.kubelet import Timing
from runlane.testing.kube.server import AccessRules, ApiServer, RequestRecord
from runlane.testing.kube.store import (
    BY_PATH,
    EVENTS,
    JOBS,
    PODS,
    RESOURCES,
    Obj,
    Propagation,
    ResourceType,
)

DEFAULT_TOKEN = "runlane-fake-token"  # noqa: S105 - a fixed test credential for a loopback fake


def resource_type(kind: str) -> ResourceType:
    """`"jobs"`, `"Job"`, `"job"`, `"pods"`, `"cm"`… -> the resource type."""
    low = kind.lower()
    for rt in RESOURCES:
        if low in (rt.plural, rt.kind.lower(), rt.singular, *rt.short_names):
            return rt
    for (_, plural), rt in BY_PATH.items():
        if low == f"{plural}.{rt.group}":
            return rt
    raise KeyError(f"unknown resource {kind!r}")


class KubeState:
    """Inspection and fault injection for tests (works directly on the store, not over HTTP)."""

    def __init__(self, cluster: Cluster, server: ApiServer) -> None:
        self.cluster = cluster
        self.server = server
        self.store = cluster.store

    # --- reads -------------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self.store.rv

    def get(self, kind: str, name: str, namespace: str = "default") -> Obj | None:
        obj = self.store.find(resource_type(kind), namespace, name)
        return copy.deepcopy(obj) if obj is not None else None

    def list(
        self,
        kind: str,
        namespace: str | None = "default",
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> builtins.list[Obj]:
        items, _ = self.store.select(resource_type(kind), namespace, label_selector, field_selector)
        return copy.deepcopy(items)

    def pods_of(self, job: str, namespace: str = "default") -> builtins.list[Obj]:
        return self.list("pods", namespace, f"batch.kubernetes.io/job-name={job}")

    def events_for(self, name: str, namespace: str = "default") -> builtins.list[Obj]:
        return self.list("events", namespace, field_selector=f"involvedObject.name={name}")

    def job_finished(self, name: str, namespace: str = "default") -> bool:
        job = self.store.find(JOBS, namespace, name)
        return job is not None and job_finished(job)

    def job_condition(self, name: str, namespace: str = "default") -> str | None:
        """The terminal condition type (`Complete`/`Failed`) of a Job, or None."""
        job = self.store.find(JOBS, namespace, name)
        for cond in (job or {}).get("status", {}).get("conditions") or []:
            if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
                return str(cond["type"])
        return None

    def explain_job(self, name: str, namespace: str = "default") -> str:
        """What the cluster holds for Job `name`, for a test's failure message when a wait on it
        times out: the Job's status, its pods (phase, container states, what the kubelet did:
        its stage, each process's pid and exit), the events of the Job and its pods (which
        outlive a deleted pod), the open watches and the controller loop."""
        with self.store.lock:
            lines = [f"kube fake, Job {namespace}/{name}:"]
            job = self.store.find(JOBS, namespace, name)
            if job is None:
                lines.append("  Job: none")
            else:
                spec, st = job.get("spec") or {}, job.get("status") or {}
                conds = [
                    f"{c.get('type')}={c.get('status')}({c.get('reason', '')})"
                    for c in st.get("conditions") or []
                ]
                lines.append(
                    f"  Job: created {job['metadata'].get('creationTimestamp')}, startTime "
                    f"{st.get('startTime')}, activeDeadlineSeconds "
                    f"{spec.get('activeDeadlineSeconds')}, active={st.get('active', 0)} "
                    f"failed={st.get('failed', 0)} succeeded={st.get('succeeded', 0)}, "
                    f"conditions [{', '.join(conds)}]"
                    + (", deleting" if job["metadata"].get("deletionTimestamp") else "")
                )
            pods, _ = self.store.select(PODS, namespace, f"batch.kubernetes.io/job-name={name}")
            if not pods:
                lines.append("  pods: none")
            for pod in pods:
                lines.append(f"  pod {pod['metadata']['name']}: {self._pod_state(pod)}")
            events, _ = self.store.select(EVENTS, namespace)
            by_object: dict[str, list[str]] = {}
            for ev in sorted(events, key=lambda e: int(e["metadata"]["resourceVersion"])):
                obj = (ev.get("involvedObject") or {}).get("name") or ""
                if obj == name or obj.startswith(f"{name}-"):
                    by_object.setdefault(obj, []).append(str(ev.get("reason")))
            for obj, reasons in by_object.items():
                lines.append(f"  events of {obj}: {', '.join(reasons)}")
            lines.append(f"  open watches: {len(self.store.active_watches)}")
            lines.append(f"  {self.cluster.loop_state()}")
            return "\n".join(lines)

    def _pod_state(self, pod: Obj) -> str:
        st = pod.get("status") or {}
        states = []
        for cs in st.get("containerStatuses") or []:
            kind, detail = next(iter((cs.get("state") or {"unknown": {}}).items()))
            why = detail.get("reason") or ""
            code = detail.get("exitCode")
            states.append(
                f"{cs.get('name')} {kind}"
                + (f" {why}" if why else "")
                + (f" exit {code}" if code is not None else "")
            )
        text = f"phase {st.get('phase')}, containers [{'; '.join(states)}]"
        if pod["metadata"].get("deletionTimestamp"):
            text += ", deleting"
        runtime = self.cluster.kubelet.runtime(pod["metadata"]["uid"])
        if runtime is None:
            return text + ", kubelet: not tracked"
        procs = []
        for c in runtime.containers:
            if c.process is None:
                procs.append(f"{c.name} no process")
            else:
                code = c.process.poll()
                procs.append(
                    f"{c.name} pid {c.process.pid} "
                    + ("running" if code is None else f"exited {code}")
                )
        killing = ", killing" if runtime.killing else ""
        return text + f", kubelet: stage {runtime.stage}{killing}, [{'; '.join(procs)}]"

    def logs(self, pod: str, namespace: str = "default", container: str | None = None) -> str:
        obj = self.store.find(PODS, namespace, pod)
        runtime = self.cluster.kubelet.runtime(obj["metadata"]["uid"]) if obj else None
        if runtime is None:
            return ""
        for c in runtime.containers:
            if container is None or c.name == container:
                return c.log.decode(errors="replace")
        return ""

    @property
    def open_watches(self) -> int:
        with self.store.lock:
            return len(self.store.active_watches)

    @property
    def requests(self) -> builtins.list[RequestRecord]:
        return builtins.list(self.server.requests)

    def clear_requests(self) -> None:
        self.server.requests.clear()

    # --- waiting (instead of sleeping) -------------------------------------------------------------

    def wait_for(self, predicate: Callable[[KubeState], bool], timeout: float = 10.0) -> None:
        """Block until `predicate(state)` holds (re-checked after every write); TimeoutError otherwise."""
        end = time.monotonic() + timeout
        with self.store.cond:
            while not predicate(self):
                left = end - time.monotonic()
                if left <= 0:
                    raise TimeoutError("kube fake: condition not reached in time")
                self.store.cond.wait(min(left, 0.05))

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Until the controllers have nothing due (pending future timers do not count)."""
        self.wait_for(lambda _: self.cluster.idle(), timeout)

    def advance(self, seconds: float) -> None:
        """Move the cluster clock (activeDeadlineSeconds, ttlSecondsAfterFinished, fake/sleep:N)."""
        self.cluster.advance(seconds)

    # --- writes behind the client's back ------------------------------------------------------------

    def create(self, kind: str, body: Obj, namespace: str = "default") -> Obj:
        return copy.deepcopy(self.cluster.create(resource_type(kind), namespace, body))

    def delete(
        self,
        kind: str,
        name: str,
        namespace: str = "default",
        propagation: Propagation | None = "Background",
    ) -> None:
        self.cluster.delete(resource_type(kind), namespace, name, propagation=propagation)

    def mutate(
        self, kind: str, name: str, fn: Callable[[Obj], None], namespace: str = "default"
    ) -> Obj:
        return copy.deepcopy(self.store.mutate(resource_type(kind), namespace, name, fn))

    def add_namespace(self, name: str) -> None:
        self.store.put_namespace(name)

    def append_log(
        self, pod: str, text: str, namespace: str = "default", container: str | None = None
    ) -> None:
        obj = self.store.find(PODS, namespace, pod)
        if obj is None:
            raise KeyError(pod)
        name = container or obj["spec"]["containers"][0]["name"]
        with self.store.cond:
            self.cluster.kubelet.append_log(obj["metadata"]["uid"], name, text)

    def record_event(
        self,
        involved_kind: str,
        name: str,
        reason: str,
        message: str,
        *,
        namespace: str = "default",
        type_: str = "Warning",
        component: str = "kubelet",
    ) -> None:
        rt = resource_type(involved_kind)
        obj = self.store.find(rt, namespace, name)
        if obj is None:
            raise KeyError(name)
        with self.store.lock:
            self.cluster.record_event(rt, obj, type_, reason, message, component)

    # --- faults ------------------------------------------------------------------------------------

    def fail_next(
        self,
        count: int = 1,
        status: int = 500,
        *,
        retry_after: int | None = None,
        method: str | None = None,
        path: str | None = None,
        exact: bool = False,
    ) -> None:
        """The next `count` matching requests fail with `status` (500, 503, 429 + Retry-After, 504…).
        `path` matches any request path containing it, or with `exact` only that path (a
        collection's list and watch, not its items)."""
        self.server.faults.fail_next(
            count, status, retry_after=retry_after, method=method, path=path, exact=exact
        )

    def drop_create_response(self, count: int = 1, *, path: str | None = None) -> None:
        """Store the next `count` created objects but close the connection instead of answering."""
        self.server.faults.drop_create_response(count, path=path)

    def clear_faults(self) -> None:
        self.server.faults.clear()

    def end_watches(self, *, abort: bool = False) -> int:
        """End every open watch: cleanly (last chunk) or by dropping the connection (`abort`)."""
        return self.server.end_watches(abort=abort)

    def expire_watches(self) -> int:
        """Send an in-stream `ERROR 410 Expired` on every watch and compact the history, so resuming
        from any earlier resourceVersion gets 410 as well."""
        with self.store.lock:
            n = self.server.end_watches(expire=True)
            self.store.compact()
        return n

    def compact(self) -> None:
        """Forget the watch history: resuming from any earlier resourceVersion gets 410."""
        self.store.compact()

    def restart(self, jump: int = 1000, *, lose_state: bool = False) -> None:
        """What clients see when the API server restarts: connections drop, the resourceVersion jumps,
        history before the restart is gone. With `lose_state`, etcd's data is lost as well: every
        object but the namespaces is gone (no DELETED events) and the resourceVersion goes back to
        1000, so any version a client holds is "too large" (504) until it lists again."""
        self.server.restart(jump, lose_state=lose_state)

    def send_bookmarks(self) -> None:
        """Make every watch that allows bookmarks send one now."""
        self.server.send_bookmarks()

    def set_allow(self, allow: Iterable[str] | None) -> None:
        """Replace the access rules (None = allow everything). Also what SelfSubjectAccessReview answers."""
        self.server.access = AccessRules.parse(allow)

    def set_expired_mode(self, mode: Literal["stream", "http"]) -> None:
        """How a watch from a compacted resourceVersion fails: in-stream ERROR (default) or HTTP 410."""
        self.server.expired = mode


class KubeFake:
    """The local Kubernetes API server: `url`, `kubeconfig_path`, `state` (see `KubeState`).

    `conditions="modern"` gives the Job condition sequences of Kubernetes >= 1.31
    (SuccessCriteriaMet then Complete; FailureTarget then Failed); `"legacy"` only Complete/Failed.
    `allow` restricts the token's user (rules like `"create jobs.batch"`, `"get pods/log"`);
    `run_local=True` runs every non-`fake/` image's command as a local process.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        kubeconfig_path: str | Path | None = None,
        conditions: ConditionStyle = "modern",
        timing: Timing | None = None,
        run_local: bool = False,
        inherit_env: bool = True,
        allow: Iterable[str] | None = None,
        token: str | None = DEFAULT_TOKEN,
        user: str = "runlane-fake",
        namespaces: Iterable[str] = (),
        bookmark_interval: float = 1.0,
        expired: Literal["stream", "http"] = "stream",
        watch_timeout: float | None = None,
        history_limit: int = 100_000,
    ) -> None:
        self.cluster = Cluster(
            conditions=conditions,
            timing=timing,
            run_local=run_local,
            inherit_env=inherit_env,
            history_limit=history_limit,
        )
        for ns in namespaces:
            self.cluster.store.put_namespace(ns)
        self.server = ApiServer(
            self.cluster,
            host=host,
            port=port,
            token=token,
            user=user,
            allow=allow,
            bookmark_interval=bookmark_interval,
            expired=expired,
            watch_timeout=watch_timeout,
        )
        self.token = token
        self.user = user
        self.state = KubeState(self.cluster, self.server)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if kubeconfig_path is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="kube-fake-")
            kubeconfig_path = Path(self._tmp.name) / "kubeconfig"
        self.kubeconfig_path = Path(kubeconfig_path)
        self._started = False

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def port(self) -> int:
        return self.server.port

    def kubeconfig(self, namespace: str = "default") -> dict[str, Any]:
        user: dict[str, Any] = {"token": self.token} if self.token else {}
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": [{"name": "runlane-fake", "cluster": {"server": self.url}}],
            "users": [{"name": self.user, "user": user}],
            "contexts": [
                {
                    "name": "runlane-fake",
                    "context": {
                        "cluster": "runlane-fake",
                        "user": self.user,
                        "namespace": namespace,
                    },
                }
            ],
            "current-context": "runlane-fake",
        }

    def write_kubeconfig(self, path: str | Path | None = None) -> Path:
        target = Path(path) if path is not None else self.kubeconfig_path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump(self.kubeconfig(), sort_keys=False))
        return target

    def start(self) -> KubeFake:
        if not self._started:
            self.cluster.start()
            self.server.start()
            self.write_kubeconfig()
            self._started = True
        return self

    def stop(self) -> None:
        if self._started:
            self.server.stop()
            self.cluster.stop()
            self._started = False
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> KubeFake:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def run_server(**kwargs: Any) -> Iterator[KubeFake]:
    """Start a `KubeFake` (same keyword arguments) for the length of the block."""
    fake = KubeFake(**kwargs)
    try:
        yield fake.start()
    finally:
        fake.stop()


__all__ = ["DEFAULT_TOKEN", "KubeFake", "KubeState", "resource_type", "run_server"]
