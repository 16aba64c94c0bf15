"""The pod executor (`executor: pod`): one run attempt = one `batch/v1` Job.

- `start` creates the Job under a deterministic name; 409 → fetch it and adopt it only if its
  labels name the same run and attempt (else `name_collision`). A lost create response followed
  by a retry therefore never makes a second Job. Params too large for the environment go into a
  ConfigMap owned by the Job.
- `events` reads the namespace's shared watch (watch.py) through a per-run wake-up (`Nudges`) and
  the pure classifier (diagnose.py); it never polls and never opens a watch of its own. Until
  the watch has listed once (a list refused or failing), only the run's cancel and the
  deadline's backstop end it, never a hang.
- Pending past `start_timeout`, or a pending reason that never resolves (InvalidImageName), or
  a Job the cluster failed to stop at its deadline: pod events (and the log tail) are saved,
  then the Job is deleted (Background propagation, UID precondition).
- `cancel` saves the log tail, deletes the Job; the run ends `cancelled` once its pod is gone.
- Closing the executor (launcher shutdown) stops the watches and never deletes a Job: the next
  launcher reattaches.

Over 600 lines on purpose: it is one Executor over one Job, and every helper below is a call that
Executor makes on the API with the run's state at hand. What is separable is already apart:
classifying what the cluster says (diagnose.py), names and manifests (names.py, manifests.py), the
shared watch (watch.py), log reads (logs.py), permissions (rbac.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from runlane.adapters.kubernetes.api import (
    ApiStatus,
    Json,
    KubeApi,
    config_maps_path,
    events_path,
    jobs_path,
    pods_path,
)
from runlane.adapters.kubernetes.config import load_cluster_config, resolve_namespace
from runlane.adapters.kubernetes.diagnose import (
    Diagnosis,
    diagnose,
    diagnose_deleted,
    ended_at,
    waiting_since,
)
from runlane.adapters.kubernetes.manifests import (
    CONTAINER,
    DEFAULT_TTL_SECONDS,
    PARAMS_VOLUME,
    JobPlan,
    belongs_to,
    build_job_plan,
)
from runlane.adapters.kubernetes.names import job_name
from runlane.adapters.kubernetes.rbac import Permission, check_permissions, missing_required
from runlane.adapters.kubernetes.watch import NamespaceWatch, Nudges
from runlane.core.runs import EndReason, Outcome, RunStatus
from runlane.errors import ConfigError, PermanentExecutorError, TemporaryExecutorError
from runlane.ports import Execution, ExecutionEvent, ExecutionSpec

log = structlog.get_logger("runlane.kubernetes")

LOG_TAIL_LINES = 100
LOG_TAIL_BYTES = 64 * 1024
NOTE_MAX_CHARS = 4096
EVENTS_MAX = 20


@dataclass(slots=True)
class _Run:
    """One supervised Job (`Execution.handle`)."""

    spec: ExecutionSpec
    name: str
    namespace: str
    watch: NamespaceWatch
    uid: str | None
    backstop_at: float  # loop time after which we end the Job ourselves (the cluster did not)
    saved_log: str | None = None
    cancel_requested: bool = False
    cancel_grace: float = 0.0
    cancel_until: float = 0.0
    deleted: bool = False  # our delete of the Job went through (or found it gone)
    finished: bool = False
    # Taken over from another launcher: the pod may have waited to start long before this one
    # saw it, so its start timeout counts from the cluster's timestamps (`_pending_since`).
    reattached: bool = False


@dataclass
class PodExecutor:
    """Runs each attempt as a Kubernetes Job. `api` defaults to the configured cluster."""

    api_client: KubeApi | None = None
    start_timeout: float = 600.0
    ttl_seconds: int = DEFAULT_TTL_SECONDS
    relist_interval: float = 300.0
    watch_timeout: int = 290
    scratch: bool | str = False
    check_rbac: bool = True
    rbac_cache_seconds: float = 600.0  # how long an allowed review set answers for a namespace
    rbac_refused_cache_seconds: float = 30.0  # … and a refusal (so a fixed Role shows soon)
    deadline_slack: float = 60.0
    cancel_wait: float = 60.0
    settle_seconds: float = 1.0  # how long a failed Job waits for its pod's last state
    # A Job the launcher must delete (start timeout, deadline backstop) but could not (the API
    # away, a refusal): looked at again this much later, until the delete goes through.
    delete_retry_seconds: float = 10.0
    environ: Mapping[str, str] | None = None  # namespace and cluster lookup; default os.environ
    # The launcher's wall clock (epoch seconds), compared with the cluster's timestamps.
    wall_clock: Callable[[], float] = time.time
    launcher_env: Mapping[str, str] | None = None  # `${VAR}` in images; default os.environ
    name: str = "pod"
    # Starts that build their Job and send it at once; the others wait before building it. The
    # API client sends 32 requests at a time anyway (KubeApi max_in_flight): without this a
    # burst of 1,000 starts held 1,000 Job manifests (~3.7 KiB each) while it did.
    start_concurrency: int = 64
    _start_slots: asyncio.Semaphore | None = field(default=None, init=False)
    _watches: dict[str, NamespaceWatch] = field(default_factory=dict, init=False)
    _rbac: dict[str, tuple[float, list[Permission]]] = field(default_factory=dict, init=False)
    # The review set under way per namespace: every start that finds no fresh answer awaits it.
    _rbac_inflight: dict[str, asyncio.Task[list[Permission]]] = field(
        default_factory=dict, init=False
    )
    rbac_reviews: int = field(default=0, init=False)  # review sets sent (len(PERMISSIONS) each)
    _events_forbidden: set[str] = field(default_factory=set, init=False)
    _runs: dict[tuple[str, int], _Run] = field(default_factory=dict, init=False)

    # ------------------------------------------------------------------ plumbing

    @property
    def api(self) -> KubeApi:
        if self.api_client is None:
            self.api_client = KubeApi.from_config(load_cluster_config(self.environ))
        return self.api_client

    def _require_api(self, *, when: str) -> None:
        """The cluster's client, or the error a run gets when the cluster configuration is
        broken (a KUBECONFIG naming no file): permanent on start, temporary on reattach (the
        Job may be running; the run waits until the configuration is fixed)."""
        try:
            self.api  # noqa: B018 - builds the client from the configuration
        except ConfigError as exc:
            if when == "reattach":
                raise TemporaryExecutorError(
                    f"cannot look for the run's Job: {exc.message}",
                    error_code="config_error",
                    retry_after=60.0,
                ) from exc
            raise PermanentExecutorError(
                f"pod runs are refused: {exc.message}", error_code="config_error"
            ) from exc

    def watch_for(self, namespace: str) -> NamespaceWatch:
        """The namespace's shared watch, started on first use."""
        watch = self._watches.get(namespace)
        if watch is None:
            watch = NamespaceWatch(
                self.api,
                namespace,
                relist_interval=self.relist_interval,
                watch_timeout=self.watch_timeout,
            )
            self._watches[namespace] = watch
        watch.start()
        return watch

    @property
    def watches(self) -> Mapping[str, NamespaceWatch]:
        return self._watches

    async def aclose(self) -> None:
        """Stop the watches and close the connection. Jobs are left running on purpose."""
        for review in list(self._rbac_inflight.values()):
            review.cancel()
        self._rbac_inflight.clear()
        for watch in self._watches.values():
            await watch.close()
        self._watches.clear()
        if self.api_client is not None:
            await self.api_client.aclose()

    def _namespace(self, spec: ExecutionSpec) -> str:
        return resolve_namespace((spec.profile or {}).get("namespace"), self.environ)

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    async def ensure_allowed(self, namespace: str) -> None:
        """Refuse pod runs when the launcher may not create, watch and delete Jobs.

        The answer is cached per namespace: 10 minutes when allowed, 30 seconds when refused
        (`rbac_cache_seconds`, `rbac_refused_cache_seconds`).
        Single-flight: however many starts find no fresh answer at once (a launcher restarting
        onto a backlog, a fan-out, the cache expiring under load), one review set goes to the
        API server and every one of them gets its answer — or its error. An error is not
        cached: the next start after it asks again. A start cancelled while it waits does
        not cancel the review the others wait on.
        """
        if not self.check_rbac:
            return
        missing = await self._missing_permissions(namespace)
        if missing:
            verbs = ", ".join(f"{p.verb} {p.label}" for p in missing)
            raise PermanentExecutorError(
                f"the launcher may not {verbs} in namespace {namespace!r}; grant them with a "
                "Role and RoleBinding (deploy/base/rbac.yaml) — `runlane doctor` shows the report",
                error_code="forbidden",
            )

    async def _missing_permissions(self, namespace: str) -> list[Permission]:
        cached = self._rbac.get(namespace)
        if cached is not None:
            checked_at, missing = cached
            ttl = self.rbac_refused_cache_seconds if missing else self.rbac_cache_seconds
            if self._now() - checked_at < ttl:
                return missing
        review = self._rbac_inflight.get(namespace)
        if review is None or review.done():
            review = asyncio.create_task(
                self._review(namespace), name=f"k8s-rbac-review-{namespace}"
            )
            # Read its error even when every waiter was cancelled (no "never retrieved").
            review.add_done_callback(lambda t: t.cancelled() or t.exception())
            self._rbac_inflight[namespace] = review
        return await asyncio.shield(review)

    async def _review(self, namespace: str) -> list[Permission]:
        """One SelfSubjectAccessReview set; its answer is cached, its error is not."""
        self.rbac_reviews += 1
        try:
            checks = await check_permissions(self.api, namespace)
        finally:
            self._rbac_inflight.pop(namespace, None)
        missing = missing_required(checks)
        for perm, allowed in checks:
            if allowed is False and not perm.required:
                log.warning(
                    "kubernetes.permission_missing",
                    namespace=namespace,
                    resource=perm.label,
                    verb=perm.verb,
                )
        self._rbac[namespace] = (self._now(), missing)
        return missing

    # ------------------------------------------------------------------ the Executor port

    async def start(self, spec: ExecutionSpec) -> Execution:
        known = self._runs.get((spec.run_id, spec.attempt))
        if known is not None and not known.finished:
            return self._execution(known)
        if self._start_slots is None:
            self._start_slots = asyncio.Semaphore(max(1, self.start_concurrency))
        async with self._start_slots:
            known = self._runs.get((spec.run_id, spec.attempt))  # started while this one waited
            if known is not None and not known.finished:
                return self._execution(known)
            return await self._start(spec)

    def _plan(self, spec: ExecutionSpec, namespace: str) -> JobPlan:
        """The Job (and params ConfigMap) of one run attempt, as this executor makes it."""
        return build_job_plan(
            spec,
            namespace=namespace,
            launcher_env=os.environ if self.launcher_env is None else self.launcher_env,
            ttl_seconds=self.ttl_seconds,
            scratch=self.scratch,
        )

    async def _start(self, spec: ExecutionSpec) -> Execution:
        self._require_api(when="start")
        namespace = self._namespace(spec)
        plan = self._plan(spec, namespace)
        await self.ensure_allowed(namespace)
        watch = self.watch_for(namespace)
        watch.subscribe(plan.name)
        try:
            job = await self._create_or_adopt(plan, spec)
        except BaseException:
            watch.unsubscribe(plan.name)
            raise
        try:
            if plan.params is not None:
                await self._ensure_config_map(plan, job)
        except Exception:
            # The Job exists but cannot run as planned: never leave it behind, unsupervised
            # (its pod would wait for the ConfigMap volume forever).
            watch.unsubscribe(plan.name)
            await self._delete(
                namespace, plan.name, (job.get("metadata") or {}).get("uid"), spec.run_id
            )
            raise
        except BaseException:
            watch.unsubscribe(plan.name)
            raise
        watch.seed(job)
        return self._execution(self._track(spec, plan.name, namespace, watch, job))

    async def reattach(self, spec: ExecutionSpec) -> Execution | None:
        """The run's Job, found by its deterministic name. A Job that is not there any more
        raises PermanentExecutorError (`deleted_externally`): unlike an inline process, a Job
        does not end with its launcher, so someone (or its TTL) removed it."""
        known = self._runs.get((spec.run_id, spec.attempt))
        if known is not None and not known.finished:
            return self._execution(known)
        self._require_api(when="reattach")
        namespace = self._namespace(spec)
        name = job_name(spec.job, spec.run_id, spec.attempt)
        await self.ensure_allowed(namespace)
        watch = self.watch_for(namespace)
        watch.subscribe(name)
        try:
            job = await self._get_job(namespace, name)
        except BaseException:
            watch.unsubscribe(name)
            raise
        if job is None:
            watch.unsubscribe(name)
            raise PermanentExecutorError(
                f"the Job {namespace}/{name} no longer exists: it was deleted, or removed by its "
                "TTL, while no launcher watched it; the run's outcome is unknown",
                error_code="deleted_externally",
            )
        if not belongs_to(job, spec.run_id, spec.attempt):
            watch.unsubscribe(name)
            raise _collision(namespace, name)
        try:
            await self._ensure_params_of_adopted(spec, namespace, job)
        except BaseException:
            watch.unsubscribe(name)
            raise
        watch.seed(job)
        log.info("kubernetes.reattached", run_id=spec.run_id, job=f"{namespace}/{name}")
        return self._execution(self._track(spec, name, namespace, watch, job, reattached=True))

    async def events(self, execution: Execution) -> AsyncIterator[ExecutionEvent]:
        run = _run_of(execution)
        watch = run.watch
        nudges = watch.subscribe(run.name)
        try:
            announced: str | None = None
            pending_since: float | None = None
            settle_until: float | None = None
            delete_retry_at = 0.0  # when a Job we failed to delete is tried again
            while True:
                now = self._now()
                wake_at = run.backstop_at
                if not watch.synced:
                    # The namespace's Jobs (or pods) were never listed (the list refused, the
                    # API away): the cache says nothing about this Job yet. Only what needs no
                    # cache ends the run meanwhile, its cancel and the deadline's backstop, so
                    # the run never hangs and a short blip of the API ends nothing early.
                    ended_event = await self._end_unsynced(run, now)
                    if ended_event is not None:
                        yield ended_event
                        return
                    if run.cancel_requested:
                        wake_at = min(wake_at, run.cancel_until)
                    await _woken(nudges, wake_at - self._now())
                    continue
                job = watch.job(run.name)
                pods = watch.pods_of(run.name)
                # Pods deleted while the run followed its Job (an eviction, a drain): their last
                # state still explains how the Job ended, never what it is doing now.
                gone = watch.gone_pods_of(run.name)
                if job is None:
                    last = watch.tombstone(run.name)
                    seen = [*pods, *gone]
                    ended = diagnose_deleted(last, seen)
                    if run.cancel_requested and ended.status != RunStatus.SUCCESS:
                        if pods and watch.pods_available and now < run.cancel_until:
                            wake_at = run.cancel_until  # the pod is still terminating
                        else:
                            yield ExecutionEvent("finished", self._cancelled(run, pods))
                            return
                    else:
                        yield ExecutionEvent(
                            "finished", await self._final(run, ended, seen), ended_at(last, seen)
                        )
                        return
                else:
                    found = diagnose(job, pods)
                    if found.final and gone:
                        pods = [*pods, *gone]
                        found = diagnose(job, pods)
                    if found.final and found.error_code == "job_failed" and watch.pods_available:
                        # Jobs and pods come on two streams: the Job's Failed condition can
                        # arrive before the pod's terminated state. Give the pod stream a
                        # moment, then read the pods once.
                        if settle_until is None:
                            settle_until = now + self.settle_seconds
                        if now < settle_until:
                            found = Diagnosis("running")
                            wake_at = min(wake_at, settle_until)
                        else:
                            pods = [*(await self._fetch_pods(run) or pods), *gone]
                            found = diagnose(job, pods)
                    # After our delete the pod's death may show as a failure first: that is
                    # the cancel. A success that came before the delete is kept.
                    if found.final and not (
                        run.cancel_requested and found.status != RunStatus.SUCCESS
                    ):
                        yield ExecutionEvent(
                            "finished", await self._final(run, found, pods), ended_at(job, pods)
                        )
                        return
                    if run.cancel_requested:
                        if now >= run.cancel_until and not run.deleted:
                            # The delete did not go through (the API away through its retries,
                            # or refused): the Job runs on, so the run is not cancelled yet.
                            # Try again; the backstop below still bounds the wait.
                            run.deleted = await self._delete_job(run)
                            now = self._now()
                            run.cancel_until = now + run.cancel_grace + self.cancel_wait
                        elif now >= run.cancel_until:
                            yield ExecutionEvent("finished", self._cancelled(run, pods))
                            return
                        wake_at = min(wake_at, run.cancel_until)
                    elif found.phase == "running":
                        pending_since = None
                        if announced != "running":
                            announced = "running"
                            yield ExecutionEvent("running")
                    elif found.phase in ("queued", "pending"):
                        if announced is None:
                            announced = "pending"
                            yield ExecutionEvent("pending")
                        if found.phase == "queued":
                            pending_since = None  # suspended (Kueue): waiting is not failing
                        else:
                            if pending_since is None:
                                pending_since = self._pending_since(run, job, pods, now)
                            give_up: tuple[str, str, str] | None = None
                            if found.fail_now:
                                give_up = (
                                    EndReason.START_FAILED,
                                    found.error_code or "start_error",
                                    f"cannot start: {found.summary()}",
                                )
                            elif now - pending_since >= self.start_timeout:
                                give_up = (
                                    EndReason.START_TIMEOUT,
                                    found.error_code or "start_timeout",
                                    f"still pending after start_timeout ({self.start_timeout:g}s): "
                                    f"{found.summary()}",
                                )
                            else:
                                wake_at = min(wake_at, pending_since + self.start_timeout)
                            if give_up is not None:
                                if now >= delete_retry_at:
                                    end_reason, code, note = give_up
                                    outcome = await self._give_up(
                                        run,
                                        found,
                                        pods,
                                        RunStatus.FAILURE,
                                        end_reason,
                                        code,
                                        note,
                                        must_end=now >= run.backstop_at,
                                    )
                                    if outcome is not None:
                                        yield ExecutionEvent("finished", outcome)
                                        return
                                    # Not deleted: the Job may still start. Not ended (a retry
                                    # would run beside it): try the delete again later.
                                    delete_retry_at = self._now() + self.delete_retry_seconds
                                wake_at = min(wake_at, delete_retry_at)
                    if now >= run.backstop_at:
                        yield await self._backstop(
                            run,
                            found,
                            pods,
                            "the cluster did not end the Job at its activeDeadlineSeconds; "
                            "the launcher deleted it",
                            why="the Job's end was read directly at the deadline's backstop: "
                            "the namespace watch had not shown it",
                        )
                        return
                await _woken(nudges, wake_at - self._now())
        finally:
            run.finished = True
            watch.unsubscribe(run.name)
            self._runs.pop((run.spec.run_id, run.spec.attempt), None)

    def _pending_since(self, run: _Run, job: Json, pods: list[Json], now: float) -> float:
        """When (loop time) a pending run's start timeout counts from. A run this launcher
        started: now, when it first sees it pending (its Job was made a moment ago). A run taken
        over: since its pod was made (else its Job started), by the cluster's clock, so a
        launcher restarted every few minutes still times out a pod that never starts. Never
        later than now (a cluster clock ahead of the launcher's), never more than the start
        timeout back."""
        if not run.reattached:
            return now
        since = waiting_since(job, pods)
        if since is None:
            return now
        waited = self.wall_clock() - since.timestamp()
        return now - min(max(waited, 0.0), self.start_timeout)

    async def _end_unsynced(self, run: _Run, now: float) -> ExecutionEvent | None:
        """The end of a run whose namespace watch never listed (`events`): its cancel, once the
        Job's delete went through and the pod's grace and the cancel wait passed, or the
        deadline's backstop. The note says why the launcher could not follow the Job."""
        reason = run.watch.unsynced_reason()
        if run.cancel_requested and now >= run.cancel_until:
            if not run.deleted:  # not gone: the Job runs on; try again, the backstop bounds it
                run.deleted = await self._delete_job(run)
                run.cancel_until = self._now() + run.cancel_grace + self.cancel_wait
            else:
                log.warning("kubernetes.ended_unsynced", run_id=run.spec.run_id, reason=reason)
                return ExecutionEvent("finished", _noted(self._cancelled(run, []), reason))
        if now < run.backstop_at:
            return None
        log.warning("kubernetes.ended_unsynced", run_id=run.spec.run_id, reason=reason)
        return await self._backstop(
            run,
            Diagnosis("running"),
            [],
            f"{reason}; the launcher deleted the Job at its deadline's backstop",
            why=reason,
        )

    async def _backstop(
        self, run: _Run, found: Diagnosis, pods: list[Json], note: str, *, why: str | None = None
    ) -> ExecutionEvent:
        """The deadline's backstop. First one direct read of the Job: the cluster may have ended
        it (its activeDeadlineSeconds, or on its own) while the watch's view was behind or
        broken (a namespace whose Jobs list fails again and again keeps its last view), and
        then the run ends as the Job really did (`why` noted: how the launcher lost sight of
        it). Otherwise the run ends `timeout` whatever the delete does (its note says so when
        the Job may still be running)."""
        try:
            job = await self.api.request("GET", jobs_path(run.namespace, run.name))
        except (ApiStatus, TemporaryExecutorError):
            job = None  # away or refused: the view at hand is all there is
        if job is not None:
            fresh = await self._fetch_pods(run) or pods
            read = diagnose(job, fresh)
            if read.final:
                final = await self._final(run, read, fresh)
                return ExecutionEvent(
                    "finished", final if why is None else _noted(final, why), ended_at(job, fresh)
                )
            found, pods = read, fresh
        outcome = await self._give_up(
            run, found, pods, RunStatus.TIMEOUT, EndReason.DEADLINE, "deadline", note, must_end=True
        )
        assert outcome is not None  # must_end: never None
        return ExecutionEvent("finished", outcome)

    def prepare(self) -> None:
        """Nothing to start ahead: the API client connects, and the RBAC check runs, on the
        first pod run (they need the namespace it runs in)."""

    def stop_following(self, execution: Execution) -> None:
        """Stop following the run (the Job is left running): its watch subscription and its
        entry go, as when `events` ends."""
        run = _run_of(execution)
        key = (run.spec.run_id, run.spec.attempt)
        if self._runs.get(key) is run:  # else its events ended, or a newer one follows the Job
            del self._runs[key]
            run.watch.unsubscribe(run.name)

    async def cancel(self, execution: Execution, *, grace: float) -> None:
        """Save the log tail, then delete the Job (Background, UID precondition). The pod gets
        its own `terminationGracePeriodSeconds` (the run's kill grace); `events` ends the run
        `cancelled` once the pod is gone. Idempotent."""
        run = _run_of(execution)
        if run.cancel_requested or run.finished:
            return
        run.cancel_requested = True
        run.cancel_grace = max(grace, 0.0)
        run.cancel_until = self._now() + run.cancel_grace + self.cancel_wait
        pods = run.watch.pods_of(run.name)
        run.saved_log = await self._log_tail(run, pods)
        run.deleted = await self._delete_job(run)
        if run.deleted:  # the pod's grace counts from a delete that went through
            run.cancel_until = self._now() + run.cancel_grace + self.cancel_wait
        run.watch.subscribe(run.name).put_nowait("cancel")

    async def logs(self, execution: Execution, *, tail_bytes: int = 65536) -> str:
        run = _run_of(execution)
        pod = _newest(run.watch.pods_of(run.name) or await self._fetch_pods(run))
        if pod is None:
            return run.saved_log or ""
        text = await self._read_log(
            run.namespace,
            pod,
            tail_lines=max(LOG_TAIL_LINES, tail_bytes // 40),
            limit_bytes=tail_bytes * 2,
        )
        if text is None:
            return run.saved_log or ""
        data = text.encode()
        return data[-tail_bytes:].decode(errors="replace") if len(data) > tail_bytes else text

    async def follow_logs(self, execution: Execution) -> AsyncIterator[str]:
        """The running pod's log, line by line, until the container ends (`logs --follow`)."""
        run = _run_of(execution)
        pod = _newest(run.watch.pods_of(run.name) or await self._fetch_pods(run))
        if pod is None:
            return
        path = f"{pods_path(run.namespace, pod['metadata']['name'])}/log"
        try:
            async for line in self.api.stream_text(
                path, params={"container": CONTAINER, "follow": True}
            ):
                yield line
        except ApiStatus:
            return

    # ------------------------------------------------------------------ helpers

    def _track(
        self,
        spec: ExecutionSpec,
        name: str,
        namespace: str,
        watch: NamespaceWatch,
        job: Json,
        *,
        reattached: bool = False,
    ) -> _Run:
        run = _Run(
            spec=spec,
            name=name,
            namespace=namespace,
            watch=watch,
            uid=(job.get("metadata") or {}).get("uid"),
            backstop_at=self._now()
            + max(spec.deadline_seconds, 1.0)
            + spec.kill_grace_seconds
            + self.deadline_slack,
            reattached=reattached,
        )
        self._runs[(spec.run_id, spec.attempt)] = run
        return run

    @staticmethod
    def _execution(run: _Run) -> Execution:
        return Execution(
            run_id=run.spec.run_id,
            attempt=run.spec.attempt,
            external_id=f"{run.namespace}/{run.name}",
            handle=run,
        )

    async def _create_or_adopt(self, plan: JobPlan, spec: ExecutionSpec) -> Json:
        ns, name = plan.namespace, plan.name
        try:
            return await self.api.request("POST", jobs_path(ns), body=plan.job)
        except ApiStatus as exc:
            if exc.code == 409:
                existing = await self._get_job(ns, name)
                if existing is None:  # deleted between our create and our get: try again soon
                    raise TemporaryExecutorError(
                        f"Job {ns}/{name} was being deleted; will create it again",
                        error_code="name_busy",
                        retry_after=2.0,
                    ) from exc
                if belongs_to(existing, spec.run_id, spec.attempt):
                    log.info("kubernetes.adopted", run_id=spec.run_id, job=f"{ns}/{name}")
                    return existing
                raise _collision(ns, name) from exc
            if exc.code == 404:
                raise PermanentExecutorError(
                    f"namespace {ns!r} does not exist (or the launcher cannot see it)",
                    error_code="config_error",
                ) from exc
            raise exc.permanent(f"create Job {ns}/{name}") from exc

    async def _fetch_pods(self, run: _Run) -> list[Json]:
        try:
            answer = await self.api.request(
                "GET",
                pods_path(run.namespace),
                params={"labelSelector": f"batch.kubernetes.io/job-name={run.name}"},
            )
        except (ApiStatus, TemporaryExecutorError):
            return []
        return list(answer.get("items") or [])

    async def _get_job(self, namespace: str, name: str) -> Json | None:
        try:
            return await self.api.request("GET", jobs_path(namespace, name))
        except ApiStatus as exc:
            if exc.code == 404:
                return None
            raise exc.permanent(f"read Job {namespace}/{name}") from exc

    async def _ensure_params_of_adopted(
        self, spec: ExecutionSpec, namespace: str, job: Json
    ) -> None:
        """The params ConfigMap of a Job found on takeover, made if it is missing: a launcher
        that died between creating the Job and its ConfigMap left a pod waiting for the volume
        (`ContainerCreating`) until its start timeout. One create (409: it is there) for a Job
        that mounts it and has not ended."""
        if not _mounts_params(job) or diagnose(job).final:
            return
        try:
            plan = self._plan(spec, namespace)
        except PermanentExecutorError as exc:  # (e.g. its image names a variable unset here)
            log.warning("kubernetes.params_not_rebuilt", run_id=spec.run_id, error=str(exc))
            return
        if plan.params is None:
            return
        try:
            await self._ensure_config_map(plan, job)
        except PermanentExecutorError as exc:
            # Refused for another reason than "it is there" (a namespace at its ConfigMap quota
            # answers 403 before it looks): most often the ConfigMap is there and the pod runs
            # with it. The Job is left alone; a pod that does wait for the volume is ended by
            # its start timeout, with the pod's FailedMount events in the run's note.
            log.warning("kubernetes.params_not_made", run_id=spec.run_id, error=str(exc))

    async def _ensure_config_map(self, plan: JobPlan, job: Json) -> None:
        uid = (job.get("metadata") or {}).get("uid") or ""
        try:
            await self.api.request(
                "POST", config_maps_path(plan.namespace), body=plan.config_map(uid)
            )
        except ApiStatus as exc:
            if exc.code != 409:  # 409: made by an earlier try of this same start
                raise exc.permanent(f"create the params ConfigMap of {plan.name}") from exc

    async def _delete_job(self, run: _Run) -> bool:
        return await self._delete(run.namespace, run.name, run.uid, run.spec.run_id)

    async def _delete(self, namespace: str, name: str, uid: str | None, run_id: str) -> bool:
        """Delete a run's Job: Background propagation, UID precondition, a few retries. True
        when the Job is gone or going (deleted, not found, or the name holds another Job)."""
        body: Json = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": "Background",
        }
        if uid:
            body["preconditions"] = {"uid": uid}
        delay = 0.5
        for attempt in range(4):
            if attempt:
                await asyncio.sleep(delay)
                delay *= 2
            try:
                await self.api.request("DELETE", jobs_path(namespace, name), body=body)
                log.info("kubernetes.deleted", run_id=run_id, job=f"{namespace}/{name}")
                return True
            except ApiStatus as exc:
                if exc.code == 404:
                    return True
                if exc.code == 409:  # UID precondition: the name now holds another Job
                    log.warning("kubernetes.delete_skipped", job=name, reason=exc.message)
                    return True
                log.warning("kubernetes.delete_failed", job=name, error=str(exc))
                return False
            except TemporaryExecutorError as exc:
                log.warning("kubernetes.delete_retry", job=name, error=str(exc))
        log.warning("kubernetes.delete_failed", job=name, error="the API was away on every try")
        return False

    async def _read_log(
        self, namespace: str, pod: Json, *, tail_lines: int, limit_bytes: int
    ) -> str | None:
        path = f"{pods_path(namespace, pod['metadata']['name'])}/log"
        try:
            return await self.api.text(
                path,
                params={"container": CONTAINER, "tailLines": tail_lines, "limitBytes": limit_bytes},
            )
        except (ApiStatus, TemporaryExecutorError):
            return None  # never started (400), already gone (404), or the API is away

    async def _log_tail(self, run: _Run, pods: list[Json]) -> str | None:
        pod = _newest(pods)
        if pod is None or not _container_started(pod):
            return None
        return await self._read_log(
            run.namespace, pod, tail_lines=LOG_TAIL_LINES, limit_bytes=LOG_TAIL_BYTES
        )

    async def _pod_events(self, run: _Run, pods: list[Json]) -> str:
        """`Warning Failed: …` lines from the events of the pod (or of the Job when no pod)."""
        if run.namespace in self._events_forbidden:
            return ""
        pod = _newest(pods)
        subject = pod["metadata"]["name"] if pod is not None else run.name
        try:
            answer = await self.api.request(
                "GET",
                events_path(run.namespace),
                params={"fieldSelector": f"involvedObject.name={subject}", "limit": 100},
            )
        except ApiStatus as exc:
            if exc.code == 403:
                self._events_forbidden.add(run.namespace)
            return ""
        except TemporaryExecutorError:
            return ""
        items = sorted(
            answer.get("items") or [],
            key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""),
        )[-EVENTS_MAX:]
        lines = []
        for ev in items:
            count = ev.get("count") or 1
            times = f" (x{count})" if count > 1 else ""
            lines.append(
                f"{ev.get('type', '')} {ev.get('reason', '')}: {ev.get('message', '')}{times}"
            )
        return "\n".join(lines)

    async def _final(self, run: _Run, found: Diagnosis, pods: list[Json]) -> Outcome:
        if found.status == RunStatus.SUCCESS:
            return found.outcome(log_tail=run.saved_log)
        log_tail = run.saved_log if run.saved_log is not None else await self._log_tail(run, pods)
        note = found.summary()
        if log_tail is None or found.end_reason == EndReason.START_FAILED:
            events = await self._pod_events(run, pods)
            if events:
                note = f"{note}\npod events:\n{events}"
        return found.outcome(log_tail=log_tail, note=note[:NOTE_MAX_CHARS])

    async def _give_up(
        self,
        run: _Run,
        found: Diagnosis,
        pods: list[Json],
        status: RunStatus,
        end_reason: str,
        error_code: str,
        note: str,
        *,
        must_end: bool,
    ) -> Outcome | None:
        """Save what explains the failure, then delete the Job. None when the delete did not go
        through and the run need not end yet (`must_end`): the Job may still run, so the run
        is not ended (a retry would run beside it); the caller tries again later."""
        log_tail = await self._log_tail(run, pods)
        events = await self._pod_events(run, pods)
        if events:
            note = f"{note}\npod events:\n{events}"
        if not await self._delete_job(run):
            if not must_end:
                return None
            note = f"{note}\nthe launcher could not delete the Job: it may still be running"
        return Outcome(
            status,
            end_reason,
            exit_code=found.exit_code,
            error_code=error_code,
            log_tail=log_tail,
            note=note[:NOTE_MAX_CHARS],
            retryable=error_code != "invalid_image",
        )

    @staticmethod
    def _cancelled(run: _Run, pods: list[Json]) -> Outcome:
        note = "the Job was deleted on request"
        if pods:
            note += f"; its pod was still terminating after {run.spec.kill_grace_seconds:g}s grace"
        return Outcome(RunStatus.CANCELLED, EndReason.CANCELLED, log_tail=run.saved_log, note=note)


async def _woken(nudges: Nudges, seconds: float) -> None:
    """Until the run's next wake-up, or `seconds` at most."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, seconds)):
            await nudges.get()


def _noted(outcome: Outcome, why: str) -> Outcome:
    """`outcome` with `why` added to its note."""
    if not why:
        return outcome
    note = f"{outcome.note}\n{why}" if outcome.note else why
    return dataclasses.replace(outcome, note=note[:NOTE_MAX_CHARS])


def _run_of(execution: Execution) -> _Run:
    run = execution.handle
    if not isinstance(run, _Run):
        raise TypeError(f"execution {execution.external_id} was not started by the pod executor")
    return run


def _collision(namespace: str, name: str) -> PermanentExecutorError:
    return PermanentExecutorError(
        f"a Job named {namespace}/{name} exists and does not belong to this run and attempt; "
        "delete it or check what made it",
        error_code="name_collision",
    )


def _newest(pods: list[Json]) -> Json | None:
    if not pods:
        return None
    return max(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))


def _mounts_params(job: Json) -> bool:
    """Whether a Job's pod mounts the run's params ConfigMap (params over the env budget)."""
    pod_spec = (((job.get("spec") or {}).get("template") or {}).get("spec")) or {}
    return any(v.get("name") == PARAMS_VOLUME for v in pod_spec.get("volumes") or ())


def _container_started(pod: Json) -> bool:
    status: Mapping[str, Any] = pod.get("status") or {}
    for cs in status.get("containerStatuses") or ():
        state = cs.get("state") or {}
        if state.get("running") or state.get("terminated"):
            return True
    return False
