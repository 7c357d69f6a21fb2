"""Internal records between stages: what stage 1 (keyed by object uid) tells stage 2
(keyed by attempt key). They travel through a Kafka re-key topic in the streaming path,
so they are plain tagged Structs like every other record.
"""

from __future__ import annotations

from datetime import datetime, timezone

import msgspec

from app.model.envelope import ChangeType
from app.model.k8s import Job, Timestamp, Workload
from app.model.records import ErrorKind, GangTransition, GpuFault, GpuFaultKind, Identity, ObjectRef, Severity

# Internal re-key topics (drivers add the configured prefix):
# the pod stage and the job router -> the attempt stage, keyed by attempt key;
ATTEMPT_FACTS = "faultline.attempt-facts"
# the job router (JobSets, Workloads) -> the gang stage, keyed by gang key;
GANG_INPUTS = "faultline.gang-inputs"
# the pods, attempts and gangs stages -> the fleet stage, keyed by node, GPU, namespace-hour or queue.
FLEET_INPUTS = "faultline.fleet-inputs"
INTERNAL_TOPICS = (ATTEMPT_FACTS, GANG_INPUTS, FLEET_INPUTS)
# Infinity in stream time: the end of a trace (SPEC R12.3).
END_OF_TIME = datetime.max.replace(tzinfo=timezone.utc)


class AttemptId(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """Which attempt (SPEC R13.1): named by the orchestrator's labels (R1: `run`, `action`,
    `attempt`) or, for a workload attempt, by the workload object itself (R13.3: `kind`,
    `name`, `uid`). Carried explicitly: an attempt stage's state key need not be it (R13.4)."""

    cluster: str
    namespace: str
    run: str = ""
    action: str = ""
    attempt: str = ""
    kind: str = ""  # a workload attempt's object, as the API spells its kind
    name: str = ""
    uid: str = ""
    group: str = ""  # R16.3: one group of the object (a LeaderWorkerSet's group index)

    @property
    def identity(self) -> Identity:
        return "workload" if self.kind else "labels"

    @property
    def key(self) -> str:
        """The attempt key: `<cluster>/<namespace>/<run>/<action>/<attempt>` (R1),
        `<cluster>/<namespace>/<Kind>/<name>/<uid>` (R13.3), or for one group of it
        `…/<uid>/group/<index>` (R16.3)."""
        if self.kind:
            key = f"{self.cluster}/{self.namespace}/{self.kind}/{self.name}/{self.uid}"
            return f"{key}/group/{self.group}" if self.group else key
        return f"{self.cluster}/{self.namespace}/{self.run}/{self.action}/{self.attempt}"

    @property
    def tracked(self) -> ObjectRef | None:
        """A workload attempt's object; None under labels (the tracked resource says)."""
        return ObjectRef(kind=self.kind, name=self.name, uid=self.uid) if self.kind else None


class OwnerFacts(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """An object's controller ownerReference (R13.2), its name and uid cut to
    `max_token_chars` (a tenant writes ownerReferences)."""

    group: str  # the API group of its apiVersion ("" for core/v1)
    kind: str
    name: str
    uid: str


class ContainerFacts(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """A regular container's current state, and the end of its previous run (init
    containers are never read)."""

    name: str
    reported: bool = False  # the kubelet has reported a status for it
    terminated: bool = False
    exit_code: int = 0
    reason: str = ""
    message: str = ""
    finished_at: datetime | None = None
    # R16.2: when its previous run ended (`lastState.terminated.finishedAt`): restarted in
    # place, its current run began then. Never an anchor (R5.1).
    restarted_at: datetime | None = None
    # R16.3: how its previous run ended (`lastState.terminated`): a LeaderWorkerSet recreates
    # a group once a container restarted, and that exit is the group's failure.
    last_exit_code: int = 0
    last_reason: str = ""
    last_message: str = ""


class AttributedFault(msgspec.Struct, frozen=True):
    """A trusted fault of one pod, with what recorded it (R6.3 ties use it): the Event's
    uid, or for a device-health fault (R14.2) `<pod uid>/<resourceID>`. Either way its
    faultline.faults key is `<cluster>/<event_uid>`."""

    event_uid: str
    fault: GpuFault


class PodDisruption(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """SPEC R14.1: the pod's `DisruptionTarget` condition, status True, as the control
    plane or the kubelet wrote it (reason and message cut to the rule set's lengths).
    `written` is its lastTransitionTime; `at` the same capped by the observed_at of the
    first record that showed it (R2.7c): the time relevance (R5.3) reads. R16.6: also a
    force deletion by Kueue's failure recovery (evidence/force_deletion.py)."""

    reason: str
    message: str
    written: datetime | None
    at: datetime


class PodFacts(msgspec.Struct, frozen=True, omit_defaults=True, gc=False, tag="PodFacts", tag_field="fact"):
    """The slim, self-contained state of one pod that the attempt stage needs."""

    cluster: str
    namespace: str
    name: str
    uid: str
    observed_at: datetime  # the record that last changed these facts
    labels: dict[str, str] = {}  # only the keys the rules read (R1, R4.2, R13.4)
    is_child: bool = False  # created by an operator or a Job (not a pod task's own pod)
    controlled: bool = False  # it has a controller ownerReference (R13.2: so it is no bare pod)
    owner: OwnerFacts | None = None  # that controller, when R13.4 joins by it (a Kubeflow job, a batch Job)
    requests_gpu: bool = False  # a regular container asks for a GPU resource, or a DRA claim (R13.2)
    primary_container: str = ""  # declared primary (R4.4), "" when none is declared
    containers: tuple[ContainerFacts, ...] = ()  # in spec order, statuses merged in
    phase: str = ""
    reason: str = ""
    message: str = ""
    node_name: str = ""
    created_at: datetime | None = None
    deletion_timestamp: datetime | None = None
    failed_observed_at: datetime | None = None  # R5.2: first record that showed Failed
    deleted: bool = False
    faults: tuple[AttributedFault, ...] = ()  # trusted fault Events, then device-health faults (R14.2)
    disruption: PodDisruption | None = None  # R14.1
    # R16.6: Kueue's failure recovery force-deleted it (its KueueFailureRecovery condition or
    # its KueueForcefullyDeleted Event; reason KueueForcefullyDeleted, no message kept).
    force_deleted: PodDisruption | None = None
    # Issue 30 (docs/fleet.md, *GPU time*): the GPUs it requested (one bounded number, never
    # the resources) and the earliest container start its records showed.
    gpus: int = 0
    started_at: datetime | None = None


class CrdFailure(msgspec.Struct, frozen=True):
    """What a tracked CRD says about its own failure (R6.1) and when (R5.2)."""

    code: str
    message: str
    at: datetime | None  # the failed condition's lastTransitionTime, if any


class GenerationEnd(msgspec.Struct, frozen=True, gc=False):
    """A generation of an attempt that ended without ending the attempt (SPEC R8, R16): a
    JobSet restarted, one of its Jobs restarted, its pods restarted in place. `scope` says
    which pods were its, in its kind's own terms (app/core/kinds)."""

    id: str  # unique within the attempt
    number: int  # the verdict's `generation`
    label: str  # how a later verdict's reasons name it
    reason: str  # its verdict's base message
    at: datetime  # when it was seen to end
    scope: tuple[str, ...] = ()
    # Its pods live on in the next generation (restarted in place): a fault that ended
    # before this generation did explains this one, not a later one (R16.2).
    kept_pods: bool = False
    # R16.3: what failed first, where its pods tell it (a LeaderWorkerSet group's): the pod's
    # uid, and its container that restarted ("" when the pod was disrupted instead).
    failed_pod: str = ""
    failed_container: str = ""


class JobFacts(msgspec.Struct, frozen=True, omit_defaults=True, tag="JobFacts", tag_field="fact"):
    """The slim state of one tracked object (RayJob, PyTorchJob, MPIJob, TFJob, JAXJob, JobSet,
    batch/v1 Job, LeaderWorkerSet) and the attempt it tracks (`attempt`: a TrainJob's for
    its JobSet, R13.4; one group of a LeaderWorkerSet, R16.3)."""

    cluster: str
    namespace: str
    name: str
    uid: str
    kind: str
    observed_at: datetime
    attempt: AttemptId | None = None  # None only in states written before R13
    restarts: int = 0  # JobSet status.restarts
    # R8, R16: the kind's restart counters as they stand (counter -> value): each value the
    # counter passed is a generation that ended without the attempt ending.
    counters: dict[str, int] = {}
    tries: int = 0  # R16.4: its tries that failed (a RayJob's status.failed)
    ray_cluster_name: str = ""
    # R16.3: a LeaderWorkerSet's creationTimestamp (its join keys outlive it: pods made
    # before it are another object's) and its `restartPolicy`.
    created_at: datetime | None = None
    restart_policy: str = ""
    failure: CrdFailure | None = None
    completed: bool = False
    deleted: bool = False


# --- what the gang stage tells the attempt stage of a job's Kueue quota (SPEC R17) ------------


class QuotaHold(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """A stretch of time a Workload held quota, by Kueue's clock (SPEC R17.1): from its
    `QuotaReserved` True until `Evicted` or `Finished` True, its deletion or the quota
    released; `end` None while its latest record shows it still held."""

    start: datetime
    end: datetime | None = None


class EvictedHold(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """SPEC R17.3, kubernetes-sigs/kueue#14811: a Workload `Evicted` True while its
    `QuotaReserved` or `Admitted` condition stays True (from the eviction until its
    conditions agree again; `end` None: not yet), with Kueue's `requeueState.requeueAt`."""

    start: datetime
    end: datetime | None = None
    requeue_at: datetime | None = None


class WorkloadQuota(msgspec.Struct, frozen=True, gc=False):
    """One Workload's quota, read from each of its records in its watch order, timed by
    its own conditions (R12.7): the GPUs its pod sets hold (R17.1), when it held them,
    its waits from an eviction to the readmission (R17.2) and its evicted holds (R17.3)."""

    name: str
    uid: str
    gpus: int = 0
    holds: tuple[QuotaHold, ...] = ()
    waits: tuple[QuotaHold, ...] = ()  # [eviction, readmission), each closed
    evicted: tuple[EvictedHold, ...] = ()
    evicted_since: datetime | None = None  # an eviction not yet followed by a readmission


class QuotaFacts(msgspec.Struct, frozen=True, gc=False, tag="QuotaFacts", tag_field="fact"):
    """The quota of a job's Workloads (SPEC R17), sent by the gang stage to the attempt
    stage under the attempt's join key whenever it changes: the latest supersedes."""

    cluster: str
    namespace: str
    observed_at: datetime  # the source record that changed it
    queue: str = ""  # the job's LocalQueue (kueue.x-k8s.io/queue-name)
    workloads: tuple[WorkloadQuota, ...] = ()


AttemptFact = PodFacts | JobFacts | QuotaFacts


class GangInput(msgspec.Struct, frozen=True, gc=False, tag="GangInput", tag_field="fact"):
    """A `faultline.gang-inputs` value: one JobSet or Workload record for the gang fold
    (SPEC R9), its object reduced to the slim view the rules read. `gpus`: a Workload's
    GPUs (its pod sets', R17.1, read before they are dropped); `join`: the attempt
    stage's key of a job, where its quota is sent (R17)."""

    change: ChangeType
    observed_at: Timestamp
    cluster: str
    jobset: Job | None = None
    workload: Workload | None = None
    gpus: int = 0
    join: str = ""

    def __post_init__(self) -> None:
        if (self.jobset is None) == (self.workload is None):
            raise ValueError(
                "GangInput needs exactly one of jobset or workload, got "
                f"jobset={self.jobset is not None} workload={self.workload is not None}"
            )


class Progress(msgspec.Struct, frozen=True, gc=False, tag="Progress", tag_field="fact"):
    """SPEC R12.3: progress of one source partition, forwarded by a stage to every
    partition of its internal topics: the bridge of `cluster` has published (and Kafka
    acknowledged) every change of `topic` it received before `observed_at`, and the
    forwarding stage has written everything it read of `topic`[`partition`] before that.
    `partitions` is the source topic's partition count. Under a stage's own name
    (`<stage>:<topic>`, `Stage.progress_as_own`) it is that stage's watermark of the source
    `topic` in its input `partition` of `partitions`, the least over every path the topic's
    progress reaches the stage by (the attempt stage hears of the jobs from the jobs stage
    and, as `gangs:k8s.jobs`, from the gang stage): a stage that reads an internal topic
    hears of every source partition in each of its partitions, so it vouches only for what
    its own partition has written, and its reader takes the least over them. It forwards
    its own to each internal topic read by a stage its records also reach by another path:
    the gang stage to attempt-facts and fleet-inputs, the attempt stage to fleet-inputs;
    the pods and jobs stages read the source partitions one to one and forward progress as
    it came. `final`: the end of the input (a trace): nothing more will come on any
    partition, the watermark is infinite; under a stage's own name with `partitions` over
    1, on that partition only (the watermark is infinite once every one has ended)."""

    cluster: str
    topic: str
    partition: int
    partitions: int
    observed_at: Timestamp
    final: bool = False


# --- fleet inputs: what the stages tell the fleet stage (docs/fleet.md) -----------------------


class FaultCount(msgspec.Struct, frozen=True, gc=False):
    """How one fault Event counts on its node and GPU: once, in the UTC hour of its
    first_seen, with its repeats as occurrences (SPEC R2.4)."""

    hour: Timestamp
    first_seen: Timestamp
    kind: GpuFaultKind
    code: int
    name: str
    severity: Severity
    occurrences: int
    action: str = "UNKNOWN"  # NVIDIA's recommended action (R14.3): a quarantine candidate's strongest


class FaultChange(msgspec.Struct, frozen=True, gc=False, tag="FaultChange", tag_field="fact"):
    """A trusted fault Event counted anew (`before` None) or changed, on a node (`gpu` "")
    or one of its GPUs. `fault` is its faultline.faults key. `hour`: the UTC hour whose
    fault rate this is for (the part of the change in that hour counts); None: for the
    node's or GPU's quarantine count."""

    cluster: str
    observed_at: Timestamp  # the source record that changed it, by the bridge's clock
    fault: str
    node: str
    gpu: str
    gpu_index: int | None
    before: FaultCount | None
    after: FaultCount
    hour: Timestamp | None = None


class NodeGpuSeconds(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """The part of a failure's GPU-seconds its pods ran on one node (issue 30)."""

    node: str
    gpu_seconds: int


class Counted(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """How one failure (an attempt's generation, or one try of a pod task) counts in the
    fleet's failure rates: by its verdict's hour, code and kind; and its GPU-seconds
    (issue 30: None when a pod's start is unknown), in all and by node."""

    hour: Timestamp
    code: str
    kind: ErrorKind
    gpu_fault: bool
    workload_kind: str = ""  # a workload attempt's object kind (SPEC R13.3); "" under labels
    gpu_seconds: int | None = 0
    nodes: tuple[NodeGpuSeconds, ...] = ()  # by node name, the nodes its GPU-seconds ran on


class FailureChange(msgspec.Struct, frozen=True, gc=False, tag="FailureChange", tag_field="fact"):
    """A failed attempt counted in (`failures` +1) or out (-1) of a namespace's hour by
    its current verdict's code and kind."""

    cluster: str
    observed_at: Timestamp
    namespace: str
    hour: Timestamp
    code: str
    kind: ErrorKind
    failures: int
    gpu_faults: int  # of those, verdicts naming a GPU fault
    workload_kind: str = ""  # a workload attempt's object kind (TrainJob, Job, Pod, ...); "" under labels
    gpu_seconds: int = 0  # issue 30: their GPU-seconds, with the sign of `failures`
    gpu_seconds_unknown: int = 0  # of those, failures whose GPU-seconds are unknown (a pod's start)


class GpuTimeChange(msgspec.Struct, frozen=True, gc=False, tag="GpuTimeChange", tag_field="fact"):
    """Issue 30: a failure's GPU-seconds on one node counted in (`failures` +1) or out (-1)
    of that node's hour (the hour of the failure), by its current verdict's kind."""

    cluster: str
    observed_at: Timestamp
    node: str
    hour: Timestamp
    kind: ErrorKind
    failures: int
    gpu_seconds: int  # with the sign of `failures`


class GoodputChange(msgspec.Struct, frozen=True, gc=False, tag="GoodputChange", tag_field="fact"):
    """SPEC R17.4: what one attempt's GPUs did in one UTC hour of a namespace and queue,
    counted in (`attempts` +1), changed (0) or out (-1): each figure the change, signed."""

    cluster: str
    observed_at: Timestamp
    namespace: str
    queue: str
    hour: Timestamp
    attempts: int = 0
    reserved: int = 0
    running: int = 0
    useful: int = 0
    lost_user: int = 0
    lost_system: int = 0
    idle: int = 0
    wait_seconds: int = 0
    waits: int = 0


class GangChange(msgspec.Struct, frozen=True, gc=False, tag="GangChange", tag_field="fact"):
    """A gang transition, for its queue's preemption and readmission counts."""

    observed_at: Timestamp
    transition: GangTransition

    @property
    def cluster(self) -> str:
        return self.transition.cluster


AttemptInput = AttemptFact | Progress  # a faultline.attempt-facts value
GangStageInput = GangInput | Progress  # a faultline.gang-inputs value
FleetInput = FaultChange | FailureChange | GpuTimeChange | GoodputChange | GangChange | Progress  # a faultline.fleet-inputs value
