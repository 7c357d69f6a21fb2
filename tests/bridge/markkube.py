"""Helpers of the mark's tests on a real API server (SPEC R18): pods written as the kubelet
would write them (bound to a node, their status through pods/status), fault records made
by the rules themselves from those pods, the mark's manifests, and what a pod's
conditions say."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from app.core.actions.marking import GPU_FAULT_CONDITION
from app.model.records import Fault
from tests.bridge import kustomize, manifests
from tests.bridge.helpers import wait_for
from tests.unit import builders
from tests.unit.scenario import faults

ROOT = Path(__file__).resolve().parents[2]
NODE = builders.NODE  # the node the pods are bound to, and the fault events reported from
MARK_SA = ("faultline", "faultline-mark")
GPU_LIMITS = {"limits": {"nvidia.com/gpu": "1"}}


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def mark_documents() -> list[dict[str, Any]]:
    """The objects of the opt-in component ops/k8s/mark, as `kubectl apply -k` builds them."""
    return [doc for file, doc in kustomize.build(manifests.MANIFESTS, ["mark"]) if file.startswith("mark/")]


def apply_mark_component(kube: Any, *, bind: bool) -> None:
    """The component on `kube` (its namespace first); the admission policy's binding only
    with `bind`."""
    manifests.apply(kube, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "faultline"}})
    for doc in mark_documents():
        if bind or doc["kind"] != "ValidatingAdmissionPolicyBinding":
            manifests.apply(kube, doc)


def policy_binding() -> dict[str, Any]:
    [binding] = [d for d in mark_documents() if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    return binding


_probes = iter(range(1 << 62))


def wait_policy(kube: Any, ns: str, *, bound: bool, timeout: float = 30) -> None:
    """Until the mark's admission policy is in force (`bound`) or no longer is: a change
    to the condition by the cluster admin is then refused, or taken. Uses a probe pod of
    its own in `ns`."""
    if kube.request("GET", pod_path(ns, "policy-probe"))[0] == 404:
        create_running_pod(kube, ns, "policy-probe")

    def in_force() -> bool:
        body = {"status": {"conditions": [{"type": GPU_FAULT_CONDITION, "status": "True", "reason": f"Probe{next(_probes)}"}]}}
        status, _ = kube.request("PATCH", pod_path(ns, "policy-probe") + "/status", body, content_type="application/strategic-merge-patch+json")
        return status == 403

    wait_for(lambda: in_force() == bound, timeout=timeout, what=f"the mark's admission policy {'in force' if bound else 'unbound'}")


def mark_kubeconfig(kube: Any, path: Path) -> Path:
    """A kubeconfig with the mark ServiceAccount's token: what the Deployment runs as."""
    return kube.write_kubeconfig(path, token=kube.create_token(*MARK_SA))


def running_status(containers: list[str], started: str | None = None) -> dict[str, Any]:
    started = started or now()
    return {
        "phase": "Running",
        "startTime": started,
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": started}],
        "containerStatuses": [
            {"name": c, "ready": True, "restartCount": 0, "image": "trainer:1", "imageID": "sha256:0", "state": {"running": {"startedAt": started}}}
            for c in containers
        ],
    }


def failed_status(served: dict[str, Any], exit_code: int = 1) -> dict[str, Any]:
    """The status a kubelet writes when the pod's containers exited with `exit_code`."""
    status = dict(served.get("status") or {})
    finished = now()
    status["phase"] = "Failed"
    status["containerStatuses"] = [
        {**c, "ready": False, "state": {"terminated": {"exitCode": exit_code, "reason": "Error", "startedAt": finished, "finishedAt": finished}}}
        for c in status.get("containerStatuses") or []
    ]
    status["conditions"] = [c if c["type"] != "Ready" else {**c, "status": "False", "lastTransitionTime": finished} for c in status.get("conditions") or []]
    return status


def pod_path(ns: str, name: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods/{name}"


def bind(kube: Any, ns: str, name: str, node: str = NODE) -> None:
    """What the scheduler does: the pods/binding subresource."""
    kube.call("POST", pod_path(ns, name) + "/binding", {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": node}})


def write_status(kube: Any, ns: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
    """What the kubelet does: the pod's status through pods/status (a merge patch; the
    conditions list is replaced, as the kubelet keeps every condition it does not own)."""
    return kube.call("PATCH", pod_path(ns, name) + "/status", {"status": status}, content_type="application/merge-patch+json")


def run_pod(kube: Any, ns: str, name: str) -> dict[str, Any]:
    """A created pod (by a controller or a test), bound and Running as the kubelet reports it."""
    served = kube.call("GET", pod_path(ns, name))
    if not served["spec"].get("nodeName"):
        bind(kube, ns, name)
    containers = [c["name"] for c in served["spec"]["containers"]]
    return write_status(kube, ns, name, running_status(containers))


def create_running_pod(kube: Any, ns: str, name: str, labels: dict[str, str] | None = None, gpus: bool = True) -> dict[str, Any]:
    """A bare pod that asks for a GPU (a workload attempt of its own, SPEC R13.2), Running on NODE."""
    resources = GPU_LIMITS if gpus else {}
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"nodeName": NODE, "restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer:1", "resources": resources}]}}  # fmt: skip
    kube.call("POST", f"/api/v1/namespaces/{ns}/pods", body)
    return run_pod(kube, ns, name)


def fault_event(served_pod: dict[str, Any], code: int = 79, severity: str = "critical", **options: Any) -> dict[str, Any]:
    """A GPU fault Event about `served_pod` as a node agent records it (SPEC R2), reported from NODE."""
    return builders.event(served_pod, code=code, severity=severity, first=datetime.now(timezone.utc), **options)


def fault_record(served_pod: dict[str, Any], cluster: str, code: int = 79, severity: str = "critical") -> Fault:
    """The faults-topic record the rules make of a fault Event on `served_pod` (R2.6)."""
    at = datetime.now(timezone.utc)
    pod_record = builders.record(served_pod, at, "ADDED", cluster=cluster)
    event_record = builders.record(fault_event(served_pod, code, severity), at, "ADDED", cluster=cluster)
    [fault] = faults([pod_record, event_record])
    return fault


def fault_bytes(fault: Fault) -> bytes:
    import msgspec

    return msgspec.json.encode(fault)


def marks(served_pod: dict[str, Any], condition_type: str = GPU_FAULT_CONDITION) -> list[dict[str, Any]]:
    return [c for c in (served_pod.get("status") or {}).get("conditions") or [] if c.get("type") == condition_type]


def marks_of(kube: Any, ns: str, name: str) -> list[dict[str, Any]]:
    return marks(kube.call("GET", pod_path(ns, name)))


def wait_marked(kube: Any, ns: str, name: str, timeout: float = 60) -> dict[str, Any]:
    [mark] = wait_for(lambda: marks_of(kube, ns, name), timeout=timeout, what=f"pod {ns}/{name} marked")
    return mark


def managers(served_pod: dict[str, Any]) -> list[str]:
    return [m.get("manager", "") for m in served_pod["metadata"].get("managedFields") or []]


def json(value: Any) -> str:
    return orjson.dumps(value).decode()


def settle(seconds: float) -> None:
    time.sleep(seconds)
