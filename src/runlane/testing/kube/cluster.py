"""The control plane behind the local API server: the Job controller, the garbage collector, the
TTL-after-finished controller, and API-level create/delete semantics (defaults, propagation policies,
preconditions).

Everything runs in one controller thread that holds the store lock while it works, reacting to store
writes and to timers on the cluster clock. Controllers are level-triggered like the real ones: each
sync looks at the current objects and writes what is missing, one write per step, so clients watch
the same sequence of states a real cluster shows.

One module of ~900 lines, on purpose: the controllers share one lock, one clock and one sync loop
(a split would pass that state between modules at every step).
"""

from __future__ import annotations

import contextlib
import copy
import heapq
import itertools
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from runlane.testing.kube.kubelet import Kubelet, Timing
from runlane.testing.kube.store import (
    EVENTS,
    JOBS,
    PODS,
    ApiError,
    Obj,
    Propagation,
    ResourceType,
    Store,
    WatchEvent,
    conflict,
    now_rfc3339,
    parse_rfc3339,
)

ConditionStyle = Literal["modern", "legacy"]
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
ORPHAN_WARNING = (
    '299 - "child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to '
    'remove them or set propagationPolicy=Orphan to suppress this warning"'
)


@dataclass
class DeleteResult:
    body: Obj
    warning: str | None = None


def _is_true(obj: Obj, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in obj.get("status", {}).get("conditions") or []
    )


def job_finished(job: Obj) -> bool:
    return _is_true(job, "Complete") or _is_true(job, "Failed")


class Cluster:
    """Store + controllers + kubelet, driven by one background thread."""

    def __init__(
        self,
        *,
        conditions: ConditionStyle = "modern",
        timing: Timing | None = None,
        run_local: bool = False,
        inherit_env: bool = True,
        history_limit: int = 100_000,
    ) -> None:
        self.store = Store(history_limit=history_limit)
        self.conditions = conditions
        self.kubelet = Kubelet(
            self, timing or Timing(), run_local=run_local, inherit_env=inherit_env
        )
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._dirty_jobs: set[tuple[str, str]] = set()
        self._dirty_pods: set[tuple[str, str]] = set()
        self._gc: list[tuple[str, Propagation]] = []
        self._foreground: set[tuple[ResourceType, str, str]] = set()
        self._pods_by_job: dict[str, set[tuple[str, str]]] = {}
        self._ttl_scheduled: set[tuple[str, str]] = set()
        # owner uid -> dependents, so garbage collection never scans the whole store
        self._dependents: dict[str, set[tuple[ResourceType, str, str]]] = {}
        self._stop = False
        self._thread: threading.Thread | None = None
        self.last_event_name = ""  # the name of the event `record_event` wrote last
        self.store.listeners.append(self._on_event)

    # --- loop ------------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="kube-fake-controllers", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self.store.cond:
            self._stop = True
            self.store.cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self.store.lock:
            self.kubelet.shutdown()

    def after(self, delay: float, fn: Callable[[], None]) -> None:
        """Run `fn` in the controller thread `delay` cluster-clock seconds from now."""
        with self.store.cond:
            heapq.heappush(
                self._timers, (self.store.clock.now() + max(delay, 0.0), next(self._seq), fn)
            )
            self.store.cond.notify_all()

    def advance(self, seconds: float) -> None:
        """Move the cluster clock forward (deadlines, TTLs, `fake/sleep:N`) without sleeping."""
        with self.store.cond:
            self.store.clock.offset += seconds
            self.store.cond.notify_all()

    def wipe(self) -> None:
        """The cluster's state is lost (see `Store.wipe`): containers stop, controllers forget."""
        with self.store.cond:
            self.kubelet.shutdown()
            self.kubelet.pods.clear()
            self._timers.clear()
            self._dirty_jobs.clear()
            self._dirty_pods.clear()
            self._gc.clear()
            self._foreground.clear()
            self._pods_by_job.clear()
            self._ttl_scheduled.clear()
            self._dependents.clear()
            self.store.wipe()
            self.store.cond.notify_all()

    def _run(self) -> None:
        with self.store.cond:
            while not self._stop:
                if self._step():
                    continue
                timeout = 0.5
                if self._timers:
                    timeout = min(timeout, max(self._timers[0][0] - self.store.clock.now(), 0.0))
                self.store.cond.wait(timeout)

    def idle(self) -> bool:
        """True when no controller work is due right now (timers in the future are fine)."""
        with self.store.lock:
            due = bool(self._timers) and self._timers[0][0] <= self.store.clock.now()
            return not (due or self._dirty_jobs or self._dirty_pods or self._gc)

    def loop_state(self) -> str:
        """The controller loop in one line, for a test's failure message: whether its thread
        lives, its timers (the next one's due time on the cluster clock) and its queued work."""
        with self.store.lock:
            alive = self._thread is not None and self._thread.is_alive()
            timers = f"{len(self._timers)} timers"
            if self._timers:
                timers += f" (next in {self._timers[0][0] - self.store.clock.now():.3f} s)"
            return (
                f"controller thread {'alive' if alive else 'NOT RUNNING'}, {timers}, "
                f"dirty jobs={len(self._dirty_jobs)} pods={len(self._dirty_pods)}, "
                f"gc={len(self._gc)}, clock offset {self.store.clock.offset:g} s"
            )

    def _step(self) -> bool:
        worked = False
        now = self.store.clock.now()
        while self._timers and self._timers[0][0] <= now:
            _, _, fn = heapq.heappop(self._timers)
            fn()
            worked = True
        while self._dirty_pods:
            ns, name = self._dirty_pods.pop()
            self._sync_pod(ns, name)
            worked = True
        while self._dirty_jobs:
            ns, name = self._dirty_jobs.pop()
            self._sync_job(ns, name)
            worked = True
        while self._gc:
            uid, policy = self._gc.pop(0)
            self._collect(uid, policy)
            worked = True
        for rt, ns, name in list(self._foreground):
            worked |= self._finish_foreground(rt, ns, name)
        return worked

    def _on_event(self, ev: WatchEvent) -> None:
        meta = ev.obj["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        ref = (ev.rt, key[0], key[1])
        for old_ref in (ev.old or {}).get("metadata", {}).get("ownerReferences") or []:
            self._dependents.get(old_ref.get("uid"), set()).discard(ref)
        if ev.type != "DELETED":
            for new_ref in meta.get("ownerReferences") or []:
                self._dependents.setdefault(new_ref.get("uid"), set()).add(ref)
        else:
            for new_ref in meta.get("ownerReferences") or []:
                self._dependents.get(new_ref.get("uid"), set()).discard(ref)
            if not self._dependents.get(meta["uid"]):
                self._dependents.pop(meta["uid"], None)
        if ev.rt is PODS:
            labels = meta.get("labels") or {}
            job_uid = labels.get("batch.kubernetes.io/controller-uid")
            if ev.type == "ADDED":
                if job_uid:
                    self._pods_by_job.setdefault(job_uid, set()).add(key)
                self.kubelet.on_pod_added(ev.obj)
            elif ev.type == "DELETED":
                if job_uid:
                    self._pods_by_job.get(job_uid, set()).discard(key)
                self.kubelet.on_pod_removed(meta["uid"])
            else:
                self._dirty_pods.add(key)
            if labels.get("batch.kubernetes.io/job-name"):
                self._dirty_jobs.add((key[0], labels["batch.kubernetes.io/job-name"]))
        elif ev.rt is JOBS and ev.type != "DELETED":
            self._dirty_jobs.add(key)
        if ev.type == "DELETED":
            self._gc.append((meta["uid"], "Background"))
        elif (
            ev.type == "MODIFIED"
            and meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and ev.rt is not PODS
        ):
            self.after(0, lambda: self._remove_if_finalized(ev.rt, key[0], key[1]))

    def _remove_if_finalized(self, rt: ResourceType, ns: str, name: str) -> None:
        obj = self.store.find(rt, ns, name)
        if (
            obj is not None
            and obj["metadata"].get("deletionTimestamp")
            and not obj["metadata"].get("finalizers")
        ):
            self.store.remove(rt, ns, name)

    # --- events ----------------------------------------------------------------------------------

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
    ) -> None:
        meta = obj["metadata"]
        now = now_rfc3339(self.store.clock.now())
        involved: Obj = {
            "kind": rt.kind,
            "namespace": meta.get("namespace"),
            "name": meta["name"],
            "uid": meta["uid"],
            "apiVersion": rt.api_version,
            "resourceVersion": meta.get("resourceVersion"),
        }
        if field_path:
            involved["fieldPath"] = field_path
        event: Obj = {
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}"},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "source": {"component": component}
            | ({"host": "fake-node"} if component == "kubelet" else {}),
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "type": kind,
            "eventTime": None,
            "reportingComponent": component,
            "reportingInstance": "fake-node" if component == "kubelet" else "",
        }
        created = self.store.create(EVENTS, meta.get("namespace") or "default", event)
        self.last_event_name = str(created["metadata"]["name"])

    # --- API operations --------------------------------------------------------------------------

    def create(self, rt: ResourceType, namespace: str | None, body: Obj) -> Obj:
        if rt is JOBS:
            return self.store.create(rt, namespace, body, defaulter=self._default_job)
        if rt is PODS:
            return self.store.create(rt, namespace, body, defaulter=_default_pod)
        return self.store.create(rt, namespace, body)

    def _default_job(self, job: Obj) -> None:
        meta = job["metadata"]
        meta["uid"] = uid = str(uuid.uuid4())
        name = str(meta.get("name") or "")
        spec = job.setdefault("spec", {})
        spec.setdefault("parallelism", 1)
        spec.setdefault("completions", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        if self.conditions == "modern":
            spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
        template = spec.setdefault("template", {})
        tmeta = template.setdefault("metadata", {})
        labels = tmeta.setdefault("labels", {}) or {}
        tmeta["labels"] = labels
        if not spec.get("manualSelector"):
            labels.update(
                {
                    "batch.kubernetes.io/controller-uid": uid,
                    "batch.kubernetes.io/job-name": name,
                    "controller-uid": uid,
                    "job-name": name,
                }
            )
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        tspec = template.get("spec")
        if isinstance(tspec, dict):
            _default_pod_spec(tspec)
        job["status"] = {}

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        *,
        propagation: Propagation | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        grace_seconds: int | None = None,
    ) -> DeleteResult:
        with self.store.lock:
            obj = self.store.get(rt, namespace, name)
            meta = obj["metadata"]
            if uid is not None and uid != meta["uid"]:
                raise conflict(
                    rt,
                    name,
                    f"Precondition failed: UID in precondition: {uid}, UID in object meta: {meta['uid']}",
                )
            if resource_version is not None and resource_version != meta["resourceVersion"]:
                raise conflict(
                    rt,
                    name,
                    "Precondition failed: ResourceVersion in precondition: "
                    f"{resource_version}, ResourceVersion in object meta: {meta['resourceVersion']}",
                )
            warning = ORPHAN_WARNING if rt is JOBS and propagation is None else None
            # batch/v1 Jobs orphan their pods by default (kubernetes#20902); everything else cascades.
            policy: Propagation = propagation or ("Orphan" if rt is JOBS else "Background")
            if meta.get("deletionTimestamp"):
                return DeleteResult(obj, warning)
            now = now_rfc3339(self.store.clock.now())
            if policy in ("Foreground", "Orphan"):
                finalizer = "foregroundDeletion" if policy == "Foreground" else "orphan"

                def mark(o: Obj) -> None:
                    m = o["metadata"]
                    m["deletionTimestamp"] = now
                    m["deletionGracePeriodSeconds"] = 0
                    m["finalizers"] = [*(m.get("finalizers") or []), finalizer]

                new = self.store.mutate(rt, namespace, name, mark)
                if policy == "Foreground":
                    self._foreground.add((rt, namespace or "", name))
                    self._gc.append((meta["uid"], "Background"))
                else:
                    self._gc.append((meta["uid"], "Orphan"))
                self.store.cond.notify_all()
                return DeleteResult(new, warning)
            graceful = (
                rt is PODS
                and obj.get("spec", {}).get("nodeName")
                and obj.get("status", {}).get("phase") not in ("Succeeded", "Failed")
            )
            if meta.get("finalizers") or graceful:
                grace = (
                    grace_seconds
                    if grace_seconds is not None
                    else obj.get("spec", {}).get("terminationGracePeriodSeconds", 30)
                )

                def mark_deleting(o: Obj) -> None:
                    o["metadata"]["deletionTimestamp"] = now
                    o["metadata"]["deletionGracePeriodSeconds"] = grace if rt is PODS else 0

                new = self.store.mutate(rt, namespace, name, mark_deleting)
                if rt is PODS:
                    self.kubelet.kill(new)
                    self._dirty_pods.add((namespace or "", name))
                return DeleteResult(new, warning)
            if rt is PODS and obj.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
                self.kubelet.kill(obj)
            last = self.store.remove(rt, namespace, name)
            if rt is PODS and last is not None:
                return DeleteResult(last, warning)  # pods return the deleted object
            details: Obj = {"name": name, "kind": rt.plural, "uid": meta["uid"]}
            if rt.group:
                details["group"] = rt.group
            return DeleteResult(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": details,
                },
                warning,
            )

    # --- garbage collector -----------------------------------------------------------------------

    def _collect(self, owner_uid: str, policy: Propagation) -> None:
        for rt, dep in self._owned_by(owner_uid):
            m = dep["metadata"]
            if policy == "Orphan":

                def strip(o: Obj) -> None:
                    refs = [
                        r
                        for r in o["metadata"].get("ownerReferences") or []
                        if r.get("uid") != owner_uid
                    ]
                    if refs:
                        o["metadata"]["ownerReferences"] = refs
                    else:
                        o["metadata"].pop("ownerReferences", None)

                self.store.mutate(rt, m.get("namespace"), m["name"], strip)
            elif not m.get("deletionTimestamp"):
                with contextlib.suppress(ApiError):  # already gone: nothing to collect
                    self.delete(rt, m.get("namespace"), m["name"], propagation="Background")
        if policy == "Orphan":
            for rt_, objs in self.store.objects.items():
                for o in list(objs.values()):
                    if o["metadata"]["uid"] == owner_uid:
                        self._drop_finalizer(rt_, o, "orphan")

    def _owned_by(self, uid: str) -> list[tuple[ResourceType, Obj]]:
        out = []
        for rt, ns, name in sorted(
            self._dependents.get(uid, set()), key=lambda r: (r[0].plural, r[1], r[2])
        ):
            obj = self.store.find(rt, ns or None, name)
            if obj is not None:
                out.append((rt, obj))
        return out

    def _drop_finalizer(self, rt: ResourceType, obj: Obj, finalizer: str) -> None:
        m = obj["metadata"]

        def drop(o: Obj) -> None:
            rest = [f for f in o["metadata"].get("finalizers") or [] if f != finalizer]
            if rest:
                o["metadata"]["finalizers"] = rest
            else:
                o["metadata"].pop("finalizers", None)

        new = self.store.mutate(rt, m.get("namespace"), m["name"], drop)
        done = (
            rt is not PODS
            or new.get("status", {}).get("phase") in ("Succeeded", "Failed")
            or not new.get("spec", {}).get("nodeName")
        )
        if (
            new["metadata"].get("deletionTimestamp")
            and not new["metadata"].get("finalizers")
            and done
        ):
            self.store.remove(rt, m.get("namespace"), m["name"])

    def _finish_foreground(self, rt: ResourceType, ns: str, name: str) -> bool:
        obj = self.store.find(rt, ns, name)
        if obj is None:
            self._foreground.discard((rt, ns, name))
            return False
        blocking = [
            d
            for _, d in self._owned_by(obj["metadata"]["uid"])
            if any(
                r.get("uid") == obj["metadata"]["uid"] and r.get("blockOwnerDeletion")
                for r in d["metadata"].get("ownerReferences") or []
            )
        ]
        if blocking:
            return False
        self._foreground.discard((rt, ns, name))
        self._drop_finalizer(rt, obj, "foregroundDeletion")
        return True

    # --- pods ------------------------------------------------------------------------------------

    def _sync_pod(self, ns: str, name: str) -> None:
        pod = self.store.find(PODS, ns, name)
        if pod is None:
            return
        m = pod["metadata"]
        terminal = pod.get("status", {}).get("phase") in ("Succeeded", "Failed")
        if m.get("deletionTimestamp"):
            if not terminal:
                self.kubelet.kill(pod)
                return
            job_name = (m.get("labels") or {}).get("batch.kubernetes.io/job-name")
            job = self.store.find(JOBS, ns, job_name) if job_name else None
            owner_gone = (
                job is None
                or job["metadata"].get("deletionTimestamp")
                or job["metadata"]["uid"]
                != (m.get("labels") or {}).get("batch.kubernetes.io/controller-uid")
            )
            if TRACKING_FINALIZER in (m.get("finalizers") or []) and owner_gone:
                self._drop_finalizer(PODS, pod, TRACKING_FINALIZER)
                return
            if not m.get("finalizers"):
                self.store.remove(PODS, ns, name)
            return
        if terminal and TRACKING_FINALIZER in (m.get("finalizers") or []):
            labels = m.get("labels") or {}
            job = self.store.find(JOBS, ns, labels.get("batch.kubernetes.io/job-name", ""))
            if job is None or job["metadata"]["uid"] != labels.get(
                "batch.kubernetes.io/controller-uid"
            ):
                self._drop_finalizer(
                    PODS, pod, TRACKING_FINALIZER
                )  # orphaned: nobody will count it

    def pod_terminated(self, ns: str, name: str) -> None:
        self._dirty_pods.add((ns, name))

    # --- Job controller --------------------------------------------------------------------------

    def _sync_job(self, ns: str, name: str) -> None:
        job = self.store.find(JOBS, ns, name)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        uid = job["metadata"]["uid"]
        spec = job.get("spec", {})
        status = job.get("status") or {}
        now = self.store.clock.now()
        pods = [
            p
            for k in sorted(self._pods_by_job.get(uid, set()))
            if (p := self.store.find(PODS, *k)) is not None
        ]
        if job_finished(job):
            self._release_pods(job, pods, count=False)
            self._schedule_ttl(job)
            return
        succeeded = int(status.get("succeeded", 0))
        failed = int(status.get("failed", 0))
        # Count terminal pods once, then release their tracking finalizer (as the real controller does).
        for pod in pods:
            phase = pod.get("status", {}).get("phase")
            if phase in ("Succeeded", "Failed") and TRACKING_FINALIZER in (
                pod["metadata"].get("finalizers") or []
            ):
                if phase == "Succeeded":
                    succeeded += 1
                else:
                    failed += 1
                self._drop_finalizer(PODS, pod, TRACKING_FINALIZER)
        pods = [
            p
            for k in sorted(self._pods_by_job.get(uid, set()))
            if (p := self.store.find(PODS, *k)) is not None
        ]
        live = [p for p in pods if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
        active = [p for p in live if not p["metadata"].get("deletionTimestamp")]
        terminating = [p for p in live if p["metadata"].get("deletionTimestamp")]
        ready = sum(1 for p in active if _is_true(p, "Ready"))
        conds: list[Obj] = list(status.get("conditions") or [])
        nowstr = now_rfc3339(now)

        def new_cond(kind: str, reason: str, message: str, state: str = "True") -> Obj:
            return {
                "type": kind,
                "status": state,
                "lastProbeTime": nowstr,
                "lastTransitionTime": nowstr,
                "reason": reason,
                "message": message,
            }

        start_time = status.get("startTime")
        # Suspension (Kueue): no pods, a Suspended condition, the deadline clock stopped.
        if spec.get("suspend"):
            for p in active:
                self.delete(PODS, ns, p["metadata"]["name"], propagation="Background")
            if not _is_true(job, "Suspended"):
                conds = [c for c in conds if c.get("type") != "Suspended"] + [
                    new_cond("Suspended", "JobSuspended", "Job suspended")
                ]
                self.record_event(
                    JOBS, job, "Normal", "Suspended", "Job suspended", "job-controller"
                )
            self._write_status(
                job,
                conds=conds,
                succeeded=succeeded,
                failed=failed,
                active=0,
                ready=0,
                terminating=len(terminating),
                start_time=None,
            )
            return
        if _is_true(job, "Suspended"):
            conds = [c for c in conds if c.get("type") != "Suspended"] + [
                new_cond("Suspended", "JobResumed", "Job resumed", "False")
            ]
            self.record_event(JOBS, job, "Normal", "Resumed", "Job resumed", "job-controller")
            start_time = None
        if start_time is None:
            start_time = nowstr
            ads = spec.get("activeDeadlineSeconds")
            if ads:
                self.after(float(ads), lambda: self._dirty_jobs.add((ns, name)))

        failure_target = next(
            (c for c in conds if c.get("type") == "FailureTarget" and c.get("status") == "True"),
            None,
        )
        success_met = next(
            (
                c
                for c in conds
                if c.get("type") == "SuccessCriteriaMet" and c.get("status") == "True"
            ),
            None,
        )
        if failure_target is not None:
            if not live:
                conds.append(
                    new_cond("Failed", failure_target["reason"], failure_target["message"])
                )
            self._write_status(
                job,
                conds=conds,
                succeeded=succeeded,
                failed=failed,
                active=0,
                ready=0,
                terminating=len(terminating),
                start_time=start_time,
            )
            return
        if success_met is not None:
            if not live:
                conds.append(new_cond("Complete", success_met["reason"], success_met["message"]))
                self.record_event(
                    JOBS, job, "Normal", "Completed", "Job completed", "job-controller"
                )
                self._write_status(
                    job,
                    conds=conds,
                    succeeded=succeeded,
                    failed=failed,
                    active=0,
                    ready=0,
                    terminating=0,
                    start_time=start_time,
                    completion_time=nowstr,
                )
            else:
                self._write_status(
                    job,
                    conds=conds,
                    succeeded=succeeded,
                    failed=failed,
                    active=len(active),
                    ready=ready,
                    terminating=len(terminating),
                    start_time=start_time,
                )
            return

        ads = spec.get("activeDeadlineSeconds")
        completions = int(spec.get("completions") or 1)
        failure: tuple[str, str] | None = None
        if ads and now >= parse_rfc3339(start_time) + float(ads):
            failure = ("DeadlineExceeded", "Job was active longer than specified deadline")
        elif failed > int(spec.get("backoffLimit", 6)):
            failure = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
        if failure is not None:
            for p in active:
                self.delete(PODS, ns, p["metadata"]["name"], propagation="Background")
            self.record_event(JOBS, job, "Warning", failure[0], failure[1], "job-controller")
            if self.conditions == "modern":
                conds.append(new_cond("FailureTarget", *failure))
            else:
                conds.append(new_cond("Failed", *failure))
            pods_now = [
                p
                for k in sorted(self._pods_by_job.get(uid, set()))
                if (p := self.store.find(PODS, *k)) is not None
            ]
            term = sum(
                1
                for p in pods_now
                if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
            )
            self._write_status(
                job,
                conds=conds,
                succeeded=succeeded,
                failed=failed,
                active=0,
                ready=0,
                terminating=term,
                start_time=start_time,
            )
            return
        if succeeded >= completions:
            for p in active:
                self.delete(PODS, ns, p["metadata"]["name"], propagation="Background")
            reason, message = "CompletionsReached", "Reached expected number of succeeded pods"
            if self.conditions == "modern":
                conds.append(new_cond("SuccessCriteriaMet", reason, message))
                self._write_status(
                    job,
                    conds=conds,
                    succeeded=succeeded,
                    failed=failed,
                    active=0,
                    ready=0,
                    terminating=len(terminating),
                    start_time=start_time,
                )
            else:
                conds.append(new_cond("Complete", reason, message))
                self.record_event(
                    JOBS, job, "Normal", "Completed", "Job completed", "job-controller"
                )
                self._write_status(
                    job,
                    conds=conds,
                    succeeded=succeeded,
                    failed=failed,
                    active=0,
                    ready=0,
                    terminating=0,
                    start_time=start_time,
                    completion_time=nowstr,
                )
            return
        want = min(int(spec.get("parallelism", 1)), completions - succeeded) - len(active)
        if spec.get("podReplacementPolicy") == "Failed":
            pass
        elif terminating:
            want = 0  # TerminatingOrFailed: replacements wait until the old pods are gone
        for _ in range(max(want, 0)):
            pod = self._create_pod(job)
            active.append(pod)
        self._write_status(
            job,
            conds=conds,
            succeeded=succeeded,
            failed=failed,
            active=len(active),
            ready=ready,
            terminating=len(terminating),
            start_time=start_time,
        )

    def _create_pod(self, job: Obj) -> Obj:
        m = job["metadata"]
        template = copy.deepcopy(job["spec"]["template"])
        tmeta = template.get("metadata") or {}
        base = f"{m['name']}-"
        # names.SimpleNameGenerator: the base is cut to 58 so `base + 5 random` stays within 63.
        pod: Obj = {
            "metadata": {
                "generateName": base[:58],
                "labels": dict(tmeta.get("labels") or {}),
                "annotations": dict(tmeta.get("annotations") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": m["name"],
                        "uid": m["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
                "finalizers": [TRACKING_FINALIZER],
            },
            "spec": template.get("spec") or {},
        }
        if not pod["metadata"]["annotations"]:
            del pod["metadata"]["annotations"]
        created = self.store.create(PODS, m["namespace"], pod, defaulter=_default_pod)
        self.record_event(
            JOBS,
            job,
            "Normal",
            "SuccessfulCreate",
            f"Created pod: {created['metadata']['name']}",
            "job-controller",
        )
        return created

    def _release_pods(self, job: Obj, pods: list[Obj], *, count: bool) -> None:
        for pod in pods:
            if pod.get("status", {}).get("phase") in (
                "Succeeded",
                "Failed",
            ) and TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or []):
                self._drop_finalizer(PODS, pod, TRACKING_FINALIZER)

    def _write_status(
        self,
        job: Obj,
        *,
        conds: list[Obj],
        succeeded: int,
        failed: int,
        active: int,
        ready: int,
        terminating: int,
        start_time: str | None,
        completion_time: str | None = None,
    ) -> None:
        current = self.store.find(JOBS, job["metadata"]["namespace"], job["metadata"]["name"])
        if current is None or current["metadata"]["uid"] != job["metadata"]["uid"]:
            return
        new = copy.deepcopy(current)
        st: Obj = {}
        if conds:
            st["conditions"] = conds
        if start_time:
            st["startTime"] = start_time
        if completion_time or current.get("status", {}).get("completionTime"):
            st["completionTime"] = completion_time or current["status"]["completionTime"]
        # int32 counters are omitempty in the API; `ready` (and `terminating`) are pointers, always sent.
        if active:
            st["active"] = active
        if succeeded:
            st["succeeded"] = succeeded
        if failed:
            st["failed"] = failed
        st["ready"] = ready
        if self.conditions == "modern":
            st["terminating"] = terminating
            st["uncountedTerminatedPods"] = {}
        new["status"] = st
        self.store.write(JOBS, new)

    def _schedule_ttl(self, job: Obj) -> None:
        ttl = job.get("spec", {}).get("ttlSecondsAfterFinished")
        if ttl is None:
            return
        finished_at = max(
            (
                parse_rfc3339(c["lastTransitionTime"])
                for c in job["status"].get("conditions") or []
                if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            ),
            default=None,
        )
        if finished_at is None:
            return
        ns, name, uid = (
            job["metadata"]["namespace"],
            job["metadata"]["name"],
            job["metadata"]["uid"],
        )

        def expire() -> None:
            cur = self.store.find(JOBS, ns, name)
            if (
                cur is not None
                and cur["metadata"]["uid"] == uid
                and not cur["metadata"].get("deletionTimestamp")
            ):
                # The TTL-after-finished controller deletes with foreground propagation.
                self.delete(JOBS, ns, name, propagation="Foreground", uid=uid)

        key = ("ttl", uid)
        if key in self._ttl_scheduled:
            return
        self._ttl_scheduled.add(key)
        self.after(finished_at + float(ttl) - self.store.clock.now(), expire)


def _default_pod_spec(spec: Obj) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    for c in spec.get("containers") or []:
        if not isinstance(c, dict):
            continue
        image = str(c.get("image") or "")
        tag = image.rsplit("/", 1)[-1]
        c.setdefault(
            "imagePullPolicy",
            "Always" if ":" not in tag or tag.endswith(":latest") else "IfNotPresent",
        )
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        c.setdefault("resources", {})


def _default_pod(pod: Obj) -> None:
    spec = pod.setdefault("spec", {})
    if isinstance(spec, dict):
        _default_pod_spec(spec)
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        spec.setdefault("priority", 0)
    pod["status"] = {"phase": "Pending", "qosClass": _qos(spec if isinstance(spec, dict) else {})}


def _qos(spec: Obj) -> str:
    res = [c.get("resources") or {} for c in spec.get("containers") or [] if isinstance(c, dict)]
    if not any(r.get("requests") or r.get("limits") for r in res):
        return "BestEffort"
    if all(
        r.get("limits")
        and set(r.get("limits") or {}) >= {"cpu", "memory"}
        and (r.get("requests") or r.get("limits")) == r.get("limits")
        for r in res
    ):
        return "Guaranteed"
    return "Burstable"


__all__ = ["Cluster", "ConditionStyle", "DeleteResult", "job_finished"]
