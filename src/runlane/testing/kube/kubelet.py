"""The fake kubelet and scheduler: pods go Pending -> Running -> Succeeded/Failed like on a node.

What a container does is chosen by its image name (see `Script.parse` and the package docs):
`fake/succeed`, `fake/exit:3`, `fake/oom`, `fake/sleep:30`, `fake/hang`, `fake/image-pull-backoff`,
`fake/err-image-pull`, `fake/invalid-image`, `fake/unschedulable`, `fake/config-error`,
`fake/start-error`, `fake/evicted`; `local` (or any image when the server runs with `run_local`)
runs the container's command as a real local process whose output becomes the pod log.

Every step is a separate write (its own resourceVersion and watch event), with the status shapes a
real kubelet reports (conditions, containerStatuses with waiting/running/terminated), and the events
the scheduler and kubelet record. Delays come from `Timing` and run on the cluster's clock, so tests
move time with `advance()` instead of sleeping.

One module of ~900 lines, on purpose: each fake container behaviour is a few lines of one pod state
machine (Pending -> Running -> Succeeded/Failed) that they all drive.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import os
import re
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from runlane.testing.kube.store import (
    CONFIGMAPS,
    EVENTS,
    PODS,
    SECRETS,
    Obj,
    ResourceType,
    Store,
    now_rfc3339,
)

NODE_NAME = "fake-node"
NODE_IP = "10.0.0.10"
# A Docker-style reference: lower-case repository path, optional tag and digest.
_IMAGE_REF = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[\w][\w.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)

Behaviour = Literal[
    "succeed",
    "exit",
    "oom",
    "sleep",
    "hang",
    "image_pull_backoff",
    "err_image_pull",
    "invalid_image",
    "unschedulable",
    "config_error",
    "start_error",
    "evicted",
    "local",
]


@dataclass(frozen=True)
class Script:
    """What a container does, parsed from its image name."""

    behaviour: Behaviour
    exit_code: int = 0
    seconds: float = 0.0

    @staticmethod
    def parse(image: str, *, run_local: bool = False) -> Script:
        if image == "local" or image.startswith("local:"):
            return Script("local")
        if not _IMAGE_REF.match(image):
            return Script("invalid_image")
        if not image.startswith("fake/"):
            return Script("local") if run_local else Script("succeed")
        name, _, arg = image[len("fake/") :].partition(":")
        if name == "exit":
            code = int(arg) if arg.isdigit() else 1
            return Script("succeed") if code == 0 else Script("exit", exit_code=code)
        if name == "sleep":
            try:
                return Script("sleep", seconds=float(arg))
            except ValueError:
                return Script("hang")
        aliases: dict[str, Behaviour] = {
            "succeed": "succeed",
            "success": "succeed",
            "oom": "oom",
            "oomkilled": "oom",
            "hang": "hang",
            "image-pull-backoff": "image_pull_backoff",
            "imagepullbackoff": "image_pull_backoff",
            "err-image-pull": "err_image_pull",
            "errimagepull": "err_image_pull",
            "invalid-image": "invalid_image",
            "unschedulable": "unschedulable",
            "config-error": "config_error",
            "start-error": "start_error",
            "evicted": "evicted",
        }
        return Script(aliases.get(name, "succeed"))


@dataclass
class Timing:
    """Seconds (on the cluster clock) each phase takes. All zero: pods finish as fast as writes go."""

    schedule: float = 0.0  # Pending, unscheduled -> PodScheduled
    pull: float = 0.0  # ContainerCreating -> Running
    run: float = 0.0  # Running -> terminated, for scripted containers (`fake/sleep:N` sets its own)
    grace_cap: float = 2.0  # SIGTERM -> SIGKILL for local processes, at most this (wall seconds)
    # A missing ConfigMap/Secret volume is retried like the kubelet's volume manager does: after
    # `mount_retry` seconds, doubling up to `mount_retry_max` (the real cap is 2m2s; a shorter one
    # keeps a volume created a moment late from delaying tests), a FailedMount event each time.
    mount_retry: float = 0.5
    mount_retry_max: float = 8.0


@dataclass
class ContainerRuntime:
    name: str
    image: str
    script: Script
    log: bytearray = field(default_factory=bytearray)
    container_id: str = ""
    process: subprocess.Popen[bytes] | None = None
    exit_code: int | None = None
    exit_reason: str = ""
    exit_message: str = ""
    started_at: str = ""
    done: bool = False


@dataclass
class PodRuntime:
    uid: str
    namespace: str
    name: str
    stage: Literal["new", "unschedulable", "scheduled", "waiting", "running", "terminated"] = "new"
    containers: list[ContainerRuntime] = field(default_factory=list)
    root: Path | None = None
    killing: bool = False
    mount_backoff: float = 0.0  # the next delay before retrying a missing volume
    mount_event: str = ""  # the FailedMount event repeats aggregate into (count, lastTimestamp)


def _ready_conditions(
    now: str,
    *,
    scheduled: bool,
    initialized: bool,
    ready: bool,
    reason: str = "",
    message: str = "",
) -> list[Obj]:
    def cond(kind: str, ok: bool, why: str = "", msg: str = "") -> Obj:
        c: Obj = {
            "type": kind,
            "status": "True" if ok else "False",
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
        if why and not ok:
            c["reason"] = why
        if msg and not ok:
            c["message"] = msg
        return c

    return [
        cond("PodReadyToStartContainers", initialized),
        cond("Initialized", initialized),
        cond("Ready", ready, reason, message),
        cond("ContainersReady", ready, reason, message),
        cond("PodScheduled", scheduled),
    ]


class NodeHost(Protocol):
    """What the kubelet needs of the cluster it runs in (`cluster.Cluster` is one): the store,
    timers on the cluster clock, events, and a way to say a pod's containers ended."""

    store: Store
    last_event_name: str  # the name of the event `record_event` wrote last

    def after(self, delay: float, fn: Callable[[], None]) -> None: ...

    def record_event(
        self,
        rt: ResourceType,
        obj: Obj,
        kind: str,
        reason: str,
        message: str,
        component: str,
        *,
        field_path: str | None = None,
    ) -> None: ...

    def pod_terminated(self, ns: str, name: str) -> None: ...


class Kubelet:
    """Drives every pod the store holds. Runs inside the cluster's controller thread (under its lock)."""

    def __init__(
        self, cluster: NodeHost, timing: Timing, *, run_local: bool, inherit_env: bool
    ) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.timing = timing
        self.run_local = run_local
        self.inherit_env = inherit_env
        self.pods: dict[str, PodRuntime] = {}

    # --- helpers -------------------------------------------------------------------------------

    def _now(self) -> str:
        return now_rfc3339(self.store.clock.now())

    def _pod(self, rt: PodRuntime) -> Obj | None:
        pod = self.store.find(PODS, rt.namespace, rt.name)
        if pod is None or pod["metadata"]["uid"] != rt.uid:
            return None
        return pod

    def _set_status(self, rt: PodRuntime, fn: Callable[[Obj], None]) -> None:
        pod = self._pod(rt)
        if pod is None:
            return
        new = copy.deepcopy(pod)
        fn(new.setdefault("status", {}))
        self.store.write(PODS, new)

    def _event(
        self,
        rt: PodRuntime,
        kind: str,
        reason: str,
        message: str,
        component: str = "kubelet",
        container: str | None = None,
    ) -> None:
        pod = self._pod(rt)
        if pod is not None:
            path = f"spec.containers{{{container}}}" if container else None
            self.cluster.record_event(PODS, pod, kind, reason, message, component, field_path=path)

    def _container_statuses(
        self,
        rt: PodRuntime,
        state_of: Callable[[ContainerRuntime], Obj],
        ready: bool = False,
        started: bool = False,
    ) -> list[Obj]:
        out = []
        for c in rt.containers:
            status: Obj = {
                "name": c.name,
                "image": c.image,
                "imageID": f"docker.io/{c.image}@sha256:{hashlib.sha256(c.image.encode()).hexdigest()}"
                if c.container_id
                else "",
                "ready": ready,
                "restartCount": 0,
                "started": started,
                "state": state_of(c),
                "lastState": {},
            }
            if c.container_id:
                status["containerID"] = c.container_id
            out.append(status)
        return out

    # --- lifecycle -----------------------------------------------------------------------------

    def on_pod_added(self, pod: Obj) -> None:
        meta = pod["metadata"]
        rt = PodRuntime(meta["uid"], meta["namespace"], meta["name"])
        for c in pod.get("spec", {}).get("containers") or []:
            rt.containers.append(
                ContainerRuntime(
                    c["name"], c["image"], Script.parse(c["image"], run_local=self.run_local)
                )
            )
        self.pods[rt.uid] = rt
        self.cluster.after(self.timing.schedule, lambda: self._schedule(rt))

    def on_pod_removed(self, uid: str) -> None:
        rt = self.pods.pop(uid, None)
        if rt is None:
            return
        for c in rt.containers:
            if c.process is not None and c.process.poll() is None:
                self._signal(c, signal.SIGKILL)
        if rt.root is not None:
            import shutil

            shutil.rmtree(rt.root, ignore_errors=True)

    def _schedule(self, rt: PodRuntime) -> None:
        pod = self._pod(rt)
        if pod is None or rt.stage != "new" or pod["metadata"].get("deletionTimestamp"):
            return
        now = self._now()
        if any(c.script.behaviour == "unschedulable" for c in rt.containers):
            rt.stage = "unschedulable"
            msg = (
                "0/1 nodes are available: 1 Insufficient memory. preemption: 0/1 nodes are available: "
                "1 No preemption victims found for incoming pod."
            )

            def unsched(st: Obj) -> None:
                st["phase"] = "Pending"
                st["conditions"] = [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "lastProbeTime": None,
                        "lastTransitionTime": now,
                        "reason": "Unschedulable",
                        "message": msg,
                    }
                ]

            self._set_status(rt, unsched)
            self._event(rt, "Warning", "FailedScheduling", msg, "default-scheduler")
            return
        rt.stage = "scheduled"
        new = copy.deepcopy(pod)
        new["spec"]["nodeName"] = NODE_NAME
        new.setdefault("status", {})["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": now,
            }
        ]
        self.store.write(PODS, new)
        self._event(
            rt,
            "Normal",
            "Scheduled",
            f"Successfully assigned {rt.namespace}/{rt.name} to {NODE_NAME}",
            "default-scheduler",
        )
        self._create_containers(rt)

    def _waiting(self, rt: PodRuntime, reasons: dict[str, tuple[str, str]]) -> None:
        """Pending with each container waiting (reason, message); default ContainerCreating."""
        now = self._now()
        names = ",".join(c.name for c in rt.containers)

        def fn(st: Obj) -> None:
            st["phase"] = "Pending"
            st["conditions"] = _ready_conditions(
                now,
                scheduled=True,
                initialized=True,
                ready=False,
                reason="ContainersNotReady",
                message=f"containers with unready status: [{names}]",
            )
            st["hostIP"] = NODE_IP
            st["hostIPs"] = [{"ip": NODE_IP}]
            st["podIP"] = f"10.244.0.{int(rt.uid[:2], 16) + 2}"
            st["podIPs"] = [{"ip": st["podIP"]}]
            st.setdefault("startTime", now)
            st["qosClass"] = st.get("qosClass", "BestEffort")

            def state(c: ContainerRuntime) -> Obj:
                reason, message = reasons.get(c.name, ("ContainerCreating", ""))
                w: Obj = {"reason": reason}
                if message:
                    w["message"] = message
                return {"waiting": w}

            st["containerStatuses"] = self._container_statuses(rt, state)

        self._set_status(rt, fn)

    def _create_containers(self, rt: PodRuntime, *, retry: bool = False) -> None:
        pod = self._pod(rt)
        if pod is None or pod["metadata"].get("deletionTimestamp") or rt.killing:
            return
        if retry:
            if rt.stage != "waiting":
                return
        else:
            self._waiting(rt, {})
            rt.stage = "waiting"
        problems: dict[str, tuple[str, str]] = {}
        missing_volume = self._missing_volume(pod)
        if missing_volume:
            # Stays ContainerCreating and retries the mount with backoff, like the kubelet's volume
            # manager: the container starts once the ConfigMap/Secret exists (runlane creates the
            # params ConfigMap just after its Job). One timer per waiting pod, no polling loop.
            self._failed_mount(rt, missing_volume)
            rt.mount_backoff = min(
                rt.mount_backoff * 2 or self.timing.mount_retry, self.timing.mount_retry_max
            )
            self.cluster.after(rt.mount_backoff, lambda: self._create_containers(rt, retry=True))
            return
        for c, spec in zip(rt.containers, pod["spec"]["containers"], strict=False):
            b = c.script.behaviour
            ref = f'"{c.image}"'
            if b == "invalid_image":
                msg = f"Failed to apply default image tag {ref}: couldn't parse image reference {ref}: invalid reference format"
                problems[c.name] = ("InvalidImageName", msg)
                self._event(rt, "Warning", "InspectFailed", msg, container=c.name)
                self._event(rt, "Warning", "Failed", "Error: InvalidImageName", container=c.name)
                continue
            config_error = (
                self._config_error(rt.namespace, spec)
                if b != "config_error"
                else 'secret "fake-missing" not found'
            )
            if config_error:
                problems[c.name] = ("CreateContainerConfigError", config_error)
                self._event(rt, "Warning", "Failed", f"Error: {config_error}", container=c.name)
                continue
            if b in ("image_pull_backoff", "err_image_pull"):
                msg = (
                    f'Failed to pull image {ref}: failed to pull and unpack image "docker.io/{c.image}:latest": '
                    "failed to resolve reference: pull access denied, repository does not exist or may "
                    "require authorization"
                )
                self._event(rt, "Normal", "Pulling", f"Pulling image {ref}", container=c.name)
                self._event(rt, "Warning", "Failed", msg, container=c.name)
                self._event(rt, "Warning", "Failed", "Error: ErrImagePull", container=c.name)
                if b == "image_pull_backoff":
                    self._event(
                        rt, "Normal", "BackOff", f"Back-off pulling image {ref}", container=c.name
                    )
                    self._event(
                        rt, "Warning", "Failed", "Error: ImagePullBackOff", container=c.name
                    )
                    problems[c.name] = ("ImagePullBackOff", f"Back-off pulling image {ref}")
                else:
                    problems[c.name] = ("ErrImagePull", msg)
        if problems:
            self._waiting(rt, problems)
            return
        self.cluster.after(self.timing.pull, lambda: self._start(rt))

    def _failed_mount(self, rt: PodRuntime, message: str) -> None:
        """A FailedMount event; repeats of the same one aggregate into its count, as the event
        recorder does ("(x5 over 20s)" in kubectl describe)."""
        prev = self.store.find(EVENTS, rt.namespace, rt.mount_event) if rt.mount_event else None
        if prev is not None and prev.get("message") == message:
            new = copy.deepcopy(prev)
            new["count"] = int(prev.get("count") or 1) + 1
            new["lastTimestamp"] = self._now()
            self.store.write(EVENTS, new)
            return
        self._event(rt, "Warning", "FailedMount", message)
        latest = self.cluster.last_event_name
        rt.mount_event = latest or ""

    def _missing_volume(self, pod: Obj) -> str:
        for vol in pod.get("spec", {}).get("volumes") or []:
            for key, rtype, label in (
                ("configMap", CONFIGMAPS, "configmap"),
                ("secret", SECRETS, "secret"),
            ):
                src = vol.get(key)
                if not isinstance(src, dict) or src.get("optional"):
                    continue
                ref = src.get("name") or src.get("secretName") or ""
                if self.store.find(rtype, pod["metadata"]["namespace"], ref) is None:
                    return f'MountVolume.SetUp failed for volume "{vol.get("name")}" : {label} "{ref}" not found'
        return ""

    def _config_error(self, namespace: str, spec: Obj) -> str:
        for src in spec.get("envFrom") or []:
            for key, rtype, label in (
                ("configMapRef", CONFIGMAPS, "configmap"),
                ("secretRef", SECRETS, "secret"),
            ):
                ref = src.get(key)
                if (
                    isinstance(ref, dict)
                    and not ref.get("optional")
                    and self.store.find(rtype, namespace, ref.get("name", "")) is None
                ):
                    return f'{label} "{ref.get("name")}" not found'
        for env in spec.get("env") or []:
            vf = env.get("valueFrom") or {}
            for key, rtype, label in (
                ("configMapKeyRef", CONFIGMAPS, "configmap"),
                ("secretKeyRef", SECRETS, "secret"),
            ):
                ref = vf.get(key)
                if not isinstance(ref, dict) or ref.get("optional"):
                    continue
                obj = self.store.find(rtype, namespace, ref.get("name", ""))
                if obj is None:
                    return f'{label} "{ref.get("name")}" not found'
                if ref.get("key") not in (obj.get("data") or {}):
                    return f"couldn't find key {ref.get('key')} in {label.capitalize()} {namespace}/{ref.get('name')}"
        return ""

    def _start(self, rt: PodRuntime) -> None:
        pod = self._pod(rt)
        if pod is None or rt.stage != "waiting" or pod["metadata"].get("deletionTimestamp"):
            return
        now = self._now()
        for c, spec in zip(rt.containers, pod["spec"]["containers"], strict=False):
            c.container_id = (
                "containerd://" + hashlib.sha256(f"{rt.uid}/{c.name}".encode()).hexdigest()
            )
            c.started_at = now
            self._event(
                rt,
                "Normal",
                "Pulled",
                f'Container image "{c.image}" already present on machine',
                container=c.name,
            )
            if c.script.behaviour == "start_error":
                c.exit_code, c.exit_reason, c.done = 128, "StartError", True
                c.exit_message = (
                    "failed to create containerd task: failed to create shim task: OCI runtime create "
                    "failed: runc create failed: unable to start container process: exec: "
                    '"/entrypoint": stat /entrypoint: no such file or directory: unknown'
                )
                self._event(rt, "Warning", "Failed", f"Error: {c.exit_message}", container=c.name)
                continue
            self._event(rt, "Normal", "Created", f"Created container {c.name}", container=c.name)
            self._event(rt, "Normal", "Started", f"Started container {c.name}", container=c.name)
            env = self._env(pod, spec)
            if c.script.behaviour == "local":
                self._spawn(rt, c, pod, spec, env)
            else:
                output = env.get("FAKE_OUTPUT")
                if output:
                    c.log += output.encode()
                self._schedule_script_end(rt, c)
        rt.stage = "running"
        if all(c.done for c in rt.containers):
            self._terminate(rt)
            return

        def running(st: Obj) -> None:
            all_running = not any(c.done for c in rt.containers)
            st["phase"] = "Running"
            st["conditions"] = _ready_conditions(
                now,
                scheduled=True,
                initialized=True,
                ready=all_running,
                reason="ContainersNotReady",
            )

            def state(c: ContainerRuntime) -> Obj:
                return (
                    self._terminated_state(c)
                    if c.done
                    else {"running": {"startedAt": c.started_at}}
                )

            st["containerStatuses"] = self._container_statuses(
                rt, state, ready=all_running, started=all_running
            )

        self._set_status(rt, running)

    def _schedule_script_end(self, rt: PodRuntime, c: ContainerRuntime) -> None:
        b = c.script.behaviour
        if b == "hang":
            return
        delay = c.script.seconds if b == "sleep" else self.timing.run

        def end() -> None:
            if c.done or rt.killing:
                return
            if b == "exit":
                c.exit_code, c.exit_reason = c.script.exit_code, "Error"
            elif b == "oom":
                c.exit_code, c.exit_reason = 137, "OOMKilled"
            elif b == "evicted":
                c.exit_code, c.exit_reason = 137, "Error"
            else:
                c.exit_code, c.exit_reason = 0, "Completed"
            c.done = True
            self._maybe_terminate(rt)

        self.cluster.after(delay, end)

    def _env(self, pod: Obj, spec: Obj) -> dict[str, str]:
        ns = pod["metadata"]["namespace"]
        env: dict[str, str] = {}
        for src in spec.get("envFrom") or []:
            prefix = src.get("prefix") or ""
            for key, rtype in (("configMapRef", CONFIGMAPS), ("secretRef", SECRETS)):
                ref = src.get(key)
                obj = (
                    self.store.find(rtype, ns, ref.get("name", ""))
                    if isinstance(ref, dict)
                    else None
                )
                if obj is not None:
                    env.update({prefix + k: v for k, v in _data(obj).items()})
        for item in spec.get("env") or []:
            if "value" in item:
                env[item["name"]] = _expand(str(item["value"]), env)
                continue
            vf = item.get("valueFrom") or {}
            for key, rtype in (("configMapKeyRef", CONFIGMAPS), ("secretKeyRef", SECRETS)):
                ref = vf.get(key)
                obj = (
                    self.store.find(rtype, ns, ref.get("name", ""))
                    if isinstance(ref, dict)
                    else None
                )
                if obj is not None and isinstance(ref, dict) and ref.get("key") in _data(obj):
                    env[item["name"]] = _data(obj)[ref["key"]]
            field_ref = (vf.get("fieldRef") or {}).get("fieldPath")
            if field_ref == "metadata.namespace":
                env[item["name"]] = ns
            elif field_ref == "metadata.name":
                env[item["name"]] = pod["metadata"]["name"]
        return env

    # --- local processes -----------------------------------------------------------------------

    def _spawn(
        self, rt: PodRuntime, c: ContainerRuntime, pod: Obj, spec: Obj, env: dict[str, str]
    ) -> None:
        argv = [str(a) for a in (spec.get("command") or [])] + [
            str(a) for a in (spec.get("args") or [])
        ]
        full_env = (
            dict(os.environ)
            if self.inherit_env
            else {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        )
        full_env.update(env)
        full_env["HOSTNAME"] = rt.name
        # Volumes are materialised under one directory per pod (the real mount paths may not be
        # writable here); programs that honour KUBE_FAKE_ROOT prefix their mount paths with it.
        root = self._materialise_volumes(rt, pod, spec)
        full_env["KUBE_FAKE_ROOT"] = str(root)
        if not argv:
            c.exit_code, c.exit_reason, c.done = 128, "StartError", True
            c.exit_message = "the fake kubelet needs a command for a `local` container"
            return
        try:
            proc = subprocess.Popen(
                argv,
                env=full_env,
                cwd=spec.get("workingDir") or str(root),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            c.exit_code, c.exit_reason, c.done = 128, "StartError", True
            c.exit_message = f'exec: "{argv[0]}": {exc.strerror or exc}'
            return
        c.process = proc
        threading.Thread(
            target=self._pump, args=(rt, c, proc), name=f"kube-fake-log-{rt.name}", daemon=True
        ).start()

    def _pump(self, rt: PodRuntime, c: ContainerRuntime, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            with self.store.cond:
                c.log += chunk
                self.store.cond.notify_all()
        code = proc.wait()
        proc.stdout.close()
        with self.store.cond:
            if code < 0:  # killed by a signal: the runtime reports 128 + signal number
                c.exit_code, c.exit_reason = 128 - code, "Error"
            else:
                c.exit_code, c.exit_reason = code, "Completed" if code == 0 else "Error"
            c.done = True
            self.cluster.after(0, lambda: self._maybe_terminate(rt))

    def _materialise_volumes(self, rt: PodRuntime, pod: Obj, spec: Obj) -> Path:
        if rt.root is None:
            rt.root = Path(tempfile.mkdtemp(prefix=f"kube-fake-{rt.name}-"))
        volumes = {v.get("name"): v for v in pod.get("spec", {}).get("volumes") or []}
        for mount in spec.get("volumeMounts") or []:
            target = rt.root / str(mount.get("mountPath", "")).lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            vol = volumes.get(mount.get("name")) or {}
            for key, rtype in (("configMap", CONFIGMAPS), ("secret", SECRETS)):
                src = vol.get(key)
                if not isinstance(src, dict):
                    continue
                obj = self.store.find(
                    rtype, rt.namespace, src.get("name") or src.get("secretName") or ""
                )
                if obj is None:
                    continue
                data = _data(obj)
                items = src.get("items")
                pairs = (
                    [(i["key"], i.get("path", i["key"])) for i in items]
                    if items
                    else [(k, k) for k in data]
                )
                for k, path in pairs:
                    if k in data:
                        (target / path).parent.mkdir(parents=True, exist_ok=True)
                        (target / path).write_text(data[k])
        return rt.root

    def _signal(self, c: ContainerRuntime, sig: int) -> None:
        if c.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(c.process.pid, sig)

    # --- termination ---------------------------------------------------------------------------

    def _terminated_state(self, c: ContainerRuntime) -> Obj:
        t: Obj = {
            "exitCode": c.exit_code if c.exit_code is not None else 137,
            "reason": c.exit_reason or "Error",
            "startedAt": c.started_at or self._now(),
            "finishedAt": self._now(),
        }
        if c.container_id:
            t["containerID"] = c.container_id
        if c.exit_message:
            t["message"] = c.exit_message
        return {"terminated": t}

    def _maybe_terminate(self, rt: PodRuntime) -> None:
        if rt.stage == "running" and all(c.done for c in rt.containers):
            self._terminate(rt)

    def _terminate(self, rt: PodRuntime, *, reason: str = "", message: str = "") -> None:
        if rt.stage == "terminated":
            return
        rt.stage = "terminated"
        now = self._now()
        evicted = any(c.script.behaviour == "evicted" for c in rt.containers) and not rt.killing
        ok = all(c.exit_code == 0 for c in rt.containers) and not evicted and not reason
        if evicted:
            reason = "Evicted"
            message = (
                "The node was low on resource: memory. Threshold quantity: 100Mi, available: 52Mi. Container "
                f"{rt.containers[0].name} was using 1843Mi, request is 0, has larger consumption of memory. "
            )
            self._event(rt, "Warning", "Evicted", message)

        def fn(st: Obj) -> None:
            st["phase"] = "Succeeded" if ok else "Failed"
            why = "PodCompleted" if ok else "PodFailed"
            st["conditions"] = _ready_conditions(
                now, scheduled=True, initialized=True, ready=False, reason=why
            )
            st["conditions"][0]["status"] = "False"
            if evicted:
                st["conditions"].insert(
                    0,
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "lastProbeTime": None,
                        "lastTransitionTime": now,
                        "reason": "TerminationByKubelet",
                        "message": message,
                    },
                )
            if reason:
                st["reason"] = reason
                st["message"] = message
            st["containerStatuses"] = self._container_statuses(rt, self._terminated_state)

        self._set_status(rt, fn)
        if rt.killing:
            for c in rt.containers:
                if c.container_id and c.exit_reason != "StartError":
                    self._event(
                        rt, "Normal", "Killing", f"Stopping container {c.name}", container=c.name
                    )
        self.cluster.pod_terminated(rt.namespace, rt.name)

    def kill(self, pod: Obj, *, reason: str = "", message: str = "") -> None:
        """Stop a pod's containers (deletion or deadline): SIGTERM, then SIGKILL after the grace."""
        rt = self.pods.get(pod["metadata"]["uid"])
        if rt is None or rt.stage == "terminated" or rt.killing:
            return
        rt.killing = True
        if rt.stage in ("new", "unschedulable"):
            # Never reached a node: no containers to stop; the pod just fails.
            rt.stage = "terminated"
            self._set_status(rt, lambda st: st.update(phase="Failed"))
            self.cluster.pod_terminated(rt.namespace, rt.name)
            return
        live = [c for c in rt.containers if c.process is not None and not c.done]
        if rt.stage != "running" or not live:
            for c in rt.containers:
                if not c.done:
                    if rt.stage == "running":
                        c.exit_code, c.exit_reason = 143, "Error"
                    else:
                        c.exit_code, c.exit_reason = 137, "ContainerStatusUnknown"
                        c.exit_message = "The container could not be located when the pod was deleted.  The container used to be Running"
                    c.done = True
            rt.stage = "running"
            self._terminate(rt, reason=reason, message=message)
            return
        grace = min(
            float(pod.get("spec", {}).get("terminationGracePeriodSeconds", 30)),
            self.timing.grace_cap,
        )
        for c in live:
            self._signal(c, signal.SIGTERM)
        for c in rt.containers:
            if c.process is None and not c.done:
                c.exit_code, c.exit_reason, c.done = 143, "Error", True

        def force() -> None:
            for c in live:
                if not c.done:
                    self._signal(c, signal.SIGKILL)

        timer = threading.Timer(grace, force)
        timer.daemon = True
        timer.start()

    # --- logs ----------------------------------------------------------------------------------

    def runtime(self, uid: str) -> PodRuntime | None:
        return self.pods.get(uid)

    def append_log(self, uid: str, container: str, text: str) -> None:
        rt = self.pods.get(uid)
        if rt is None:
            return
        for c in rt.containers:
            if c.name == container:
                c.log += text.encode()
        self.store.cond.notify_all()

    def shutdown(self) -> None:
        for rt in list(self.pods.values()):
            for c in rt.containers:
                if c.process is not None and c.process.poll() is None:
                    self._signal(c, signal.SIGKILL)
            if rt.root is not None:
                import shutil

                shutil.rmtree(rt.root, ignore_errors=True)


def _data(obj: Obj) -> dict[str, str]:
    data: dict[str, str] = {k: str(v) for k, v in (obj.get("data") or {}).items()}
    if obj.get("kind") == "Secret":
        data = {k: base64.b64decode(v).decode(errors="replace") for k, v in data.items()}
    for k, v in (obj.get("binaryData") or {}).items():
        data[k] = base64.b64decode(v).decode(errors="replace")
    return data


def _expand(value: str, env: dict[str, str]) -> str:
    """`$(VAR)` references to earlier variables, as the kubelet expands them."""
    return re.sub(
        r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), value
    )


__all__ = ["NODE_NAME", "Kubelet", "Script", "Timing"]
