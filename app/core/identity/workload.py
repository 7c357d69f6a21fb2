"""Workloads without an orchestrator (SPEC R13.2): the kinds faultline tracks, which
object controls which, and whether a pod asks for a GPU. Pure functions over the slim
views; the identity rules built on them are in `attempt.py`.
"""

from __future__ import annotations

from typing import Final

from app.core.base.bounds import Trim
from app.core.base.rules import Rules
from app.model.decode import BadRecord
from app.model.facts import AttemptId, OwnerFacts
from app.model.k8s import ObjectMeta, PodSpec

# API groups (the part of apiVersion before the "/"; core/v1 has none).
TRAINER_GROUP: Final = "trainer.kubeflow.org"  # kubeflow/trainer pkg/apis/trainer/v1alpha1/groupversion_info.go
JOBSET_GROUP: Final = "jobset.x-k8s.io"  # kubernetes-sigs/jobset api/jobset/v1alpha2/groupversion_info.go
KUBEFLOW_GROUP: Final = "kubeflow.org"  # Kubeflow training-operator v1 and mpi-operator v2beta1
RAY_GROUP: Final = "ray.io"
BATCH_GROUP: Final = "batch"

TRAINJOB: Final = "TrainJob"  # kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go TrainJobKind
JOBSET: Final = "JobSet"
RAYJOB: Final = "RayJob"
JOB: Final = "Job"
POD: Final = "Pod"
RAY_CLUSTER_KIND: Final = "RayCluster"
KUBEFLOW_KINDS: Final = frozenset({"PyTorchJob", "MPIJob", "TFJob"})

# R13.2: an object whose controller is one of these belongs to it and is never an attempt
# of its own (a TrainJob's JobSet, a JobSet's Jobs, a RayJob's submitter Job, an MPIJob's
# launcher Job, a Job's pods); any other controller (a CronJob) does not hide it.
TRACKED_OWNERS: Final = frozenset(
    {(TRAINER_GROUP, TRAINJOB), (JOBSET_GROUP, JOBSET), (RAY_GROUP, RAYJOB), (BATCH_GROUP, JOB)}
    | {(KUBEFLOW_GROUP, kind) for kind in KUBEFLOW_KINDS}
)

# kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go (JobSetNameKey, JobSetUIDKey):
# the JobSet controller sets both on every child Job and on its pod template
# (pkg/controllers/jobset_controller.go, labelAndAnnotateObject); the uid since v0.9.0 (#862).
JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID: Final = "jobset.sigs.k8s.io/jobset-uid"
# kubernetes/api batch/v1/types.go (ControllerUidLabel, JobNameLabel): the Job controller
# labels its pods with both, and still with the unprefixed names of older releases.
JOB_CONTROLLER_UID: Final = ("batch.kubernetes.io/controller-uid", "controller-uid")
JOB_NAME: Final = ("batch.kubernetes.io/job-name", "job-name")
# ray-project/kuberay ray-operator/controllers/ray/utils/constant.go RayClusterLabelKey: on
# every pod of a RayCluster (common/pod.go labelPod); a RayJob's cluster is its
# status.rayClusterName.
RAY_CLUSTER: Final = "ray.io/cluster"
# The pod labels R13.4 reads on top of `Rules.pod_labels_read` (which has the JobSet name
# and the Ray cluster already).
WORKLOAD_POD_LABELS: Final = (JOBSET_UID, *JOB_CONTROLLER_UID, *JOB_NAME)


def group_of(api_version: str) -> str:
    """`batch/v1` -> `batch`; `v1` (the core group) -> ``."""
    group, slash, _ = api_version.partition("/")
    return group if slash else ""


def controller_of(meta: ObjectMeta, trim: Trim) -> OwnerFacts | None:
    """The object's controller ownerReference (at most one is honoured: the first), its
    text cut to `max_token_chars`: a tenant may write any ownerReference (R11.5)."""
    for ref in meta.owner_references:
        if ref.controller:
            return OwnerFacts(trim.token(group_of(ref.api_version)), trim.token(ref.kind), trim.token(ref.name), trim.token(ref.uid))
    return None


# The controllers a pod is joined by (R13.4): kept in a pod's facts; any other is only "controlled".
_JOINED_BY = frozenset({(BATCH_GROUP, JOB)} | {(KUBEFLOW_GROUP, kind) for kind in KUBEFLOW_KINDS})


def joining_controller(owner: OwnerFacts | None) -> OwnerFacts | None:
    """A pod's controller, if R13.4 joins the pod by it (a Kubeflow job, a batch Job)."""
    return owner if owner is not None and (owner.group, owner.kind) in _JOINED_BY else None


def is_tracked_owner(owner: OwnerFacts | None) -> bool:
    return owner is not None and (owner.group, owner.kind) in TRACKED_OWNERS


def requests_gpu(spec: PodSpec, rules: Rules) -> bool:
    """R13.2: a regular container's limits or requests name a resource in `gpu_resources`,
    or the pod asks for a DRA claim. Only the names are looked up: a map of thousands of
    resources costs as many lookups as `gpu_resources` has names."""
    if spec.resource_claims:
        return True
    names = rules.gpu_resources
    for container in spec.containers:
        resources = container.resources
        limits, requests = resources.limits, resources.requests
        for name in names:  # a loop, not any(): this runs for every pod record that changed
            if name in limits or name in requests:
                return True
    return False


def _part(what: str, value: str, kind: str | None = None) -> str:
    """A part of a key (SPEC R11.3): empty or holding '/' it would split the key differently.
    (`kind` is put before `what` only in a refusal: no message is built per record.)"""
    if not value or "/" in value:
        raise BadRecord(f"{what if kind is None else f'{kind} {what}'} {value[:256]!r} cannot name a workload: it is empty or contains '/'")
    return value


def workload_attempt(cluster: str, namespace: str, kind: str, name: str, uid: str) -> AttemptId:
    """R13.3: a workload attempt, one object: key `<cluster>/<namespace>/<Kind>/<name>/<uid>`."""
    return AttemptId(
        cluster=cluster,
        namespace=_part("namespace", namespace),
        kind=kind,
        name=_part("name", name, kind),
        uid=_part("uid", uid, kind),
    )


def ray_cluster_key(cluster: str, namespace: str, name: str) -> str:
    """R13.4: where a RayJob and its cluster's pods meet (a pod names only its cluster)."""
    return f"{cluster}/{_part('namespace', namespace)}/{RAY_CLUSTER_KIND}/{_part('RayCluster name', name)}"
