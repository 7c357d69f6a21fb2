"""Slim views of the Kubernetes objects the rules read.

Each view decodes the object exactly as the API serves it (camelCase JSON); fields the
rules never read are not declared, so msgspec skips them (SPEC R11.2: unknown fields,
kinds and API versions are ignored).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec

# Kubernetes serves RFC 3339 timestamps with a zone; a naive one is malformed input.
Timestamp = Annotated[datetime, msgspec.Meta(tz=True)]


class _View(msgspec.Struct, rename="camel", frozen=True, omit_defaults=True, gc=False):
    pass


class OwnerReference(_View):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool = False


class ObjectMeta(_View):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    creation_timestamp: Timestamp | None = None
    deletion_timestamp: Timestamp | None = None
    owner_references: list[OwnerReference] = []


class Condition(_View):
    type: str = ""
    status: str = ""
    reason: str = ""
    message: str = ""
    last_transition_time: Timestamp | None = None


# --- Pod (core/v1) -------------------------------------------------------------------


class TerminatedState(_View):
    exit_code: int = 0
    reason: str = ""
    message: str = ""
    started_at: Timestamp | None = None  # issue 30: when it ran (GPU-seconds)
    finished_at: Timestamp | None = None


class RunningState(_View):
    started_at: Timestamp | None = None


class ContainerState(_View):
    terminated: TerminatedState | None = None
    running: RunningState | None = None


class ResourceHealth(_View):
    """One allocated device's health (SPEC R14.2; kubernetes/api core/v1/types.go
    ResourceHealth, KEP-4680, feature gate ResourceHealthStatus): `health` is Healthy,
    Unhealthy or Unknown; `message` is written only with ResourceHealthStatusMessage."""

    resource_id: str = msgspec.field(default="", name="resourceID")  # a device plugin's device ID, or DRA <driver>/<pool>/<device>
    health: str = ""
    message: str | None = None


class ResourceStatus(_View):
    """core/v1 ResourceStatus: a resource of the container (`nvidia.com/gpu`, or a DRA
    claim `claim:<claim>/<request>` or `claim:<claim>`) and its devices' health."""

    name: str = ""
    resources: list[ResourceHealth] = []


class ContainerStatus(_View):
    name: str = ""
    state: ContainerState = ContainerState()
    # R16.2, R16.3: its previous run, when it was restarted in place (never an anchor: R5.1)
    last_state: ContainerState = ContainerState()
    allocated_resources_status: list[ResourceStatus] = []  # R14.2: written by the kubelet


class ContainerClaim(_View):
    """core/v1 ResourceClaim (kubernetes/api core/v1/types.go): a container's use of one of
    the pod's DRA claims, `request` naming one request of it ("" = all of the claim)."""

    name: str = ""
    request: str = ""


class ResourceRequirements(_View):
    """The names are read (SPEC R13.2: does it request a GPU?); a quantity stays raw until
    issue 30's accounting derives one bounded number from it (app/core/verdicts/gpu_time.py)."""

    limits: dict[str, msgspec.Raw] = {}
    requests: dict[str, msgspec.Raw] = {}
    claims: list[ContainerClaim] = []  # DRA: which of the pod's claims (and requests) it uses


class Container(_View):
    name: str = ""
    resources: ResourceRequirements = ResourceRequirements()


class PodResourceClaim(_View):
    name: str = ""


class PodSpec(_View):
    node_name: str = ""
    containers: list[Container] = []
    resource_claims: list[PodResourceClaim] = []  # DRA (SPEC R13.2: a claim may be a GPU)


class PodTemplateSpec(_View):
    spec: PodSpec = PodSpec()


class PodStatus(_View):
    phase: str = ""
    reason: str = ""
    message: str = ""
    conditions: list[Condition] = []  # R14.1: DisruptionTarget (the control plane's and the kubelet's)
    container_statuses: list[ContainerStatus] = []


class Pod(_View):
    metadata: ObjectMeta = ObjectMeta()
    spec: PodSpec = PodSpec()
    status: PodStatus = PodStatus()


# --- Event (core/v1, and events.k8s.io/v1 which maps onto the same fields) ----------


class ObjectReference(_View):
    kind: str = ""
    namespace: str = ""
    name: str = ""
    uid: str = ""


class EventSource(_View):
    component: str = ""
    host: str = ""


class EventSeries(_View):
    count: int | None = None
    last_observed_time: Timestamp | None = None


class Event(_View):
    """core/v1 Event fields, plus the events.k8s.io/v1 names for the same facts."""

    metadata: ObjectMeta = ObjectMeta()
    type: str = ""
    reason: str = ""
    # core/v1
    involved_object: ObjectReference | None = None
    message: str | None = None
    event_time: Timestamp | None = None
    first_timestamp: Timestamp | None = None
    last_timestamp: Timestamp | None = None
    count: int | None = None
    source: EventSource | None = None
    reporting_component: str = ""
    reporting_instance: str = ""
    series: EventSeries | None = None
    # events.k8s.io/v1
    regarding: ObjectReference | None = None
    reporting_controller: str = ""
    note: str | None = None
    deprecated_first_timestamp: Timestamp | None = None
    deprecated_last_timestamp: Timestamp | None = None
    deprecated_count: int | None = None
    deprecated_source: EventSource | None = None


# --- Tracked workloads: TrainJob, JobSet, RayJob, PyTorchJob, MPIJob, TFJob, JAXJob,
# batch/v1 Job, LeaderWorkerSet ----------------------------------------------------------


class ReplicatedJobStatus(_View):
    name: str = ""
    ready: int = 0
    succeeded: int = 0
    failed: int = 0
    active: int = 0
    # JobSet v0.12 (api/jobset/v1alpha2/jobset_types.go): restarts of each of its Jobs, by
    # job index (RestartJob failure-policy actions, SPEC R16.1).
    job_restarts: list[int] = []


class JobStatus(_View):
    """Union of the status fields the rules read across the tracked kinds."""

    conditions: list[Condition] = []
    # JobSet
    restarts: int = 0
    replicated_jobs_status: list[ReplicatedJobStatus] = []
    # JobSet v0.12 in-place restarts (SPEC R16.2): the attempt whose pods are being restarted
    # in place, and the attempt every pod has reached.
    previous_in_place_restart_attempt: int | None = None
    current_in_place_restart_attempt: int | None = None
    # RayJob
    ray_cluster_name: str = ""
    job_status: str = ""
    job_deployment_status: str = ""
    reason: str = ""
    message: str = ""
    # ray-project/kuberay ray-operator/apis/ray/v1/rayjob_types.go RayJobStatus.EndTime: when
    # the deployment reached a terminal state (its own time for the failure, R5.2, R12.7).
    end_time: Timestamp | None = None
    # rayjob_types.go RayJobStatus.StartTime: when the current try began, written with its
    # RayCluster's name (rayjob_controller.go initRayJobStatusIfNeed): where its quota's
    # share moves to that cluster's key (SPEC R17, R16.4, R12.7)
    start_time: Timestamp | None = None
    # rayjob_types.go RayJobStatus.Failed: how many of its tries failed (SPEC R16.4)
    failed: int | None = None
    # batch/v1 Job: pods ready and pods succeeded (SPEC R15.2: started)
    ready: int | None = None
    succeeded: int = 0


class LeaderWorkerTemplate(_View):
    """LeaderWorkerSet (kubernetes-sigs/lws v0.10.0 api/leaderworkerset/v1/leaderworkerset_types.go
    LeaderWorkerTemplate): the leader's pod template (absent: the leader uses the worker's),
    the workers', and what the controller does when a pod of a group restarts (SPEC R16.3)."""

    leader_template: PodTemplateSpec | None = None
    worker_template: PodTemplateSpec = PodTemplateSpec()
    restart_policy: str = ""


class RunPolicy(_View):
    """Kubeflow training-operator v1 (common_types.go RunPolicy): Kueue suspends a job here."""

    suspend: bool | None = None


class JobSpec(_View):
    """Union of the spec fields the rules read across the tracked kinds."""

    suspend: bool | None = None  # JobSet, TrainJob, RayJob, batch/v1 Job
    run_policy: RunPolicy | None = None  # PyTorchJob, MPIJob, TFJob, JAXJob (SPEC R15)
    template: PodTemplateSpec | None = None  # batch/v1 Job: the pod template (R13.2: a GPU?)
    cluster_selector: dict[str, str] = {}  # RayJob: runs on an existing RayCluster (R13.4)
    replicas: int | None = None  # LeaderWorkerSet: its groups (SPEC R16.3; absent: 1)
    leader_worker_template: LeaderWorkerTemplate | None = None  # LeaderWorkerSet (R13.2: a GPU?)


class Job(_View):
    api_version: str = ""
    kind: str = ""
    metadata: ObjectMeta = ObjectMeta()
    spec: JobSpec = JobSpec()
    status: JobStatus = JobStatus()


# --- Kueue Workload (kueue.x-k8s.io v1beta1 / v1beta2) ------------------------------


class PodSet(_View):
    count: int = 1  # SPEC R17.1: its pods (kueue.x-k8s.io PodSet.Count)
    template: PodTemplateSpec = PodTemplateSpec()


class WorkloadSpec(_View):
    active: bool = True
    pod_sets: list[PodSet] = []  # the job's pods, as Kueue admits them (does it ask for a GPU?)


class SchedulingStatsEviction(_View):
    """kueue.x-k8s.io/v1beta2 WorkloadSchedulingStatsEviction: evictions counted by reason
    and underlying cause (apis/kueue/v1beta2/workload_types.go)."""

    reason: str = ""
    underlying_cause: str = ""
    count: int = 0


class SchedulingStats(_View):
    evictions: list[SchedulingStatsEviction] = []


class RequeueState(_View):
    count: int | None = None
    requeue_at: Timestamp | None = None  # SPEC R17.3: when Kueue means to requeue it (kueue#14811)


class WorkloadStatus(_View):
    conditions: list[Condition] = []
    scheduling_stats: SchedulingStats | None = None  # v1beta2 (Kueue 0.13+)
    requeue_state: RequeueState | None = None


class Workload(_View):
    api_version: str = ""
    kind: str = ""
    metadata: ObjectMeta = ObjectMeta()
    spec: WorkloadSpec = WorkloadSpec()
    status: WorkloadStatus = WorkloadStatus()
