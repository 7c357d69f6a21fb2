"""Real-shaped JobSet (jobset.x-k8s.io/v1alpha2) and Kueue Workload (kueue.x-k8s.io
v1beta2, and v1beta1) objects for the gang tests, and the source records carrying them.

`GangWorld` plays a JobSet and its Workload through Kueue's life cycle the way the
controllers write them (Kueue's webhook suspends the JobSet at creation, Kueue evicts
before it suspends and readmits before it unsuspends, the JobSet controller then writes
its `Suspended` condition), one source record per change, stamped by an advancing bridge
clock. Field names follow the Kueue and JobSet API types.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import orjson

from app.core.base.emit import Emit
from app.core.stages.gangs import GangInput, GangStateData
from app.core.base.rules import Rules
from app.model.envelope import EVENTS, JOBS, PODS, WORKLOADS, Envelope, TraceLine
from app.model.k8s import Job, Workload
from app.model.records import GANG_TRANSITIONS
from app.embedded.pipeline import Pipeline
from tests.unit.drivers import new_pipeline

Line = dict[str, Any]  # one trace line: {"topic", "key", "value": envelope}

T0 = datetime(2026, 9, 15, 10, 30, 1, 123456, tzinfo=UTC)
CLUSTER = "prod-a"
NAMESPACE = "team-a"
JOBSET_NAME = "run-abc-a0-1"
JOBSET_UID = "5f0c7a52-8d3e-4b1f-9a6e-2c1d4e7b9a01"
WORKLOAD_UID = "a3b9e1d4-6c2f-4e8a-b7d5-0f1e2d3c4b5a"
PREEMPTOR_UID = "c7d2f3a1-9b8e-4d6c-a5f4-3e2d1c0b9a87"
ATTEMPT_LABELS = {"flyte.org/managed": "true", "run": "run-abc", "action": "a0", "attempt": "1"}
V1BETA2 = "kueue.x-k8s.io/v1beta2"
V1BETA1 = "kueue.x-k8s.io/v1beta1"
RESUME_ANNOTATION = "faultline.io/resume-after-preemption"

# Kueue's human wording for each Preempted condition reason (pkg/scheduler/preemption).
PREEMPTION_WORDING = {
    "InClusterQueue": "prioritization in the ClusterQueue",
    "InCohortReclamation": "reclamation within the cohort",
    "InCohortFairSharing": "Fair Sharing within the cohort",
    "InCohortReclaimWhileBorrowing": "reclamation within the cohort while borrowing",
}
EVICTION_MESSAGES = {
    "PodsReadyTimeout": f"Exceeded the PodsReady timeout {NAMESPACE}/jobset-{JOBSET_NAME}-3f9a2",
    "NodeFailures": "Workload was evicted as there were not enough healthy nodes",
    "ClusterQueueStopped": "The ClusterQueue is stopped",
    "LocalQueueStopped": "The LocalQueue is stopped",
    "AdmissionCheck": "At least one admission check is false",
    "Deactivated": "The workload is deactivated",
    "DeactivatedDueToMaximumExecutionTimeExceeded": "The workload is deactivated due to exceeding the maximum execution time",
    "DeactivatedDueToRequeuingLimitExceeded": "The workload is deactivated due to exceeding the maximum number of re-queuing retries",
}


def k8s_time(t: datetime) -> str:
    """metav1.Time: RFC 3339, whole seconds."""
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def observed_time(t: datetime) -> str:
    """The bridge's `observed_at`: microseconds."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def condition(type_: str, status: str, reason: str, message: str, at: datetime, generation: int = 1) -> dict[str, Any]:
    """metav1.Condition."""
    return {
        "type": type_,
        "status": status,
        "observedGeneration": generation,
        "lastTransitionTime": k8s_time(at),
        "reason": reason,
        "message": message,
    }


def set_condition(obj: dict[str, Any], new: dict[str, Any]) -> None:
    """apimeta.SetStatusCondition: replace by type; keep lastTransitionTime if status is unchanged."""
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    for i, old in enumerate(conditions):
        if old["type"] == new["type"]:
            if old["status"] == new["status"]:
                new = {**new, "lastTransitionTime": old["lastTransitionTime"]}
            conditions[i] = new
            return
    conditions.append(new)


def jobset(
    *,
    name: str = JOBSET_NAME,
    uid: str = JOBSET_UID,
    namespace: str = NAMESPACE,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    suspend: bool = True,
    created: datetime = T0,
    workers: int = 4,
) -> dict[str, Any]:
    """A JobSet as Kueue's webhook leaves it: suspended, queue-labelled, no status yet."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": "104211",
            "generation": 1,
            "creationTimestamp": k8s_time(created),
            "labels": {"kueue.x-k8s.io/queue-name": "team-a", **(ATTEMPT_LABELS if labels is None else labels)},
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "suspend": suspend,
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": workers,
                            "completions": workers,
                            "backoffLimit": 0,
                            "completionMode": "Indexed",
                            "template": {
                                "spec": {
                                    "restartPolicy": "Never",
                                    "containers": [
                                        {
                                            "name": "main",
                                            "image": "ghcr.io/acme/train:2026.09",
                                            "resources": {"limits": {"nvidia.com/gpu": "8"}, "requests": {"nvidia.com/gpu": "8"}},
                                        }
                                    ],
                                }
                            },
                        }
                    },
                }
            ],
            "failurePolicy": {"maxRestarts": 0},
            "successPolicy": {"operator": "All"},
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        },
        "status": {},
    }


def workload(
    *,
    name: str = f"jobset-{JOBSET_NAME}-3f9a2",
    uid: str = WORKLOAD_UID,
    namespace: str = NAMESPACE,
    jobset_name: str = JOBSET_NAME,
    jobset_uid: str = JOBSET_UID,
    api_version: str = V1BETA2,
    created: datetime = T0,
    labelled: bool = True,
    owned: bool = True,
    workers: int = 4,
) -> dict[str, Any]:
    """A Workload as Kueue's JobSet reconciler creates it (pending, no conditions yet)."""
    pod_set: dict[str, Any] = {
        "name": "workers",
        "count": workers,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "main", "image": "ghcr.io/acme/train:2026.09", "resources": {"requests": {"nvidia.com/gpu": "8"}}}
                ],
            }
        },
    }
    spec: dict[str, Any] = {"active": True, "queueName": "team-a", "podSets": [pod_set], "priority": 100}
    if api_version == V1BETA2:
        spec["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "batch"}
    else:  # v1beta1 names the priority class flat
        spec["priorityClassName"] = "batch"
        spec["priorityClassSource"] = "kueue.x-k8s.io/workloadpriorityclass"
        pod_set["minCount"] = workers
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "resourceVersion": "104215",
        "generation": 1,
        "creationTimestamp": k8s_time(created),
        "labels": {"kueue.x-k8s.io/job-uid": jobset_uid} if labelled else {},
        "annotations": {
            "kueue.x-k8s.io/job-owner-gvk": "jobset.x-k8s.io/v1alpha2, Kind=JobSet",
            "kueue.x-k8s.io/job-owner-name": jobset_name,
        },
        "finalizers": ["kueue.x-k8s.io/resource-in-use"],
    }
    if owned:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "name": jobset_name,
                "uid": jobset_uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {"apiVersion": api_version, "kind": "Workload", "metadata": metadata, "spec": spec, "status": {}}


def record(topic: str, obj: dict[str, Any], change: str, observed_at: datetime, cluster: str = CLUSTER) -> Line:
    """One trace line (DESIGN.md): key = metadata.uid, value = the bridge's envelope."""
    value = {"type": change, "observed_at": observed_time(observed_at), "cluster": cluster, "object": copy.deepcopy(obj)}
    return {"topic": topic, "key": obj["metadata"]["uid"], "value": value}


def to_input(line: Line) -> GangInput:
    """Decode a trace line the way the runner does: JSON bytes → Envelope → Job | Workload."""
    trace = msgspec.json.decode(msgspec.json.encode(line), type=TraceLine)
    envelope = msgspec.json.decode(trace.value, type=Envelope)
    common = {"change": envelope.type, "observed_at": envelope.observed_at, "cluster": envelope.cluster}
    if trace.topic == JOBS:
        return GangInput(**common, jobset=msgspec.json.decode(envelope.object, type=Job))
    if trace.topic == WORKLOADS:
        return GangInput(**common, workload=msgspec.json.decode(envelope.object, type=Workload))
    raise ValueError(f"topic {trace.topic!r} is neither {JOBS!r} nor {WORKLOADS!r}")


def feed(
    lines: Iterable[Line], rules: Rules, pipeline: Pipeline | None = None, *, end: bool = True
) -> tuple[GangStateData | None, list[Emit]]:
    """Every line through the driver the test runs with (or `pipeline`, to go on with
    one): the gang's state after them and every gang transition they emitted. `end`: the lines
    are a whole trace, whose end settles every pending decision (R12.3); else only the
    progress records among them (`GangWorld.progress`) do."""
    pipeline = pipeline if pipeline is not None else new_pipeline(rules)
    emitted: list[Emit] = []
    for line in lines:
        emitted.extend(pipeline.feed(line["topic"], line["key"], orjson.dumps(line["value"])))
    if end:
        emitted.extend(pipeline.finish())
    emitted = [e for e in emitted if e.topic == GANG_TRANSITIONS]
    gangs = pipeline.states["gangs"]
    assert len(gangs) <= 1, f"expected one gang, got {sorted(gangs)}"
    return next(iter(gangs.values()), None), emitted


def interleave(first: Sequence[Line], second: Sequence[Line], picks: Sequence[bool]) -> list[Line]:
    """Merge two sequences keeping each one's order; picks[i] True takes from `first`."""
    merged: list[Line] = []
    i = j = 0
    for pick in picks:
        if pick and i < len(first):
            merged.append(first[i])
            i += 1
        elif j < len(second):
            merged.append(second[j])
            j += 1
    return merged + list(first[i:]) + list(second[j:])


class GangWorld:
    """A JobSet and its Workload as the controllers change them; every change is one record.

    Methods name what happened in the cluster; each appends the record(s) the bridge would
    publish and advances the clock by `step`.
    """

    def __init__(
        self,
        *,
        policy: str | None = None,
        cluster: str = CLUSTER,
        api_version: str = V1BETA2,
        labels: dict[str, str] | None = None,
        start: datetime = T0,
        step: timedelta = timedelta(seconds=1),
        workers: int = 4,
        workload_uid: str = WORKLOAD_UID,
        workload_name: str = f"jobset-{JOBSET_NAME}-3f9a2",
        labelled: bool = True,
        owned: bool = True,
    ) -> None:
        self.now = start
        self.step = step
        self.cluster = cluster
        self.workers = workers
        self.records: list[Line] = []
        annotations = {RESUME_ANNOTATION: policy} if policy is not None else {}
        self.js = jobset(labels=labels, annotations=annotations, created=start, workers=workers)
        self.wl = workload(
            api_version=api_version, created=start, uid=workload_uid, name=workload_name, labelled=labelled, owned=owned, workers=workers
        )
        self.eviction_message = ""
        self.resource_version = 104210
        # Called after each record is added: tests/bridge/realkube.py LiveKueue writes the
        # change to a real API server at once and sets the clock to the real one.
        self.published: Callable[[GangWorld], None] | None = None

    # -- plumbing --------------------------------------------------------------------

    def _publish(self, topic: str, obj: dict[str, Any], change: str = "MODIFIED") -> GangWorld:
        self.resource_version += 1  # one etcd revision per write, shared by every object
        obj["metadata"]["resourceVersion"] = str(self.resource_version)
        self.records.append(record(topic, obj, change, self.now, self.cluster))
        self.now += self.step
        if self.published is not None:
            self.published(self)
        return self

    def _jobset(self, change: str = "MODIFIED") -> GangWorld:
        return self._publish(JOBS, self.js, change)

    def _workload(self, change: str = "MODIFIED") -> GangWorld:
        return self._publish(WORKLOADS, self.wl, change)

    def _js_condition(self, *args: Any) -> None:
        set_condition(self.js, condition(*args, self.now, self.js["metadata"]["generation"]))

    def _wl_condition(self, *args: Any) -> None:
        set_condition(self.wl, condition(*args, self.now, self.wl["metadata"]["generation"]))

    @staticmethod
    def _set_spec(obj: dict[str, Any], field: str, value: Any) -> None:
        """A spec change bumps metadata.generation."""
        if obj["spec"].get(field) != value:
            obj["spec"][field] = value
            obj["metadata"]["generation"] += 1

    def _replicated(self, *, ready: int = 0, succeeded: int = 0, failed: int = 0, active: int = 0, suspended: int = 0) -> None:
        self.js["status"]["replicatedJobsStatus"] = [
            {"name": "workers", "ready": ready, "succeeded": succeeded, "failed": failed, "active": active, "suspended": suspended}
        ]

    def jobset_records(self) -> list[Line]:
        return [r for r in self.records if r["topic"] == JOBS]

    def workload_records(self) -> list[Line]:
        return [r for r in self.records if r["topic"] == WORKLOADS]

    # -- JobSet controller and Kueue's job reconciler ---------------------------------

    def create_jobset(self) -> GangWorld:
        """ADDED (suspended by Kueue's webhook), then the controller's Suspended condition."""
        self._jobset("ADDED")
        self._js_condition("Suspended", "True", "SuspendedJobs", "jobset is suspended")
        self._replicated(suspended=1)
        return self._jobset()

    def unsuspend(self) -> GangWorld:
        """Kueue releases the JobSet; the controller resumes its Jobs."""
        self._set_spec(self.js, "suspend", False)
        self._jobset()
        self._js_condition("Suspended", "False", "ResumeJobs", "jobset is resumed")
        self._replicated(active=1)
        return self._jobset()

    def workers_ready(self) -> GangWorld:
        self._replicated(ready=1, active=1)
        return self._jobset()

    def suspend(self, *, status_update: bool = True) -> GangWorld:
        """Kueue stops the JobSet (spec.suspend), then the controller's Suspended condition."""
        self._set_spec(self.js, "suspend", True)
        self._jobset()
        if status_update:
            self._js_condition("Suspended", "True", "SuspendedJobs", "jobset is suspended")
            self._replicated(active=1)
            self._jobset()
        return self

    def jobs_stopped(self) -> GangWorld:
        """The controller records its child Jobs suspended once their pods are gone."""
        self._replicated(suspended=1)
        return self._jobset()

    def complete(self) -> GangWorld:
        self._js_condition("Completed", "True", "AllJobsCompleted", "jobset completed successfully")
        self._replicated(succeeded=1)
        self.js["status"]["terminalState"] = "Completed"
        return self._jobset()

    def fail(self) -> GangWorld:
        self._js_condition("Failed", "True", "FailedJobs", "jobset failed due to one or more job failures")
        self._replicated(failed=1)
        self.js["status"]["terminalState"] = "Failed"
        return self._jobset()

    def restart(self) -> GangWorld:
        """A whole-set restart in place (failure policy), not a suspension."""
        self.js["status"]["restarts"] = self.js["status"].get("restarts", 0) + 1
        self._replicated(active=1)
        return self._jobset()

    def delete_jobset(self) -> GangWorld:
        return self._jobset("DELETED")

    # -- Kueue ------------------------------------------------------------------------

    def create_workload(self, created: datetime | None = None) -> GangWorld:
        """Kueue creates the Workload; the API server stamps its creationTimestamp (now,
        unless `created` says otherwise)."""
        self.wl["metadata"]["creationTimestamp"] = k8s_time(created or self.now)
        self._workload("ADDED")
        self._wl_condition(
            "QuotaReserved",
            "False",
            "Pending",
            "couldn't assign flavors to pod set workers: insufficient unused quota for nvidia.com/gpu in flavor h100, 32 more needed",
        )
        return self._workload()

    def admit(self) -> GangWorld:
        """Quota reserved and admission checks passed (Kueue then unsuspends the JobSet)."""
        self._reserve_quota()
        return self._workload()

    def _reserve_quota(self) -> None:
        self.wl["status"]["admission"] = {
            "clusterQueue": "gpu-cq",
            "podSetAssignments": [
                {"name": "workers", "count": self.workers, "flavors": {"nvidia.com/gpu": "h100"}, "resourceUsage": {"nvidia.com/gpu": str(8 * self.workers)}}
            ],
        }
        self._wl_condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue gpu-cq")
        self._wl_condition("Admitted", "True", "Admitted", "The workload is admitted")

    def pods_ready(self) -> GangWorld:
        self._wl_condition("PodsReady", "True", "Started", "All pods reached readiness and the workload is running")
        return self._workload()

    def start(self) -> GangWorld:
        """Create, admit and run: the JobSet ends up started (R9.3)."""
        return self.create_jobset().create_workload().admit().unsuspend().workers_ready().pods_ready()

    def preempt(self, detail: str = "InClusterQueue") -> GangWorld:
        wording = PREEMPTION_WORDING.get(detail, "prioritization in the ClusterQueue")
        message = (
            f"Preempted to accommodate a workload (UID: {PREEMPTOR_UID}, JobUID: 0d9e8f7a-6b5c-4d3e-2f1a-0b9c8d7e6f5a) "
            f"due to {wording}; preemptor path: /gpu-cq; preemptee path: /gpu-cq"
        )
        self._wl_condition("Preempted", "True", detail, message)
        return self.evict("Preempted", message)

    def evict(self, reason: str, message: str | None = None) -> GangWorld:
        message = EVICTION_MESSAGES.get(reason, "") if message is None else message
        self.eviction_message = message
        self._wl_condition("Evicted", "True", reason, message)
        self._wl_condition("Requeued", "False", reason, message)
        return self._workload()

    def release_quota(self) -> GangWorld:
        """After the JobSet stopped: Kueue releases the quota (and the Workload changes again)."""
        self.wl["status"].pop("admission", None)
        self._wl_condition("QuotaReserved", "False", "Pending", self.eviction_message)
        self._wl_condition("Admitted", "False", "NoReservation", "The workload has no reservation")
        self._wl_condition("PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded")
        return self._workload()

    def readmit(self) -> GangWorld:
        """SetQuotaReservation: Evicted and Preempted go False with reason QuotaReserved."""
        previously = f"Previously: {self.eviction_message}"
        self._wl_condition("Requeued", "True", "BackoffFinished", "The workload backoff was finished")
        self._reserve_quota()
        self._wl_condition("Evicted", "False", "QuotaReserved", previously)
        conditions = self.wl["status"]["conditions"]
        if any(c["type"] == "Preempted" for c in conditions):
            self._wl_condition("Preempted", "False", "QuotaReserved", previously)
        return self._workload()

    def deactivate(self, *, evicts: bool = True) -> GangWorld:
        """spec.active=false; Kueue evicts with Deactivated unless already evicted (stale reason)."""
        self._set_spec(self.wl, "active", False)
        if evicts:
            return self.evict("Deactivated")
        return self._workload()

    def exceed_max_execution_time(self) -> GangWorld:
        self._set_spec(self.wl, "active", False)
        return self.evict("DeactivatedDueToMaximumExecutionTimeExceeded")

    def finish(self) -> GangWorld:
        self._wl_condition("Finished", "True", "Succeeded", "jobset completed successfully")
        return self._workload()

    def delete_workload(self) -> GangWorld:
        return self._workload("DELETED")

    def pause(self, seconds: float) -> GangWorld:
        self.now += timedelta(seconds=seconds)
        return self

    def progress(self, *topics: str) -> GangWorld:
        """The bridge's progress (SPEC R12.1): a BOOKMARK on each topic (both by default)
        saying every change before now was published; one record, no clock step."""
        for topic in topics or (JOBS, WORKLOADS):
            kind = {JOBS: "JobSet", WORKLOADS: "Workload", PODS: "Pod", EVENTS: "Event"}[topic]
            value = {
                "type": "BOOKMARK",
                "observed_at": observed_time(self.now),
                "cluster": self.cluster,
                "object": {"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": str(self.resource_version)}},
            }
            self.records.append({"topic": topic, "key": kind, "value": value})
        return self


# --- SPEC R15: the other jobs Kueue suspends ---------------------------------------------

TRAINJOB_NAME = "llama-ft"
TRAINJOB_UID = "9e1f2a3b-4c5d-4e6f-8a7b-1c2d3e4f5a6b"
JOB_NAME = "bench-sweep-7"
JOB_UID = "2b3c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d6e"


def trainjob_world(**kw: Any) -> GangWorld:
    """A Kubeflow Trainer v2 TrainJob under Kueue, as its JobSet and its Workload show it:
    Trainer names the JobSet after the TrainJob and makes the TrainJob its controller
    (kubeflow/trainer pkg/runtime/framework/plugins/jobset/jobset.go Build); Kueue's
    TrainJob integration owns the Workload by the TrainJob and labels it with its uid."""
    world = GangWorld(labels={}, workload_name=f"trainjob-{TRAINJOB_NAME}-5c2e1", **kw)
    meta = world.js["metadata"]
    meta["name"] = TRAINJOB_NAME
    meta["ownerReferences"] = [
        {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": TRAINJOB_NAME, "uid": TRAINJOB_UID, "controller": True, "blockOwnerDeletion": True}
    ]
    wl = world.wl["metadata"]
    wl["labels"] = {"kueue.x-k8s.io/job-uid": TRAINJOB_UID}
    wl["annotations"] = {"kueue.x-k8s.io/job-owner-gvk": "trainer.kubeflow.org/v1alpha1, Kind=TrainJob", "kueue.x-k8s.io/job-owner-name": TRAINJOB_NAME}
    wl["ownerReferences"] = [
        {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": TRAINJOB_NAME, "uid": TRAINJOB_UID, "controller": True, "blockOwnerDeletion": True}
    ]
    return world


class JobWorld(GangWorld):
    """An indexed batch/v1 Job of GPU pods under Kueue (its `batch/job` integration): Kueue
    suspends it at creation and readmits it by unsuspending; the Job controller reports
    active, ready and succeeded pods and its Complete or Failed condition
    (kubernetes/api batch/v1/types.go)."""

    def __init__(self, *, gpus: int = 8, **kw: Any) -> None:
        super().__init__(labels={}, workload_name=f"job-{JOB_NAME}-7a1b0", **kw)
        resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
        self.js = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": JOB_NAME,
                "namespace": NAMESPACE,
                "uid": JOB_UID,
                "resourceVersion": "104211",
                "generation": 1,
                "creationTimestamp": k8s_time(self.now),
                "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
            },
            "spec": {
                "suspend": True,
                "parallelism": self.workers,
                "completions": self.workers,
                "completionMode": "Indexed",
                "backoffLimit": 0,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "ghcr.io/acme/sweep:1", "resources": resources}]}},
            },
            "status": {},
        }
        meta = self.wl["metadata"]
        meta["labels"] = {"kueue.x-k8s.io/job-uid": JOB_UID}
        meta["annotations"] = {"kueue.x-k8s.io/job-owner-gvk": "batch/v1, Kind=Job", "kueue.x-k8s.io/job-owner-name": JOB_NAME}
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": JOB_NAME, "uid": JOB_UID, "controller": True, "blockOwnerDeletion": True}]
        for pod_set in self.wl["spec"]["podSets"]:
            pod_set["template"]["spec"]["containers"][0]["resources"] = {"requests": resources.get("limits", {})}

    def _pods(self, *, active: int = 0, ready: int = 0, succeeded: int = 0) -> None:
        self.js["status"].update(active=active, ready=ready, succeeded=succeeded)

    def create_jobset(self) -> GangWorld:
        self._jobset("ADDED")
        self._js_condition("Suspended", "True", "JobSuspended", "Job suspended")
        return self._jobset()

    def unsuspend(self) -> GangWorld:
        self._set_spec(self.js, "suspend", False)
        self._js_condition("Suspended", "False", "JobResumed", "Job resumed")
        self._pods(active=self.workers)
        return self._jobset()

    def workers_ready(self) -> GangWorld:
        self._pods(active=self.workers, ready=self.workers)
        return self._jobset()

    def suspend(self, *, status_update: bool = True) -> GangWorld:
        self._set_spec(self.js, "suspend", True)
        self._jobset()
        if status_update:
            self._js_condition("Suspended", "True", "JobSuspended", "Job suspended")
            self._pods(active=self.workers)
            self._jobset()
        return self

    def jobs_stopped(self) -> GangWorld:
        self._pods()
        return self._jobset()

    def complete(self) -> GangWorld:
        self._js_condition("Complete", "True", "CompletionsReached", "Reached expected number of succeeded pods")
        self._pods(succeeded=self.workers)
        return self._jobset()

    def fail(self) -> GangWorld:
        self._js_condition("Failed", "True", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        self._pods()
        return self._jobset()


def with_eviction_counts(world: GangWorld, *counts: tuple[str, str, int]) -> GangWorld:
    """Kueue v1beta2's `status.schedulingStats.evictions` as it stands now (by reason and
    underlying cause), written with the Workload's next change."""
    world.wl["status"]["schedulingStats"] = {"evictions": [{"reason": r, "underlyingCause": c, "count": n} for r, c, n in counts]}
    return world
