"""Attempt identity (SPEC R1, R13.1): which attempt, if any, an object belongs to, and the
key under which the attempt stage joins it.

First that applies (R13.1): the orchestrator's labels (R1), unchanged; else, with
`workload_identity`, a workload attempt named by the workload object (R13.3); else none.
What each kind means — whether it is an attempt, which attempt it speaks for, where its
pods meet it — is its own module's (app/core/kinds); this module applies R13.1's order.

The attempt stage is keyed by what a pod can name (`Route.key`, the *join key*): for
labels and most workloads the attempt key itself; for a JobSet the JobSet (its pods
name it by uid, not the TrainJob that may own it), for a RayJob its RayCluster (its pods
name only the cluster), for a LeaderWorkerSet each of its groups by name and index (its
pods name no uid; R16.3). The attempt's identity travels with the tracked object's facts
(`JobFacts.attempt`), or with the pod where the pod is the attempt.
"""

from __future__ import annotations

from app.core.base.bounds import Trim
from app.core.base.rules import Rules
from app.core.kinds import registry
from app.core.kinds.base import Route, controller_of, workload_attempt
from app.model.decode import BadRecord
from app.model.facts import AttemptId, PodFacts
from app.model.k8s import Job
from app.model.records import ClassifiedFailure, GangTransition, Identity, ObjectRef

__all__ = ["AttemptId", "Route", "attempt_name", "attempt_of", "gang_attempt", "is_child_pod", "job_attempts", "pod_route"]


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


def pod_route(pod: PodFacts, rules: Rules) -> Route | None:
    """R13.1, R13.4 for a pod, first that applies: the orchestrator's labels; then the kind
    that claims it (a JobSet's labels, a Kubeflow job as its controller; then, only when
    the pod asks for a GPU, a Ray cluster's label, a batch Job, no controller at all: a
    bare pod). A pod of any other controller (ReplicaSet, StatefulSet, ...) goes nowhere,
    nor one asking for no GPU: a CPU-only Job and its pods create no attempt state."""
    labelled = attempt_of(pod.cluster, pod.namespace, pod.labels, rules)
    if labelled is not None:
        return Route(labelled.key, labelled)
    if not rules.workload_identity:
        return None
    return registry.route_pod(pod, rules)


def job_attempts(cluster: str, job: Job, rules: Rules, trim: Trim) -> tuple[list[tuple[str, AttemptId]], int]:
    """R13.1, R13.4 for a k8s.jobs record: the attempt stage's keys and the attempts the
    object tracks (none: not tracked, another object's, or asks for no GPU; one, but a
    LeaderWorkerSet's groups each, R16.3), and how many it left out (R11.5)."""
    kind = registry.kind_of(job.api_version, job.kind)
    if kind is None or not kind.records_attempt():
        return [], 0  # a TrainJob's own record joins nothing: its JobSet's carries it
    if not kind.requests_gpu(job, rules):
        return [], 0  # most Jobs (CronJobs' among them): decided here, cheaply
    meta = job.metadata
    namespace = meta.namespace
    labelled = attempt_of(cluster, namespace, meta.labels, rules)
    if labelled is not None:
        # R1 unchanged: labels win; only R1's tracked resources are attempts under them.
        return ([(labelled.key, labelled)] if kind.tracked_under_labels else []), 0
    if not rules.workload_identity:
        return [], 0
    owner = controller_of(meta, trim)
    attempt = kind.owners_attempt(cluster, job, owner, trim)
    if attempt is None:
        if registry.owner_kind(owner) is not None:
            return [], 0  # R13.2: it belongs to its owner
        attempt = workload_attempt(cluster, namespace, kind.name, meta.name, meta.uid)
    return kind.join_keys(cluster, job, attempt, trim)


def gang_attempt(cluster: str, job: Job, rules: Rules, trim: Trim) -> tuple[str, Identity, ObjectRef]:
    """The key, identity and tracked object of a job's gang transitions (R9.11, R15.6):
    under the orchestrator's labels (or with `workload_identity` off) v1's key
    `<cluster>/<namespace>/<JobSet name>`; else the workload attempt's key, the owner's
    where the job speaks for it (a TrainJob's JobSet)."""
    meta = job.metadata
    kind = registry.kind_of(job.api_version, job.kind)
    if kind is not None and kind.gang_under_labels:
        if not rules.workload_identity or attempt_of(cluster, meta.namespace, meta.labels, rules) is not None:
            return f"{cluster}/{meta.namespace}/{meta.name}", "labels", ObjectRef(kind=kind.name, name=meta.name, uid=meta.uid)
    owned = kind.owners_attempt(cluster, job, controller_of(meta, trim), trim) if kind is not None else None
    attempt = owned or workload_attempt(cluster, meta.namespace, job.kind, trim.token(meta.name), meta.uid)
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
    name = f"{record.cluster}/{record.namespace}/{tracked.kind}/{tracked.name} ({tracked.uid[:SHORT_UID]})"
    _, grouped, group = record.key.rpartition(f"/{tracked.uid}/group/")
    return f"{name} group {group}" if grouped else name  # R16.3: one group of it
