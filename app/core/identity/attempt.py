"""Attempt identity (SPEC R1, R13.1): which attempt, if any, an object belongs to, and the
key under which the attempt stage joins it.

First that applies (R13.1): the orchestrator's labels (R1), unchanged; else, with
`workload_identity`, a workload attempt named by the workload object (R13.3); else none.

The attempt stage is keyed by what a pod can name (`Route.key`, the *join key*): for
labels and most workloads the attempt key itself; for a JobSet the JobSet (its pods
name it by uid, not the TrainJob that may own it), for a RayJob its RayCluster (its pods
name only the cluster). The attempt's identity travels with the tracked object's facts
(`JobFacts.attempt`), or with the pod where the pod is the attempt.
"""

from __future__ import annotations

import msgspec

from app.core.identity import workload as w
from app.core.base.bounds import Trim
from app.core.verdicts.child_pods import TRACKED_GROUPS, TRACKED_KINDS
from app.core.base.rules import Rules
from app.model.decode import BadRecord
from app.model.facts import AttemptId, PodFacts
from app.model.k8s import Job, PodSpec
from app.model.records import ClassifiedFailure, GangTransition, Identity, ObjectRef

__all__ = ["AttemptId", "Route", "attempt_name", "attempt_of", "gang_attempt", "is_child_pod", "job_attempt", "pod_route"]


def attempt_of(cluster: str, namespace: str, labels: dict[str, str], rules: Rules) -> AttemptId | None:
    """R1: all four labels or no attempt at all (a partial match would credit one
    action's fault to another)."""
    keys = rules.labels
    run, action, attempt = labels.get(keys.run), labels.get(keys.action), labels.get(keys.attempt)
    if labels.get(keys.managed) != "true" or not run or not action or not attempt:
        return None
    if "/" in namespace or "/" in run or "/" in action or "/" in attempt:  # the names only for a refusal
        for what, value in (("namespace", namespace), (f"label {keys.run}", run), (f"label {keys.action}", action), (f"label {keys.attempt}", attempt)):
            if "/" in value:  # it would split the attempt key differently (SPEC R11.3)
                raise BadRecord(f"{what} {value[:256]!r} contains '/', which separates the parts of an attempt key")
    return AttemptId(cluster=cluster, namespace=namespace, run=run, action=action, attempt=attempt)


def is_child_pod(labels: dict[str, str], rules: Rules) -> bool:
    """A pod an operator or a batch Job created is a child pod, never a pod task's own."""
    return not labels.keys().isdisjoint(rules.child_pod_labels)


class Route(msgspec.Struct, frozen=True, gc=False):  # a Struct: made for every pod record that changed
    """Where a pod's facts go: the attempt stage's key, and the attempt when the pod
    alone tells it (labels, a Kubeflow job's or a batch Job's pod, a bare pod; not a
    JobSet's pod, which cannot tell a bare JobSet from a TrainJob's, nor a Ray pod)."""

    key: str
    attempt: AttemptId | None


def _job_of(pod: PodFacts) -> tuple[str, str] | None:
    """R13.4: the batch Job a pod belongs to, by the Job controller's labels, else by its
    controller ownerReference: (name, uid)."""
    labels = pod.labels
    uid = next((labels[k] for k in w.JOB_CONTROLLER_UID if labels.get(k)), "")
    name = next((labels[k] for k in w.JOB_NAME if labels.get(k)), "")
    if uid and name:
        return name, uid
    owner = pod.owner
    if owner is not None and (owner.group, owner.kind) == (w.BATCH_GROUP, w.JOB):
        return owner.name, owner.uid
    return None


def pod_route(pod: PodFacts, rules: Rules) -> Route | None:
    """R13.1, R13.4 for a pod, first that applies: the orchestrator's labels; a JobSet's
    labels; a Kubeflow job as its controller; then, only when the pod asks for a GPU, a
    Ray cluster's label; a batch Job; no controller at all (a bare pod). A pod of any
    other controller (ReplicaSet, StatefulSet, ...) goes nowhere, nor one asking for no
    GPU: a CPU-only Job and its pods create no attempt state at all."""
    cluster, namespace, labels, owner = pod.cluster, pod.namespace, pod.labels, pod.owner
    labelled = attempt_of(cluster, namespace, labels, rules)
    if labelled is not None:
        return Route(labelled.key, labelled)
    if not rules.workload_identity:
        return None
    jobset_name, jobset_uid = labels.get(w.JOBSET_NAME), labels.get(w.JOBSET_UID)
    if jobset_name and jobset_uid:
        return Route(w.workload_attempt(cluster, namespace, w.JOBSET, jobset_name, jobset_uid).key, None)
    if owner is not None and owner.group == w.KUBEFLOW_GROUP and owner.kind in w.KUBEFLOW_KINDS:
        attempt = w.workload_attempt(cluster, namespace, owner.kind, owner.name, owner.uid)
        return Route(attempt.key, attempt)
    if not pod.requests_gpu:
        return None
    ray_cluster = labels.get(w.RAY_CLUSTER)
    if ray_cluster:
        return Route(w.ray_cluster_key(cluster, namespace, ray_cluster), None)
    job = _job_of(pod)
    if job is not None:
        attempt = w.workload_attempt(cluster, namespace, w.JOB, *job)
        return Route(attempt.key, attempt)
    if not pod.controlled:
        attempt = w.workload_attempt(cluster, namespace, w.POD, pod.name, pod.uid)
        return Route(attempt.key, attempt)
    return None


# The kinds the attempt stage reads from k8s.jobs: R1's, and the batch Job (R13.2). A
# TrainJob never names its JobSet's uid, so its own record joins nothing here: its
# JobSet's record carries it (R13.4).
_BATCH_JOB = (w.BATCH_GROUP, w.JOB)


def job_attempt(cluster: str, job: Job, rules: Rules, trim: Trim) -> tuple[str, AttemptId] | None:
    """R13.1, R13.4 for a k8s.jobs record: the attempt stage's key and the attempt the
    object tracks, or None (not tracked, another object's, or asks for no GPU)."""
    meta, kind = job.metadata, job.kind
    group = w.group_of(job.api_version)
    namespace = meta.namespace
    if (group, kind) == _BATCH_JOB:
        template = job.spec.template
        if not w.requests_gpu(template.spec if template is not None else PodSpec(), rules):
            return None  # most Jobs (CronJobs' among them): decided here, cheaply
    elif kind not in TRACKED_KINDS or group not in TRACKED_GROUPS:
        return None
    labelled = attempt_of(cluster, namespace, meta.labels, rules)
    if labelled is not None:
        # R1 unchanged: labels win; a batch Job is no tracked resource of R1.
        return (labelled.key, labelled) if kind in TRACKED_KINDS else None
    if not rules.workload_identity:
        return None
    owner = w.controller_of(meta, trim)
    if kind == w.JOBSET and owner is not None and (owner.group, owner.kind) == (w.TRAINER_GROUP, w.TRAINJOB):
        # Kubeflow Trainer v2 names the JobSet after the TrainJob, controls it, and copies
        # its Failed/Completed conditions into the TrainJob (kubeflow/trainer
        # pkg/runtime/framework/plugins/jobset/jobset.go, Build and Status): the JobSet's
        # record tells the TrainJob's failure; its pods name the JobSet.
        trainjob = w.workload_attempt(cluster, namespace, w.TRAINJOB, owner.name, owner.uid)
        return w.workload_attempt(cluster, namespace, w.JOBSET, meta.name, meta.uid).key, trainjob
    if w.is_tracked_owner(owner):
        return None  # R13.2: it belongs to its owner
    attempt = w.workload_attempt(cluster, namespace, kind, meta.name, meta.uid)
    if kind == w.RAYJOB:
        ray_cluster = trim.token(job.status.ray_cluster_name)
        if job.spec.cluster_selector or not ray_cluster:
            # No pod of its own yet; or it runs on an existing RayCluster whose pods
            # belong to the cluster, not to this job (docs/rules.md).
            return None
        return w.ray_cluster_key(cluster, namespace, ray_cluster), attempt
    return attempt.key, attempt


def gang_attempt(cluster: str, jobset: Job, rules: Rules, trim: Trim) -> tuple[str, Identity, ObjectRef]:
    """The key, identity and tracked object of a JobSet's gang transitions (R9.11,
    R15.6): under the orchestrator's labels (or with `workload_identity` off) v1's key
    `<cluster>/<namespace>/<JobSet name>`; else the workload attempt's key, a TrainJob's
    for the JobSet it controls."""
    meta = jobset.metadata
    own = ObjectRef(kind=w.JOBSET, name=meta.name, uid=meta.uid)
    if not rules.workload_identity or attempt_of(cluster, meta.namespace, meta.labels, rules) is not None:
        return f"{cluster}/{meta.namespace}/{meta.name}", "labels", own
    owner = w.controller_of(meta, trim)
    if owner is not None and (owner.group, owner.kind) == (w.TRAINER_GROUP, w.TRAINJOB):
        attempt = w.workload_attempt(cluster, meta.namespace, w.TRAINJOB, owner.name, owner.uid)
    else:
        attempt = w.workload_attempt(cluster, meta.namespace, w.JOBSET, meta.name, meta.uid)
    tracked = attempt.tracked
    assert tracked is not None  # a workload attempt names its object
    return attempt.key, "workload", tracked


SHORT_UID = 8  # a uid's first characters in a name shown to people (a UUID's first group)


def attempt_name(record: ClassifiedFailure | GangTransition) -> str:
    """How people see which attempt a verdict or transition is about: the attempt key
    under the orchestrator's labels (R1); a workload attempt by kind and name, with its
    uid shortened (`prod-a/ml/TrainJob/llama-ft (cdc524c6)`): one object is one attempt,
    and an object created again under the same name is another (R13.3)."""
    if record.identity == "labels":
        return record.key
    tracked = record.tracked
    return f"{record.cluster}/{record.namespace}/{tracked.kind}/{tracked.name} ({tracked.uid[:SHORT_UID]})"
