"""Every kind faultline knows, registered once. The bridge watches what `WATCHED` lists;
the core asks this module which kind an object, an owner or a pod belongs to. Adding a
kind is one module of this package, its tests, and one entry below."""

from __future__ import annotations

from functools import lru_cache
from typing import Final

from app.core.base.rules import AttemptLabels, Rules
from app.core.kinds.base import Api, Route, WorkloadKind, group_of
from app.core.kinds.batch_job import BatchJob
from app.core.kinds.jobset import JobSet
from app.core.kinds.kubeflow import JAXJOB, MPIJOB, PYTORCHJOB, TFJOB
from app.core.kinds.lws import LeaderWorkerSet
from app.core.kinds.pod import Pod
from app.core.kinds.rayjob import RayJob
from app.core.kinds.trainjob import TrainJob
from app.model.envelope import EVENTS, WORKLOADS
from app.model.facts import OwnerFacts, PodFacts

POD, RAYJOB, JOBSET, TRAINJOB, BATCH_JOB = Pod(), RayJob(), JobSet(), TrainJob(), BatchJob()
LWS = LeaderWorkerSet()

# The workload kinds (R1, R13.2, R16), in the order the bridge lists them.
KINDS: Final[tuple[WorkloadKind, ...]] = (POD, RAYJOB, PYTORCHJOB, TFJOB, MPIJOB, JAXJOB, JOBSET, TRAINJOB, LWS, BATCH_JOB)

# What else the bridge watches: Events (faults, R2; keyed by the object they are about, so
# a pod's Events share its partition) and Kueue's Workloads (R9, R15: the version the
# server prefers, v1beta2, else v1beta1; kueue apis/kueue/*/workload_types.go).
EVENT = Api("Event", "", ("v1",), "events", EVENTS, key="involved_object", optional=False)
WORKLOAD = Api("Workload", "kueue.x-k8s.io", ("v1beta2", "v1beta1"), "workloads", WORKLOADS)
WATCHED: Final[tuple[Api, ...]] = (POD.api, EVENT, *(k.api for k in KINDS[1:-1]), BATCH_JOB.api, WORKLOAD)

_BY_API: Final = {(k.api.group, k.name): k for k in KINDS}
_BY_NAME: Final = {k.name: k for k in KINDS}
# R13.2: an object whose controller is one of these belongs to it and is never an attempt
# of its own (a TrainJob's JobSet, a JobSet's Jobs, a RayJob's submitter, an MPIJob's
# launcher, a Job's pods); any other controller (a CronJob) does not hide it.
_OWNERS: Final = {key: k for key, k in _BY_API.items() if k is not POD}
# R13.4: pods are routed by the first kind that claims them; those after the GPU gate only
# when the pod asks for a GPU (a CPU-only Job and its pods create no attempt state at all).
_ROUTES_ANY_POD: Final = (JOBSET, PYTORCHJOB, TFJOB, MPIJOB, JAXJOB, LWS)
_ROUTES_GPU_POD: Final = (RAYJOB, BATCH_JOB, POD)


def kind_of(api_version: str, kind: str) -> WorkloadKind | None:
    """The kind of an object, by its apiVersion's group and its kind (any served version
    of the group is read the same way: R11.2)."""
    return _BY_API.get((group_of(api_version), kind))


def kind_named(name: str) -> WorkloadKind | None:
    """A kind by its name alone (the facts and records carry the name)."""
    return _BY_NAME.get(name)


def owner_kind(owner: OwnerFacts | None) -> WorkloadKind | None:
    """The kind of a controller ownerReference, when faultline tracks it (R13.2)."""
    return _OWNERS.get((owner.group, owner.kind)) if owner is not None else None


def joined_by_owner(owner: OwnerFacts | None) -> OwnerFacts | None:
    """A pod's controller, if R13.4 joins the pod by it (a Kubeflow job, a batch Job)."""
    kind = owner_kind(owner)
    return owner if kind is not None and kind.joins_pods_by_owner else None


def route_pod(pod: PodFacts, rules: Rules) -> Route | None:
    """R13.4 for a pod without an orchestrator's labels: the first kind that claims it."""
    claimed = claiming_kind(pod, rules)
    return claimed[1] if claimed is not None else None


def claiming_kind(pod: PodFacts, rules: Rules) -> tuple[WorkloadKind, Route] | None:
    """The first kind that claims a pod without an orchestrator's labels, and its route."""
    for kind in _ROUTES_ANY_POD:
        route = kind.route_pod(pod, rules)
        if route is not None:
            return kind, route
    if not pod.requests_gpu:
        return None
    for kind in _ROUTES_GPU_POD:
        route = kind.route_pod(pod, rules)
        if route is not None:
            return kind, route
    return None


@lru_cache(maxsize=16)
def pod_labels_read(labels: AttemptLabels) -> tuple[str, ...]:
    """Only the pod labels the rules read (R1, R4.2, R13.4): the rest may be many, and long."""
    read = [labels.managed, labels.run, labels.action, labels.attempt]
    for kind in KINDS:
        read += [key for key in kind.pod_labels if key not in read]
    return tuple(read)
