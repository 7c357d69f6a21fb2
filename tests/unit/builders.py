"""Builders of real-shaped Kubernetes JSON (as the API serves it) and source records.

Every builder returns plain dicts in camelCase, so tests exercise the real decoding.
"""

from __future__ import annotations

import hashlib
import itertools
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson

T0 = datetime(2026, 8, 25, 12, 0, 0, tzinfo=timezone.utc)
CLUSTER = "prod-a"
NS = "ml"
NODE = "gpu-17"
_uids = itertools.count(1)


def ts(at: datetime) -> str:
    text = at.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    return text


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def reset_ids() -> None:
    """Start uids and resourceVersions again from 1, so generated traces are reproducible."""
    global _uids
    _uids = itertools.count(1)


def uid(prefix: str = "uid") -> str:
    return f"{prefix}-{next(_uids):06d}"


def kube_uid() -> str:
    """A uid shaped as the API server makes them (a UUID), reproducible after `reset_ids`."""
    return str(uuid.uuid5(uuid.NAMESPACE_OID, f"faultline-{next(_uids)}"))


def attempt_labels(run: str = "run-abc", action: str = "a0", attempt: str = "1") -> dict[str, str]:
    return {"flyte.org/managed": "true", "run": run, "action": action, "attempt": attempt, "task-name": "train"}


# --- pods -------------------------------------------------------------------------------


def terminated(exit_code: int = 1, finished: datetime = T0, reason: str = "Error", message: str = "") -> dict:
    state = {"exitCode": exit_code, "reason": reason, "startedAt": ts(finished - minutes(60)), "finishedAt": ts(finished)}
    if message:
        state["message"] = message
    return {"terminated": state}


def running(since: datetime = T0 - minutes(60)) -> dict:
    return {"running": {"startedAt": ts(since)}}


def pod(
    name: str = "p",
    *,
    pod_uid: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    phase: str = "Running",
    reason: str | None = None,
    message: str | None = None,
    node: str | None = NODE,
    containers: dict[str, dict | None] | None = None,
    init_containers: dict[str, dict] | None = None,
    created: datetime = T0 - minutes(120),
    deletion: datetime | None = None,
    namespace: str = NS,
    gpus: int = 8,
    owners: list[dict] | None = None,
    claims: bool = False,
) -> dict:
    """A core/v1 Pod. `containers` maps name -> state dict (None: no status yet); each
    container asks for `gpus` nvidia.com/gpu (0: none); `owners`: its ownerReferences."""
    containers = containers if containers is not None else {"main": running()}
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": pod_uid or uid("pod"),
        "resourceVersion": str(next(_uids)),
        "creationTimestamp": ts(created),
        "labels": labels if labels is not None else attempt_labels(),
        "annotations": annotations or {},
        "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1"}],
    }
    if deletion is not None:
        meta["deletionTimestamp"] = ts(deletion)
        meta["deletionGracePeriodSeconds"] = 30
    if owners:
        meta["ownerReferences"] = owners
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {"limits": {"cpu": "8", "memory": "64Gi"}}
    spec: dict[str, Any] = {
        "containers": [{"name": c, "image": "ghcr.io/acme/trainer:1.4", "resources": resources} for c in containers],
        "restartPolicy": "Never",
        "schedulerName": "default-scheduler",
    }
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]
    if node:
        spec["nodeName"] = node
    statuses = []
    for c, state in containers.items():
        if state is None:
            continue
        statuses.append({"name": c, "state": state, "ready": "running" in state, "restartCount": 0, "image": "trainer", "imageID": "sha256:abc"})
    status: dict[str, Any] = {"phase": phase, "containerStatuses": statuses, "hostIP": "10.0.0.7", "startTime": ts(created)}
    if init_containers:
        status["initContainerStatuses"] = [{"name": c, "state": s, "ready": False, "restartCount": 0} for c, s in init_containers.items()]
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def disruption_target(reason: str = "EvictionByEvictionAPI", at: datetime = T0, message: str = "Eviction API: evicting", status: str = "True") -> dict:
    """The `DisruptionTarget` pod condition as the control plane or the kubelet writes it
    (kubernetes/api core/v1/types.go; the messages are theirs, e.g. kubernetes
    pkg/registry/core/pod/storage/eviction.go "Eviction API: evicting")."""
    return {"type": "DisruptionTarget", "status": status, "reason": reason, "message": message, "lastProbeTime": None, "lastTransitionTime": ts(at)}


def resource_status(name: str = "nvidia.com/gpu", message: str | None = None, **health: str) -> dict:
    """One `allocatedResourcesStatus` entry of a container status (kubernetes/api
    core/v1/types.go ResourceStatus): its devices' health by resourceID, e.g.
    `resource_status(**{"GPU-1234": "Unhealthy"})`; `message` on each (ResourceHealthStatusMessage)."""
    devices = []
    for rid, h in health.items():
        device = {"resourceID": rid, "health": h}
        if message is not None:
            device["message"] = message
        devices.append(device)
    return {"name": name, "resources": devices}


def with_devices(obj: dict, *entries: dict, container: str | None = None) -> dict:
    """A copy of a pod whose container (the first by default) reports `entries` as its
    allocatedResourcesStatus, as the kubelet writes it (SPEC R14.2)."""
    copy = orjson.loads(orjson.dumps(obj))
    statuses = copy["status"]["containerStatuses"]
    target = next(c for c in statuses if container is None or c["name"] == container)
    target["allocatedResourcesStatus"] = list(entries)
    copy["metadata"]["resourceVersion"] = str(next(_uids))
    return copy


def owner(kind: str, name: str, owner_uid: str, api_version: str, controller: bool = True) -> dict:
    """An ownerReference as a controller writes it."""
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": owner_uid, "controller": controller, "blockOwnerDeletion": True}


# --- events -------------------------------------------------------------------------------

STANDARD_TAILS = "gpu_uuid=GPU-1234 gpu_index=0 pci=0000:3b:00.0"


def xid_message(code: int, severity: str = "critical", node: str = NODE, extra: str = STANDARD_TAILS) -> str:
    return (
        f"[gpu-health] [{severity.upper()}] Xid {code} on GPU 0 GPU-1234. "
        f"xid={code} severity={severity} {extra} node={node} pid=4242 process=python3"
    )


def sxid_message(code: int, severity: str = "critical", node: str = NODE) -> str:
    return f"[gpu-health] [{severity.upper()}] SXid {code} on NVSwitch 0000:05:00.0. sxid={code} severity={severity} pci=0000:05:00.0 node={node}"


def event(
    target: dict,
    *,
    message: str | None = None,
    reason: str = "GPUXidError",
    type_: str = "Warning",
    first: datetime = T0 - minutes(1),
    last: datetime | None = None,
    count: int = 1,
    event_uid: str | None = None,
    reporting: str | None = NODE,
    regarding_uid: str | None = None,
    code: int = 79,
    severity: str = "critical",
) -> dict:
    """A core/v1 Event about `target` (a pod dict)."""
    meta = target["metadata"]
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{meta['name']}.{next(_uids):x}",
            "namespace": meta["namespace"],
            "uid": event_uid or uid("ev"),
            "creationTimestamp": ts(first),
        },
        "involvedObject": {
            "kind": "Pod",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"] if regarding_uid is None else regarding_uid,
            "apiVersion": "v1",
        },
        "reason": reason,
        "message": message if message is not None else xid_message(code, severity, node=reporting or NODE),
        "type": type_,
        "firstTimestamp": ts(first),
        "lastTimestamp": ts(last or first),
        "count": count,
        "source": {"component": "gpu-health-agent", "host": reporting} if reporting else {"component": "gpu-health-agent"},
        "reportingComponent": "gpu-health-agent",
        "reportingInstance": reporting or "",
        "eventTime": None,
    }
    return body


def controller_event(
    target: dict,
    reason: str,
    message: str,
    at: datetime,
    *,
    type_: str = "Warning",
    reporter: str = "kube-controller-manager",
    instance: str = "",
    action: str = "",
    events_api: bool = False,
    kind: str = "Pod",
    api_version: str = "v1",
) -> dict:
    """An Event a controller records about `target`, as the core/v1 watch serves it: one
    recorded through core/v1 (firstTimestamp, lastTimestamp, count, source.component), or
    (`events_api`) through events.k8s.io/v1 (eventTime, reportingComponent,
    reportingInstance, action; no firstTimestamp, no count)."""
    meta = target["metadata"]
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{next(_uids):x}", "namespace": meta["namespace"], "uid": kube_uid(), "creationTimestamp": ts(at)},
        "involvedObject": {"kind": kind, "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"], "apiVersion": api_version},
        "reason": reason,
        "message": message,
        "type": type_,
    }
    if events_api:
        micro = at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body |= {"eventTime": micro, "firstTimestamp": None, "lastTimestamp": None, "source": {}, "action": action,
                 "reportingComponent": reporter, "reportingInstance": instance}
    else:
        body |= {"eventTime": None, "firstTimestamp": ts(at), "lastTimestamp": ts(at), "count": 1, "source": {"component": reporter},
                 "reportingComponent": reporter, "reportingInstance": instance}
    return body


def as_events_v1(core: dict) -> dict:
    """The same Event as events.k8s.io/v1 serves it (regarding, note, reportingController,
    deprecated* for the core/v1 fields)."""
    out = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": core["metadata"],
        "regarding": core["involvedObject"],
        "reason": core["reason"],
        "note": core["message"],
        "type": core["type"],
        "eventTime": core.get("eventTime"),
        "reportingController": core.get("reportingComponent", ""),
        "reportingInstance": core.get("reportingInstance", ""),
        "action": core.get("action", ""),
    }
    if core.get("firstTimestamp"):
        out |= {"deprecatedFirstTimestamp": core["firstTimestamp"], "deprecatedLastTimestamp": core["lastTimestamp"], "deprecatedCount": core.get("count", 1),
                "deprecatedSource": core.get("source", {})}
    return out


def kueue_force_deleted(p: dict, at: datetime, node: str, *, grace: str = "1m0.00000003s") -> tuple[dict, dict]:
    """What Kueue's failure recovery writes on a pod it force-deletes (kueue v0.19.2
    pkg/controller/failurerecovery/pod_termination_controller.go): the pod as patched
    through pods/status (phase Failed, condition KueueFailureRecovery with no
    lastTransitionTime) and its Warning Event (events.k8s.io/v1, as core/v1 serves it)."""
    message = (f"Pod forcefully terminated after {grace} grace period due to unreachable node `{node}` "
               "(triggered by `kueue.x-k8s.io/safe-to-forcefully-delete` annotation)")
    condition = {"type": "KueueFailureRecovery", "status": "True", "reason": "KueueForcefullyDeleted", "message": message,
                 "lastProbeTime": None, "lastTransitionTime": None}
    patched = updated(p, phase="Failed", conditions=[*p["status"].get("conditions", []), condition])
    ev = controller_event(p, "KueueForcefullyDeleted", message, at, reporter="kueue-pod-termination-controller",
                          instance="kueue-controller-manager-6c9d8f7b5-x2x7k", action="ForcefulTermination", events_api=True)
    return patched, ev


# --- CRDs ----------------------------------------------------------------------------------


def condition(type_: str, reason: str = "", message: str = "", at: datetime = T0, status: str = "True") -> dict:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": ts(at), "lastUpdateTime": ts(at)}


def _crd(api_version: str, kind: str, name: str, labels: dict | None, status: dict, job_uid: str | None, spec: dict | None = None) -> dict:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": job_uid or uid(kind.lower()),
            "creationTimestamp": ts(T0 - minutes(130)),
            "labels": labels if labels is not None else attempt_labels(),
            "generation": 1,
        },
        "spec": spec or {},
        "status": status,
    }


def jobset(name: str = "js", *, restarts: int = 0, conditions: list[dict] | None = None, labels=None, job_uid=None, suspend=False) -> dict:
    status: dict[str, Any] = {"conditions": conditions or [], "replicatedJobsStatus": [{"name": "workers", "ready": 2, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0}]}
    if restarts:
        status["restarts"] = restarts
    spec = {"suspend": suspend, "replicatedJobs": [{"name": "workers", "replicas": 2}], "failurePolicy": {"maxRestarts": 3}}
    return _crd("jobset.x-k8s.io/v1alpha2", "JobSet", name, labels, status, job_uid, spec)


def kueue_workload(job: dict, *, workers: int = 2, gpus: int = 8, created: datetime = T0, conditions: list[dict] | None = None) -> dict:
    """A Kueue Workload (kueue.x-k8s.io/v1beta2) for `job` as Kueue's JobSet reconciler makes it:
    labelled and owned by the job, one pod set of `workers` pods asking `gpus` GPUs each."""
    meta = job["metadata"]
    template = {"spec": {"containers": [{"name": "main", "image": "ghcr.io/acme/trainer:1.4", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            **_meta(f"jobset-{meta['name']}-{meta['uid'][-5:]}", uid("workload"), created, {"kueue.x-k8s.io/job-uid": meta["uid"]},
                    [owner(job["kind"], meta["name"], meta["uid"], job["apiVersion"])], namespace=meta["namespace"]),
            "finalizers": ["kueue.x-k8s.io/resource-in-use"],
        },
        "spec": {"active": True, "queueName": "team-a", "podSets": [{"name": "workers", "count": workers, "template": template}]},
        "status": {"conditions": conditions or []},
    }


def kubeflow(kind: str = "MPIJob", name: str = "mpi", *, conditions: list[dict] | None = None, labels=None, job_uid=None) -> dict:
    version = "kubeflow.org/v2beta1" if kind == "MPIJob" else "kubeflow.org/v1"
    return _crd(version, kind, name, labels, {"conditions": conditions or [], "replicaStatuses": {"Worker": {"active": 2}}}, job_uid)


def rayjob(name: str = "rj", *, cluster_name: str = "", job_status: str = "RUNNING", deployment: str = "Running", reason: str = "", message: str = "", labels=None, job_uid=None) -> dict:
    status: dict[str, Any] = {"jobStatus": job_status, "jobDeploymentStatus": deployment, "jobId": "raysubmit_1"}
    if cluster_name:
        status["rayClusterName"] = cluster_name
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    return _crd("ray.io/v1", "RayJob", name, labels, status, job_uid)


# --- workloads without an orchestrator (SPEC R13) ------------------------------------------


def _meta(name: str, obj_uid: str, created: datetime, labels: dict | None = None, owners: list[dict] | None = None, namespace: str = NS) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": obj_uid, "resourceVersion": str(next(_uids)), "creationTimestamp": ts(created), "generation": 1}
    if labels:
        meta["labels"] = labels
    if owners:
        meta["ownerReferences"] = owners
    return meta


def trainjob(name: str, *, tj_uid: str | None = None, nodes: int = 2, created: datetime = T0 - minutes(130), conditions: list[dict] | None = None) -> dict:
    """A Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1) on the torch runtime."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": _meta(name, tj_uid or kube_uid(), created, {"kueue.x-k8s.io/queue-name": "team-a"}),
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": "torch-distributed"},
            "trainer": {"image": "ghcr.io/acme/llama-ft:2026.08", "numNodes": nodes, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}},
            "suspend": False,
        },
        "status": {"conditions": conditions or [], "jobsStatus": [{"name": "node", "ready": nodes, "succeeded": 0, "failed": 0, "active": nodes, "suspended": 0}]},
    }


def _template(labels: dict, gpus: int, container: str = "node") -> dict:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {"limits": {"cpu": "1", "memory": "1Gi"}}
    return {"metadata": {"labels": labels}, "spec": {"containers": [{"name": container, "image": "ghcr.io/acme/llama-ft:2026.08", "resources": resources}], "restartPolicy": "OnFailure"}}


def workload_jobset(
    name: str,
    *,
    js_uid: str | None = None,
    owner_of: dict | None = None,
    replicated: str = "node",
    replicas: int = 2,
    restarts: int = 0,
    conditions: list[dict] | None = None,
    created: datetime = T0 - minutes(129),
    suspend: bool = False,
) -> dict:
    """A JobSet without orchestrator labels: bare, or (`owner_of`: a TrainJob) built by
    Kubeflow Trainer v2, which names it after the TrainJob and controls it
    (kubeflow/trainer pkg/runtime/framework/plugins/jobset/jobset.go, Build)."""
    owners = None
    if owner_of is not None:
        tj = owner_of["metadata"]
        owners = [owner("TrainJob", tj["name"], tj["uid"], "trainer.kubeflow.org/v1alpha1")]
    template = {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}} if owner_of else {}, "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": _template({}, 8)}}
    status: dict[str, Any] = {"conditions": conditions or [], "restarts": restarts, "replicatedJobsStatus": [{"name": replicated, "ready": replicas, "succeeded": 0, "failed": 0, "active": replicas, "suspended": 0}]}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": _meta(name, js_uid or kube_uid(), created, owners=owners),
        "spec": {"suspend": suspend, "replicatedJobs": [{"name": replicated, "replicas": replicas, "template": template}], "failurePolicy": {"maxRestarts": 3}},
        "status": status,
    }


def jobset_child_labels(js: dict, replicated: str = "node", index: int = 0, replicas: int = 2, restarts: int = 0, trainjob: bool = False) -> dict[str, str]:
    """The labels the JobSet controller puts on a child Job and its pods
    (kubernetes-sigs/jobset pkg/controllers/jobset_controller.go, labelAndAnnotateObject),
    plus Trainer's runtime label on a TrainJob's."""
    meta = js["metadata"]
    labels = {
        "jobset.sigs.k8s.io/jobset-name": meta["name"],
        "jobset.sigs.k8s.io/jobset-uid": meta["uid"],
        "jobset.sigs.k8s.io/replicatedjob-name": replicated,
        "jobset.sigs.k8s.io/restart-attempt": str(restarts),
        "jobset.sigs.k8s.io/replicatedjob-replicas": str(replicas),
        "jobset.sigs.k8s.io/global-replicas": str(replicas),
        "jobset.sigs.k8s.io/job-index": str(index),
        "jobset.sigs.k8s.io/job-global-index": str(index),
        "jobset.sigs.k8s.io/job-key": f"{meta['name']}-{replicated}-{index}-key",
    }
    if trainjob:
        labels["trainer.kubeflow.org/trainjob-ancestor-step"] = "trainer"
    return labels


def batch_job(
    name: str,
    *,
    job_uid: str | None = None,
    gpus: int = 8,
    owners: list[dict] | None = None,
    labels: dict | None = None,
    template_labels: dict | None = None,
    completions: int = 1,
    indexed: bool = False,
    conditions: list[dict] | None = None,
    created: datetime = T0 - minutes(128),
    claims: bool = False,
) -> dict:
    """A batch/v1 Job as the API serves it (the Job controller's own labels on its template)."""
    the_uid = job_uid or kube_uid()
    own = {"batch.kubernetes.io/controller-uid": the_uid, "batch.kubernetes.io/job-name": name, "controller-uid": the_uid, "job-name": name}
    template = _template({**(template_labels or {}), **own}, gpus, "main")
    if claims:
        template["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "single-gpu"}]
    spec: dict[str, Any] = {
        "parallelism": completions,
        "completions": completions,
        "backoffLimit": 0 if indexed else 6,
        "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": the_uid}},
        "manualSelector": False,
        "podReplacementPolicy": "TerminatingOrFailed",
        "suspend": False,
        "template": template,
    }
    if indexed:
        spec["completionMode"] = "Indexed"
        spec["backoffLimitPerIndex"] = 0
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(name, the_uid, created, labels, owners),
        "spec": spec,
        "status": {"conditions": conditions or [], "active": completions, "ready": completions, "startTime": ts(created), "uncountedTerminatedPods": {}},
    }


def leaderworkerset(
    name: str,
    *,
    lws_uid: str | None = None,
    replicas: int = 1,
    size: int = 2,
    gpus: int = 8,
    leader_gpus: int | None = None,
    restart_policy: str = "RecreateGroupOnPodRestart",
    created: datetime = T0 - minutes(60),
) -> dict:
    """A LeaderWorkerSet as kubernetes-sigs/lws v0.10.0 serves it (api/leaderworkerset/v1):
    `replicas` groups of `size` pods; the leader uses the workers' template unless
    `leader_gpus` gives it one of its own."""
    worker = _template({}, gpus, "worker")
    worker["spec"]["restartPolicy"] = "Always"  # StatefulSet pods
    template: dict[str, Any] = {"size": size, "restartPolicy": restart_policy, "workerTemplate": worker}
    if leader_gpus is not None:
        leader = _template({}, leader_gpus, "leader")
        leader["spec"]["restartPolicy"] = "Always"
        template["leaderTemplate"] = leader
    spec = {
        "replicas": replicas,
        "leaderWorkerTemplate": template,
        "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": {"partition": 0, "maxUnavailable": 1, "maxSurge": 0}},
        "startupPolicy": "LeaderCreated",
        "networkConfig": {"subdomainPolicy": "Shared"},
    }
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": _meta(name, lws_uid or kube_uid(), created), "spec": spec, "status": {}}


def lws_pod(
    lws: dict, group: int, worker: int, *, node: str, created: datetime, owner_uid: str, container: str = "worker", gpus: int = 8, revision: str = "6d9f7c8b5"
) -> dict:
    """A pod of a LeaderWorkerSet's group as its controller and pod webhook make it
    (lws pkg/controllers/pod_controller.go, pkg/webhooks/pod_webhook.go): the leader
    `<lws>-<group>` (worker index 0) of the leader StatefulSet `<lws>`; a worker
    `<lws>-<group>-<worker>` of the worker StatefulSet `<lws>-<group>`, which the leader
    pod owns (`owner_uid`: that StatefulSet's uid, new with each generation)."""
    name = lws["metadata"]["name"]
    leader = f"{name}-{group}"
    pod_name = leader if worker == 0 else f"{leader}-{worker}"
    labels = {
        "leaderworkerset.sigs.k8s.io/name": name,
        "leaderworkerset.sigs.k8s.io/group-index": str(group),
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
        "leaderworkerset.sigs.k8s.io/group-key": hashlib.sha1(f"{NS}/{leader}".encode()).hexdigest(),
        "leaderworkerset.sigs.k8s.io/template-revision-hash": revision,
        "apps.kubernetes.io/pod-index": str(group if worker == 0 else worker),
        "statefulset.kubernetes.io/pod-name": pod_name,
    }
    annotations = {"leaderworkerset.sigs.k8s.io/size": str(lws["spec"]["leaderWorkerTemplate"]["size"])}
    if worker:
        annotations["leaderworkerset.sigs.k8s.io/leader-name"] = leader
    sts = owner("StatefulSet", name if worker == 0 else leader, owner_uid, "apps/v1")
    p = pod(pod_name, pod_uid=kube_uid(), labels=labels, annotations=annotations, node=node, containers={container: None}, created=created, gpus=gpus, owners=[sts])
    p["spec"]["restartPolicy"] = "Always"
    return p


def job_pod_labels(job: dict, index: int | None = None, legacy_only: bool = False) -> dict[str, str]:
    """The labels the Job controller puts on its pods (kubernetes/api batch/v1/types.go)."""
    meta = job["metadata"]
    labels = {"controller-uid": meta["uid"], "job-name": meta["name"]}
    if not legacy_only:
        labels |= {"batch.kubernetes.io/controller-uid": meta["uid"], "batch.kubernetes.io/job-name": meta["name"]}
    if index is not None:
        labels["batch.kubernetes.io/job-completion-index"] = str(index)
    return labels


def owned_by(obj: dict) -> list[dict]:
    """ownerReferences naming `obj` as the controller."""
    meta = obj["metadata"]
    return [owner(obj["kind"], meta["name"], meta["uid"], obj["apiVersion"])]


def child_labels(operator: dict[str, str], **attempt: str) -> dict[str, str]:
    return {**attempt_labels(**attempt), **operator}


def jobset_pod_labels(jobset_name: str = "js", restart_attempt: int = 0, **attempt: str) -> dict[str, str]:
    return child_labels(
        {
            "jobset.sigs.k8s.io/jobset-name": jobset_name,
            "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "jobset.sigs.k8s.io/restart-attempt": str(restart_attempt),
            "batch.kubernetes.io/job-name": f"{jobset_name}-workers-0",
        },
        **attempt,
    )


def kubeflow_pod_labels(job_name: str = "mpi", replica: str = "worker", **attempt: str) -> dict[str, str]:
    return child_labels(
        {"training.kubeflow.org/job-name": job_name, "training.kubeflow.org/replica-type": replica, "training.kubeflow.org/operator-name": "mpijob-controller"},
        **attempt,
    )


def jaxjob(name: str, *, job_uid: str | None = None, workers: int = 2, gpus: int = 8, created: datetime = T0 - minutes(130), labels: dict | None = None, conditions: list[dict] | None = None) -> dict:
    """A Kubeflow JAXJob (kubeflow.org/v1, SPEC R16.5) as kubeflow/trainer v1.9.4 serves it
    once its defaults are applied (pkg/apis/kubeflow.org/v1/jax_defaults.go: replica
    restartPolicy Never, runPolicy.cleanPodPolicy None, the `jax` container's port
    `jaxjob-port` 6666)."""
    container = {"name": "jax", "image": "ghcr.io/acme/jax-sft:2026.09", "ports": [{"name": "jaxjob-port", "containerPort": 6666, "protocol": "TCP"}],
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "JAXJob",
        "metadata": _meta(name, job_uid or kube_uid(), created, labels),
        "spec": {
            "runPolicy": {"cleanPodPolicy": "None", "suspend": False},
            "jaxReplicaSpecs": {"Worker": {"replicas": workers, "restartPolicy": "Never", "template": {"spec": {"containers": [container]}}}},
        },
        "status": {"conditions": conditions or [], "replicaStatuses": {}, "startTime": ts(created)},
    }


def jax_pod_labels(job: dict, index: int) -> dict[str, str]:
    """The labels the v1 operator puts on a JAXJob's pod (kubeflow/trainer v1.9.4
    pkg/controller.v1/common/job_controller.go GenLabels, common/pod.go createNewPod;
    keys in pkg/apis/kubeflow.org/v1/common_types.go): job-role `master` on index 0 only."""
    labels = {
        "training.kubeflow.org/job-name": job["metadata"]["name"],
        "training.kubeflow.org/operator-name": "jaxjob-controller",
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": str(index),
    }
    if index == 0:
        labels["training.kubeflow.org/job-role"] = "master"
    return labels


def ray_pod_labels(cluster: str, **attempt: str) -> dict[str, str]:
    return child_labels({"ray.io/cluster": cluster, "ray.io/node-type": "worker"}, **attempt)


# --- source records -----------------------------------------------------------------------

TOPIC_OF_KIND = {"Pod": "k8s.pods", "Event": "k8s.events", "Workload": "k8s.workloads"}


def record(obj: dict, observed_at: datetime, change: str = "MODIFIED", cluster: str = CLUSTER) -> dict:
    """A trace line: {"topic", "key", "value": envelope}."""
    kind = obj["kind"]
    topic = TOPIC_OF_KIND.get(kind, "k8s.jobs")
    key = obj["involvedObject"]["uid"] if kind == "Event" else obj["metadata"]["uid"]
    envelope = {"type": change, "observed_at": ts(observed_at), "cluster": cluster, "object": obj}
    return {"topic": topic, "key": key, "value": envelope}


SOURCE_KINDS = {"k8s.pods": "Pod", "k8s.events": "Event", "k8s.jobs": "JobSet", "k8s.workloads": "Workload"}


def progress(topic: str, at: datetime, cluster: str = CLUSTER) -> dict:
    """A progress trace line (SPEC R12.1): every change of `topic` observed before `at`
    has been published."""
    kind = SOURCE_KINDS[topic]
    envelope = {"type": "BOOKMARK", "observed_at": ts(at), "cluster": cluster, "object": {"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": ""}}}
    return {"topic": topic, "key": kind, "value": envelope}


def with_progress(
    records: list[dict],
    every: timedelta = timedelta(minutes=1),
    tail: timedelta = timedelta(minutes=1),
    topics: tuple[str, ...] = tuple(SOURCE_KINDS),
    times: list[datetime] | None = None,
) -> list[dict]:
    """`records` (in observation order) with the bridge's progress on every source topic
    of each cluster: a BOOKMARK every `every` of observed time, placed after every record
    observed before it, and a last one `tail` after the last record (long enough for
    every decision waiting on an absence, R9.6, to be taken). `times`: the records'
    observation times, when not every record can tell its own (a malformed one)."""
    if not records:
        return []
    times = times or [datetime.fromisoformat(r["value"]["observed_at"]) for r in records]
    # The bridge of a cluster writes its progress; a malformed record's cluster ("", "prod/a") has none.
    clusters = sorted({c for r in records if isinstance(r.get("value"), dict) and isinstance(c := r["value"].get("cluster"), str) and c and "/" not in c})
    out: list[dict] = []
    mark = min(times) + every
    for record, at in zip(records, times, strict=True):
        while at >= mark:
            out += [progress(topic, mark, cluster) for cluster in clusters for topic in topics]
            mark += every
        out.append(record)
    out += [progress(topic, max(times) + tail, cluster) for cluster in clusters for topic in topics]
    return out


def trace_bytes(records: list[dict]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def updated(obj: dict, **status_changes: Any) -> dict:
    """A copy of a pod/CRD with status fields replaced."""
    copy = orjson.loads(orjson.dumps(obj))
    copy["status"].update(status_changes)
    copy["metadata"]["resourceVersion"] = str(next(_uids))
    return copy
