"""What the bridge watches: each kind, where the API serves it, and the topic and key of
its records (DESIGN.md, "Source record")."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from app.model.envelope import EVENTS, JOBS, PODS, WORKLOADS

KeyRule = Literal["uid", "involved_object"]


class Kind(msgspec.Struct, frozen=True):
    """One watched resource. `versions` are tried in order: the first one the API serves
    (a list that is not 404) is the one watched."""

    name: str  # the object's kind, e.g. "PyTorchJob"
    group: str  # "" for the core API group
    versions: tuple[str, ...]
    plural: str
    topic: str  # logical source topic (the prefix is added by the sink)
    key: KeyRule = "uid"
    optional: bool = True  # a CRD that may not be installed; the built-in kinds always are

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    def resource(self) -> str:
        """`plural.group`, as RBAC and kubectl name it (`pods` for the core group)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


KINDS: tuple[Kind, ...] = (
    Kind("Pod", "", ("v1",), "pods", PODS, optional=False),
    Kind("Event", "", ("v1",), "events", EVENTS, key="involved_object", optional=False),
    Kind("RayJob", "ray.io", ("v1",), "rayjobs", JOBS),
    Kind("PyTorchJob", "kubeflow.org", ("v1",), "pytorchjobs", JOBS),
    Kind("TFJob", "kubeflow.org", ("v1",), "tfjobs", JOBS),
    Kind("MPIJob", "kubeflow.org", ("v2beta1", "v1"), "mpijobs", JOBS),
    Kind("JobSet", "jobset.x-k8s.io", ("v1alpha2",), "jobsets", JOBS),
    # Kubeflow Trainer v2 (kubeflow/trainer manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml).
    Kind("TrainJob", "trainer.kubeflow.org", ("v1alpha1",), "trainjobs", JOBS),
    # Served by every API server; numerous (CronJobs make one per run): SPEC R13.2 keeps
    # only those that request a GPU, which the rules decide, not the bridge.
    Kind("Job", "batch", ("v1",), "jobs", JOBS, optional=False),
    Kind("Workload", "kueue.x-k8s.io", ("v1beta2", "v1beta1"), "workloads", WORKLOADS),
)

KINDS_BY_NAME = {kind.name: kind for kind in KINDS}


def kinds_named(names: list[str]) -> tuple[Kind, ...]:
    """The kinds to watch, in KINDS order; all of them for an empty list."""
    if not names:
        return KINDS
    unknown = [n for n in names if n not in KINDS_BY_NAME]
    if unknown:
        raise ValueError(f"unknown kind(s) {', '.join(unknown)}: expected some of {', '.join(KINDS_BY_NAME)}")
    return tuple(kind for kind in KINDS if kind.name in names)


def key_of(kind: Kind, obj: dict[str, Any]) -> str:
    """The Kafka key of a change to `obj`: its uid, or for an Event the uid of the object
    it is about (involvedObject, else events.k8s.io's regarding), so an Event lands on
    the partition of its pod. An Event naming no uid (a cluster-scoped event) is keyed
    by its own uid: its changes keep their order and spread over partitions."""
    meta = obj.get("metadata") or {}
    if kind.key == "involved_object":
        for field in ("involvedObject", "regarding"):
            ref = obj.get(field)
            if isinstance(ref, dict) and ref.get("uid"):
                return str(ref["uid"])
    return str(meta.get("uid") or "")
