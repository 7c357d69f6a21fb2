"""The mark's only module that talks to the Kubernetes API (SPEC R18.3: `get` on pods,
`patch` on `pods/status`, nothing else), through the official client configured as the
bridge's is (`app.bridge.client.api_client`: a kubeconfig, else the pod's ServiceAccount).

A mark is a strategic merge patch of `status.conditions` (merge key `type`: kubernetes/api
core/v1/types.go PodStatus.Conditions, `patchStrategy:"merge" patchMergeKey:"type"`) that
carries the resourceVersion of the pod the rule read: the API server applies it only to
that version of the pod and answers 409 Conflict otherwise, so a pod that ended (or was
marked) since it was read is never patched on the strength of an older read (R18.2).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Literal, NamedTuple

import msgspec
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from app.bridge.client import CONNECT_TIMEOUT, connection_failure, status_of
from app.bridge.errors import Transient
from app.core.actions.marking import MarkCondition
from app.model.k8s import Pod

READ_TIMEOUT = 30.0
FIELD_MANAGER = "faultline-mark"  # names the writer in the pod's managedFields
PATCH_TYPE = "application/strategic-merge-patch+json"
RBAC_MANIFEST = "ops/k8s/mark/rbac.yaml"

Patched = Literal["patched", "conflict", "gone"]


class MarkApiError(RuntimeError):
    """Fatal: `faultline mark` stops; the message says what to fix."""


class Refused(Exception):
    """The API server refused one patch (admission, validation): that pod is not marked,
    the others go on (the message is the server's)."""


class Unreadable(Exception):
    """The pod as served cannot be read into the view the rule reads: that pod is not
    marked, the others go on (bad input never stops the mark, SPEC R11)."""


class _Version(msgspec.Struct, frozen=True):
    resource_version: str = msgspec.field(default="", name="resourceVersion")


class _Versioned(msgspec.Struct, frozen=True):
    metadata: _Version = _Version()


class FetchedPod(NamedTuple):
    pod: Pod
    resource_version: str


_pod = msgspec.json.Decoder(Pod)
_versioned = msgspec.json.Decoder(_Versioned)


def condition_patch(condition: MarkCondition, resource_version: str, at: datetime) -> dict[str, object]:
    """The body of the patch: the condition, stamped with when it became true, applied
    only to the pod at `resource_version`."""
    stamp = at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # metav1.Time: whole seconds
    entry = {
        "type": condition.type,
        "status": condition.status,
        "reason": condition.reason,
        "message": condition.message,
        "lastTransitionTime": stamp,
    }
    return {"metadata": {"resourceVersion": resource_version}, "status": {"conditions": [entry]}}


class PodApi:
    """GET a pod, PATCH its status; raw JSON decoded into the slim view the rule reads."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self.server = str(api_client.configuration.host)
        self._core = client.CoreV1Api(api_client)

    def close(self) -> None:
        self.api_client.close()

    def get(self, namespace: str, name: str) -> FetchedPod | None:
        """The pod as served now, or None when there is none (404)."""
        what = f"get pod {namespace}/{name}"
        try:
            response = self._core.read_namespaced_pod(name, namespace, _preload_content=False, _request_timeout=(CONNECT_TIMEOUT, READ_TIMEOUT))
            try:
                data = response.data
            finally:
                response.release_conn()
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise self._failure(exc, what, "get", "pods") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise connection_failure(exc, what, self.server) from None
        try:
            return FetchedPod(_pod.decode(data), _versioned.decode(data).metadata.resource_version)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            raise Unreadable(f"{what}: the answer is not a pod the rules can read ({exc})") from None

    def add_condition(self, namespace: str, name: str, resource_version: str, condition: MarkCondition, at: datetime) -> Patched:
        """Add `condition` to the pod at `resource_version`: "patched", "conflict" (the pod
        changed since it was read: read it again) or "gone" (deleted meanwhile)."""
        what = f"patch pod {namespace}/{name} status"
        body = condition_patch(condition, resource_version, at)
        try:
            response = self._core.patch_namespaced_pod_status(
                name, namespace, body, field_manager=FIELD_MANAGER, _content_type=PATCH_TYPE,
                _preload_content=False, _request_timeout=(CONNECT_TIMEOUT, READ_TIMEOUT),
            )  # fmt: skip
            try:
                response.data  # noqa: B018 - read the answer, so the connection goes back to the pool
            finally:
                response.release_conn()
        except ApiException as exc:
            if exc.status == 409:
                return "conflict"
            if exc.status == 404:
                return "gone"
            if exc.status in (400, 403, 422):
                detail = str(status_of(exc.body).get("message") or exc.reason or "")
                if exc.status == 403 and "cannot patch resource" in detail:  # RBAC, not admission: nothing will be marked
                    raise self._failure(exc, what, "patch", "pods/status") from None
                raise Refused(f"{what}: HTTP {exc.status} {detail}") from None
            raise self._failure(exc, what, "patch", "pods/status") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise connection_failure(exc, what, self.server) from None
        return "patched"

    def _failure(self, exc: ApiException, what: str, verb: str, resource: str) -> Exception:
        if not exc.status:  # the client wraps a TLS error in an ApiException with status 0
            return connection_failure(exc, what, self.server)
        detail = str(status_of(exc.body).get("message") or exc.reason or "")
        if exc.status == 401:
            return MarkApiError(
                f"the API server rejected the mark's credentials on {what} (401 {detail}): check the kubeconfig user or the "
                "pod's service account token"
            )
        if exc.status == 403:
            return MarkApiError(
                f"RBAC forbids the mark to {verb} {resource} ({what}: {detail}); fix: bind its identity (its ServiceAccount "
                f"in a pod, else the kubeconfig user) to a ClusterRole with `get` on pods and `patch` on pods/status "
                f"({RBAC_MANIFEST} has it)"
            )
        return Transient(f"{what}: HTTP {exc.status} {detail}", cause=f"HTTP {exc.status} {detail}"[:200])
