"""The cluster-side guard of GPU fault events (SPEC R2.7e; ops/k8s/gpu-event-guard.yaml)
on a real API server: only the node agent's identity may write GPUXidError/GPUSXidError
Events, and only reporting the node its pod-bound token names."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.bridge import manifests
from tests.bridge.helpers import wait_for

pytestmark = pytest.mark.apiserver

# The node agent the shipped ConfigMap names (ops/k8s/gpu-event-guard.yaml).
AGENT_NS, AGENT_SA = "gpu-health", "gpu-health-agent"
TEAM = "team-guard"
EVENT_WRITER_RULES = [
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "update", "patch", "get"]},
]


def core_event(name: str, reason: str = "GPUXidError", instance: str | None = "node-a", host: str | None = "node-a") -> dict[str, Any]:
    event: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": TEAM},
        "involvedObject": {"kind": "Pod", "name": "trainer", "namespace": TEAM, "uid": "uid-1", "apiVersion": "v1"},
        "reason": reason, "type": "Warning", "count": 1,
        "message": "[gpu-health] [CRITICAL] Xid 79 on GPU 0. xid=79 severity=critical node=node-a",
        "reportingComponent": "gpu-health-agent", "source": {"component": "gpu-health-agent"},
    }
    if instance is not None:
        event["reportingInstance"] = instance
    if host is not None:
        event["source"]["host"] = host
    return event


def new_event(name: str, instance: str, reason: str = "GPUXidError") -> dict[str, Any]:
    """An events.k8s.io/v1 Event (the newer API: reportingInstance, deprecatedSource)."""
    return {
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": name, "namespace": TEAM},
        "eventTime": "2026-12-01T10:00:00.000000Z", "reportingController": "gpu-health-agent", "reportingInstance": instance,
        "action": "Detected", "reason": reason, "type": "Warning", "note": "[gpu-health] xid=79",
        "regarding": {"kind": "Pod", "name": "trainer", "namespace": TEAM, "uid": "uid-1", "apiVersion": "v1"},
    }


def post(kube: Any, event: dict[str, Any], token: str | None = None) -> tuple[int, Any]:
    group = "/apis/events.k8s.io/v1" if event["apiVersion"] == "events.k8s.io/v1" else "/api/v1"
    return kube.request("POST", f"{group}/namespaces/{TEAM}/events", event, token=token)


def create(kube: Any, *docs: dict[str, Any]) -> None:
    for doc in docs:
        manifests.apply(kube, doc)


@pytest.fixture(scope="module")
def guard(ops_applied: Any) -> Iterator[dict[str, Any]]:
    """The guard bound (as shipped), a node agent with a token bound to its pod on node-a,
    an ordinary user who may write Events in the team's namespace. Unbound afterwards."""
    kube = ops_applied
    rbac = "rbac.authorization.k8s.io/v1"
    create(
        kube,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": AGENT_NS}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TEAM}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": AGENT_SA, "namespace": AGENT_NS}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "user", "namespace": TEAM}},
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": "guard-test-event-writer"}, "rules": EVENT_WRITER_RULES},
        {"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": "guard-test-agent"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "guard-test-event-writer"},
         "subjects": [{"kind": "ServiceAccount", "name": AGENT_SA, "namespace": AGENT_NS}]},
        {"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": "guard-test-user", "namespace": TEAM},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "guard-test-event-writer"},
         "subjects": [{"kind": "ServiceAccount", "name": "user", "namespace": TEAM}]},
    )
    agent_pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent-node-a", "namespace": AGENT_NS},
                 "spec": {"nodeName": "node-a", "serviceAccountName": AGENT_SA, "containers": [{"name": "agent", "image": "gpu-health:1"}]}}
    status, served = kube.request("POST", f"/api/v1/namespaces/{AGENT_NS}/pods", agent_pod)
    if status == 409:
        served = kube.call("GET", f"/api/v1/namespaces/{AGENT_NS}/pods/agent-node-a")
    tokens = {
        "agent": kube.create_token(AGENT_NS, AGENT_SA, pod=served),  # names node-a
        "agent-unbound": kube.create_token(AGENT_NS, AGENT_SA),
        "user": kube.create_token(TEAM, "user"),
    }
    [(_, binding)] = [d for d in manifests.documents("gpu-event-guard.yaml") if d[1]["kind"] == "ValidatingAdmissionPolicyBinding"]
    manifests.apply(kube, binding)
    probe = 0

    def admin_refused() -> bool:  # the policy is compiled and enforced a moment after it is bound
        nonlocal probe
        probe += 1
        status, _ = post(kube, core_event(f"probe-{probe}"))
        return status == 403

    wait_for(admin_refused, timeout=30, what="the guard in force")
    try:
        yield tokens
    finally:
        kube.call("DELETE", f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{binding['metadata']['name']}")

        def admin_allowed() -> bool:
            nonlocal probe
            probe += 1
            return post(kube, core_event(f"probe-{probe}"))[0] == 201

        wait_for(admin_allowed, timeout=30, what="the guard unbound")


def test_r2_7e_the_node_agent_may_write_a_fault_event_reporting_its_own_node(apiserver, guard):
    status, created = post(apiserver, core_event("ok-1"), token=guard["agent"])
    assert status == 201, created
    created["count"], created["lastTimestamp"] = 2, "2026-12-01T10:05:00Z"  # the recorder's update of a repeat
    status, updated = apiserver.request("PUT", f"/api/v1/namespaces/{TEAM}/events/ok-1", created, token=guard["agent"])
    assert status == 200, updated
    # reportingInstance alone, or source.host alone, is enough when it is the node.
    assert post(apiserver, core_event("ok-2", instance=None), token=guard["agent"])[0] == 201
    assert post(apiserver, core_event("ok-3", host=None), token=guard["agent"])[0] == 201
    assert post(apiserver, new_event("ok-4", "node-a"), token=guard["agent"])[0] == 201


def test_r2_7e_the_node_agent_is_refused_for_another_node(apiserver, guard):
    status, answer = post(apiserver, core_event("other-1", instance="node-b", host="node-b"), token=guard["agent"])
    assert status == 403
    assert "must report the node its writer runs on (node-a)" in answer["message"] and "reportingInstance node-b" in answer["message"]
    assert post(apiserver, core_event("other-2", instance="node-a", host="node-b"), token=guard["agent"])[0] == 403
    assert post(apiserver, core_event("other-3", instance=None, host=None), token=guard["agent"])[0] == 403
    # events.k8s.io/v1 is checked too (converted to core/v1).
    assert post(apiserver, new_event("other-4", "node-b"), token=guard["agent"])[0] == 403


def test_r2_7e_a_token_not_bound_to_a_pod_names_no_node_and_is_refused(apiserver, guard):
    status, answer = post(apiserver, core_event("unbound-1"), token=guard["agent-unbound"])
    assert status == 403 and "not bound to a node" in answer["message"]


def test_r2_7e_anyone_else_is_refused_a_fault_event(apiserver, guard):
    status, answer = post(apiserver, core_event("forged-1"), token=guard["user"])
    assert status == 403
    assert f"only system:serviceaccount:{AGENT_NS}:{AGENT_SA} may write GPUXidError events" in answer["message"]
    assert "system:serviceaccount:team-guard:user may not" in answer["message"]
    assert post(apiserver, core_event("forged-2", reason="GPUSXidError"), token=guard["user"])[0] == 403
    assert post(apiserver, core_event("forged-3"))[0] == 403  # the cluster admin as well
    # Turning an ordinary event into a fault event is a forgery too.
    status, plain = post(apiserver, core_event("plain-1", reason="BackOff"), token=guard["user"])
    assert status == 201
    plain["reason"] = "GPUXidError"
    assert apiserver.request("PUT", f"/api/v1/namespaces/{TEAM}/events/plain-1", plain, token=guard["user"])[0] == 403


def test_r2_7e_other_events_are_untouched(apiserver, guard):
    assert post(apiserver, core_event("other-reason-1", reason="Scheduled", instance="node-z", host="node-z"), token=guard["user"])[0] == 201
    assert post(apiserver, core_event("other-reason-2", reason="Started", instance=None, host=None))[0] == 201
    assert post(apiserver, core_event("other-reason-3", reason="NodeNotReady", instance="node-b", host="node-b"), token=guard["agent"])[0] == 201
    assert post(apiserver, new_event("other-reason-4", "node-q", reason="Killing"), token=guard["user"])[0] == 201
