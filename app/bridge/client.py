"""The only module that talks to the Kubernetes API, through the official `kubernetes`
client. Every call asks for the raw response (`_preload_content=False`) and decodes the
JSON itself: the client's model objects serialise in snake_case, which is not what the
API serves, and the contract is the object exactly as served (DESIGN.md).
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from app.bridge.comeback import PROBE_TIMEOUT
from app.bridge.errors import (
    BridgeError,
    Forbidden,
    Gone,
    NotServed,
    Transient,
    Unauthorized,
    Unreachable,
)
from app.bridge.kubeconfig import file_problem
from app.bridge.records import Page
from app.bridge.resources import Kind

log = logging.getLogger("faultline.bridge")

CONNECT_TIMEOUT = 10.0
LIST_READ_TIMEOUT = 60.0
# A watch is silent between events; a live server ends it at timeoutSeconds, so a read
# that waits this much longer than that is a dead connection.
WATCH_READ_SLACK = 15.0
READ_SIZE = 1 << 16


KUBECONFIG_FIX = "give --kubeconfig FILE (and --context NAME) or set FAULTLINE_KUBECONFIG, or run the bridge in a pod"


def api_client(kubeconfig: str = "", context: str = "", connections: int = 16) -> client.ApiClient:
    """An ApiClient from the kubeconfig (the given file, else $KUBECONFIG or
    ~/.kube/config), or from the pod's service account when running in a pod and no file
    is given. Token refresh hooks of both loaders are kept."""
    configuration = client.Configuration()
    in_cluster = not kubeconfig and "KUBERNETES_SERVICE_HOST" in os.environ
    if not in_cluster:
        _check_kubeconfig_exists(kubeconfig)
        _check_kubeconfig_shape(kubeconfig)
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(
                config_file=kubeconfig or None,
                context=context or None,
                client_configuration=configuration,
                persist_config=False,
            )
    except (config.ConfigException, OSError, TypeError, ValueError, AttributeError, KeyError) as exc:
        source = "the in-cluster service account" if in_cluster else _kubeconfig_source(kubeconfig)
        detail = str(exc) or type(exc).__name__
        raise BridgeError(f"cannot load the Kubernetes client configuration from {source}: {detail}; {KUBECONFIG_FIX}") from None
    # One connection per concurrent watch plus the lists: the default pool (5 x cores)
    # would discard and reopen connections under many watches.
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, connections)
    # No hidden retries inside urllib3: a watch retries with its own backoff and logs
    # one line per outage (urllib3's own retries each log a warning).
    configuration.retries = False
    return client.ApiClient(configuration)


def _kubeconfig_source(kubeconfig: str) -> str:
    return kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"


def _kubeconfig_files(kubeconfig: str) -> list[Path]:
    """The files the client will read: the given one, else those of $KUBECONFIG that
    exist, else ~/.kube/config."""
    if kubeconfig:
        return [Path(kubeconfig)]
    paths = [Path(p).expanduser() for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if paths:
        return [p for p in paths if p.is_file()]
    return [Path("~/.kube/config").expanduser()]


def _check_kubeconfig_shape(kubeconfig: str) -> None:
    """A file that is not YAML, or YAML of another shape, is named with what is wrong
    (the client's own errors are a TypeError deep inside it)."""
    for path in _kubeconfig_files(kubeconfig):
        problem = file_problem(path)
        if problem is not None:
            raise BridgeError(f"the kubeconfig {path} {problem}; fix the file or {KUBECONFIG_FIX}")


def _check_kubeconfig_exists(kubeconfig: str) -> None:
    """The client's own message for a missing file is "No configuration found"."""
    if kubeconfig:
        if not Path(kubeconfig).is_file():
            raise BridgeError(f"the kubeconfig {kubeconfig} does not exist (from --kubeconfig or FAULTLINE_KUBECONFIG): give the path of an existing kubeconfig file")
        return
    paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if paths:
        if not any(Path(p).expanduser().is_file() for p in paths):
            raise BridgeError(f"$KUBECONFIG names no existing file ({os.environ['KUBECONFIG']}): fix $KUBECONFIG or {KUBECONFIG_FIX}")
        return
    if not Path("~/.kube/config").expanduser().is_file():
        raise BridgeError(
            "no Kubernetes client configuration: no --kubeconfig or FAULTLINE_KUBECONFIG was given, $KUBECONFIG is unset, "
            f"~/.kube/config does not exist and this is not a pod; {KUBECONFIG_FIX}"
        )


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and everything it wraps (urllib3 wraps the socket and ssl errors in its own)."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo.extend(a for a in current.args if isinstance(a, BaseException))
        todo.extend(e for e in (current.__cause__, current.__context__, getattr(current, "reason", None)) if isinstance(e, BaseException))


# getaddrinfo's "the name does not exist" answers; EAI_AGAIN ("try again") is transient.
_NO_SUCH_HOST = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


def connection_failure(exc: BaseException, what: str, server: str) -> Exception:
    """Unreachable (fatal: waiting cannot heal it, the message says the fix) or Transient
    (retried with backoff), for an error raised below HTTP on `what` (e.g. "list pods")."""
    causes = list(_causes(exc))
    host = urlsplit(server).hostname or server
    for cause in causes:
        if isinstance(cause, ssl.SSLCertVerificationError):
            detail = cause.verify_message or str(cause)
            return Unreachable(
                f"the API server at {server} presented a certificate that the kubeconfig does not trust ({detail}): "
                "fix the cluster's certificate-authority (or certificate-authority-data) in the kubeconfig, "
                "or pick the right cluster with --kubeconfig / --context"
            )
    for cause in causes:
        if isinstance(cause, ssl.SSLError) and "alert" in (cause.reason or str(cause)).lower():
            return Unreachable(
                f"the API server at {server} refused the TLS handshake ({cause.reason or cause}): it does not accept the client "
                "certificate of the kubeconfig's user; fix client-certificate / client-key (or their -data) in the kubeconfig"
            )
    for cause in causes:
        if isinstance(cause, socket.gaierror) and cause.errno in _NO_SUCH_HOST:
            return Unreachable(
                f"cannot resolve the API server's host {host!r} ({server}): fix the cluster's server address in the kubeconfig, "
                "or pick the right cluster with --kubeconfig / --context"
            )
    return Transient(f"{what}: {_short(causes)} ({server})", cause=f"{_short(causes)} ({server})")


def _short(causes: list[BaseException]) -> str:
    """A few words for a log line, not urllib3's repr of a connection pool. The socket's
    own error wins over urllib3's wrappers (its NewConnectionError is a timeout class)."""
    for kinds, words in (
        ((ConnectionRefusedError,), "connection refused"),
        ((ConnectionResetError,), "connection reset"),
        ((socket.gaierror,), None),
        ((ssl.SSLError,), None),
        ((urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.ReadTimeoutError, TimeoutError, socket.timeout), "timed out"),
    ):
        for cause in causes:
            if isinstance(cause, kinds):
                if words is not None:
                    return words
                if isinstance(cause, socket.gaierror):
                    return f"name resolution failed ({cause.strerror})"
                return f"TLS error ({getattr(cause, 'reason', None) or cause})"
    for cause in causes:
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror.lower()
    first = causes[0]
    return f"{type(first).__name__}: {str(first)[:200]}"


class KubeApi:
    """List pages and watch streams of the bridge's kinds, as raw JSON."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self.server = str(api_client.configuration.host)
        self._core = client.CoreV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)

    def close(self) -> None:
        self.api_client.close()

    def ready(self) -> bool:
        """Is the server back? `GET /readyz` with a short timeout (`app.bridge.comeback`):
        200 is ready; no answer, 429 or 5xx is not. A server that answers 401/403/404
        (readiness not public there, or an old server) answers: taken as ready, and the
        watches' own requests say the rest."""
        try:
            method, url, headers, _, _ = self.api_client.param_serialize(
                "GET", "/readyz", header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"]
            )
            response = self.api_client.call_api(method, url, headers, _request_timeout=(PROBE_TIMEOUT, PROBE_TIMEOUT))
            response.read()
        except (ApiException, urllib3.exceptions.HTTPError, OSError):
            return False
        return response.status < 500 and response.status != 429

    def _request(self, verb: str, kind: Kind, version: str, namespace: str | None, **params: Any) -> urllib3.HTTPResponse:
        params = {k: v for k, v in params.items() if v is not None}
        try:
            if kind.group == "":
                return self._core_call(kind, namespace, params)
            if namespace:
                return self._custom.list_namespaced_custom_object(kind.group, version, namespace, kind.plural, **params)
            return self._custom.list_cluster_custom_object(kind.group, version, kind.plural, **params)
        except ApiException as exc:
            if not exc.status:  # the client wraps a TLS error in an ApiException with status 0
                raise connection_failure(exc, f"{verb} {kind.resource()}", self.server) from None
            raise _translate(exc, verb, kind, version, namespace) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise connection_failure(exc, f"{verb} {kind.resource()}", self.server) from None

    def _core_call(self, kind: Kind, namespace: str | None, params: dict[str, Any]) -> urllib3.HTTPResponse:
        if kind.plural == "pods":
            if namespace:
                return self._core.list_namespaced_pod(namespace, **params)
            return self._core.list_pod_for_all_namespaces(**params)
        if kind.plural == "events":
            if namespace:
                return self._core.list_namespaced_event(namespace, **params)
            return self._core.list_event_for_all_namespaces(**params)
        raise AssertionError(f"no core API call for {kind.plural}")

    def list_page(
        self,
        kind: Kind,
        version: str,
        namespace: str | None,
        *,
        limit: int,
        cont: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> Page:
        response = self._request(
            "list",
            kind,
            version,
            namespace,
            limit=limit,
            _continue=cont,
            resource_version=resource_version,
            resource_version_match=resource_version_match,
            _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT, LIST_READ_TIMEOUT),
        )
        try:
            body = orjson.loads(response.data)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise connection_failure(exc, f"list {kind.resource()}", self.server) from None
        except orjson.JSONDecodeError as exc:
            raise Transient(f"list {kind.resource()}: the response is not JSON ({exc})") from None
        finally:
            response.release_conn()
        meta = body.get("metadata") or {}
        list_kind = str(body.get("kind") or "")
        return Page(
            items=body.get("items") or [],
            resource_version=str(meta.get("resourceVersion") or ""),
            cont=meta.get("continue") or None,
            item_kind=list_kind.removesuffix("List") or kind.name,
            api_version=str(body.get("apiVersion") or kind.api_version(version)),
        )

    def watch(self, kind: Kind, version: str, namespace: str | None, *, resource_version: str, timeout_seconds: int) -> WatchStream:
        response = self._request(
            "watch",
            kind,
            version,
            namespace,
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT, timeout_seconds + WATCH_READ_SLACK),
        )
        return WatchStream(response, f"watch {kind.resource()}")


class WatchStream:
    """The newline-delimited JSON events of one watch response, a network read at a time."""

    def __init__(self, response: urllib3.HTTPResponse, what: str) -> None:
        self._response = response
        self._what = what

    def batches(self) -> Iterator[list[bytes]]:
        """Lists of complete event lines, as they arrive. A line split across reads is
        joined; a partial line left when the stream breaks is discarded (the watch is
        resumed from the last complete event). Ends when the server ends the watch;
        raises Transient when the connection breaks."""
        pending = b""
        try:
            for data in self._response.stream(READ_SIZE, decode_content=True):
                if not data:
                    continue
                if pending:
                    data, pending = pending + data, b""
                if data[-1:] != b"\n":
                    cut = data.rfind(b"\n") + 1
                    data, pending = data[:cut], data[cut:]
                    if not data:
                        continue
                yield [line for line in data.split(b"\n") if line.strip()]
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise Transient(f"{self._what}: the connection broke ({type(exc).__name__}: {exc})", cause="the watch connection broke") from None
        if pending.strip():
            raise Transient(f"{self._what}: the stream ended inside an event")

    def interrupt(self) -> None:
        """From another thread: make a blocked read return now (used to stop)."""
        try:
            self._response.shutdown()
        except (ValueError, RuntimeError, OSError, AttributeError):
            pass

    def close(self) -> None:
        try:
            self._response.close()
            self._response.release_conn()
        except (urllib3.exceptions.HTTPError, OSError, AttributeError):
            pass


def status_of(body: str | bytes | None) -> dict[str, Any]:
    """The metav1.Status in an error body, or {} when there is none."""
    if not body:
        return {}
    try:
        status = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return status if isinstance(status, dict) else {}


def _translate(exc: ApiException, verb: str, kind: Kind, version: str, namespace: str | None) -> Exception:
    status = status_of(exc.body)
    detail = str(status.get("message") or exc.reason or "")
    code = exc.status or 0
    if code == 403:
        return Forbidden(verb, kind, version, namespace, detail)
    if code == 401:
        return Unauthorized(
            f"the API server rejected the bridge's credentials on {verb} {kind.resource()} (401 {detail}): "
            "check the kubeconfig user or the pod's service account token"
        )
    if code == 404:  # the CRD (or this version of it) is not served, or was removed meanwhile
        return NotServed(f"{kind.api_version(version)} {kind.plural}: {detail}")
    if code == 410:
        return Gone(detail)
    return Transient(f"{verb} {kind.resource()} ({kind.api_version(version)}): HTTP {code} {detail}", cause=f"HTTP {code} {detail}"[:200])
