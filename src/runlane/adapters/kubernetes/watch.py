"""One shared list-then-watch per namespace for every runlane Job and pod in it.

Each kind (jobs, pods) runs one loop: list with the `managed-by=runlane` selector, then watch
from the list's resourceVersion with bookmarks; when the server ends the stream, watch again
from the last version seen. A dropped connection resumes from the last version once (like
client-go); if that resume fails too, list again. On 410 Gone and on 504 "Too large resource
version" (the API server lost its state: our version is from its future; HTTP or in-stream), on
any other error, and every `relist_interval`, list again and reconcile the cache (objects gone
from the list count as deleted). A stream ending is never a final state: only what the objects
say is, and the watch never stays blind.

Runs subscribe by Job name and get a wake-up (`Nudges`) whenever their Job or one of its pods
changes (and when the watch has listed both kinds for the first time); they read the current
state from the cache. No run ever polls or opens a watch of its own. The last state of a
subscribed Job, and of its pods, outlives their deletion until the run unsubscribes: a pod
deleted (an eviction, a drain) before its Job's failure is seen still explains that failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog

from runlane.adapters.kubernetes.api import ApiStatus, Json, KubeApi, jobs_path, pods_path
from runlane.adapters.kubernetes.manifests import MANAGED_SELECTOR
from runlane.errors import TemporaryExecutorError

log = structlog.get_logger("runlane.kubernetes.watch")

Kind = Literal["jobs", "pods"]
CHANGED = "changed"
# Objects per list page. client-go's reflector asks for 500; smaller pages keep less decoded
# at once (a page of 500 pods is ~2 MB on the wire and several times that decoded) for a
# request more per 100 objects.
LIST_PAGE = 100


def _meta(obj: Json) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


_KEEP_META = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "labels",
    "annotations",
    "ownerReferences",
)


def _slim(obj: Json) -> Json:
    """Keep what decisions read: metadata (without managedFields), status, and of a Job's spec
    only `suspend`. The pod template (with the run's env) is most of an object's size, and the
    cache holds every runlane Job and pod of the namespace."""
    meta = _meta(obj)
    out: Json = {
        "metadata": {k: meta[k] for k in _KEEP_META if k in meta},
        "status": obj.get("status") or {},
    }
    spec = obj.get("spec")
    if isinstance(spec, dict) and "suspend" in spec:
        out["spec"] = {"suspend": spec["suspend"]}
    return _compact(out) if _is_final(out) else out


# A finished Job or pod stays in the cache until the cluster deletes it (the Jobs' TTL: a day by
# default), so a launcher holds every runlane Job and pod of the namespace's last day. Decoded
# from separate events, each keeps its own copy of every key ("lastTransitionTime", "type", ...)
# and short value ("True", "Succeeded", ...): ~10 KiB a run (Job + pod). Shared, ~4.6 KiB. Done
# once, when an object turns final (its later copies are rare), not on every event of a live one.
_SHARED_TEXT_MAX = 64


def _compact(value: Any) -> Any:
    if isinstance(value, dict):
        return {sys.intern(k): _compact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    if isinstance(value, str) and len(value) <= _SHARED_TEXT_MAX:
        return sys.intern(value)
    return value


def _revision(version: object) -> int | None:
    """A resourceVersion as the etcd revision it is on API servers backed by etcd (and on
    `runlane.testing.kube`); None for any other form, which is then never compared."""
    if isinstance(version, str) and version.isdigit():
        return int(version)
    return None


def _existed_at(obj: Json, listed: int | None) -> bool:
    """Whether `obj`'s own version is at or before a list's (both etcd revisions)."""
    own = _revision(_meta(obj).get("resourceVersion"))
    return listed is not None and own is not None and own <= listed


def _is_final(obj: Json) -> bool:
    """A pod that succeeded or failed, or a Job that completed or failed."""
    status = obj.get("status")
    if not isinstance(status, dict):
        return False
    if "phase" in status:
        return status["phase"] in ("Succeeded", "Failed")
    conditions = status.get("conditions")
    return isinstance(conditions, list) and any(
        isinstance(c, dict)
        and c.get("type") in ("Complete", "Failed")
        and c.get("status") == "True"
        for c in conditions
    )


def is_too_large(exc: ApiStatus) -> bool:
    """The server has not reached the resourceVersion asked for (client-go's
    `isTooLargeResourceVersionError`): a 504 Timeout with cause `ResourceVersionTooLarge`, or, from
    servers before 1.18.6, only the message."""
    causes = exc.details.get("causes") or ()
    if any(isinstance(c, dict) and c.get("reason") == "ResourceVersionTooLarge" for c in causes):
        return True
    return exc.code == 504 and "Too large resource version" in exc.message


def pod_job_name(pod: Json) -> str | None:
    """The Job a pod belongs to: its job-name label, else its owner reference."""
    meta = _meta(pod)
    labels = meta.get("labels") or {}
    name = labels.get("batch.kubernetes.io/job-name") or labels.get("job-name")
    if name:
        return str(name)
    for ref in meta.get("ownerReferences") or ():
        if ref.get("kind") == "Job":
            return str(ref.get("name"))
    return None


class Nudges:
    """A run's wake-ups from the shared watch: any change to its Job or its pods (or a cancel)
    sets it; the run's `events` loop takes it and reads the cache again. Wake-ups that come
    while one is pending are one: the loop reads the whole state each time. (An asyncio.Queue
    did this before, at ~3 KiB a run for its three deques and an Event.)"""

    __slots__ = ("_pending", "_waiter")

    def __init__(self) -> None:
        self._pending = False
        self._waiter: asyncio.Future[None] | None = None

    def empty(self) -> bool:
        return not self._pending

    def put_nowait(self, reason: str = CHANGED) -> None:
        del reason  # every wake-up means "look again"
        self._pending = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> None:
        """Until a wake-up is pending; takes it. A cancelled wait loses none (the flag stays)."""
        if not self._pending:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        self._pending = False


@dataclass(slots=True)
class _Entry:
    obj: Json
    seq: int  # the list generation it was stored under; a relist only removes older entries


@dataclass
class WatchStats:
    lists: int = 0
    watches: int = 0
    gone: int = 0  # 410 Gone, or 504 Too large resource version: both list again at once
    errors: int = 0
    events: int = 0
    bookmarks: int = 0


@dataclass
class _KindState:
    entries: dict[str, _Entry] = field(default_factory=dict)
    seq: int = 0
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    available: bool = True  # False when listing is forbidden (pods: diagnosis from the Job only)
    last_error: str | None = None  # why the latest list or watch failed; None after a list


class NamespaceWatch:
    """The cache of runlane Jobs and pods in one namespace, kept current by two watch loops."""

    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        *,
        relist_interval: float = 300.0,
        watch_timeout: int = 290,
        max_backoff: float = 30.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.relist_interval = relist_interval
        self.watch_timeout = watch_timeout
        self.max_backoff = max_backoff
        self._clock = clock
        self.stats = WatchStats()
        self._state: dict[Kind, _KindState] = {"jobs": _KindState(), "pods": _KindState()}
        self._pods_by_job: dict[str, set[str]] = {}
        self._subscribers: dict[str, Nudges] = {}
        self._tombstones: dict[str, Json] = {}
        # job name -> pod name -> the last state of a subscribed Job's pod that was deleted.
        self._gone_pods: dict[str, dict[str, Json]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._pulse = asyncio.Event()  # set and replaced whenever `stats` changes

    def _count(self, stat: str) -> None:
        setattr(self.stats, stat, getattr(self.stats, stat) + 1)
        self._pulse.set()
        self._pulse = asyncio.Event()

    async def wait_stats(self, predicate: Callable[[WatchStats], bool]) -> None:
        """Until `predicate(stats)` holds (for tests and benchmarks: no sleeping)."""
        while not predicate(self.stats):
            await self._pulse.wait()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._loop("jobs"), name=f"k8s-watch-jobs-{self.namespace}"),
                asyncio.create_task(self._loop("pods"), name=f"k8s-watch-pods-{self.namespace}"),
            ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []

    async def wait_synced(self) -> None:
        """Until both kinds have been listed once."""
        await self._state["jobs"].synced.wait()
        await self._state["pods"].synced.wait()

    @property
    def synced(self) -> bool:
        """Both kinds have been listed once (pods: or found forbidden). Until then the cache
        says nothing about any Job; subscribers are nudged when it becomes true."""
        return all(s.synced.is_set() for s in self._state.values())

    def unsynced_reason(self) -> str:
        """Why the cache is not synced yet, for a person (a run's note, a log line)."""
        parts = [
            f"{kind} ({s.last_error})" if s.last_error else f"{kind} (no answer yet)"
            for kind, s in self._state.items()
            if not s.synced.is_set()
        ]
        if not parts:
            return ""
        return (
            f"the launcher could not list the runlane {' and '.join(parts)} "
            f"of namespace {self.namespace!r}, so it could not follow the Job"
        )

    @property
    def pods_available(self) -> bool:
        return self._state["pods"].available

    # ------------------------------------------------------------------ what runs read

    def subscribe(self, job_name: str) -> Nudges:
        nudges = self._subscribers.get(job_name)
        if nudges is None:
            nudges = self._subscribers[job_name] = Nudges()
        return nudges

    def unsubscribe(self, job_name: str) -> None:
        self._subscribers.pop(job_name, None)
        self._tombstones.pop(job_name, None)
        self._gone_pods.pop(job_name, None)

    def job(self, name: str) -> Json | None:
        entry = self._state["jobs"].entries.get(name)
        return entry.obj if entry is not None else None

    def tombstone(self, name: str) -> Json | None:
        """The last state of a subscribed Job that was deleted."""
        return self._tombstones.get(name)

    def pods_of(self, job_name: str) -> list[Json]:
        entries = self._state["pods"].entries
        return [entries[p].obj for p in self._pods_by_job.get(job_name, ()) if p in entries]

    def gone_pods_of(self, job_name: str) -> list[Json]:
        """The last state of a subscribed Job's pods that were deleted (to explain its end)."""
        return list(self._gone_pods.get(job_name, {}).values())

    def seed(self, job: Json) -> None:
        """A Job we just created or fetched; the watch may not have shown it yet."""
        name = _meta(job).get("name")
        if not name or name in self._tombstones:
            return
        state = self._state["jobs"]
        if name not in state.entries:
            state.entries[name] = _Entry(_slim(job), state.seq)
            self._nudge(name)

    def counts(self) -> dict[str, int]:
        return {kind: len(s.entries) for kind, s in self._state.items()}

    # ------------------------------------------------------------------ the loops

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    async def _loop(self, kind: Kind) -> None:
        path = jobs_path(self.namespace) if kind == "jobs" else pods_path(self.namespace)
        state = self._state[kind]
        backoff = 0.5
        version: str | None = None
        listed_at = 0.0
        failed_resumes = 0  # watch attempts in a row that ended in an error with nothing read
        while True:
            try:
                if version is None or self._now() - listed_at >= self.relist_interval:
                    version = await self._list(kind, path)
                    listed_at = self._now()
                    backoff = 0.5
                    failed_resumes = 0
                budget = max(
                    1,
                    int(min(self.watch_timeout, self.relist_interval - (self._now() - listed_at))),
                )
                self._count("watches")
                async for event in self.api.watch(
                    path,
                    params={
                        "labelSelector": MANAGED_SELECTOR,
                        "resourceVersion": version,
                        "allowWatchBookmarks": True,
                        "timeoutSeconds": budget,
                    },
                    read_timeout=budget + 30.0,
                ):
                    version = self._apply_event(kind, event) or version
                    backoff = 0.5
                    failed_resumes = 0
                # The server ended the stream (its timeout, a restart): watch again from `version`.
            except asyncio.CancelledError:
                raise
            except ApiStatus as exc:
                if exc.code == 410 or is_too_large(exc):
                    self._count("gone")
                    log.info(
                        "kubernetes.watch_expired" if exc.code == 410 else "kubernetes.watch_ahead",
                        kind=kind,
                        namespace=self.namespace,
                        version=version,
                        error=exc.message,
                    )
                    version = None  # never reuse a stale (or future) version: list again
                    continue
                state.last_error = str(exc)
                if exc.code == 403 and kind == "pods":
                    if state.available:
                        log.warning(
                            "kubernetes.pods_forbidden",
                            namespace=self.namespace,
                            hint="grant pods get/list/watch for failure diagnosis",
                        )
                    state.available = False
                    self._mark_synced(state)
                self._count("errors")
                log.warning("kubernetes.watch_failed", kind=kind, error=str(exc))
                self._warn_unsynced(kind)
                version = None
                await asyncio.sleep(backoff if exc.code != 403 else self.max_backoff)
                backoff = min(backoff * 2, self.max_backoff)
            except TemporaryExecutorError as exc:
                state.last_error = str(exc)
                self._count("errors")
                failed_resumes += 1
                # A dropped stream resumes from the last version once: if that is too old the
                # server answers 410 and we list again. If the resume fails as well (the server
                # is down, or answers 504 because it lost its state and our version is from its
                # future: the HTTP error carries no Status here), list again rather than resume
                # from a version that may never come back.
                relist = failed_resumes > 1
                log.info("kubernetes.watch_dropped", kind=kind, error=str(exc), relist=relist)
                self._warn_unsynced(kind)
                if relist:
                    version = None
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)
            except Exception as exc:  # a bug must not stop the shared watch for every run
                state.last_error = f"{type(exc).__name__}: {exc}"
                self._count("errors")
                log.exception("kubernetes.watch_crashed", kind=kind)
                version = None
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff)

    async def _list(self, kind: Kind, path: str) -> str:
        state = self._state[kind]
        state.seq += 1
        seq = state.seq
        self._count("lists")
        # Page by page, each slimmed before the next is read: the whole list decoded at once
        # (1,000 Jobs and 1,000 pods, with their pod templates) was the launcher's largest
        # allocation in a burst of starts. The pages are one consistent list (`continue`), so
        # nothing is stored until the last one has come: a list that fails half-way leaves the
        # cache as it was.
        pages: list[list[tuple[str, Json]]] = []
        params: dict[str, Any] = {"labelSelector": MANAGED_SELECTOR, "limit": LIST_PAGE}
        version = ""
        while True:
            page = await self.api.request("GET", path, params=params)
            items = page.get("items") or []
            meta = page.get("metadata") or {}
            del page
            pages.append([(name, _slim(obj)) for obj in items if (name := _meta(obj).get("name"))])
            del items
            version = str(meta.get("resourceVersion") or "")
            cont = meta.get("continue")
            if not cont:
                break
            params = {**params, "continue": cont}
        seen: set[str] = set()
        for slimmed in pages:
            for name, obj in slimmed:
                seen.add(name)
                self._store(kind, name, obj, seq, slimmed=True)
        del pages
        listed = _revision(version)
        for name, entry in list(state.entries.items()):
            # An entry stored under this list's generation was seeded while the list was in
            # flight, so maybe created after its snapshot: kept, unless it already existed at the
            # snapshot's version and the list has it not. Then it was deleted before the list was
            # taken, and no watch event (they start after that version) will say so.
            if name not in seen and (entry.seq < seq or _existed_at(entry.obj, listed)):
                self._remove(kind, name, entry.obj)
        state.available = True
        state.last_error = None
        self._mark_synced(state)
        return version

    def _mark_synced(self, state: _KindState) -> None:
        """The kind is listed (or found forbidden); the first time, every run waiting for the
        cache is woken up to read it."""
        if state.synced.is_set():
            return
        state.synced.set()
        if self.synced:
            for nudges in list(self._subscribers.values()):
                nudges.put_nowait(CHANGED)

    def _warn_unsynced(self, kind: Kind) -> None:
        """A list or watch failed before the kind was ever listed: the runs of the namespace
        are followed by nothing but their deadline's backstop and their cancels until it is."""
        if self._state[kind].synced.is_set():
            return
        log.warning(
            "kubernetes.watch_unsynced",
            namespace=self.namespace,
            kind=kind,
            runs_waiting=len(self._subscribers),
            error=self._state[kind].last_error,
            hint="runs end at their deadline's backstop (or a cancel) until the list succeeds",
        )

    def _apply_event(self, kind: Kind, event: Json) -> str | None:
        etype = event.get("type")
        obj = event.get("object") or {}
        if etype == "ERROR":
            raise ApiStatus(
                int(obj.get("code") or 500),
                str(obj.get("reason") or ""),
                str(obj.get("message") or ""),
            )
        version = _meta(obj).get("resourceVersion")
        if etype == "BOOKMARK":
            self._count("bookmarks")
            return str(version) if version else None
        name = _meta(obj).get("name")
        if not name:
            return str(version) if version else None
        self._count("events")
        state = self._state[kind]
        if etype == "DELETED":
            self._remove(kind, name, obj)
        elif etype in ("ADDED", "MODIFIED"):
            self._store(kind, name, obj, state.seq)
        return str(version) if version else None

    # ------------------------------------------------------------------ cache updates

    def _store(self, kind: Kind, name: str, obj: Json, seq: int, *, slimmed: bool = False) -> None:
        state = self._state[kind]
        old = state.entries.get(name)
        meta, old_meta = _meta(obj), _meta(old.obj) if old is not None else {}
        # The uid too: after an API server lost its state, versions restart and may repeat.
        changed = (
            old is None
            or old_meta.get("resourceVersion") != meta.get("resourceVersion")
            or old_meta.get("uid") != meta.get("uid")
        )
        if old is not None and not changed:
            old.seq = seq
            return
        state.entries[name] = _Entry(obj if slimmed else _slim(obj), seq)
        if kind == "jobs":
            self._tombstones.pop(name, None)  # the name is back: a deletion seen earlier is over
            self._nudge(name)
            return
        job_name = pod_job_name(obj)
        if job_name is not None:
            self._pods_by_job.setdefault(job_name, set()).add(name)
            gone = self._gone_pods.get(job_name)
            if gone is not None and gone.pop(name, None) is not None and not gone:
                del self._gone_pods[job_name]
            self._nudge(job_name)

    def _remove(self, kind: Kind, name: str, last: Json) -> None:
        state = self._state[kind]
        entry = state.entries.pop(name, None)
        obj = entry.obj if entry is not None else last
        if kind == "jobs":
            if name in self._subscribers:
                self._tombstones[name] = _slim(obj)
            self._nudge(name)
            return
        job_name = pod_job_name(obj)
        if job_name is not None:
            pods = self._pods_by_job.get(job_name)
            if pods is not None:
                pods.discard(name)
                if not pods:
                    del self._pods_by_job[job_name]
            if job_name in self._subscribers:
                # Kept while the run follows its Job: a pod deleted (an eviction, a drain, the
                # Job controller) before the Job's Failed condition is seen still says why.
                self._gone_pods.setdefault(job_name, {})[name] = _slim(obj)
            self._nudge(job_name)

    def _nudge(self, job_name: str) -> None:
        nudges = self._subscribers.get(job_name)
        if nudges is not None:
            nudges.put_nowait(CHANGED)
