"""A Kubernetes API server double that speaks the list/watch protocol over real HTTP/1.1,
for the official `kubernetes` client to talk to (stdlib http.server, one thread per
connection).

What it does as kube-apiserver does (the parts the bridge relies on):
- one global resourceVersion counter (etcd's revision) shared by every resource;
  every create/update/delete bumps it and stamps the object;
- lists: `limit`/`continue` pages of one consistent snapshot, sorted by namespace/name
  (etcd key order), `remainingItemCount`, the list's `resourceVersion`; items of
  built-in kinds come WITHOUT kind/apiVersion (as the real server serves them), custom
  resources with them; `resourceVersion` with `resourceVersionMatch=NotOlderThan` or
  `Exact` (the state at that revision, 410 once "etcd" was compacted past it); an expired
  continue token is HTTP 410 `Expired`;
- watches: `resourceVersion=X` streams every change after X (the server's history), then
  live changes, as newline-delimited JSON in chunked transfer encoding, chunks cut at
  arbitrary byte offsets (inside lines too); `allowWatchBookmarks` bookmarks with the
  current resourceVersion for the kinds in the watch cache only (Events are not: their
  watches never get one); `timeoutSeconds` ends the stream cleanly; an X older than the
  compaction floor is 410 Gone, either as an ERROR event carrying a Status (what the
  watch cache does) or as an HTTP 410 Status response;
- a restart (`restart()`): every watch ends; the cached kinds answer 410 for a position
  from before it (their watch cache starts empty), Events resume; optionally 403 for a
  moment, as RBAC caches sync;
- a pod's deletion is a MODIFIED (deletionTimestamp) then a DELETED; the status sent
  with a create is dropped (custom resources have a status subresource; a pod starts
  Pending), so a test sets it with a second write, as a controller does;
- managedFields on every object (the bridge must drop them);
- 404 Status for a resource (CRD) or version not served, 403 Status for a forbidden
  verb/resource/namespace (with the real message format), 401 without the bearer token,
  503 while "unavailable" (and `/readyz` 503 then, 200 otherwise);
- connection drops in the middle of a watch stream, after half an event line.

What it does not do is listed in docs/bridge.md ("Tests: a real API server, and a double").
"""

from __future__ import annotations

import base64
import bisect
import copy
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

TOKEN = "fake-token"
USER = "system:serviceaccount:faultline:faultline-bridge"


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code: int, reason: str, message: str, **extra: Any) -> dict[str, Any]:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason}
    body.update(extra)
    body["code"] = code
    return body


class ResourceType:
    """One resource (group + plural) with its objects and change history."""

    def __init__(self, group: str, plural: str, kind: str, versions: tuple[str, ...], installed: bool = True) -> None:
        self.group, self.plural, self.kind = group, plural, kind
        self.cached = plural != "events"  # kube-apiserver keeps no watch cache for Events
        self.versions = list(versions)
        self.installed = installed
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.history: list[tuple[int, str, bytes]] = []  # (rv, namespace, event line)
        self.history_rvs: list[int] = []
        self.base = 0  # absolute index of history[0] (older entries were compacted away)
        self.floor = 0  # a watch from a resourceVersion below this is 410 Gone (watch cache)
        self.etcd_floor = 0  # a list at an exact resourceVersion below this is 410 (etcd compaction)
        self.log: list[tuple[int, tuple[str, str], dict[str, Any] | None]] = []  # every state, for Exact lists
        self.log_rvs: list[int] = []

    @property
    def built_in(self) -> bool:
        """Served by kube-apiserver itself (not a CRD): its list items carry no kind/apiVersion."""
        return self.group in ("", "batch")

    def api_version(self, version: str | None = None) -> str:
        version = version or self.versions[0]
        return f"{self.group}/{version}" if self.group else version


DEFAULT_TYPES = (
    ("", "pods", "Pod", ("v1",)),
    ("", "events", "Event", ("v1",)),
    ("ray.io", "rayjobs", "RayJob", ("v1",)),
    ("kubeflow.org", "pytorchjobs", "PyTorchJob", ("v1",)),
    ("kubeflow.org", "tfjobs", "TFJob", ("v1",)),
    ("kubeflow.org", "mpijobs", "MPIJob", ("v2beta1",)),
    ("kubeflow.org", "jaxjobs", "JAXJob", ("v1",)),
    ("jobset.x-k8s.io", "jobsets", "JobSet", ("v1alpha2",)),
    ("trainer.kubeflow.org", "trainjobs", "TrainJob", ("v1alpha1",)),
    ("leaderworkerset.x-k8s.io", "leaderworkersets", "LeaderWorkerSet", ("v1",)),
    ("batch", "jobs", "Job", ("v1",)),
    ("kueue.x-k8s.io", "workloads", "Workload", ("v1beta2",)),
)


class Request:
    __slots__ = ("code", "group", "namespace", "params", "plural", "verb", "version")

    def __init__(self, verb: str, group: str, version: str, plural: str, namespace: str | None, params: dict[str, str]) -> None:
        self.verb, self.group, self.version, self.plural, self.namespace, self.params = verb, group, version, plural, namespace, params
        self.code = 0

    def __repr__(self) -> str:
        return f"<{self.verb} {self.group}/{self.version}/{self.plural} ns={self.namespace} {self.params} -> {self.code}>"


class _Watch:
    """A live watch connection (so the test can drop it)."""

    def __init__(self, handler: BaseHTTPRequestHandler, plural: str) -> None:
        self.handler, self.plural = handler, plural
        self.drop = False


class FakeKube:
    def __init__(
        self,
        *,
        bookmark_interval: float | None = None,
        gone_as: str = "event",
        history_limit: int | None = None,
        seed: int = 7,
        max_chunk: int = 16 * 1024,
    ) -> None:
        self.cond = threading.Condition()
        self.rv = 1000
        self.types: dict[tuple[str, str], ResourceType] = {}
        for group, plural, kind, versions in DEFAULT_TYPES:
            self.types[(group, plural)] = ResourceType(group, plural, kind, versions)
        self.bookmark_interval = bookmark_interval
        self.gone_as = gone_as
        self.history_limit = history_limit
        self.max_chunk = max_chunk
        self.forbidden: set[tuple[str, str, str | None]] = set()
        self.forbid_all_until = 0.0  # monotonic time: 403 for everything until then (RBAC warming up)
        self.unavailable = False
        self.unavailable_plurals: set[str] = set()
        self.requests: list[Request] = []
        self.readyz_probes = 0
        self.snapshots: dict[str, tuple[int, list[bytes]]] = {}
        self.watches: list[_Watch] = []
        self.after_list_page: Callable[[Request], None] | None = None  # a test's hook
        self._connections: set[socket.socket] = set()
        self._random = random.Random(seed)
        self._stopping = False
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = False  # server_close() joins every handler thread
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-kube")

    # --- lifecycle ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeKube:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self.cond:
            self._stopping = True
            self.cond.notify_all()
        self._server.shutdown()
        self._thread.join()
        with self.cond:
            connections = list(self._connections)
        for conn in connections:  # idle keep-alive connections: end their handler threads
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._server.server_close()

    def write_kubeconfig(self, path: Path, context: str = "fake") -> Path:
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: fake\n  cluster:\n    server: {self.url}\n"
            f"users:\n- name: bridge\n  user:\n    token: {TOKEN}\n"
            f"contexts:\n- name: {context}\n  context:\n    cluster: fake\n    user: bridge\n"
            f"current-context: {context}\n"
        )
        return path

    # --- what the test controls -----------------------------------------------------------

    def type(self, plural: str) -> ResourceType:
        matches = [t for (g, p), t in self.types.items() if p == plural]
        assert len(matches) == 1, plural
        return matches[0]

    def install(self, plural: str, versions: tuple[str, ...] | None = None) -> None:
        with self.cond:
            t = self.type(plural)
            t.installed = True
            if versions is not None:
                t.versions = list(versions)

    def uninstall(self, plural: str) -> None:
        with self.cond:
            self.type(plural).installed = False

    def forbid(self, verb: str, plural: str, namespace: str | None = None) -> None:
        self.forbidden.add((verb, plural, namespace))

    def set_unavailable(self, value: bool) -> None:
        with self.cond:
            self.unavailable = value
            self.cond.notify_all()

    def set_unavailable_for(self, plural: str, value: bool) -> None:
        """503 for one resource only (its watches are cut), as a failing aggregated API or
        an overloaded priority level."""
        with self.cond:
            (self.unavailable_plurals.add if value else self.unavailable_plurals.discard)(plural)
            self.cond.notify_all()

    def restart(self, rbac_warmup: float = 0.0) -> None:
        """An API server restart with etcd kept: every watch ends; a cached kind's watch
        cache starts over at the current revision, so its watches from an older position
        are 410 (its history in "etcd" stays, for Exact lists); Events are read from etcd
        directly and resume. With `rbac_warmup`, every request is 403 for that long."""
        with self.cond:
            for w in self.watches:
                w.drop = True
            for t in self.types.values():
                if t.cached:
                    t.base += len(t.history)
                    t.history.clear()
                    t.history_rvs.clear()
                    t.floor = self.rv
            self.snapshots.clear()
            self.forbid_all_until = time.monotonic() + rbac_warmup
            self.cond.notify_all()

    def drop_watches(self, plural: str | None = None) -> int:
        """Break every live watch (of `plural`) in the middle of an event line."""
        with self.cond:
            hit = [w for w in self.watches if plural is None or w.plural == plural]
            for w in hit:
                w.drop = True
            self.cond.notify_all()
        return len(hit)

    def compact(self, plural: str | None = None, etcd: bool = True) -> None:
        """Forget history up to now: a watch or continue token from before is 410 Gone;
        with `etcd`, an Exact list at an older resourceVersion is 410 too (else only the
        watch cache forgot, as when its window is shorter than etcd's compaction)."""
        with self.cond:
            for t in self.types.values():
                if plural is None or t.plural == plural:
                    t.base += len(t.history)
                    t.history.clear()
                    t.history_rvs.clear()
                    t.floor = self.rv
                    if etcd:
                        t.etcd_floor = self.rv
            self.snapshots.clear()

    def expire_continue_tokens(self) -> None:
        with self.cond:
            self.snapshots.clear()

    def requests_of(self, verb: str, plural: str) -> list[Request]:
        with self.cond:
            return [r for r in self.requests if r.verb == verb and r.plural == plural]

    # --- objects ------------------------------------------------------------------------

    def create(self, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        """As a POST: the status sent is dropped (a pod starts Pending)."""
        t = self.type(plural)
        obj = copy.deepcopy(obj)
        if t.kind == "Pod":
            obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        elif t.kind != "Event":  # a status subresource: a Job's, a custom resource's
            obj.pop("status", None)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta["uid"] = meta.get("uid") or str(uuid.uuid4())
        meta.setdefault("creationTimestamp", _now())
        meta["managedFields"] = [
            {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": t.api_version(), "time": _now(), "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}
        ]
        obj["apiVersion"] = obj.get("apiVersion") or t.api_version()
        obj["kind"] = t.kind
        with self.cond:
            key = (meta["namespace"], meta["name"])
            assert key not in t.objects, f"{plural} {key} already exists"
            return self._commit(t, "ADDED", key, obj)

    def update(self, plural: str, namespace: str, name: str, change: Callable[[dict[str, Any]], Any] | dict[str, Any]) -> dict[str, Any]:
        """`change` mutates a copy of the object, or is the new object (uid and name kept).
        One write of object and status (a real client writes the status through /status)."""
        t = self.type(plural)
        with self.cond:
            current = t.objects[(namespace, name)]
            if callable(change):
                obj = orjson.loads(orjson.dumps(current))
                change(obj)
            else:
                obj = copy.deepcopy(change)
                obj.setdefault("metadata", {})
                for field in ("uid", "namespace", "name", "creationTimestamp", "managedFields"):
                    obj["metadata"][field] = current["metadata"].get(field)
                obj["apiVersion"], obj["kind"] = current["apiVersion"], current["kind"]
            return self._commit(t, "MODIFIED", (namespace, name), obj)

    def delete(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        """As a DELETE with gracePeriodSeconds=0: a pod gets its deletionTimestamp (a
        MODIFIED) before it is removed."""
        t = self.type(plural)
        with self.cond:
            obj = orjson.loads(orjson.dumps(t.objects[(namespace, name)]))
            if t.kind == "Pod":
                obj["metadata"]["deletionTimestamp"] = _now()
                obj["metadata"]["deletionGracePeriodSeconds"] = 0
                obj = orjson.loads(orjson.dumps(self._commit(t, "MODIFIED", (namespace, name), obj)))
            return self._commit(t, "DELETED", (namespace, name), obj)

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        with self.cond:
            return orjson.loads(orjson.dumps(self.type(plural).objects[(namespace, name)]))

    def _commit(self, t: ResourceType, change: str, key: tuple[str, str], obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        if change == "DELETED":
            del t.objects[key]
        else:
            t.objects[key] = obj
        t.history.append((self.rv, key[0], orjson.dumps({"type": change, "object": obj}) + b"\n"))
        t.history_rvs.append(self.rv)
        t.log.append((self.rv, key, None if change == "DELETED" else obj))
        t.log_rvs.append(self.rv)
        if self.history_limit is not None and len(t.history) > self.history_limit:
            drop = len(t.history) - self.history_limit
            t.floor = t.history_rvs[drop - 1]
            del t.history[:drop], t.history_rvs[:drop]
            t.base += drop
        self.cond.notify_all()
        return obj

    # --- HTTP -----------------------------------------------------------------------------

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        kube = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with kube.cond:
                    kube._connections.add(self.connection)

            def finish(self) -> None:
                with kube.cond:
                    kube._connections.discard(self.connection)
                try:
                    super().finish()
                except OSError:
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                try:
                    kube._serve(self)
                except (BrokenPipeError, ConnectionResetError, OSError):
                    self.close_connection = True

        return Handler

    def _send_json(self, h: BaseHTTPRequestHandler, code: int, body: dict[str, Any] | bytes, request: Request | None = None) -> None:
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        if request is not None:
            request.code = code
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _route(self, path: str) -> tuple[str, str, str | None, str] | None:
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return None
        if len(rest) == 1:
            return group, version, None, rest[0]
        if len(rest) == 3 and rest[0] == "namespaces":
            return group, version, rest[1], rest[2]
        return None

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        url = urlsplit(h.path)
        if url.path == "/readyz":  # public, as on a real server; not ready while "unavailable"
            with self.cond:
                self.readyz_probes += 1
                ready = not self.unavailable
            body = b"ok" if ready else b"[-]etcd failed: reason withheld\nreadyz check failed"
            h.send_response(200 if ready else 503)
            h.send_header("Content-Type", "text/plain")
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
            return
        params = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        route = self._route(url.path)
        verb = "watch" if params.get("watch") in ("true", "1") else "list"
        if route is None:
            self._send_json(h, 404, status(404, "NotFound", "the server could not find the requested resource", details={}))
            return
        group, version, namespace, plural = route
        request = Request(verb, group, version, plural, namespace, params)
        with self.cond:
            self.requests.append(request)
            t = self.types.get((group, plural))
            served = t is not None and t.installed and version in t.versions
            unavailable = self.unavailable
        if h.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._send_json(h, 401, status(401, "Unauthorized", "Unauthorized"), request)
            return
        if "json" not in (h.headers.get("Accept") or ""):
            self._send_json(h, 406, status(406, "NotAcceptable", "only JSON is served here"), request)
            return
        if unavailable or plural in self.unavailable_plurals:
            self._send_json(h, 503, status(503, "ServiceUnavailable", "the server is currently unable to handle the request"), request)
            return
        if not served:
            self._send_json(h, 404, status(404, "NotFound", "the server could not find the requested resource", details={}), request)
            return
        assert t is not None
        if (verb, plural, namespace) in self.forbidden or time.monotonic() < self.forbid_all_until:
            scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
            message = f'{plural}{"." + group if group else ""} is forbidden: User "{USER}" cannot {verb} resource "{plural}" in API group "{group}" {scope}'
            self._send_json(h, 403, status(403, "Forbidden", message, details={"group": group, "kind": plural}), request)
            return
        if verb == "list":
            self._serve_list(h, t, version, namespace, params, request)
        else:
            self._serve_watch(h, t, version, namespace, params, request)

    # --- list -----------------------------------------------------------------------------

    def _list_item(self, t: ResourceType, obj: dict[str, Any]) -> bytes:
        if t.built_in:  # built-in kinds: list items carry no kind/apiVersion
            obj = {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
        return orjson.dumps(obj)

    def _serve_list(self, h, t: ResourceType, version: str, namespace: str | None, params: dict[str, str], request: Request) -> None:
        limit = int(params.get("limit") or 0)
        token = params.get("continue")
        with self.cond:
            if token:
                try:
                    state = orjson.loads(base64.urlsafe_b64decode(token))
                except ValueError:
                    self._send_json(h, 400, status(400, "BadRequest", "continue key is not valid"), request)
                    return
                snapshot = self.snapshots.get(state["id"])
                if snapshot is None:
                    message = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter."
                    self._send_json(h, 410, status(410, "Expired", message), request)
                    return
                list_rv, items = snapshot
                start = state["offset"]
                snapshot_id = state["id"]
            else:
                match = params.get("resourceVersionMatch")
                asked = params.get("resourceVersion")
                if asked and asked != "0" and int(asked) > self.rv:
                    self._send_json(h, 504, status(504, "Timeout", f"Too large resource version: {asked}, current: {self.rv}"), request)
                    return
                if match == "Exact":
                    if not asked or int(asked) < t.etcd_floor:
                        message = f"The resourceVersion for the provided list is too old: {asked} (compacted at {t.etcd_floor})"
                        self._send_json(h, 410, status(410, "Expired", message), request)
                        return
                    list_rv = int(asked)
                    state: dict[tuple[str, str], dict[str, Any]] = {}
                    for _, key, obj in t.log[: bisect.bisect_right(t.log_rvs, list_rv)]:
                        if obj is None:
                            state.pop(key, None)
                        else:
                            state[key] = obj
                else:
                    list_rv, state = self.rv, t.objects
                objs = sorted((k, o) for k, o in state.items() if namespace is None or k[0] == namespace)
                items = [self._list_item(t, o) for _, o in objs]
                start = 0
                snapshot_id = uuid.uuid4().hex
            page = items[start : start + limit] if limit else items[start:]
            end = start + len(page)
            meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
            if end < len(items):
                self.snapshots[snapshot_id] = (list_rv, items)
                meta["continue"] = base64.urlsafe_b64encode(orjson.dumps({"id": snapshot_id, "offset": end, "rv": list_rv})).decode()
                meta["remainingItemCount"] = len(items) - end
            elif token:
                self.snapshots.pop(snapshot_id, None)
        head = orjson.dumps({"kind": t.kind + "List", "apiVersion": t.api_version(version), "metadata": meta})
        body = head[:-1] + b',"items":[' + b",".join(page) + b"]}"
        self._send_json(h, 200, body, request)
        if self.after_list_page is not None:
            self.after_list_page(request)

    # --- watch ----------------------------------------------------------------------------

    def _write_chunks(self, h: BaseHTTPRequestHandler, data: bytes) -> None:
        """Send `data` as chunks cut at arbitrary offsets (lines are split across chunks)."""
        pos = 0
        while pos < len(data):
            size = min(len(data) - pos, self._random.randint(1, self.max_chunk))
            piece = data[pos : pos + size]
            h.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            pos += size

    def _serve_watch(self, h, t: ResourceType, version: str, namespace: str | None, params: dict[str, str], request: Request) -> None:
        asked = params.get("resourceVersion") or ""
        timeout = float(params.get("timeoutSeconds") or 1800)
        bookmarks = params.get("allowWatchBookmarks") == "true" and self.bookmark_interval is not None and t.cached
        initial: list[bytes] = []
        with self.cond:
            if asked in ("", "0"):  # "start at most recent": synthetic ADDED for what exists
                initial = [
                    orjson.dumps({"type": "ADDED", "object": o}) + b"\n"
                    for k, o in sorted(t.objects.items())
                    if namespace is None or k[0] == namespace
                ]
                cursor = t.base + len(t.history)
            else:
                start = int(asked)
                if start < t.floor:
                    gone = status(410, "Expired", f"too old resource version: {start} ({t.floor})")
                    if self.gone_as == "http":
                        self._send_json(h, 410, status(410, "Gone", gone["message"]), request)
                        return
                    initial = [orjson.dumps({"type": "ERROR", "object": gone}) + b"\n"]
                    cursor = -1
                else:
                    cursor = t.base + bisect.bisect_right(t.history_rvs, start)
            watch = _Watch(h, t.plural)
            self.watches.append(watch)
        request.code = 200
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        deadline = time.monotonic() + timeout
        next_bookmark = time.monotonic() + (self.bookmark_interval or 0)
        try:
            if initial:
                self._write_chunks(h, b"".join(initial))
            if cursor < 0:  # the ERROR event ends the watch
                h.wfile.write(b"0\r\n\r\n")
                return
            while True:
                with self.cond:
                    while True:
                        now = time.monotonic()
                        pending = t.base + len(t.history) > cursor
                        down = self.unavailable or t.plural in self.unavailable_plurals
                        if pending or watch.drop or self._stopping or down or now >= deadline:
                            break
                        if bookmarks and now >= next_bookmark:
                            break
                        wake = min(deadline, next_bookmark) if bookmarks else deadline
                        self.cond.wait(max(0.0, wake - now))
                    if cursor < t.base:  # this watcher fell behind the kept history: end it
                        lines: list[bytes] = []
                        ended = True
                    else:
                        lines = [line for _, ns, line in t.history[cursor - t.base :] if namespace is None or ns == namespace]
                        ended = False
                    cursor = t.base + len(t.history)
                    bookmark_rv = self.rv
                    drop, stopping = watch.drop, self._stopping
                    unavailable = self.unavailable or t.plural in self.unavailable_plurals
                if drop:
                    self._break(h, lines)
                    return
                if unavailable:  # the server went away: the connection just ends
                    self._abort(h)
                    return
                if ended or stopping:
                    h.wfile.write(b"0\r\n\r\n")
                    return
                if lines:
                    self._write_chunks(h, b"".join(lines))
                now = time.monotonic()
                if bookmarks and now >= next_bookmark:
                    event = {"type": "BOOKMARK", "object": {"kind": t.kind, "apiVersion": t.api_version(version), "metadata": {"resourceVersion": str(bookmark_rv)}}}
                    self._write_chunks(h, orjson.dumps(event) + b"\n")
                    next_bookmark = now + (self.bookmark_interval or 0)
                if now >= deadline:
                    h.wfile.write(b"0\r\n\r\n")  # timeoutSeconds: a clean end of the stream
                    return
        finally:
            with self.cond:
                self.watches.remove(watch)

    def _break(self, h: BaseHTTPRequestHandler, lines: list[bytes]) -> None:
        """Send the first pending line whole and half of the next, then cut the
        connection: the client must drop the half line and resume after the whole one."""
        data = lines[0] if lines else b""
        if len(lines) > 1:
            data += lines[1][: len(lines[1]) // 2]
        else:
            data += b'{"type":"MODIFIED","object":{"metad'
        h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        h.wfile.write(b"400\r\n" + b"{" * 10)  # a chunk promised and never delivered
        self._abort(h)

    def _abort(self, h: BaseHTTPRequestHandler) -> None:
        h.close_connection = True
        try:
            h.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
