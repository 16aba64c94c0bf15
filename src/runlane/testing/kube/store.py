"""The object store of the local Kubernetes API server: resource types, `Status` errors, validation,
label and field selectors, one global resourceVersion and the watch history.

Every write replaces the stored dict with a fresh one (objects are never mutated after they are
stored), so the watch history can keep references to past states without copying them again.
All state is guarded by one lock; `cond` (on that lock) wakes watchers and the controllers.

One module of ~900 lines, on purpose: validation, selectors and the watch history all read and write
the one versioned object map under its lock.
"""

from __future__ import annotations

import copy
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

Obj = dict[str, Any]
Propagation = Literal["Orphan", "Background", "Foreground"]

# k8s.io/apimachinery/pkg/util/rand: no vowels (no words), no 0/1/3 (no look-alikes).
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
MAX_OBJECT_BYTES = 3 * 1024 * 1024  # the apiserver's request size limit
MAX_CONFIGMAP_BYTES = 1024 * 1024  # ConfigMap/Secret data limit (etcd value size in practice)


@dataclass(frozen=True)
class ResourceType:
    """One served resource: `plural` in URLs, `kind` in bodies, `group` "" for the core group."""

    plural: str
    kind: str
    group: str
    version: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )
    # Field labels a fieldSelector may use besides metadata.name/metadata.namespace.
    field_labels: tuple[str, ...] = ()
    singular: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """`jobs.batch` or `pods`, as it appears in error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


JOBS = ResourceType(
    "jobs",
    "Job",
    "batch",
    "v1",
    short_names=(),
    subresources=("status",),
    field_labels=("status.successful",),
    singular="job",
)
PODS = ResourceType(
    "pods",
    "Pod",
    "",
    "v1",
    short_names=("po",),
    subresources=("status", "log"),
    field_labels=(
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    singular="pod",
)
CONFIGMAPS = ResourceType(
    "configmaps", "ConfigMap", "", "v1", short_names=("cm",), singular="configmap"
)
SECRETS = ResourceType("secrets", "Secret", "", "v1", singular="secret", field_labels=("type",))
EVENTS = ResourceType(
    "events",
    "Event",
    "",
    "v1",
    short_names=("ev",),
    field_labels=(
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    singular="event",
)
NAMESPACES = ResourceType(
    "namespaces",
    "Namespace",
    "",
    "v1",
    namespaced=False,
    short_names=("ns",),
    verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
    field_labels=("status.phase",),
    singular="namespace",
)
RESOURCES: tuple[ResourceType, ...] = (JOBS, PODS, CONFIGMAPS, SECRETS, EVENTS, NAMESPACES)
BY_PATH: dict[tuple[str, str], ResourceType] = {(r.group, r.plural): r for r in RESOURCES}


def now_rfc3339(ts: float) -> str:
    """Kubernetes timestamps: RFC 3339, UTC, whole seconds."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(value: str) -> float:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def random_suffix(n: int = 5) -> str:
    return "".join(secrets.choice(_NAME_ALPHABET) for _ in range(n))


# --------------------------------------------------------------------------------------------------
# Errors


class ApiError(Exception):
    """An API failure, rendered as the apiserver's `Status` body with the same HTTP code."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: Obj | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> Obj:
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(rt: ResourceType, name: str | None) -> Obj:
    details: Obj = {}
    if name:
        details["name"] = name
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.plural
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.qualified} "{name}" not found', _details(rt, name))


def already_exists(rt: ResourceType, name: str, *, terminating: bool = False) -> ApiError:
    prefix = "object is being deleted: " if terminating else ""
    return ApiError(
        409, "AlreadyExists", f'{prefix}{rt.qualified} "{name}" already exists', _details(rt, name)
    )


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rt.qualified} "{name}": {why}',
        _details(rt, name),
    )


def invalid(rt: ResourceType, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422; `causes` are (field, reason, message) like FieldValueInvalid / FieldValueRequired."""
    kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    parts = [f"{f}: {m}" for f, _, m in causes]
    text = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details = _details(rt, name)
    details["kind"] = rt.kind
    details["causes"] = [{"reason": r, "message": m, "field": f} for f, r, m in causes]
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {text}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def too_large(requested: int, current: int) -> ApiError:
    """What the apiserver answers a watch or list from a resourceVersion it has not reached (it lost
    its state, or the client came from another cluster): `storage.NewTooLargeResourceVersionError`,
    a 504 Timeout whose cause client-go's reflector looks for before it lists from scratch."""
    return ApiError(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {requested}, current: {current}",
        {
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
    )


def forbidden(
    rt: ResourceType,
    name: str | None,
    user: str,
    verb: str,
    namespace: str | None,
    subresource: str = "",
) -> ApiError:
    what = f"{rt.plural}/{subresource}" if subresource else rt.plural
    subject = f'{rt.qualified} "{name}"' if name else rt.qualified
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    message = (
        f'{subject} is forbidden: User "{user}" cannot {verb} resource "{what}" '
        f'in API group "{rt.group}"{where}'
    )
    return ApiError(403, "Forbidden", message, _details(rt, name))


# --------------------------------------------------------------------------------------------------
# Selectors


@dataclass(frozen=True)
class Requirement:
    key: str
    op: Literal["=", "!=", "in", "notin", "exists", "!"]
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!":
            return self.key not in labels
        if self.op in ("=", "in"):
            return labels.get(self.key) in self.values
        # `!=` and `notin` also match objects without the key, as in apimachinery.
        return labels.get(self.key) not in self.values


_SET_REQ = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_top(text: str) -> Iterator[str]:
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            yield text[start:i]
            start = i + 1
    yield text[start:]


def parse_label_selector(text: str | None) -> list[Requirement]:
    """The apimachinery label selector grammar: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a)`, `k`, `!k`."""
    reqs: list[Requirement] = []
    if not text or not text.strip():
        return reqs
    for raw in _split_top(text):
        part = raw.strip()
        if not part:
            raise bad_request(
                f"unable to parse requirement: found '', expected: identifier (in {text!r})"
            )
        m = _SET_REQ.match(part)
        if m:
            values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
            op: Literal["in", "notin"] = "in" if m.group(2) == "in" else "notin"
            reqs.append(Requirement(_check_key(m.group(1), text), op, values))
        elif "!=" in part:
            k, v = part.split("!=", 1)
            reqs.append(
                Requirement(
                    _check_key(k.strip(), text), "!=", frozenset({_check_value(v.strip(), text)})
                )
            )
        elif "=" in part:
            k, v = part.split("==", 1) if "==" in part else part.split("=", 1)
            reqs.append(
                Requirement(
                    _check_key(k.strip(), text), "=", frozenset({_check_value(v.strip(), text)})
                )
            )
        elif part.startswith("!"):
            reqs.append(Requirement(_check_key(part[1:].strip(), text), "!"))
        else:
            reqs.append(Requirement(_check_key(part, text), "exists"))
    return reqs


def _check_key(key: str, text: str) -> str:
    if not key or " " in key or not _label_key_ok(key):
        raise bad_request(f"unable to parse requirement: invalid label key {key!r} (in {text!r})")
    return key


def _check_value(value: str, text: str) -> str:
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        raise bad_request(
            f"unable to parse requirement: invalid label value: {value!r} (in {text!r})"
        )
    return value


def _label_key_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


def labels_match(reqs: list[Requirement], obj: Obj) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(r.matches(labels) for r in reqs)


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    equal: bool
    value: str


def parse_field_selector(text: str | None, rt: ResourceType) -> list[FieldRequirement]:
    reqs: list[FieldRequirement] = []
    if not text or not text.strip():
        return reqs
    allowed = {"metadata.name", "metadata.namespace", *rt.field_labels}
    for raw in text.split(","):
        part = raw.strip()
        if "!=" in part:
            k, v = part.split("!=", 1)
            equal = False
        elif "==" in part:
            k, v = part.split("==", 1)
            equal = True
        elif "=" in part:
            k, v = part.split("=", 1)
            equal = True
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        k = k.strip()
        if k not in allowed:
            raise bad_request(f"field label not supported: {k}")
        reqs.append(FieldRequirement(k, equal, v.strip()))
    return reqs


def _field_value(obj: Obj, path: str) -> str:
    if path == "source":  # events: `source` means the reporting component
        return str(obj.get("source", {}).get("component", ""))
    if path == "status.successful":  # jobs
        return str(obj.get("status", {}).get("succeeded", 0))
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return "" if cur is None else str(cur)


def fields_match(reqs: list[FieldRequirement], obj: Obj) -> bool:
    return all((_field_value(obj, r.path) == r.value) == r.equal for r in reqs)


# --------------------------------------------------------------------------------------------------
# Validation


def _validate_labels(
    rt: ResourceType, name: str, labels: Any, field_path: str
) -> list[tuple[str, str, str]]:
    causes: list[tuple[str, str, str]] = []
    if labels is None:
        return causes
    if not isinstance(labels, dict):
        return [(field_path, "FieldValueInvalid", "Invalid value: labels must be a map")]
    for k, v in labels.items():
        if not _label_key_ok(str(k)):
            causes.append(
                (
                    field_path,
                    "FieldValueInvalid",
                    f'Invalid value: "{k}": name part must be a valid label key',
                )
            )
        sv = str(v)
        if len(sv) > 63:
            causes.append(
                (
                    field_path,
                    "FieldValueInvalid",
                    f'Invalid value: "{sv}": must be no more than 63 characters',
                )
            )
        elif not _LABEL_VALUE.match(sv):
            causes.append(
                (field_path, "FieldValueInvalid", f'Invalid value: "{sv}": {_LABEL_VALUE_MSG}')
            )
    return causes


def validate_name(rt: ResourceType, name: str) -> list[tuple[str, str, str]]:
    if not name:
        return [
            (
                "metadata.name",
                "FieldValueRequired",
                "Required value: name or generateName is required",
            )
        ]
    if rt in (NAMESPACES,):
        if len(name) > 63 or not _DNS1123_LABEL.match(name):
            return [
                ("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {_LABEL_MSG}')
            ]
        return []
    if len(name) > 253:
        return [
            (
                "metadata.name",
                "FieldValueInvalid",
                f'Invalid value: "{name}": must be no more than 253 characters',
            )
        ]
    if not _DNS1123_SUBDOMAIN.match(name):
        return [
            ("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {_SUBDOMAIN_MSG}')
        ]
    return []


def _validate_pod_spec(spec: Any, path: str) -> list[tuple[str, str, str]]:
    causes: list[tuple[str, str, str]] = []
    if not isinstance(spec, dict):
        return [(path, "FieldValueRequired", "Required value")]
    containers = spec.get("containers")
    if not containers:
        causes.append((f"{path}.containers", "FieldValueRequired", "Required value"))
        return causes
    seen: set[str] = set()
    for i, c in enumerate(containers):
        cname = c.get("name") if isinstance(c, dict) else None
        cpath = f"{path}.containers[{i}]"
        if not cname:
            causes.append((f"{cpath}.name", "FieldValueRequired", "Required value"))
        elif len(cname) > 63 or not _DNS1123_LABEL.match(cname):
            causes.append(
                (f"{cpath}.name", "FieldValueInvalid", f'Invalid value: "{cname}": {_LABEL_MSG}')
            )
        elif cname in seen:
            causes.append((f"{cpath}.name", "FieldValueDuplicate", f'Duplicate value: "{cname}"'))
        else:
            seen.add(cname)
        if isinstance(c, dict) and not c.get("image"):
            causes.append((f"{cpath}.image", "FieldValueRequired", "Required value"))
    return causes


def validate(rt: ResourceType, obj: Obj) -> None:
    """Raise 422 Invalid for what the apiserver would reject (a useful subset, see module docs)."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    causes = validate_name(rt, name)
    causes += _validate_labels(rt, name, meta.get("labels"), "metadata.labels")
    if rt is JOBS:
        spec = obj.get("spec") or {}
        template = spec.get("template") or {}
        tspec = template.get("spec")
        # The Job name is copied into the pod template's `batch.kubernetes.io/job-name` label.
        if len(name) > 63 and not causes:
            causes.append(
                (
                    "spec.template.labels",
                    "FieldValueInvalid",
                    f'Invalid value: "{name}": must be no more than 63 characters',
                )
            )
        causes += _validate_labels(
            rt,
            name,
            (template.get("metadata") or {}).get("labels"),
            "spec.template.metadata.labels",
        )
        causes += _validate_pod_spec(tspec, "spec.template.spec")
        restart = (tspec or {}).get("restartPolicy") if isinstance(tspec, dict) else None
        if restart not in ("Never", "OnFailure"):
            if restart is None:
                causes.append(
                    (
                        "spec.template.spec.restartPolicy",
                        "FieldValueRequired",
                        'Required value: valid values: "OnFailure", "Never"',
                    )
                )
            else:
                causes.append(
                    (
                        "spec.template.spec.restartPolicy",
                        "FieldValueNotSupported",
                        f'Unsupported value: "{restart}": supported values: "OnFailure", "Never"',
                    )
                )
        for key in (
            "backoffLimit",
            "activeDeadlineSeconds",
            "ttlSecondsAfterFinished",
            "completions",
            "parallelism",
        ):
            v = spec.get(key)
            if v is not None and (
                not isinstance(v, int)
                or isinstance(v, bool)
                or v < (1 if key == "activeDeadlineSeconds" else 0)
            ):
                bound = (
                    "greater than 0"
                    if key == "activeDeadlineSeconds"
                    else "greater than or equal to 0"
                )
                causes.append(
                    (f"spec.{key}", "FieldValueInvalid", f"Invalid value: {v}: must be {bound}")
                )
    elif rt is PODS:
        causes += _validate_pod_spec(obj.get("spec"), "spec")
    elif rt in (CONFIGMAPS, SECRETS):
        size = sum(
            len(str(k)) + len(str(v))
            for part in ("data", "binaryData", "stringData")
            for k, v in (obj.get(part) or {}).items()
        )
        if size > MAX_CONFIGMAP_BYTES:
            causes.append(
                (
                    "",
                    "FieldValueTooLong",
                    f"Too long: must have at most {MAX_CONFIGMAP_BYTES} bytes",
                )
            )
    if causes:
        raise invalid(rt, name, causes)


# --------------------------------------------------------------------------------------------------
# The store


@dataclass
class WatchEvent:
    rv: int
    type: Literal["ADDED", "MODIFIED", "DELETED"]
    rt: ResourceType
    obj: Obj
    old: Obj | None = None


@dataclass
class Watcher:
    """One open watch stream; the store sets `command` to make its handler stop."""

    rt: ResourceType
    namespace: str | None
    command: Literal["", "end", "abort", "expire"] = ""


class Clock:
    """Wall time plus an offset that tests move forward with `advance()` instead of sleeping."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset


Key = tuple[str, str]  # (namespace or "", name)


@dataclass
class Store:
    """Objects by resource type, the global resourceVersion and the event history watches replay."""

    clock: Clock = field(default_factory=Clock)
    history_limit: int = 100_000
    lock: threading.RLock = field(default_factory=threading.RLock)
    cond: threading.Condition = field(init=False)
    rv: int = 1000
    # Resuming a watch from an rv older than this gets 410 Expired (history before it is compacted).
    oldest_rv: int = 1000
    history: list[WatchEvent] = field(default_factory=list)
    objects: dict[ResourceType, dict[Key, Obj]] = field(default_factory=dict)
    watchers: set[int] = field(default_factory=set)
    active_watches: dict[int, Watcher] = field(default_factory=dict)
    # Called (under the lock) after every write; the controllers hook in here.
    listeners: list[Callable[[WatchEvent], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cond = threading.Condition(self.lock)
        for rt in RESOURCES:
            self.objects.setdefault(rt, {})
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.put_namespace(ns)

    # --- low level -----------------------------------------------------------------------------

    def _emit(
        self,
        kind: Literal["ADDED", "MODIFIED", "DELETED"],
        rt: ResourceType,
        obj: Obj,
        old: Obj | None,
    ) -> None:
        ev = WatchEvent(self.rv, kind, rt, obj, old)
        self.history.append(ev)
        if len(self.history) > self.history_limit:
            drop = len(self.history) - self.history_limit
            self.oldest_rv = self.history[drop - 1].rv
            del self.history[:drop]
        for listener in list(self.listeners):
            listener(ev)
        self.cond.notify_all()

    def _bump(self) -> str:
        self.rv += 1
        return str(self.rv)

    @staticmethod
    def key(rt: ResourceType, namespace: str | None, name: str) -> Key:
        return (namespace or "" if rt.namespaced else "", name)

    def put_namespace(self, name: str) -> None:
        with self.lock:
            if (("", name)) in self.objects[NAMESPACES]:
                return
            self._insert(
                NAMESPACES,
                None,
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": name},
                    "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"},
                },
            )

    def _insert(self, rt: ResourceType, namespace: str | None, obj: Obj) -> Obj:
        meta = obj.setdefault("metadata", {})
        meta.setdefault(
            "uid", str(uuid.uuid4())
        )  # a Job's defaulter sets it early for its selector
        meta["creationTimestamp"] = now_rfc3339(self.clock.now())
        if rt.namespaced:
            meta["namespace"] = namespace
        if rt is JOBS or rt is PODS:
            meta.setdefault("generation", 1)
        meta["resourceVersion"] = self._bump()
        self.objects[rt][self.key(rt, namespace, meta["name"])] = obj
        self._emit("ADDED", rt, obj, None)
        return obj

    # --- reads ---------------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        with self.lock:
            obj = self.objects[rt].get(self.key(rt, namespace, name))
            if obj is None:
                raise not_found(rt, name)
            return obj

    def find(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        with self.lock:
            return self.objects[rt].get(self.key(rt, namespace, name))

    def select(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[Obj], int]:
        lreqs = parse_label_selector(label_selector)
        freqs = parse_field_selector(field_selector, rt)
        with self.lock:
            items = [
                o
                for (ns, _), o in self.objects[rt].items()
                if (namespace is None or ns == namespace)
                and labels_match(lreqs, o)
                and fields_match(freqs, o)
            ]
            items.sort(key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]))
            return items, self.rv

    def owned_by(self, uid: str) -> list[tuple[ResourceType, Obj]]:
        with self.lock:
            return [
                (rt, o)
                for rt, objs in self.objects.items()
                for o in objs.values()
                if any(ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or [])
            ]

    # --- writes --------------------------------------------------------------------------------

    def create(
        self,
        rt: ResourceType,
        namespace: str | None,
        body: Obj,
        defaulter: Callable[[Obj], None] | None = None,
    ) -> Obj:
        obj = copy.deepcopy(body)
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        for server_field in (
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "managedFields",
        ):
            meta.pop(server_field, None)
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
        else:
            meta.pop("namespace", None)
        if rt in (JOBS, PODS):
            obj.pop("status", None)  # status is a subresource: ignored on create
        with self.lock:
            if rt.namespaced and ("", namespace or "") not in self.objects[NAMESPACES]:
                raise not_found(NAMESPACES, namespace or "")
            if not meta.get("name") and meta.get("generateName"):
                for _ in range(10):
                    candidate = f"{meta['generateName']}{random_suffix()}"
                    if self.key(rt, namespace, candidate) not in self.objects[rt]:
                        meta["name"] = candidate
                        break
            if defaulter is not None:
                defaulter(obj)
            validate(rt, obj)
            name = meta["name"]
            existing = self.objects[rt].get(self.key(rt, namespace, name))
            if existing is not None:
                raise already_exists(
                    rt, name, terminating=bool(existing["metadata"].get("deletionTimestamp"))
                )
            return self._insert(rt, namespace, obj)

    def write(self, rt: ResourceType, obj: Obj, *, expect_rv: str | None = None) -> Obj:
        """Store a new version of an existing object (a fresh dict); bumps rv and emits MODIFIED."""
        with self.lock:
            meta = obj["metadata"]
            key = self.key(rt, meta.get("namespace"), meta["name"])
            old = self.objects[rt].get(key)
            if old is None:
                raise not_found(rt, meta["name"])
            if expect_rv and expect_rv != old["metadata"]["resourceVersion"]:
                raise conflict(
                    rt,
                    meta["name"],
                    "the object has been modified; please apply your changes "
                    "to the latest version and try again",
                )
            if obj == old:
                return old  # a no-op write does not bump the resourceVersion, as in the apiserver
            meta["resourceVersion"] = self._bump()
            self.objects[rt][key] = obj
            self._emit("MODIFIED", rt, obj, old)
            return obj

    def mutate(
        self, rt: ResourceType, namespace: str | None, name: str, fn: Callable[[Obj], None]
    ) -> Obj:
        """Copy, change with `fn`, write. The usual way controllers update objects."""
        with self.lock:
            new = copy.deepcopy(self.get(rt, namespace, name))
            fn(new)
            return self.write(rt, new)

    def remove(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        """Drop an object now (emits DELETED carrying its last state with a new rv)."""
        with self.lock:
            key = self.key(rt, namespace, name)
            old = self.objects[rt].pop(key, None)
            if old is None:
                return None
            last = copy.deepcopy(old)
            last["metadata"]["resourceVersion"] = self._bump()
            self._emit("DELETED", rt, last, old)
            return last

    # --- watch history -------------------------------------------------------------------------

    def events_since(self, rv: int) -> list[WatchEvent]:
        """History after `rv`; raises 410 Expired when it was compacted away."""
        with self.lock:
            if rv < self.oldest_rv:
                raise gone(f"too old resource version: {rv} ({self.oldest_rv})")
            lo, hi = 0, len(self.history)
            while lo < hi:  # history is sorted by rv
                mid = (lo + hi) // 2
                if self.history[mid].rv <= rv:
                    lo = mid + 1
                else:
                    hi = mid
            return self.history[lo:]

    def wait_for_rv(self, rv: int, timeout: float) -> None:
        """Block (up to `timeout` seconds) until the store reaches `rv`, like the watch cache does
        for a request from a version it has not seen yet; then 504 Too large resource version."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.rv < rv:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise too_large(rv, self.rv)
                self.cond.wait(min(left, 0.5))

    def wipe(self, rv: int = 1000) -> None:
        """Lose every object but the namespaces and go back to `rv`, with no watch events (an etcd
        restored from an old backup, or a fresh one): every resourceVersion clients hold is now
        from the future."""
        with self.lock:
            for rt in RESOURCES:
                if rt is not NAMESPACES:
                    self.objects[rt].clear()
            self.history.clear()
            self.rv = self.oldest_rv = rv

    def compact(self) -> None:
        """Forget the whole history: any watch resumed from an older rv now gets 410."""
        with self.lock:
            self.history.clear()
            self.oldest_rv = self.rv

    def iter_all(
        self, rts: Iterable[ResourceType] | None = None
    ) -> Iterator[tuple[ResourceType, Obj]]:
        with self.lock:
            for rt in rts or RESOURCES:
                yield from ((rt, o) for o in list(self.objects[rt].values()))
