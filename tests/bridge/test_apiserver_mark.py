"""SPEC R18 on a real API server: the mark's driver (app/mark) marks a running pod with its
own ServiceAccount's credentials, retries a conflict against the newest pod, never marks a
pod that ended under it; the mark's RBAC grants `get` on pods and `patch` on pods/status
only; and the admission policy of ops/k8s/mark keeps the condition the mark's own (it
may add it once and change nothing else; nobody else may add, change or remove it)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.bridge.client import api_client
from app.core.actions.marking import GPU_FAULT_CONDITION, MarkCondition
from app.core.base.rules import DEFAULT_RULES
from app.mark.kube import PodApi
from app.mark.marker import Marker
from app.mark.metrics import MarkMetrics
from tests.bridge import markkube as mk
from tests.bridge.helpers import wait_for
from tests.bridge.realkube import install_crd, namespace, operator_crd

pytestmark = pytest.mark.apiserver

CLUSTER = "real-mark"
TENANT_RULES = [{"apiGroups": [""], "resources": ["pods", "pods/status"], "verbs": ["get", "patch", "update"]}]


@pytest.fixture(scope="module")
def mark_sa(apiserver: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The component applied (its policy not bound): a kubeconfig of the mark's ServiceAccount."""
    mk.apply_mark_component(apiserver, bind=False)
    return mk.mark_kubeconfig(apiserver, tmp_path_factory.mktemp("mark") / "kubeconfig")


@pytest.fixture
def ns(apiserver: Any) -> str:
    return namespace(apiserver, "mark")


def marker_on(kubeconfig: Path, api_class: type[PodApi] = PodApi, **options: Any) -> Marker:
    api = api_class(api_client(str(kubeconfig)))
    return Marker(api, cluster=CLUSTER, condition_type=GPU_FAULT_CONDITION, rules=DEFAULT_RULES, metrics=MarkMetrics(),
                  stop=threading.Event(), backoff_initial=0.05, backoff_max=0.2, **options)  # fmt: skip


def close(marker: Marker) -> None:
    marker.close()
    marker.api.close()


# --- the driver ---------------------------------------------------------------------------------


def test_r18_1_the_mark_adds_the_condition_to_a_running_pod_with_its_own_credentials(apiserver, mark_sa, ns):
    served = mk.create_running_pod(apiserver, ns, "trainer")
    fault = mk.fault_record(served, CLUSTER, code=79)
    marker = marker_on(mark_sa)
    try:
        assert marker.mark(fault) is True
        assert marker.mark(fault) is False  # R18.2: once
    finally:
        close(marker)
    after = apiserver.call("GET", mk.pod_path(ns, "trainer"))
    [mark] = mk.marks(after)
    assert (mark["status"], mark["reason"]) == ("True", "GpuFallenOffBus")
    assert mark["message"] == "[gpu-health] [CRITICAL] Xid 79 (GPU has fallen off the bus) on GPU 0 GPU-1234."
    assert mark["lastTransitionTime"]
    assert "faultline-mark" in mk.managers(after)
    # Nothing else of the pod changed: the kubelet's conditions and status are as they were.
    assert [c for c in after["status"]["conditions"] if c["type"] != GPU_FAULT_CONDITION] == served["status"]["conditions"]
    assert after["status"]["containerStatuses"] == served["status"]["containerStatuses"] and after["status"]["phase"] == "Running"
    s = marker.metrics.snapshot()
    assert (s.marks, s.skips["already_marked"]) == (1, 1)


def test_r18_2_a_pod_marked_by_an_earlier_run_is_not_patched_again(apiserver, mark_sa, ns):
    served = mk.create_running_pod(apiserver, ns, "trainer")
    fault = mk.fault_record(served, CLUSTER)
    first, second = marker_on(mark_sa), marker_on(mark_sa)  # a restart: nothing remembered
    try:
        assert first.mark(fault) is True
        version = apiserver.call("GET", mk.pod_path(ns, "trainer"))["metadata"]["resourceVersion"]
        assert second.mark(fault) is False
        assert second.mark(mk.fault_record(served, CLUSTER, code=48)) is False  # another fault on it: still once
    finally:
        close(first)
        close(second)
    assert apiserver.call("GET", mk.pod_path(ns, "trainer"))["metadata"]["resourceVersion"] == version  # never written again
    assert second.metrics.snapshot().skips["already_marked"] == 2


class KubeletBetween(PodApi):
    """The real API, with the kubelet writing the pod's status once between the mark's read
    and its patch (what a busy node does): `then` makes the status it writes of the pod."""

    def __init__(self, api_client: Any) -> None:
        super().__init__(api_client)
        self.kube: Any = None
        self.then: Any = None

    def add_condition(self, namespace: str, name: str, resource_version: str, condition: MarkCondition, at: Any) -> Any:
        if self.then is not None:
            status, self.then = self.then, None
            mk.write_status(self.kube, namespace, name, status(self.kube.call("GET", mk.pod_path(namespace, name))))
        return super().add_condition(namespace, name, resource_version, condition, at)


def test_r18_2_a_conflict_is_retried_against_the_newest_pod(apiserver, mark_sa, ns):
    served = mk.create_running_pod(apiserver, ns, "trainer")
    marker = marker_on(mark_sa, KubeletBetween)
    marker.api.kube, marker.api.then = apiserver, lambda pod: {**pod["status"], "podIP": "10.1.2.3", "podIPs": [{"ip": "10.1.2.3"}]}  # type: ignore[attr-defined]
    try:
        assert marker.mark(mk.fault_record(served, CLUSTER)) is True
    finally:
        close(marker)
    after = apiserver.call("GET", mk.pod_path(ns, "trainer"))
    assert len(mk.marks(after)) == 1 and after["status"]["podIP"] == "10.1.2.3"  # the kubelet's write stands
    assert marker.metrics.snapshot().conflicts == 1


def test_r18_1_a_pod_that_fails_between_the_read_and_the_patch_is_never_marked(apiserver, mark_sa, ns):
    served = mk.create_running_pod(apiserver, ns, "trainer")
    marker = marker_on(mark_sa, KubeletBetween)
    marker.api.kube, marker.api.then = apiserver, mk.failed_status  # type: ignore[attr-defined]
    try:
        assert marker.mark(mk.fault_record(served, CLUSTER)) is False
    finally:
        close(marker)
    after = apiserver.call("GET", mk.pod_path(ns, "trainer"))
    assert after["status"]["phase"] == "Failed" and mk.marks(after) == []
    s = marker.metrics.snapshot()
    assert (s.conflicts, s.skips["ended"], s.marks) == (1, 1, 0)


def test_r18_1_gone_and_replaced_pods_are_not_marked(apiserver, mark_sa, ns):
    served = mk.create_running_pod(apiserver, ns, "trainer")
    fault = mk.fault_record(served, CLUSTER)
    apiserver.call("DELETE", mk.pod_path(ns, "trainer"), {"gracePeriodSeconds": 0})
    wait_for(lambda: apiserver.request("GET", mk.pod_path(ns, "trainer"))[0] == 404, what="the pod gone")
    marker = marker_on(mark_sa)
    try:
        assert marker.mark(fault) is False  # gone
        mk.create_running_pod(apiserver, ns, "trainer")  # another pod of the same name
        assert marker_on(mark_sa).mark(fault) is False
    finally:
        close(marker)
    assert mk.marks_of(apiserver, ns, "trainer") == []
    assert marker.metrics.snapshot().skips["ended"] == 1


# --- least privilege: RBAC (R18.3) --------------------------------------------------------------


def test_r18_3_the_mark_may_get_pods_and_patch_their_status_and_nothing_else(apiserver, mark_sa, ns):
    token = apiserver.create_token(*mk.MARK_SA)
    mk.create_running_pod(apiserver, ns, "trainer")
    path = mk.pod_path(ns, "trainer")
    condition = {"status": {"conditions": [{"type": GPU_FAULT_CONDITION, "status": "True", "reason": "GpuFallenOffBus"}]}}
    assert apiserver.request("GET", path, token=token)[0] == 200
    for method, url, body in (
        ("GET", f"/api/v1/namespaces/{ns}/pods", None),  # list
        ("GET", f"/api/v1/namespaces/{ns}/pods?watch=true&timeoutSeconds=1", None),
        ("PATCH", path, {"metadata": {"labels": {"x": "y"}}}),  # the pod itself
        ("DELETE", path, None),
        ("POST", f"/api/v1/namespaces/{ns}/pods", {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        ("PUT", path + "/status", apiserver.call("GET", path)),  # update, not patch
        ("GET", f"/api/v1/namespaces/{ns}/secrets", None),
        ("GET", f"/api/v1/namespaces/{ns}/events", None),
        ("POST", f"/api/v1/namespaces/{ns}/pods/trainer/eviction", {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "trainer"}}),
    ):
        status, _ = apiserver.request(method, url, body, token=token, content_type="application/merge-patch+json" if method == "PATCH" else "application/json")
        assert status == 403, (method, url, status)
    status, _ = apiserver.request("PATCH", path + "/status", condition, token=token, content_type="application/strategic-merge-patch+json")
    assert status == 200


# --- least privilege: the admission policy (R18.3) ----------------------------------------------


@pytest.fixture(scope="module")
def policy(apiserver: Any, mark_sa: Path) -> Iterator[dict[str, str]]:
    """The policy bound (as shipped); tokens of the mark and of a tenant who may patch pod
    status in its namespace. Unbound afterwards (the session's API server is shared)."""
    tenant_ns = namespace(apiserver, "tenant")
    rbac = "rbac.authorization.k8s.io/v1"
    for doc in (
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tenant", "namespace": tenant_ns}},
        {"apiVersion": rbac, "kind": "Role", "metadata": {"name": "pod-writer", "namespace": tenant_ns}, "rules": TENANT_RULES},
        {"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": "pod-writer", "namespace": tenant_ns},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-writer"},
         "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": tenant_ns}]},
    ):  # fmt: skip
        mk.manifests.apply(apiserver, doc)
    binding = mk.policy_binding()
    mk.manifests.apply(apiserver, binding)
    mk.wait_policy(apiserver, tenant_ns, bound=True)  # compiled and enforced a moment after it is bound
    try:
        yield {"mark": apiserver.create_token(*mk.MARK_SA), "tenant": apiserver.create_token(tenant_ns, "tenant"), "tenant_ns": tenant_ns}
    finally:
        apiserver.call("DELETE", f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{binding['metadata']['name']}")
        mk.wait_policy(apiserver, tenant_ns, bound=False)


def patch_status(kube: Any, ns: str, name: str, body: dict[str, Any], token: str | None = None, kind: str = "strategic-merge") -> tuple[int, Any]:
    return kube.request("PATCH", mk.pod_path(ns, name) + "/status", body, token=token, content_type=f"application/{kind}-patch+json")


def our_condition(reason: str = "GpuFallenOffBus", message: str = "[gpu-health] [CRITICAL] Xid 79") -> dict[str, Any]:
    return {"type": GPU_FAULT_CONDITION, "status": "True", "reason": reason, "message": message, "lastTransitionTime": mk.now()}


def test_r18_3_the_mark_may_add_its_condition_once_and_change_nothing_else(apiserver, policy, ns):
    token = policy["mark"]
    for name in ("a", "b", "c", "d", "e", "f"):
        mk.create_running_pod(apiserver, ns, name, labels={"team": "ml"})
    refused = {
        "another condition": {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
        "its condition and another": {"status": {"conditions": [our_condition(), {"type": "Ready", "status": "False"}]}},
        "the phase": {"status": {"phase": "Failed"}},
        "its condition and the phase": {"status": {"phase": "Failed", "conditions": [our_condition()]}},
        "a label": {"metadata": {"labels": {"team": "other"}}, "status": {"conditions": [our_condition()]}},
        "a finalizer": {"metadata": {"finalizers": ["example.com/hold"]}},
    }
    for (what, body), name in zip(refused.items(), "abcdef"):
        status, answer = patch_status(apiserver, ns, name, body, token)
        assert status == 403, (what, answer)
        assert "faultline mark may" in answer["message"], (what, answer["message"])
    assert all(mk.marks_of(apiserver, ns, name) == [] for name in "abcdef")
    # What it is for: the condition, added once.
    assert patch_status(apiserver, ns, "a", {"status": {"conditions": [our_condition()]}}, token)[0] == 200
    status, answer = patch_status(apiserver, ns, "a", {"status": {"conditions": [our_condition(message="changed")]}}, token)
    assert status == 403 and "may not change or remove it" in answer["message"]
    removal = {"status": {"conditions": [{"type": GPU_FAULT_CONDITION, "$patch": "delete"}]}}
    assert patch_status(apiserver, ns, "a", removal, token)[0] == 403
    [mark] = mk.marks_of(apiserver, ns, "a")
    assert mark["reason"] == "GpuFallenOffBus"


def test_r18_3_nobody_else_may_add_change_or_remove_the_condition(apiserver, policy):
    tenant_ns, tenant = policy["tenant_ns"], policy["tenant"]
    for name in ("t1", "t2"):
        mk.create_running_pod(apiserver, tenant_ns, name)
    add = {"status": {"conditions": [our_condition(reason="Forged")]}}
    for who, token in (("the tenant", tenant), ("the cluster admin", None)):
        status, answer = patch_status(apiserver, tenant_ns, "t1", add, token)
        assert status == 403, who
        assert f"only system:serviceaccount:faultline:faultline-mark may add, change or remove the pod condition {GPU_FAULT_CONDITION}" in answer["message"]
    assert mk.marks_of(apiserver, tenant_ns, "t1") == []
    # A marked pod: the mark's condition cannot be changed or removed by anyone else...
    assert patch_status(apiserver, tenant_ns, "t2", add, policy["mark"])[0] == 200
    assert patch_status(apiserver, tenant_ns, "t2", {"status": {"conditions": [our_condition(reason="Changed")]}}, tenant)[0] == 403
    removal = {"status": {"conditions": [{"type": GPU_FAULT_CONDITION, "$patch": "delete"}]}}
    assert patch_status(apiserver, tenant_ns, "t2", removal)[0] == 403
    served = apiserver.call("GET", mk.pod_path(tenant_ns, "t2"))
    dropped = {**served, "status": {**served["status"], "conditions": [c for c in served["status"]["conditions"] if c["type"] != GPU_FAULT_CONDITION]}}
    assert apiserver.request("PUT", mk.pod_path(tenant_ns, "t2") + "/status", dropped)[0] == 403
    # ...while the kubelet goes on writing the rest of its status (it keeps conditions it does not own).
    failed = mk.failed_status(apiserver.call("GET", mk.pod_path(tenant_ns, "t2")))
    after = mk.write_status(apiserver, tenant_ns, "t2", failed)
    assert after["status"]["phase"] == "Failed" and [m["reason"] for m in mk.marks(after)] == ["Forged"]


def test_r18_3_pods_without_the_condition_are_not_slowed_by_the_policy(apiserver, policy):
    """The matchConditions: an ordinary status write by anyone but the mark is not evaluated (and passes)."""
    tenant_ns = policy["tenant_ns"]
    mk.create_running_pod(apiserver, tenant_ns, "plain")
    status, answer = patch_status(apiserver, tenant_ns, "plain", {"status": {"podIP": "10.9.9.9", "podIPs": [{"ip": "10.9.9.9"}]}}, policy["tenant"])
    assert status == 200, answer


def test_r18_1_a_pod_being_deleted_is_marked_under_the_policy(apiserver, policy, mark_sa, ns):
    """A drained pod (deletionTimestamp set, its containers still running) has not ended:
    its GPU fault still marks it, and the policy lets the mark's patch through."""
    served = mk.create_running_pod(apiserver, ns, "draining")
    apiserver.call("DELETE", mk.pod_path(ns, "draining"), {"gracePeriodSeconds": 300})  # bound to a node: it stays Terminating
    assert apiserver.call("GET", mk.pod_path(ns, "draining"))["metadata"]["deletionTimestamp"]
    marker = marker_on(mark_sa)
    try:
        assert marker.mark(mk.fault_record(served, CLUSTER)) is True
    finally:
        close(marker)
    assert len(mk.marks_of(apiserver, ns, "draining")) == 1


def test_r18_2_the_mark_waits_out_an_api_server_restart(bare_apiserver, tmp_path):
    """The API server down when a fault comes: the mark retries with backoff and marks once
    it is back; nothing is skipped."""
    kube = bare_apiserver
    ns = namespace(kube, "outage")
    served = mk.create_running_pod(kube, ns, "trainer")
    fault = mk.fault_record(served, CLUSTER)
    marker = marker_on(kube.write_kubeconfig(tmp_path / "kubeconfig"))
    kube.stop_apiserver()
    outcome: list[bool] = []
    worker = threading.Thread(target=lambda: outcome.append(marker.mark(fault)))
    try:
        worker.start()
        threading.Event().wait(2)  # a few failed tries
        assert not outcome
        kube.start_apiserver()
        worker.join(timeout=60)
    finally:
        close(marker)
    assert outcome == [True] and len(mk.marks_of(kube, ns, "trainer")) == 1


# --- R18.4: the policies the docs show -----------------------------------------------------------


def documented(kind: str) -> dict[str, Any]:
    """The one object of `kind` among docs/mark.md's YAML blocks."""
    import yaml

    text = (mk.ROOT / "docs" / "mark.md").read_text()
    found = [d for d in (yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.S)) if isinstance(d, dict) and d.get("kind") == kind]
    assert len(found) == 1, f"docs/mark.md shows {len(found)} {kind} objects"
    return found[0]


def test_r18_4_the_documented_job_and_jobset_policies_are_valid_and_match_the_mark(bare_apiserver):
    """Both policies of docs/mark.md, created with strict field validation: the Job by the
    API server itself, the JobSet against JobSet v0.12.0's own CRD schema."""
    kube = bare_apiserver
    ns = namespace(kube, "docs")
    job = documented("Job")
    assert job["spec"]["podFailurePolicy"]["rules"] == [{"action": "Ignore", "onPodConditions": [{"type": GPU_FAULT_CONDITION}]}]
    served = kube.call("POST", f"/apis/batch/v1/namespaces/{ns}/jobs?fieldValidation=Strict&dryRun=All", job)
    assert served["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"] == [{"type": GPU_FAULT_CONDITION, "status": "True"}]

    install_crd(kube, operator_crd("jobset-v0.12.0-jobsets.yaml"))
    jobset = documented("JobSet")
    [rule] = jobset["spec"]["failurePolicy"]["rules"]
    assert (rule["action"], rule["onJobFailureReasons"]) == ("RestartJobSetAndIgnoreMaxRestarts", ["PodFailurePolicy"])
    [child] = jobset["spec"]["replicatedJobs"]
    assert child["template"]["spec"]["podFailurePolicy"]["rules"] == [{"action": "FailJob", "onPodConditions": [{"type": GPU_FAULT_CONDITION}]}]
    path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets?fieldValidation=Strict"
    kube.call("POST", path, jobset)
    # The schema is upstream's: a misspelt field or an action it does not know is refused.
    for broken in ({**rule, "onJobFailureReason": ["PodFailurePolicy"]}, {**rule, "action": "RestartIgnoringMaxRestarts"}):
        wrong = {**jobset, "metadata": {"name": "wrong"}, "spec": {**jobset["spec"], "failurePolicy": {"rules": [broken]}}}
        status, answer = kube.request("POST", path, wrong)
        assert status in (400, 422), answer
