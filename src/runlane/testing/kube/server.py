"""The HTTP face of the local Kubernetes API server: routing, discovery, list/watch streaming,
pods/log, SelfSubjectAccessReview, RBAC answers, and injected faults.

Built on the standard library's threading HTTP server (HTTP/1.1, keep-alive, one thread per
connection) rather than an async framework: the package ships to users, so it should need nothing
beyond runlane's own dependencies, and watches and `follow` logs are plain chunked responses that a
blocking thread streams simply while it waits on the store's condition variable.

One module of ~1,400 lines, on purpose: it is one request handler for one API, whose routes share
the parsed request, the access rules and the fault plan; the store, the controllers and the
kubelet it serves are modules of their own.
"""

from __future__ import annotations

import contextlib
import copy
import json
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from runlane.testing.kube.cluster import Cluster
from runlane.testing.kube.store import (
    BY_PATH,
    JOBS,
    MAX_OBJECT_BYTES,
    NAMESPACES,
    PODS,
    RESOURCES,
    ApiError,
    Obj,
    ResourceType,
    Watcher,
    WatchEvent,
    bad_request,
    fields_match,
    forbidden,
    gone,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)

KUBE_VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.0-runlane-fake",
    "gitCommit": "0" * 40,
    "gitTreeState": "clean",
    "buildDate": "2024-08-13T00:00:00Z",
    "goVersion": "go1.22.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}
SSAR_GROUP = "authorization.k8s.io"


class DropConnection(Exception):
    """Close the socket without answering (a lost response)."""


# --------------------------------------------------------------------------------------------------
# Faults and access rules


@dataclass
class Fault:
    status: int
    remaining: int
    retry_after: int | None = None
    method: str | None = None
    path: str | None = None
    exact: bool = False  # `path` is the whole path (a collection's list, not its items)

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method.upper() == method) and (
            self.path is None or (self.path == path if self.exact else self.path in path)
        )


@dataclass
class Faults:
    """Injected failures, consumed by matching requests in arrival order."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    rules: list[Fault] = field(default_factory=list)
    # Creates whose response is dropped after the object was stored: (remaining, path substring).
    dropped_creates: list[list[Any]] = field(default_factory=list)

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
        with self.lock:
            self.rules.append(Fault(status, count, retry_after, method, path, exact))

    def drop_create_response(self, count: int = 1, *, path: str | None = None) -> None:
        with self.lock:
            self.dropped_creates.append([count, path])

    def take(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for rule in self.rules:
                if rule.remaining > 0 and rule.matches(method, path):
                    rule.remaining -= 1
                    return rule
            self.rules = [r for r in self.rules if r.remaining > 0]
            return None

    def take_drop(self, path: str) -> bool:
        with self.lock:
            for entry in self.dropped_creates:
                if entry[0] > 0 and (entry[1] is None or entry[1] in path):
                    entry[0] -= 1
                    return True
            return False

    def clear(self) -> None:
        with self.lock:
            self.rules.clear()
            self.dropped_creates.clear()


def fault_error(fault: Fault) -> ApiError:
    headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
    if fault.status == 429:
        details: Obj = {"causes": [{"reason": "RetryAfter"}]}
        if fault.retry_after is not None:
            details["retryAfterSeconds"] = fault.retry_after
        return ApiError(
            429, "TooManyRequests", "Too many requests, please try again later.", details, headers
        )
    if fault.status == 503:
        return ApiError(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
            None,
            headers,
        )
    if fault.status == 504:
        return ApiError(
            504,
            "Timeout",
            "Timeout: request did not complete within the allotted timeout",
            None,
            headers,
        )
    if fault.status == 500:
        return ApiError(
            500,
            "InternalError",
            "Internal error occurred: injected fault",
            {"causes": [{"message": "injected fault"}]},
            headers,
        )
    return ApiError(fault.status, "Unknown", f"injected fault {fault.status}", None, headers)


@dataclass
class AccessRules:
    """What the token's user may do: rules `"VERB RESOURCE"`, e.g. `"create jobs.batch"`,
    `"get pods/log"`, `"list,watch pods"`, `"* configmaps"`, or `"*"` for everything."""

    rules: list[tuple[frozenset[str], str]] = field(
        default_factory=lambda: [(frozenset({"*"}), "*")]
    )

    @classmethod
    def parse(cls, allow: Iterable[str] | None) -> AccessRules:
        if allow is None:
            return cls()
        rules = []
        for rule in allow:
            parts = rule.split()
            if parts == ["*"]:
                rules.append((frozenset({"*"}), "*"))
                continue
            if len(parts) != 2:
                raise ValueError(f"access rule {rule!r}: expected 'VERB RESOURCE'")
            rules.append((frozenset(v.strip() for v in parts[0].split(",")), parts[1]))
        return cls(rules)

    def allows(self, verb: str, group: str, resource: str, subresource: str = "") -> bool:
        name = (f"{resource}.{group}" if group else resource) + (
            f"/{subresource}" if subresource else ""
        )
        for verbs, res in self.rules:
            if ("*" in verbs or verb in verbs) and res in ("*", name):
                return True
        return False


# --------------------------------------------------------------------------------------------------
# Discovery


def _api_resources(group: str, version: str) -> Obj:
    resources: list[Obj] = []
    for rt in RESOURCES:
        if rt.group != group or rt.version != version:
            continue
        resources.append(
            {
                "name": rt.plural,
                "singularName": rt.singular,
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": list(rt.verbs),
                **({"shortNames": list(rt.short_names)} if rt.short_names else {}),
                **({"categories": ["all"]} if rt in (JOBS, PODS) else {}),
            }
        )
        for sub in rt.subresources:
            verbs = ["get"] if sub == "log" else ["get", "patch", "update"]
            resources.append(
                {
                    "name": f"{rt.plural}/{sub}",
                    "singularName": "",
                    "namespaced": rt.namespaced,
                    "kind": "Pod" if sub == "log" else rt.kind,
                    "verbs": verbs,
                }
            )
    if group == SSAR_GROUP:
        resources.append(
            {
                "name": "selfsubjectaccessreviews",
                "singularName": "selfsubjectaccessreview",
                "namespaced": False,
                "kind": "SelfSubjectAccessReview",
                "verbs": ["create"],
            }
        )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def _group(name: str) -> Obj:
    gv = {"groupVersion": f"{name}/v1", "version": "v1"}
    return {"name": name, "versions": [gv], "preferredVersion": gv}


API_GROUPS = {
    "kind": "APIGroupList",
    "apiVersion": "v1",
    "groups": [_group("batch"), _group(SSAR_GROUP)],
}


# --------------------------------------------------------------------------------------------------
# Tables (what `kubectl get` asks for)


def _age(ts: str | None, now: float) -> str:
    from runlane.testing.kube.store import parse_rfc3339

    if not ts:
        return "<unknown>"
    secs = max(int(now - parse_rfc3339(ts)), 0)
    if secs < 120:
        return f"{secs}s"
    if secs < 7200:
        return f"{secs // 60}m"
    return f"{secs // 3600}h"


def _row(rt: ResourceType, obj: Obj, now: float) -> list[Any]:
    meta = obj["metadata"]
    st = obj.get("status") or {}
    if rt is JOBS:
        conds = {c["type"] for c in st.get("conditions") or [] if c.get("status") == "True"}
        status = (
            "Complete"
            if "Complete" in conds
            else "Failed"
            if "Failed" in conds
            else "Suspended"
            if "Suspended" in conds
            else "Running"
        )
        return [
            meta["name"],
            status,
            f"{st.get('succeeded', 0)}/{obj.get('spec', {}).get('completions', 1)}",
            "",
            _age(meta.get("creationTimestamp"), now),
        ]
    if rt is PODS:
        statuses = st.get("containerStatuses") or []
        ready = sum(1 for s in statuses if s.get("ready"))
        shown = st.get("reason") or st.get("phase", "Pending")
        for s in statuses:
            state = s.get("state") or {}
            if "waiting" in state and state["waiting"].get("reason"):
                shown = state["waiting"]["reason"]
            elif "terminated" in state:
                shown = state["terminated"].get("reason") or shown
        if meta.get("deletionTimestamp"):
            shown = "Terminating"
        return [
            meta["name"],
            f"{ready}/{len(obj.get('spec', {}).get('containers') or [])}",
            shown,
            0,
            _age(meta.get("creationTimestamp"), now),
        ]
    return [meta["name"], _age(meta.get("creationTimestamp"), now)]


def _table(rt: ResourceType, items: list[Obj], rv: str, now: float) -> Obj:
    if rt is JOBS:
        names = ["Name", "Status", "Completions", "Duration", "Age"]
    elif rt is PODS:
        names = ["Name", "Ready", "Status", "Restarts", "Age"]
    else:
        names = ["Name", "Age"]
    cols = [
        {
            "name": n,
            "type": "integer" if n == "Restarts" else "string",
            "format": "name" if n == "Name" else "",
            "description": n,
            "priority": 0,
        }
        for n in names
    ]
    rows = [
        {
            "cells": _row(rt, o, now),
            "object": {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": o["metadata"],
            },
        }
        for o in items
    ]
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "columnDefinitions": cols,
        "rows": rows,
    }


# --------------------------------------------------------------------------------------------------
# Patches


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (strategic merge patches are applied the same way: lists replace)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$"):
            continue  # strategic-merge directives
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def json_patch(target: Obj, ops: list[Obj]) -> Obj:
    """RFC 6902 add/replace/remove/test on a copy."""
    doc = copy.deepcopy(target)

    def walk(path: str) -> tuple[Any, str]:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]
        cur: Any = doc
        for p in parts[:-1]:
            cur = cur[int(p)] if isinstance(cur, list) else cur.setdefault(p, {})
        return cur, parts[-1]

    for op in ops:
        parent, key = walk(str(op.get("path", "")))
        kind = op.get("op")
        try:
            if kind in ("add", "replace"):
                if isinstance(parent, list):
                    idx = len(parent) if key == "-" else int(key)
                    if kind == "add":
                        parent.insert(idx, op.get("value"))
                    else:
                        parent[idx] = op.get("value")
                else:
                    parent[key] = op.get("value")
            elif kind == "remove":
                del parent[int(key) if isinstance(parent, list) else key]
            elif kind == "test":
                value = parent[int(key)] if isinstance(parent, list) else parent.get(key)
                if value != op.get("value"):
                    raise ApiError(
                        422,
                        "Invalid",
                        f"the server rejected our request due to an error in our request: test failed at {op.get('path')}",
                    )
            else:
                raise bad_request(f"Unexpected kind: {kind}")
        except (KeyError, IndexError, ValueError) as exc:
            raise ApiError(
                422,
                "Invalid",
                f"the server rejected our request due to an error in our request: {exc}",
            ) from exc
    return doc


# --------------------------------------------------------------------------------------------------
# The server


@dataclass
class RequestRecord:
    method: str
    path: str
    query: str
    status: int
    at: float


@dataclass
class _Route:
    group: str
    rt: ResourceType | None
    namespace: str | None
    name: str | None
    sub: str
    special: str = ""


class ApiServer:
    """Owns the HTTP listener; the `Cluster` holds the objects and controllers."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        user: str = "runlane-fake",
        allow: Iterable[str] | None = None,
        bookmark_interval: float = 1.0,
        expired: Literal["stream", "http"] = "stream",
        watch_timeout: float | None = None,
        require_auth: bool = False,
    ) -> None:
        self.cluster = cluster
        self.store = cluster.store
        self.host = host
        self.token = token
        self.require_auth = require_auth
        self.user = user
        self.access = AccessRules.parse(allow)
        self.bookmark_interval = bookmark_interval
        self.expired = expired
        self.watch_timeout = watch_timeout
        # How long a watch or list from a resourceVersion the store has not reached waits for it
        # before 504 "Too large resource version" (the watch cache's blockTimeout is 3 s).
        self.too_large_wait = 3.0
        self.faults = Faults()
        self.requests: deque[RequestRecord] = deque(maxlen=200_000)
        self._bookmark_now = 0
        self._next_watch_id = 0
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        self.httpd = _HTTPServer((host, port), _Handler, self)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="kube-fake-http",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        self.end_watches(abort=True)
        self.httpd.shutdown()
        self.httpd.server_close()
        self.drop_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # --- watch control -----------------------------------------------------------------------------

    def end_watches(self, *, abort: bool = False, expire: bool = False) -> int:
        with self.store.cond:
            watchers = list(self.store.active_watches.values())
            for w in watchers:
                w.command = "expire" if expire else "abort" if abort else "end"
            self.store.cond.notify_all()
            return len(watchers)

    def restart(
        self, jump: int = 1000, *, lose_state: bool = False, keep: socket.socket | None = None
    ) -> None:
        """Drop every connection; the resourceVersion jumps by `jump` and the history is gone, or
        (`lose_state`) every object is gone and the resourceVersion goes backwards."""
        if lose_state:
            self.cluster.wipe()
        else:
            with self.store.lock:
                self.store.rv += jump
                self.store.compact()
        self.end_watches(abort=True)
        self.drop_connections(keep=keep)

    def send_bookmarks(self) -> None:
        with self.store.cond:
            self._bookmark_now += 1
            self.store.cond.notify_all()

    def drop_connections(self, *, keep: socket.socket | None = None) -> None:
        """Shut every client connection (but `keep`: the admin request asking for it)."""
        with self._conns_lock:
            conns = [c for c in self._conns if c is not keep]
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def track(self, conn: socket.socket, add: bool) -> None:
        with self._conns_lock:
            (self._conns.add if add else self._conns.discard)(conn)

    def record(self, method: str, path: str, query: str, status: int) -> None:
        self.requests.append(RequestRecord(method, path, query, status, time.time()))

    # --- routing -----------------------------------------------------------------------------------

    def route(self, path: str) -> _Route:
        segs = [s for s in path.split("/") if s]
        if not segs:
            return _Route("", None, None, None, "", special="root")
        if segs[0] == "api":
            if len(segs) == 1:
                return _Route("", None, None, None, "", special="api")
            if segs[1] != "v1":
                raise _not_found_path(path)
            group, rest = "", segs[2:]
        elif segs[0] == "apis":
            if len(segs) == 1:
                return _Route("", None, None, None, "", special="apis")
            if len(segs) == 2:
                if segs[1] in ("batch", SSAR_GROUP):
                    return _Route(segs[1], None, None, None, "", special="group")
                raise _not_found_path(path)
            if segs[2] != "v1" or segs[1] not in ("batch", SSAR_GROUP):
                raise _not_found_path(path)
            group, rest = segs[1], segs[3:]
        elif segs == ["version"]:
            return _Route("", None, None, None, "", special="version")
        elif segs[0] in ("healthz", "readyz", "livez"):
            return _Route("", None, None, None, "", special="health")
        else:
            raise _not_found_path(path)
        if not rest:
            return _Route(group, None, None, None, "", special="resources")
        if group == SSAR_GROUP:
            if rest == ["selfsubjectaccessreviews"]:
                return _Route(group, None, None, None, "", special="ssar")
            raise _not_found_path(path)
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        elif rest[0] == "namespaces":
            if group:
                raise _not_found_path(path)
            return _Route(group, NAMESPACES, None, rest[1] if len(rest) > 1 else None, "")
        rt_ = BY_PATH.get((group, rest[0]))
        if rt_ is None or len(rest) > 3:
            raise _not_found_path(path)
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        if sub and sub not in rt_.subresources:
            raise _not_found_path(path)
        if namespace is None and name is not None and rt_.namespaced:
            raise _not_found_path(path)
        return _Route(group, rt_, namespace, name, sub)


def _not_found_path(path: str) -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self, addr: tuple[str, int], handler: type[BaseHTTPRequestHandler], api: ApiServer
    ) -> None:
        self.api = api
        super().__init__(addr, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up on a kept-alive connection (the reset reaches the handler
        while it reads the next request) is what clients of a real API server do: not worth a
        traceback on stderr. Any other error is printed as the standard library does."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer
    _status: int = 0
    _recorded: bool = False
    # One watch or a streamed log must not stall behind Nagle's algorithm.
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        self.server.api.track(self.connection, True)

    def finish(self) -> None:
        self.server.api.track(self.connection, False)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        return  # the request log is kept in ApiServer.requests instead

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # --- plumbing ----------------------------------------------------------------------------------

    def _send(
        self,
        code: int,
        body: bytes,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        self._record(code)
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, obj: Obj, headers: dict[str, str] | None = None) -> None:
        self._send(code, json.dumps(obj, separators=(",", ":")).encode(), headers=headers)

    def _start_stream(self, content_type: str) -> None:
        self._record(200)
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_OBJECT_BYTES:
            self.rfile.read(length)
            raise ApiError(
                413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728"
            )
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = bytearray()
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
            return bytes(data)
        return self.rfile.read(length) if length else b""

    def _record(self, code: int) -> None:
        """Log the request before its answer leaves: a client that has its answer must find
        its request in the log (recording after the write raced the client's next step)."""
        if self._recorded:
            return
        self._recorded = True
        url = urlsplit(self.path)
        self.server.api.record(self.command, url.path, url.query, code)

    def _handle(self, method: str) -> None:
        api = self.server.api
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        self._status = 0
        self._recorded = False
        try:
            raw = self._read_body()
            if url.path.startswith("/fake/"):
                self._admin(method, url.path, query)
                return
            auth = self.headers.get("Authorization")
            # kubectl/client-go never send credentials over plain http (clientcmd only merges auth info
            # for TLS), so a request without them is taken as the configured user; a wrong one is 401.
            if (
                api.token is not None
                and (auth is not None or api.require_auth)
                and auth != f"Bearer {api.token}"
            ):
                raise ApiError(401, "Unauthorized", "Unauthorized")
            fault = api.faults.take(method, url.path)
            if fault is not None:
                raise fault_error(fault)
            route = api.route(url.path)
            self._dispatch(method, route, query, raw, url.path)
        except DropConnection:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            self._status = -1
        except ApiError as exc:
            self._json(exc.code, exc.status(), exc.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            if not self._recorded:  # dropped or reset before any answer
                self._recorded = True
                api.record(method, url.path, url.query, self._status)

    def _body(self, raw: bytes) -> Any:
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            try:
                import yaml

                return yaml.safe_load(raw)
            except Exception as exc:
                raise bad_request(
                    f"the body of the request was in an unknown format: {exc}"
                ) from exc

    def _authorize(self, verb: str, route: _Route) -> None:
        rt = route.rt
        if rt is None:
            return
        api = self.server.api
        sub = route.sub if route.sub != "status" or verb != "get" else "status"
        if not api.access.allows(verb, rt.group, rt.plural, sub):
            raise forbidden(rt, route.name, api.user, verb, route.namespace, sub)

    def _dispatch(
        self, method: str, route: _Route, query: dict[str, str], raw: bytes, path: str
    ) -> None:
        api = self.server.api
        store = api.store
        if route.special:
            self._special(method, route, raw)
            return
        rt = route.rt
        assert rt is not None
        watch = query.get("watch") in ("true", "1")
        if method == "GET":
            verb = "get" if route.name else "watch" if watch else "list"
        else:
            verb = {
                "POST": "create",
                "PUT": "update",
                "PATCH": "patch",
                "DELETE": "delete" if route.name else "deletecollection",
            }[method]
        self._authorize(verb, route)
        if (
            route.namespace is not None
            and rt.namespaced
            and method != "POST"
            and store.find(NAMESPACES, None, route.namespace) is None
            and route.name is not None
        ):
            raise ApiError(
                404,
                "NotFound",
                f'{rt.qualified} "{route.name}" not found',
                {
                    "name": route.name,
                    "kind": rt.plural,
                    **({"group": rt.group} if rt.group else {}),
                },
            )
        if method == "GET" and route.sub == "log":
            self._log(route, query)
        elif method == "GET" and route.name:
            obj = store.get(rt, route.namespace, route.name)
            if self._wants_table():
                self._json(
                    200, _table(rt, [obj], obj["metadata"]["resourceVersion"], store.clock.now())
                )
            else:
                self._json(200, obj)
        elif method == "GET" and watch:
            self._watch(rt, route.namespace, query)
        elif method == "GET":
            self._check_list_rv(query)
            items, rv = store.select(
                rt, route.namespace, query.get("labelSelector"), query.get("fieldSelector")
            )
            if self._wants_table():
                self._json(200, _table(rt, items, str(rv), store.clock.now()))
                return
            stripped = [
                {k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items
            ]
            self._json(
                200,
                {
                    "kind": f"{rt.kind}List",
                    "apiVersion": rt.api_version,
                    "metadata": {"resourceVersion": str(rv)},
                    "items": stripped,
                },
            )
        elif method == "POST" and not route.name:
            body = self._body(raw)
            if not isinstance(body, dict):
                raise bad_request("the body of the request was not an object")
            kind = body.get("kind")
            if kind and kind != rt.kind:
                raise bad_request(
                    f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                    f'no kind "{kind}" is registered for version "{rt.api_version}"'
                )
            if query.get("dryRun"):
                self._json(201, body)
                return
            created = api.cluster.create(rt, route.namespace, body)
            if api.faults.take_drop(path):
                raise DropConnection
            self._json(201, created)
        elif method in ("PUT", "PATCH") and route.name:
            self._update(method, rt, route, raw)
        elif method == "DELETE" and route.name:
            opts = self._delete_options(raw, query)
            result = api.cluster.delete(rt, route.namespace, route.name, **opts)
            self._json(200, result.body, {"Warning": result.warning} if result.warning else None)
        elif method == "DELETE":
            opts = self._delete_options(raw, query)
            items, rv = store.select(
                rt, route.namespace, query.get("labelSelector"), query.get("fieldSelector")
            )
            deleted = []
            for o in items:
                with contextlib.suppress(ApiError):
                    deleted.append(
                        api.cluster.delete(
                            rt, o["metadata"].get("namespace"), o["metadata"]["name"], **opts
                        ).body
                    )
            self._json(
                200,
                {
                    "kind": f"{rt.kind}List",
                    "apiVersion": rt.api_version,
                    "metadata": {"resourceVersion": str(store.rv)},
                    "items": deleted,
                },
            )
        else:
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )

    def _check_list_rv(self, query: dict[str, str]) -> None:
        """A list at (or not older than) a resourceVersion the store has not reached waits for it,
        then fails with 504 Too large resource version. "0" (any) and "" (latest) always work."""
        rv_param = query.get("resourceVersion") or ""
        if rv_param in ("", "0") or query.get("continue"):
            return
        try:
            wanted = int(rv_param)
        except ValueError as exc:
            raise bad_request(f"invalid resource version: {rv_param}") from exc
        store = self.server.api.store
        if wanted > store.rv:
            store.wait_for_rv(wanted, self.server.api.too_large_wait)

    def _wants_table(self) -> bool:
        return "as=Table" in (self.headers.get("Accept") or "")

    def _delete_options(self, raw: bytes, query: dict[str, str]) -> dict[str, Any]:
        body = self._body(raw) or {}
        if not isinstance(body, dict):
            raise bad_request("DeleteOptions must be an object")
        policy = body.get("propagationPolicy") or query.get("propagationPolicy")
        if body.get("orphanDependents") is not None or query.get("orphanDependents"):
            orphan = body.get("orphanDependents", query.get("orphanDependents") in ("true", "1"))
            policy = policy or ("Orphan" if orphan else "Background")
        if policy not in (None, "Orphan", "Background", "Foreground"):
            raise ApiError(
                422,
                "Invalid",
                f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported '
                f'value: "{policy}": supported values: "Foreground", "Background", "Orphan", "nil"',
            )
        pre = body.get("preconditions") or {}
        grace = body.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
        return {
            "propagation": policy,
            "uid": pre.get("uid"),
            "resource_version": pre.get("resourceVersion"),
            "grace_seconds": int(grace) if grace is not None else None,
        }

    def _update(self, method: str, rt: ResourceType, route: _Route, raw: bytes) -> None:
        store = self.server.api.store
        assert route.name is not None
        body = self._body(raw)
        with store.lock:
            current = store.get(rt, route.namespace, route.name)
            if method == "PATCH":
                ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
                if ctype == "application/json-patch+json":
                    if not isinstance(body, list):
                        raise bad_request("json patch must be a list of operations")
                    new = json_patch(current, body)
                elif ctype in (
                    "application/merge-patch+json",
                    "application/strategic-merge-patch+json",
                ):
                    new = merge_patch(current, body)
                else:
                    raise ApiError(
                        415,
                        "UnsupportedMediaType",
                        "the body of the request was in an unknown format - "
                        "accepted media types include: application/json-patch+json, "
                        "application/merge-patch+json, application/strategic-merge-patch+json",
                    )
                expect_rv = (
                    (body.get("metadata") or {}).get("resourceVersion")
                    if isinstance(body, dict)
                    else None
                )
            else:
                if not isinstance(body, dict):
                    raise bad_request("the body of the request was not an object")
                new = copy.deepcopy(body)
                expect_rv = (new.get("metadata") or {}).get("resourceVersion")
                if not expect_rv:
                    raise ApiError(
                        422,
                        "Invalid",
                        f'{rt.kind} "{route.name}" is invalid: metadata.resourceVersion: '
                        "Invalid value: 0x0: must be specified for an update",
                    )
            if route.sub == "status":
                # The status subresource changes status only.
                merged = copy.deepcopy(current)
                merged["status"] = new.get("status")
                new = merged
            else:
                new["status"] = (
                    copy.deepcopy(current.get("status"))
                    if rt in (JOBS, PODS)
                    else new.get("status")
                )
                if new.get("status") is None:
                    new.pop("status", None)
                if rt is JOBS:
                    old_spec, new_spec = current.get("spec") or {}, new.get("spec") or {}
                    for key in ("template", "selector", "completionMode"):
                        if new_spec.get(key) != old_spec.get(key) and key in new_spec:
                            from runlane.testing.kube.store import invalid

                            raise invalid(
                                rt,
                                route.name,
                                [
                                    (
                                        f"spec.{key}",
                                        "FieldValueInvalid",
                                        f"Invalid value: {json.dumps(new_spec.get(key))}: field is immutable",
                                    )
                                ],
                            )
            meta = new.setdefault("metadata", {})
            for k in (
                "uid",
                "creationTimestamp",
                "namespace",
                "name",
                "deletionTimestamp",
                "generation",
            ):
                if k in current["metadata"]:
                    meta[k] = current["metadata"][k]
            meta["resourceVersion"] = current["metadata"]["resourceVersion"]
            new["kind"], new["apiVersion"] = rt.kind, rt.api_version
            if (
                rt in (JOBS, PODS)
                and route.sub != "status"
                and new.get("spec") != current.get("spec")
            ):
                meta["generation"] = int(current["metadata"].get("generation", 1)) + 1
            saved = store.write(rt, new, expect_rv=expect_rv)
        self._json(200, saved)

    # --- special endpoints -------------------------------------------------------------------------

    def _special(self, method: str, route: _Route, raw: bytes) -> None:
        api = self.server.api
        kind = route.special
        if kind == "ssar":
            if method != "POST":
                raise ApiError(
                    405,
                    "MethodNotAllowed",
                    "the server does not allow this method on the requested resource",
                )
            self._ssar(self._body(raw))
            return
        if method != "GET":
            raise ApiError(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        if kind == "version":
            self._json(200, KUBE_VERSION)
        elif kind == "health":
            self._send(200, b"ok", "text/plain; charset=utf-8")
        elif kind == "root":
            self._json(
                200,
                {
                    "paths": [
                        "/api",
                        "/api/v1",
                        "/apis",
                        "/apis/batch",
                        "/apis/batch/v1",
                        f"/apis/{SSAR_GROUP}",
                        f"/apis/{SSAR_GROUP}/v1",
                        "/healthz",
                        "/version",
                    ]
                },
            )
        elif kind == "api":
            host = f"{api.host}:{api.port}"
            self._json(
                200,
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": host}
                    ],
                },
            )
        elif kind == "apis":
            self._json(200, API_GROUPS)
        elif kind == "group":
            self._json(200, {"kind": "APIGroup", "apiVersion": "v1", **_group(route.group)})
        elif kind == "resources":
            self._json(200, _api_resources(route.group, "v1"))

    def _ssar(self, body: Any) -> None:
        api = self.server.api
        if not isinstance(body, dict) or not isinstance(body.get("spec"), dict):
            raise bad_request("SelfSubjectAccessReview needs a spec")
        attrs = body["spec"].get("resourceAttributes")
        if isinstance(attrs, dict):
            allowed = api.access.allows(
                str(attrs.get("verb", "")),
                str(attrs.get("group", "")),
                str(attrs.get("resource", "")),
                str(attrs.get("subresource", "")),
            )
        else:
            allowed = (
                True  # non-resource URLs (discovery, /version) are open to authenticated users
            )
        status: Obj = {"allowed": allowed}
        if allowed:
            status["reason"] = (
                f'RBAC: allowed by RoleBinding "runlane-fake" of Role "runlane-fake" to User "{api.user}"'
            )
        out = {
            "kind": "SelfSubjectAccessReview",
            "apiVersion": f"{SSAR_GROUP}/v1",
            "metadata": {"creationTimestamp": None},
            "spec": body["spec"],
            "status": status,
        }
        self._json(201, out)

    def _admin(self, method: str, path: str, query: dict[str, str]) -> None:
        """`/fake/...`: fault injection and inspection over HTTP, for the standalone server."""
        api = self.server.api
        action = path[len("/fake/") :].strip("/")
        result: Obj = {"ok": True}
        if action == "fail":
            api.faults.fail_next(
                int(query.get("count", "1")),
                int(query.get("status", "500")),
                retry_after=int(query["retryAfter"]) if "retryAfter" in query else None,
                method=query.get("method") or None,
                path=query.get("path") or None,
                exact=query.get("exact") in ("1", "true"),
            )
        elif action == "drop-create":
            api.faults.drop_create_response(
                int(query.get("count", "1")), path=query.get("path") or None
            )
        elif action == "end-watches":
            result["watches"] = api.end_watches(abort=query.get("abort") in ("1", "true"))
        elif action == "expire-watches":
            with api.store.lock:
                result["watches"] = api.end_watches(expire=True)
                api.store.compact()
        elif action == "compact":
            api.store.compact()
        elif action == "restart":
            api.restart(
                int(query.get("jump", "1000")),
                lose_state=query.get("loseState") in ("1", "true"),
                keep=self.connection,
            )
            self.close_connection = True  # like any connection open across a restart
        elif action == "advance":
            api.cluster.advance(float(query.get("seconds", "0")))
        elif action == "bookmark":
            api.send_bookmarks()
        elif action == "requests":
            result["requests"] = [r.__dict__ for r in api.requests]
        else:
            raise ApiError(404, "NotFound", f"no fake admin action {action!r}")
        self._json(200, result)

    # --- watch -------------------------------------------------------------------------------------

    def _watch(self, rt: ResourceType, namespace: str | None, query: dict[str, str]) -> None:
        api = self.server.api
        store = api.store
        lreqs = parse_label_selector(query.get("labelSelector"))
        freqs = parse_field_selector(query.get("fieldSelector"), rt)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        timeout = (
            float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else api.watch_timeout
        )
        deadline = time.monotonic() + timeout if timeout else None
        rv_param = query.get("resourceVersion") or ""

        def passes(obj: Obj | None) -> bool:
            if obj is None:
                return False
            if namespace is not None and obj["metadata"].get("namespace") != namespace:
                return False
            return labels_match(lreqs, obj) and fields_match(freqs, obj)

        initial: list[Obj] = []
        expired: ApiError | None = None
        with store.cond:
            if rv_param in ("", "0"):
                initial = [o for o in store.objects[rt].values() if passes(o)]
                cursor = store.rv
            else:
                try:
                    cursor = int(rv_param)
                except ValueError as exc:
                    raise bad_request(f"invalid resource version: {rv_param}") from exc
                if cursor > store.rv:
                    store.wait_for_rv(cursor, api.too_large_wait)  # else 504, before the stream
                try:
                    store.events_since(cursor)
                except ApiError as exc:
                    if api.expired == "http":
                        raise
                    expired = exc
            api._next_watch_id += 1
            wid = api._next_watch_id
            watcher = Watcher(rt, namespace)
            store.active_watches[wid] = watcher
            seen_bookmark = api._bookmark_now
        try:
            self._start_stream("application/json")
            for obj in initial:
                self._send_event("ADDED", obj)
            if expired is not None:
                self._send_event("ERROR", expired.status())
                self._end_stream()
                return
            next_bookmark = time.monotonic() + api.bookmark_interval
            while True:
                out: list[tuple[str, Obj]] = []
                with store.cond:
                    while True:
                        if watcher.command in ("abort", "expire"):
                            break
                        try:
                            events = store.events_since(cursor)
                        except ApiError as exc:
                            watcher.command = "expire"
                            expired = exc
                            break
                        if events:
                            for ev in events:
                                if ev.rt is rt:
                                    pair = _convert(ev, passes)
                                    if pair is not None:
                                        out.append(pair)
                                cursor = ev.rv
                            if out:
                                break
                        if watcher.command:  # "end": after what was already written
                            break
                        now = time.monotonic()
                        if deadline is not None and now >= deadline:
                            break
                        if bookmarks and (
                            now >= next_bookmark or api._bookmark_now != seen_bookmark
                        ):
                            break
                        wait = next_bookmark - now if bookmarks else 1.0
                        if deadline is not None:
                            wait = min(wait, deadline - now)
                        store.cond.wait(max(min(wait, 1.0), 0.001))
                    command = watcher.command
                    current_rv = max(cursor, 0)
                    forced = api._bookmark_now != seen_bookmark
                    seen_bookmark = api._bookmark_now
                for kind, obj in out:
                    self._send_event(kind, obj)
                if command == "abort":
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if command == "expire":
                    err = expired or gone(f"too old resource version: {cursor} ({store.oldest_rv})")
                    self._send_event("ERROR", err.status())
                    self._end_stream()
                    return
                if command == "end":
                    self._end_stream()
                    return
                now = time.monotonic()
                if bookmarks and (forced or now >= next_bookmark):
                    self._send_event(
                        "BOOKMARK",
                        {
                            "kind": rt.kind,
                            "apiVersion": rt.api_version,
                            "metadata": {"resourceVersion": str(current_rv)},
                        },
                    )
                    next_bookmark = now + api.bookmark_interval
                if deadline is not None and now >= deadline:
                    self._end_stream()
                    return
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True
        finally:
            with store.cond:
                store.active_watches.pop(wid, None)

    def _send_event(self, kind: str, obj: Obj) -> None:
        self._chunk(
            json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"
        )

    # --- logs --------------------------------------------------------------------------------------

    def _log(self, route: _Route, query: dict[str, str]) -> None:
        api = self.server.api
        store = api.store
        assert route.name is not None
        with store.lock:
            pod = store.get(PODS, route.namespace, route.name)
            names = [c["name"] for c in pod.get("spec", {}).get("containers") or []]
            container = query.get("container") or (names[0] if len(names) == 1 else "")
            if not container:
                raise bad_request(
                    f"a container name must be specified for pod {route.name}, choose one of: "
                    f"[{' '.join(names)}]"
                )
            if container not in names:
                raise bad_request(f"container {container} is not valid for pod {route.name}")
            if query.get("previous") in ("true", "1"):
                raise bad_request(
                    f'previous terminated container "{container}" in pod "{route.name}" not found'
                )
            statuses = {s["name"]: s for s in pod.get("status", {}).get("containerStatuses") or []}
            state = (statuses.get(container) or {}).get("state") or {
                "waiting": {"reason": "ContainerCreating"}
            }
            if "waiting" in state:
                reason = state["waiting"].get("reason", "ContainerCreating")
                why = (
                    "image can't be pulled"
                    if reason in ("ErrImagePull", "ImagePullBackOff")
                    else reason
                )
                raise bad_request(
                    f'container "{container}" in pod "{route.name}" is waiting to start: {why}'
                )
            runtime = api.cluster.kubelet.runtime(pod["metadata"]["uid"])
            c = (
                next((c for c in runtime.containers if c.name == container), None)
                if runtime
                else None
            )
            data = bytes(c.log) if c else b""
        tail = int(query["tailLines"]) if query.get("tailLines") else None
        limit = int(query["limitBytes"]) if query.get("limitBytes") else None
        if tail is not None:
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-tail:]) if tail > 0 else b""
        follow = query.get("follow") in ("true", "1")
        if not follow or c is None:
            self._send(200, data[:limit] if limit is not None else data, "text/plain")
            return
        # follow: stream what exists, then what the container writes until it exits
        sent = 0
        offset = len(c.log)
        self._start_stream("text/plain")
        try:
            chunk = data[:limit] if limit is not None else data
            self._chunk(chunk)
            sent += len(chunk)
            while limit is None or sent < limit:
                with store.cond:
                    while len(c.log) <= offset and not c.done:
                        store.cond.wait(1.0)
                    more = bytes(c.log[offset:])
                    offset += len(more)
                    done = c.done and len(c.log) <= offset
                if limit is not None:
                    more = more[: limit - sent]
                self._chunk(more)
                sent += len(more)
                if done:
                    break
            self._end_stream()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


def _convert(ev: WatchEvent, passes: Any) -> tuple[str, Obj] | None:
    """Map a store event through the watch's filter, as the watch cache does for selector changes."""
    cur_ok = passes(ev.obj) if ev.type != "DELETED" else False
    old_ok = passes(ev.old)
    if ev.type == "DELETED":
        return ("DELETED", ev.obj) if passes(ev.obj) else None
    if ev.type == "ADDED":
        return ("ADDED", ev.obj) if cur_ok else None
    if cur_ok and old_ok:
        return ("MODIFIED", ev.obj)
    if cur_ok:
        return ("ADDED", ev.obj)
    if old_ok and ev.old is not None:
        gone_obj = copy.deepcopy(ev.old)
        gone_obj["metadata"]["resourceVersion"] = ev.obj["metadata"]["resourceVersion"]
        return ("DELETED", gone_obj)
    return None


__all__ = ["KUBE_VERSION", "AccessRules", "ApiServer", "Faults", "merge_patch"]
