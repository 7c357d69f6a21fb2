"""Output records: every value faultline writes carries a `schema` naming its type.

Field order is the wire order; encoding is deterministic (SPEC R7.3).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from app.model.k8s import Timestamp

Severity = Literal["USER", "WARN", "CRITICAL"]
FaultKind = Literal["XID", "SXID"]  # what the Xid table (R3) covers
# SPEC R14.2: a fault is also a device the kubelet reports Unhealthy (or Unknown).
DEVICE_HEALTH = "DEVICE_HEALTH"
GpuFaultKind = Literal["XID", "SXID", "DEVICE_HEALTH"]
ErrorKind = Literal["USER", "SYSTEM"]
# SPEC R13.3: how an attempt is named: the orchestrator's labels (R1) or the workload object.
Identity = Literal["labels", "workload"]

# Output topics (DESIGN.md); drivers add the configured prefix.
FAULTS = "faultline.faults"
CLASSIFIED_FAILURES = "faultline.classified-failures"
GANG_TRANSITIONS = "faultline.gang-transitions"
STUCK_READMISSIONS = "faultline.stuck-readmissions"
IDLE_QUOTA = "faultline.idle-quota"  # SPEC R17.3
DEAD_LETTER = "faultline.dead-letter"
OUTPUT_TOPICS = (FAULTS, CLASSIFIED_FAILURES, GANG_TRANSITIONS, STUCK_READMISSIONS, IDLE_QUOTA, DEAD_LETTER)


class _Record(msgspec.Struct, frozen=True):
    pass


class PodRef(_Record):
    name: str
    uid: str


class NamespacedRef(_Record):
    namespace: str
    name: str
    uid: str


class ObjectRef(_Record):
    kind: str
    name: str
    uid: str


class GpuFault(_Record):
    """One GPU fault as parsed from its Event (SPEC R2, R6.8), or a device the kubelet
    reports Unhealthy or Unknown in the pod's `allocatedResourcesStatus` (R14.2, kind
    `DEVICE_HEALTH`: `code` 0, `gpu_uuid` the resourceID, `resource` the resource name,
    `message` the kubelet's, `count` 1, first/last seen the bridge's clock).
    `action`: NVIDIA's recommended immediate action (R14.3), advice only."""

    kind: GpuFaultKind
    code: int
    name: str
    severity: Severity
    gpu_uuid: str
    gpu_index: int | None
    pci_bus_id: str
    node: str
    pid: int | None
    process: str
    first_seen: Timestamp
    last_seen: Timestamp
    count: int
    pod: PodRef
    action: str = "UNKNOWN"  # the Xid catalogue's vocabulary (app/core/base/xid.py XidAction)
    resource: str = ""  # DEVICE_HEALTH: `nvidia.com/gpu`, `claim:<claim>/<request>`; "" for an Xid
    message: str = ""  # DEVICE_HEALTH: the kubelet's message, cut to max_message_chars


class Fault(_Record, tag="faultline.Fault/v2", tag_field="schema"):
    """`faultline.faults`: every trusted fault, with its pod and attempt (SPEC R2.6,
    R14.2). v2 = v1 plus device health: `fault.kind` may be `DEVICE_HEALTH` (key
    `<cluster>/<pod uid>/<resourceID>`, `event_uid` null), and `fault` carries `action`,
    `resource` and `message` (docs/rules.md, *Records v2*)."""

    key: str
    cluster: str
    namespace: str
    event_uid: str | None  # None for a device-health fault: no Event recorded it
    attempt: str | None
    fault: GpuFault
    rules_version: str


class GoodputFigures(_Record):
    """SPEC R17.2, R17.4: where an attempt's GPU-seconds went, up to its failure (whole
    seconds): `reserved` while its Kueue Workload held quota (R17.1), `running` while its
    pods ran (every generation's), `lost` to failures (its verdicts' `gpu_seconds`, every
    generation's), `useful` = running - lost, `idle` = reserved - running (never below 0),
    and the seconds it waited from an eviction to the readmission."""

    reserved_gpu_seconds: int
    running_gpu_seconds: int
    useful_gpu_seconds: int
    lost_gpu_seconds: int
    idle_gpu_seconds: int
    wait_seconds: int = 0


class ClassifiedFailure(_Record, tag="faultline.ClassifiedFailure/v2", tag_field="schema"):
    """`faultline.classified-failures`: the verdict for a failed attempt (SPEC R6.8, R13.3).
    v2 = v1 plus `identity`: `labels` (an orchestrator's attempt, R1: `run`, `action`,
    `attempt` set) or `workload` (R13: those three null, `tracked` names the workload
    object, e.g. the TrainJob, and `key` is `<cluster>/<namespace>/<Kind>/<name>/<uid>`, or
    for one group of a LeaderWorkerSet `…/<uid>/group/<index>`, SPEC R16.3). A RayJob's try
    that KubeRay retried has its interim verdict under `<attempt key>/try/<n>` (R16.4).
    `gpu_seconds` (issue 30, added to v2 before its release): what the failure cost, the
    GPUs its candidate pods requested times the whole seconds each ran (that generation's
    pods for a JobSet restarted in place); null when a GPU pod's start is unknown
    (docs/fleet.md, *GPU time*). `goodput` (SPEC R17.4, added to v2, optional): on a terminal
    verdict, where the attempt's GPU-seconds went; null on an earlier generation's."""

    key: str
    cluster: str
    namespace: str
    identity: Identity
    run: str | None
    action: str | None
    attempt: str | None
    tracked: ObjectRef
    generation: int
    terminal: bool
    failed_at: Timestamp
    code: str
    kind: ErrorKind
    message: str
    gpu_fault: GpuFault | None
    faulted_pod: NamespacedRef | None
    reasons: list[str]
    revision: int
    rules_version: str
    gpu_seconds: int | None = None
    goodput: GoodputFigures | None = None


class DeadLetter(_Record, tag="faultline.DeadLetter/v1", tag_field="schema"):
    """`faultline.dead-letter`: a record that could not be processed, where it was and why
    (SPEC R11.1, R11.3). Bounded whatever the record: `value` holds at most the first
    `app.core.base.dead_letters.VALUE_BYTES` of it (as text, invalid UTF-8 replaced), `size`
    and `sha256` describe the whole of it."""

    topic: str
    key: str | None
    partition: int | None
    offset: int | None
    reason: str
    value: str
    size: int = 0  # bytes of the record's value
    sha256: str = ""  # of the record's value, hex
    truncated: bool = False  # `value` is a prefix of the record's value


# SPEC R15.5: `Suspended`: a workload attempt held by its user or a controller, not by Kueue.
GangState = Literal["Pending", "Running", "WaitingForReadmission", "Suspended", "Ended", "Completed"]
Retry = Literal["user", "system"]
# SPEC R9.4: a gang that waits to be admitted again; R9.4-R9.7: the code of an eviction's ending.
WAITING_FOR_READMISSION: GangState = "WaitingForReadmission"
GANG_EVICTED = "GangEvicted"


class EvictionCause(_Record):
    """Why Kueue stopped a gang, as data (SPEC R9.4-R9.8): the Workload's `Evicted`
    reason (`Preempted`, `PodsReadyTimeout`, `Deactivated`, …; "" when no eviction was
    recorded, R9.6/R9.7), the `Preempted` condition's reason (`InClusterQueue`, …) and
    Kueue's message, and Kueue's underlying cause where it counts one (SPEC R15.2,
    `status.schedulingStats.evictions` of a v1beta2 Workload; "" otherwise). `reason` is
    the transition's text; read this, never that."""

    reason: str
    detail: str
    message: str
    underlying_cause: str = ""


class GangTransition(_Record, tag="faultline.GangTransition/v2", tag_field="schema"):
    """`faultline.gang-transitions`: one state change of a job under Kueue (SPEC R9.11,
    R15.6). v2 = v1 plus `identity` and `tracked`: under `labels` the key is
    `<cluster>/<namespace>/<JobSet name>` as in v1; under `workload` it is the workload
    attempt key (R13.3) and `tracked` names the attempt's object (a TrainJob for its
    JobSet, a JobSet, a batch Job, a RayJob, a Kubeflow job). `jobset` names the JobSet
    (null for the kinds that have none); `to` may also be `Suspended` (R15.5)."""

    key: str
    cluster: str
    namespace: str
    identity: Identity
    jobset: PodRef | None
    workload: PodRef | None
    run: str | None
    action: str | None
    attempt: str | None
    tracked: ObjectRef
    queue: str | None  # the JobSet's kueue.x-k8s.io/queue-name label (its LocalQueue)
    from_: GangState = msgspec.field(name="from")
    to: GangState
    code: str | None
    retry: Retry | None
    cause: EvictionCause | None  # on WaitingForReadmission and on an eviction's ending
    reason: str
    at: Timestamp
    waited_seconds: float | None
    rules_version: str
    # Issue 29: a step faultline did not see but Kueue counted (an eviction and readmission
    # between two observations of the Workload, e.g. while the API server was unreachable),
    # reported from the Workload's eviction counts; `waited_seconds` is then unknown.
    reconstructed: bool = False


class StuckReadmission(_Record, tag="faultline.StuckReadmission/v1", tag_field="schema"):
    """`faultline.stuck-readmissions` (SPEC R15.4): a workload attempt waiting for Kueue to
    readmit it for longer than `max_readmission_wait` of stream time, reported once when
    the wait passes it (`stuck` true) and once more when the wait ends (`stuck` false: it
    was readmitted, or it ended). Keyed like its gang transitions."""

    key: str
    cluster: str
    namespace: str
    identity: Identity
    tracked: ObjectRef
    workload: PodRef | None
    queue: str | None  # its kueue.x-k8s.io/queue-name label (its LocalQueue)
    stuck: bool
    since: Timestamp  # the wait began
    at: Timestamp  # when this was known (stream time)
    waited_seconds: float  # `at` - `since`
    cause: EvictionCause | None  # the eviction it waits after
    reason: str  # the wait's transition text
    rules_version: str


# SPEC R17.3: why quota counts as idle: held while no pod of the attempt runs, or held by a
# Workload Kueue evicted (its conditions contradict, kubernetes-sigs/kueue#14811).
IdleWhy = Literal["no-running-pod", "evicted-but-held"]


class IdleQuota(_Record, tag="faultline.IdleQuota/v1", tag_field="schema"):
    """`faultline.idle-quota` (SPEC R17.3): GPU quota a Kueue Workload holds for an attempt
    while nothing of it runs for longer than `max_idle_quota` of stream time, or while
    Kueue has evicted it (`Evicted` True with `QuotaReserved` or `Admitted` still True
    past `requeueAt` and the eviction + `max_idle_quota`, kubernetes-sigs/kueue#14811).
    Reported once when it passes the limit (`idle` true, `at` = the moment it did) and
    once more when it ends (`idle` false: a pod runs, or the quota is released). Keyed by
    the attempt key; compacted."""

    key: str
    cluster: str
    namespace: str
    identity: Identity
    tracked: ObjectRef
    workload: PodRef | None
    queue: str | None  # the job's kueue.x-k8s.io/queue-name label (its LocalQueue)
    gpus: int  # the GPUs the Workload holds (its pod sets', R17.1)
    idle: bool
    why: IdleWhy
    since: Timestamp  # the quota began to be idle, by the objects' own times
    at: Timestamp  # when this was known: since + max_idle_quota, or when it ended
    idle_seconds: float  # `at` - `since`
    reason: str
    rules_version: str
    requeue_at: Timestamp | None = None  # evicted-but-held: when Kueue meant to requeue it


# Any record on the output topics, told apart by its `schema` tag.
OutputRecord = Fault | ClassifiedFailure | GangTransition | StuckReadmission | IdleQuota | DeadLetter
