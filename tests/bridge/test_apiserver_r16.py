"""SPEC R16 on a real API server: Kubeflow's JAXJob CRD as kubeflow/trainer v1.9.4 ships it
(tests/bridge/crds), a JAXJob story played as its operator writes it; a pod a DRA device
taint evicts and a pod Kueue's failure recovery force-deletes, each written as its
controller writes it — the `DisruptionTarget` condition through `pods/status`, the
deletion with a grace period (the server sets the `deletionTimestamp`), Kueue's
`KueueFailureRecovery` condition by a JSON merge patch of `pods/status` with no
`lastTransitionTime` and its Warning Event through events.k8s.io/v1, both with the
rights Kueue's ClusterRole grants. `faultline record` takes everything down and
`faultline run` prints the verdicts `faultline classify` gives for the recorded trace."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.bridge.helpers import wait_for
from tests.bridge.realkube import RecordAndRun, StoryPlayer, attempt, controller_job_status, install_crd, namespace, operator_crd, verdicts_in
from tests.unit import builders, stories

pytestmark = pytest.mark.apiserver

CLUSTER = "real-r16"
JAXJOB_CRD = "trainer-v1.9.4-jaxjobs.yaml"
MERGE = "application/merge-patch+json"
GPU_NODE_TAINTED, GPU_NODE_LOST = "gpu-120", "gpu-131"


def now() -> str:
    return builders.ts(datetime.now(timezone.utc).replace(microsecond=0))


def micro_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Cluster:
    """The writes of a Job's controllers, the kubelet, the taint managers and Kueue, by hand."""

    def __init__(self, kube: Any, ns: str, kueue_token: str) -> None:
        self.kube, self.ns, self.kueue = kube, ns, kueue_token

    def job(self, name: str, *, claims: bool = False) -> dict[str, Any]:
        """A user's batch/v1 Job of one GPU pod (backoffLimit 0), started by its controller."""
        container: dict[str, Any] = {"name": "main", "image": "ghcr.io/acme/train:2026.09", "resources": self.gpu(claims)}
        template: dict[str, Any] = {"spec": {"restartPolicy": "Never", "containers": [container]}}
        if claims:
            template["spec"]["resourceClaims"] = self.claims()
        job = self.kube.call("POST", f"/apis/batch/v1/namespaces/{self.ns}/jobs", {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"backoffLimit": 0, "completions": 1, "parallelism": 1, "template": template}})  # fmt: skip
        return self.kube.call("PUT", f"/apis/batch/v1/namespaces/{self.ns}/jobs/{name}/status",
                              {**job, "status": {"startTime": now(), "active": 1, "ready": 0, "uncountedTerminatedPods": {}}})  # fmt: skip

    def job_failed(self, job: dict[str, Any]) -> None:
        """The Job controller after its pod failed (backoffLimit 0)."""
        name = job["metadata"]["name"]
        current = self.kube.call("GET", f"/apis/batch/v1/namespaces/{self.ns}/jobs/{name}")
        failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit",
                  "lastProbeTime": now(), "lastTransitionTime": now()}  # fmt: skip
        status = controller_job_status({**current["status"], "failed": 1, "conditions": [failed]}, current["status"])
        self.kube.call("PUT", f"/apis/batch/v1/namespaces/{self.ns}/jobs/{name}/status", {**current, "status": status})

    @staticmethod
    def gpu(claims: bool) -> dict[str, Any]:
        """A container's GPU: through a DRA claim (Kubernetes 1.37), else a device plugin's."""
        return {"claims": [{"name": "gpu"}]} if claims else {"limits": {"nvidia.com/gpu": "8"}}

    @staticmethod
    def claims() -> list[dict[str, str]]:
        return [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]

    def pod(self, job: dict[str, Any], node: str, *, claims: bool = False, annotations: dict[str, str] | None = None) -> str:
        """The Job controller's pod, bound to `node`, and the kubelet's word that it runs."""
        meta = job["metadata"]
        container: dict[str, Any] = {"name": "main", "image": "ghcr.io/acme/train:2026.09", "resources": self.gpu(claims)}
        spec: dict[str, Any] = {"nodeName": node, "restartPolicy": "Never", "containers": [container]}
        if claims:
            spec["resourceClaims"] = self.claims()
        labels = job["spec"]["template"]["metadata"]["labels"]
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}
        pod = self.kube.call("POST", f"/api/v1/namespaces/{self.ns}/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{meta['name']}-x7k2p", "labels": labels, "annotations": annotations or {}, "ownerReferences": [owner]},
            "spec": spec})  # fmt: skip
        running = {"phase": "Running", "startTime": now(), "containerStatuses": [
            {"name": "main", "image": "ghcr.io/acme/train:2026.09", "imageID": "", "ready": True, "restartCount": 0, "state": {"running": {"startedAt": now()}}}]}  # fmt: skip
        self.kube.call("PUT", f"/api/v1/namespaces/{self.ns}/pods/{pod['metadata']['name']}/status", {**pod, "status": running})
        return str(pod["metadata"]["name"])

    def get(self, pod: str) -> dict[str, Any]:
        return dict(self.kube.call("GET", f"/api/v1/namespaces/{self.ns}/pods/{pod}"))

    def legacy_event(self, pod: str, reason: str, message: str, component: str) -> None:
        """A Normal Event a kube-controller-manager controller records (core/v1 recorder)."""
        p = self.get(pod)
        self.kube.call("POST", f"/api/v1/namespaces/{self.ns}/events", {
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{pod}.{reason.lower()}"},
            "involvedObject": {"kind": "Pod", "namespace": self.ns, "name": pod, "uid": p["metadata"]["uid"], "apiVersion": "v1"},
            "reason": reason, "message": message, "type": "Normal", "source": {"component": component},
            "firstTimestamp": now(), "lastTimestamp": now(), "count": 1})  # fmt: skip

    def disrupt(self, pod: str, reason: str, message: str, *, token: str | None = None) -> None:
        """`DisruptionTarget` True through pods/status (a JSON merge patch of the conditions),
        then the deletion with the default grace period: the pod stays, terminating."""
        conditions = [*(self.get(pod)["status"].get("conditions") or []),
                      {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message, "lastTransitionTime": now()}]  # fmt: skip
        self.kube.call("PATCH", f"/api/v1/namespaces/{self.ns}/pods/{pod}/status", {"status": {"conditions": conditions}}, content_type=MERGE, token=token)
        self.kube.call("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{pod}", {"gracePeriodSeconds": 30}, token=token)

    def killed(self, pod: str) -> None:
        """The kubelet: SIGTERM, exit 143, the pod Failed; then its final deletion."""
        p = self.get(pod)
        started = p["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
        status = {**p["status"], "phase": "Failed", "containerStatuses": [
            {"name": "main", "image": "ghcr.io/acme/train:2026.09", "imageID": "", "ready": False, "restartCount": 0,
             "state": {"terminated": {"exitCode": 143, "reason": "Error", "startedAt": started, "finishedAt": now()}}}]}  # fmt: skip
        self.kube.call("PUT", f"/api/v1/namespaces/{self.ns}/pods/{pod}/status", {**p, "status": status})
        self.kube.call("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{pod}", {"gracePeriodSeconds": 0})

    def force_deleted_by_kueue(self, pod: str, node: str) -> None:
        """kueue v0.19.2 pod_termination_controller.go, with Kueue's own credential: phase
        Failed and the condition (no lastTransitionTime) by a merge patch of pods/status, the
        Warning Event through events.k8s.io/v1, the deletion with grace 0."""
        p = self.get(pod)
        message = (f"Pod forcefully terminated after 1m0.00000003s grace period due to unreachable node `{node}` "
                   "(triggered by `kueue.x-k8s.io/safe-to-forcefully-delete` annotation)")
        conditions = [*(p["status"].get("conditions") or []),
                      {"type": "KueueFailureRecovery", "status": "True", "reason": "KueueForcefullyDeleted", "message": message}]  # fmt: skip
        self.kube.call("PATCH", f"/api/v1/namespaces/{self.ns}/pods/{pod}/status", {"status": {"phase": "Failed", "conditions": conditions}},
                       content_type=MERGE, token=self.kueue)  # fmt: skip
        self.kube.call("POST", f"/apis/events.k8s.io/v1/namespaces/{self.ns}/events", {
            "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": f"{pod}.kueueforcefullydeleted"},
            "regarding": {"kind": "Pod", "namespace": self.ns, "name": pod, "uid": p["metadata"]["uid"], "apiVersion": "v1"},
            "reason": "KueueForcefullyDeleted", "note": message, "type": "Warning", "action": "ForcefulTermination",
            "reportingController": "kueue-pod-termination-controller", "reportingInstance": "kueue-controller-manager-6c9d8f7b5-x2x7k",
            "eventTime": micro_now()}, token=self.kueue)  # fmt: skip
        self.kube.call("DELETE", f"/api/v1/namespaces/{self.ns}/pods/{pod}", {"gracePeriodSeconds": 0}, token=self.kueue)


def kueue_controller(kube: Any) -> str:
    """Kueue's ServiceAccount with what its ClusterRole grants the failure recovery
    (kueue v0.19.2 pod_termination_controller.go kubebuilder RBAC: pods get, list, watch,
    delete; pods/status get, patch; and its event recorder's create), and its token."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    kube.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}}, expect=(201, 409))
    kube.call("POST", "/api/v1/namespaces/kueue-system/serviceaccounts", {"metadata": {"name": "kueue-controller-manager"}}, expect=(201, 409))
    kube.call("POST", f"{rbac}/clusterroles", {"metadata": {"name": "kueue-failure-recovery"}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["get", "patch"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
    ]}, expect=(201, 409))  # fmt: skip
    kube.call("POST", f"{rbac}/clusterrolebindings", {
        "metadata": {"name": "kueue-failure-recovery"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kueue-failure-recovery"},
        "subjects": [{"kind": "ServiceAccount", "name": "kueue-controller-manager", "namespace": "kueue-system"}]}, expect=(201, 409))  # fmt: skip
    return str(kube.create_token("kueue-system", "kueue-controller-manager"))


def recorded(trace: Path) -> list[dict[str, Any]]:
    if not trace.exists():
        return []
    return [orjson.loads(line)["value"] for line in trace.read_bytes().split(b"\n")[:-1] if b'"type":"BOOKMARK"' not in line]


def test_r16_the_new_kinds_and_evidence_recorded_from_a_real_api_server_classify_and_run_prints_what_classify_gives(bare_apiserver, tmp_path):
    kube = bare_apiserver
    install_crd(kube, operator_crd(JAXJOB_CRD))
    ns = namespace(kube, "r16")
    cluster = Cluster(kube, ns, kueue_controller(kube))
    with RecordAndRun(kube, ns, CLUSTER, tmp_path) as watching:
        trace, outputs = watching.trace, watching.outputs
        # R16.5: the JAXJob story, as kubeflow/trainer's operator writes it.
        builders.reset_ids()
        StoryPlayer(kube, ns).play(stories.jaxjob_fell_off_the_bus(t0=datetime.now(timezone.utc) - timedelta(minutes=2)))
        # R16.6: a DRA device taint evicts a Job's pod (kubernetes v1.37.2 device_taint_eviction.go).
        tainted_job = cluster.job("vllm-shard", claims=True)
        tainted = cluster.pod(tainted_job, GPU_NODE_TAINTED, claims=True)
        cluster.legacy_event(tainted, "DeviceTaintManagerEviction", "Marking for deletion", "device-taint-eviction-controller")
        cluster.disrupt(tainted, "DeletionByDeviceTaintManager", "Device Taint manager: deleting due to NoExecute taint")
        cluster.killed(tainted)
        cluster.job_failed(tainted_job)
        # R16.6: a node stops answering; the taint manager's deletion never ends; Kueue's does.
        lost_job = cluster.job("ckpt-shard")
        lost = cluster.pod(lost_job, GPU_NODE_LOST, annotations={"kueue.x-k8s.io/safe-to-forcefully-delete": "true"})
        cluster.legacy_event(lost, "TaintManagerEviction", f"Marking for deletion Pod {ns}/{lost}", "taint-eviction-controller")
        cluster.disrupt(lost, "DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint")
        cluster.force_deleted_by_kueue(lost, GPU_NODE_LOST)
        cluster.job_failed(lost_job)

        def complete() -> bool:
            seen = recorded(trace)
            failed_jobs = {v["object"]["metadata"]["name"] for v in seen if v["object"]["kind"] in ("Job", "JAXJob")
                           and any(c["type"] == "Failed" for c in v["object"].get("status", {}).get("conditions") or [])}
            gone = {v["object"]["metadata"]["name"] for v in seen if v["type"] == "DELETED"}
            forced = any(v["object"].get("reason") == "KueueForcefullyDeleted" for v in seen)
            return failed_jobs == {"gemma-sft", "vllm-shard", "ckpt-shard"} and {tainted, lost} <= gone and forced

        wait_for(complete, timeout=60, what="every change in the trace")
        wait_for(lambda: {attempt(k)[:2] for k in verdicts_in(outputs)} == {("JAXJob", "gemma-sft"), ("Job", "vllm-shard"), ("Job", "ckpt-shard")}
                 and all(v["code"] in ("JAXJobFailed", "PodDisrupted") for v in verdicts_in(outputs).values()), timeout=60, what="three verdicts from run")  # fmt: skip
    watching.run_prints_what_classify_gives()

    # The server kept what each controller wrote, and the bridge recorded it.
    seen = recorded(trace)
    kueue_pod = next(v["object"] for v in seen if v["object"]["kind"] == "Pod" and any(c["type"] == "KueueFailureRecovery" for c in v["object"]["status"].get("conditions") or []))
    [condition] = [c for c in kueue_pod["status"]["conditions"] if c["type"] == "KueueFailureRecovery"]
    assert condition.get("lastTransitionTime") is None and kueue_pod["status"]["phase"] == "Failed"
    assert kueue_pod["metadata"]["deletionTimestamp"]  # set by the server on the taint manager's graceful delete
    [event] = [v["object"] for v in seen if v["object"].get("reason") == "KueueForcefullyDeleted"]
    assert (event["type"], event["reportingComponent"], event["involvedObject"]["name"]) == ("Warning", "kueue-pod-termination-controller", lost)
    assert event["eventTime"] and not event.get("firstTimestamp")  # written through events.k8s.io/v1
    jax = [v["object"] for v in seen if v["object"]["kind"] == "JAXJob"][-1]
    assert jax["apiVersion"] == "kubeflow.org/v1" and jax["status"]["replicaStatuses"]["Worker"] == {"active": 1, "failed": 1}


    verdicts = {attempt(key)[:2]: v for key, v in verdicts_in(outputs).items()}
    jaxjob = verdicts[("JAXJob", "gemma-sft")]
    assert (jaxjob["code"], jaxjob["kind"], jaxjob["gpu_fault"]["code"], jaxjob["faulted_pod"]["name"]) == ("JAXJobFailed", "SYSTEM", 79, "gemma-sft-worker-1")
    device = verdicts[("Job", "vllm-shard")]
    assert (device["code"], device["kind"], device["faulted_pod"]["name"]) == ("PodDisrupted", "SYSTEM", tainted)
    assert device["reasons"] == [f"pod {tainted} disrupted by the cluster (DeletionByDeviceTaintManager): a DRA device allocated to it was tainted "
                                 "NoExecute: Device Taint manager: deleting due to NoExecute taint"]  # fmt: skip
    forced = verdicts[("Job", "ckpt-shard")]
    assert (forced["code"], forced["kind"], forced["faulted_pod"]["name"]) == ("PodDisrupted", "SYSTEM", lost)
    assert forced["reasons"] == [f"pod {lost} disrupted by the cluster (KueueForcefullyDeleted): force-deleted by Kueue's failure recovery, node {GPU_NODE_LOST} unreachable"]
