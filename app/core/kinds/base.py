"""What a workload kind means to faultline, as one interface every kind implements
(`WorkloadKind`), in the spirit of Kueue's `jobframework.GenericJob`: where the API serves
it (for the bridge), whether an object of it is an attempt at all (SPEC R13.2), which
attempt it tracks and where the attempt stage joins it (R13.3, R13.4), which pods are its
children (R4.2) and which generation runs now (R8), how it says it failed or completed
(R6.1, R13.5), and how Kueue suspends, starts and ends it (R9, R15).

A kind is one module of this package and one line of `registry.py`; nothing outside this
package names a kind (the model's types of the objects aside). The readers here are the
ones every kind shares: workload keys (R13.3), the GPU request (R13.2), conditions.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Final, Literal, NamedTuple

import msgspec

from app.core.base.bounds import Trim
from app.core.base.rules import Rules
from app.model.decode import BadRecord
from app.model.facts import AttemptId, CrdFailure, GenerationEnd, JobFacts, OwnerFacts, PodFacts
from app.model.k8s import Condition, Job, ObjectMeta, PodSpec, Workload

KeyRule = Literal["uid", "involved_object"]

# The condition a job's controller writes when it acts on `spec.suspend` (JobSet
# api/jobset/v1alpha2/jobset_types.go JobSetSuspended; kubernetes/api batch/v1/types.go
# JobSuspended; Kubeflow training-operator common_types.go JobSuspended).
SUSPENDED: Final = "Suspended"
FAILED: Final = "Failed"


class Api(msgspec.Struct, frozen=True):
    """Where the API serves a kind, and the topic and key of its records (DESIGN.md,
    "Source record"). `versions` are tried in order: the first one served is watched."""

    name: str  # the kind, as the API spells it, e.g. "PyTorchJob"
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


class Route(msgspec.Struct, frozen=True, gc=False):  # a Struct: made for every pod record that changed
    """Where a pod's facts go: the attempt stage's key, and the attempt when the pod
    alone tells it (labels, a Kubeflow job's or a batch Job's pod, a bare pod; not a
    JobSet's pod, which cannot tell a bare JobSet from a TrainJob's, nor a Ray pod)."""

    key: str
    attempt: AttemptId | None


class PodGeneration(NamedTuple):
    """R16.3: a generation its pods tell ended (a LeaderWorkerSet group recreated), and its pods."""

    end: GenerationEnd
    pods: tuple[PodFacts, ...]


class End(NamedTuple):
    """A job's own ending (R9.10, R15.3): Completed, or Ended with a reason."""

    state: str  # "Completed" | "Ended"
    reason: str
    message: str


COMPLETED: Final = "Completed"
ENDED: Final = "Ended"


class WorkloadKind:
    """One kind of workload. Subclasses set the attributes and override what differs;
    the defaults are a CRD that Kueue does not suspend, with no pods of its own."""

    api: Api
    # R1: under an orchestrator's labels it is the attempt's tracked resource.
    tracked_under_labels: bool = False
    # R9, R15: Kueue suspends it (its Workload's controller); `gang_under_labels`: R9
    # follows it under an orchestrator's labels too; `observed_by_gang`: its own records
    # feed the gang (a TrainJob's do not: its JobSet mirrors it).
    kueue: bool = False
    gang_under_labels: bool = False
    observed_by_gang: bool = True
    # R13.4: its pods are joined by their controller ownerReference naming it.
    joins_pods_by_owner: bool = False
    # R13.4: it joins pods that ask for no GPU too (its pods are labelled with it).
    joins_any_pod: bool = False
    # R16.4: its generations are joined under keys of their own (a RayJob's tries, each on
    # its own RayCluster): their records' revisions start above the earlier ones'.
    tries_apart: bool = False
    # R16.3: its join keys outlive it (they name it by name, not uid): an object created
    # again under its name meets its pods under the same keys, and is another attempt.
    keys_outlive_objects: bool = False
    # R16.3: its generations are told by its pods (no counter keeps them: `pod_generations`).
    generations_by_pods: bool = False
    # R8, R16: how it went on after an interim verdict, as `classify`'s RESTARTED cell says it.
    restarted: str = "in place (generation {generation})"
    # R4.2, R13.4: the pod labels its selection reads (kept in a pod's facts).
    pod_labels: tuple[str, ...] = ()
    # The labels its operator sets on the pods it creates: such a pod is a child pod, never
    # a pod task's own (the rule set's `child_pod_labels` defaults to every kind's).
    child_pod_labels: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.api.name

    # --- R13.2: is an object of this kind an attempt at all ----------------------------------

    def requests_gpu(self, job: Job, rules: Rules) -> bool:
        """Whether its pods ask for a GPU, where only that makes it an attempt."""
        return True

    def workload_requests_gpu(self, workload: Workload, rules: Rules) -> bool:
        """The same, read from its Kueue Workload's pod sets."""
        return True

    # --- R13.1, R13.4: the attempt it tracks, and where the attempt stage joins it -----------

    def records_attempt(self) -> bool:
        """Whether its own records (k8s.jobs) tell an attempt's failure."""
        return True

    def owners_attempt(self, cluster: str, job: Job, owner: OwnerFacts | None, trim: Trim) -> AttemptId | None:
        """The attempt of its controller it speaks for (a TrainJob's JobSet), if any."""
        return None

    def join_key(self, cluster: str, job: Job, attempt: AttemptId, trim: Trim) -> str | None:
        """The attempt stage's key for its records: where its pods' facts meet it (None:
        no pod of its can be joined yet)."""
        return attempt.key

    def join_keys(self, cluster: str, job: Job, attempt: AttemptId, trim: Trim) -> tuple[list[tuple[str, AttemptId]], int]:
        """Every attempt its record speaks for, with its join key (one, but a LeaderWorkerSet
        speaks for each of its groups, R16.3), and how many it leaves out (R11.5)."""
        key = self.join_key(cluster, job, attempt, trim)
        return ([(key, attempt)] if key is not None else []), 0

    def route_pod(self, pod: PodFacts, rules: Rules) -> Route | None:
        """R13.4: the attempt stage's key of a pod of this kind, if the pod names one."""
        return None

    # --- R4.2, R8, R16: its children and its generations -------------------------------------

    def selects(self, job: JobFacts, pod: PodFacts, ended: GenerationEnd | None = None) -> bool:
        """R4.2: whether `pod` (joined by attempt key) is a child pod of the generation now
        running, or of `ended`; the caller has matched the attempt labels already (R4.6)."""
        return False

    def generation(self, job: JobFacts) -> int:
        """R8: the generation now running (a verdict's `generation`)."""
        return 0

    def counters(self, job: Job) -> dict[str, int]:
        """R8, R16: its restart counters as the object shows them (counter -> value): each
        value a counter passes is a generation that ended without the attempt ending."""
        return {}

    def generation_ended(self, counter: str, value: int, job: JobFacts, at: datetime) -> GenerationEnd:
        """The generation `value` of `counter` that `job`, seen at `at`, shows ended."""
        raise NotImplementedError(f"{self.name} keeps no counter {counter!r}")

    def pod_generations(self, job: JobFacts, pods: Iterable[PodFacts], first: int) -> list[PodGeneration]:
        """R16.3: the generations its pods show ended with a failure (`generations_by_pods`),
        numbered from `first` (the generations before were left out of the state, R11.5)."""
        return []

    def kept_pods(self, job: JobFacts | None, pods: dict[str, PodFacts], rules: Rules) -> tuple[dict[str, PodFacts], int]:
        """R11.5 where its pods tell its generations: the pods of the generations kept, and
        how many generations were left out (the oldest)."""
        return pods, 0

    def restart_policy(self, job: Job) -> str:
        """R16.3: what its controller does when a pod of it restarts, as it says it."""
        return ""

    # --- R6.1, R13.5: its failure -------------------------------------------------------------

    def failure(self, job: Job) -> CrdFailure | None:
        """Its `Failed` condition (reason, message, lastTransitionTime), if True."""
        failed = true_condition(job.status.conditions, FAILED)
        if failed is None:
            return None
        return CrdFailure(failed.reason or FAILED, failed.message, failed.last_transition_time)

    def completed(self, job: Job) -> bool:
        return False

    # --- R9, R15: Kueue --------------------------------------------------------------------

    def suspended(self, job: Job) -> bool:
        """Kueue holds it."""
        return job.spec.suspend is True

    def suspension_since(self, job: Job, suspended: bool) -> datetime | None:
        """R12.7: when its own controller says its suspension state began: its `Suspended`
        condition's lastTransitionTime where that agrees with the state (True while
        suspended, False while running); None when it does not agree yet (the spec
        changed first) or the kind writes none."""
        for condition in job.status.conditions:
            if condition.type == SUSPENDED:
                agrees = condition.status == ("True" if suspended else "False")
                return condition.last_transition_time if agrees else None
        return None

    def started(self, job: Job) -> bool:
        """R9.3, R15.2: its workers ran."""
        return False

    def end(self, job: Job) -> End | None:
        """R9.10, R15.3: its own ending, if it has one."""
        return None

    def end_since(self, job: Job) -> datetime | None:
        """When its own ending was recorded (its terminal condition's time), if it says."""
        return None

    def joined_since(self, job: Job) -> datetime | None:
        """R17, R16.4: when it began joining the key its record names, by its own clock, for
        a kind whose join moves (`tries_apart`); None where it says nothing."""
        return None


# --- readers every kind shares -------------------------------------------------------------


def group_of(api_version: str) -> str:
    """`batch/v1` -> `batch`; `v1` (the core group) -> ``."""
    group, slash, _ = api_version.partition("/")
    return group if slash else ""


def true_condition(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_ and c.status == "True"), None)


def ended_by(job: Job, done: str) -> End | None:
    """R9.10, R15.3 for a kind whose conditions say it: `done` (its completion condition)
    True → Completed; `Failed` True → Ended with its reason."""
    for type_, state in ((done, COMPLETED), (FAILED, ENDED)):
        found = true_condition(job.status.conditions, type_)
        if found is not None:
            return End(state, found.reason, found.message)
    return None


def ended_since(job: Job, done: str) -> datetime | None:
    """When `ended_by` says it ended: the time of the condition that says so."""
    end = ended_by(job, done)
    if end is None:
        return None
    found = true_condition(job.status.conditions, done if end.state == COMPLETED else FAILED)
    return found.last_transition_time if found is not None else None


def clock_of(job: Job) -> datetime | None:
    """The latest time a job's conditions carry: a record that shows it was written after
    every change of the job made before then (R12.7: how far the job is known)."""
    times = [c.last_transition_time for c in job.status.conditions if c.last_transition_time is not None]
    return max(times) if times else None


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


def controller_of(meta: ObjectMeta, trim: Trim) -> OwnerFacts | None:
    """The object's controller ownerReference (at most one is honoured: the first), its
    text cut to `max_token_chars`: a tenant may write any ownerReference (R11.5)."""
    for ref in meta.owner_references:
        if ref.controller:
            return OwnerFacts(trim.token(group_of(ref.api_version)), trim.token(ref.kind), trim.token(ref.name), trim.token(ref.uid))
    return None


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


def own_attempt(cluster: str, job: Job, trim: Trim) -> AttemptId:
    """The workload attempt an object is of its own (R13.3)."""
    meta = job.metadata
    return workload_attempt(cluster, meta.namespace, job.kind, trim.token(meta.name), meta.uid)
