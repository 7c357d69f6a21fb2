"""Derived records: fleet health, folded per node, GPU, namespace-hour and queue by the
fleet stage (app/core/fleet/fold.py).

Every value carries a `schema` tag like the other output records. Each derived topic is
keyed so that the latest record per key is the current value (the topics can be
compacted): an hourly bucket is re-emitted whole whenever it changes.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from app.model.k8s import Timestamp
from app.model.records import ErrorKind, GpuFaultKind, Severity

# Derived topics; drivers add the configured prefix.
NODE_FAULT_RATES = "faultline.node-fault-rates"
GPU_FAULT_RATES = "faultline.gpu-fault-rates"
QUARANTINE_CANDIDATES = "faultline.quarantine-candidates"
FAILURE_RATES = "faultline.failure-rates"
PREEMPTION_WAITS = "faultline.preemption-waits"
GANG_QUEUES = "faultline.gang-queues"
NODE_GPU_TIME = "faultline.node-gpu-time"  # issue 30: GPU-seconds failures burned, by node
GOODPUT = "faultline.goodput"  # SPEC R17.4: where the GPU-hours went, per namespace, queue and hour
DERIVED_TOPICS = (NODE_FAULT_RATES, GPU_FAULT_RATES, QUARANTINE_CANDIDATES, FAILURE_RATES, PREEMPTION_WAITS, GANG_QUEUES, NODE_GPU_TIME, GOODPUT)

Scope = Literal["node", "gpu"]
CandidateState = Literal["candidate", "cleared"]


class _Record(msgspec.Struct, frozen=True, gc=False):
    """Plain values (no reference cycles): not tracked by the garbage collector, whose full
    passes would otherwise walk every record a fleet view keeps, more as history grows."""


class XidCount(_Record):
    """Faults of one code and severity in one bucket. `faults` counts distinct Events (a
    repeating Event is one fault, SPEC R2.4) and devices reported Unhealthy or Unknown
    (kind `DEVICE_HEALTH`, code 0, R14.2); `occurrences` sums their `count`."""

    kind: GpuFaultKind
    code: int
    name: str
    severity: Severity
    faults: int
    occurrences: int


class NodeFaultRate(_Record, tag="faultline.NodeFaultRate/v2", tag_field="schema"):
    """`faultline.node-fault-rates`, key `<cluster>/<node>/<hour>`: the faults first seen
    on a node within one UTC hour. v2 = v1 with device-health faults among `xids` (kind
    `DEVICE_HEALTH`, SPEC R14.2)."""

    key: str
    cluster: str
    node: str
    hour: Timestamp
    faults: int
    occurrences: int
    user: int
    warn: int
    critical: int
    xids: tuple[XidCount, ...]  # a tuple (JSON: the same array): a fleet view keeps one per node and GPU hour, and the garbage collector skips these
    last_fault_at: Timestamp | None = None  # the latest first_seen counted in the hour


class GpuFaultRate(_Record, tag="faultline.GpuFaultRate/v2", tag_field="schema"):
    """`faultline.gpu-fault-rates`, key `<cluster>/<node>/<gpu>/<hour>`: the same per GPU.
    `gpu` is the GPU's uuid (a device-health fault's resourceID), or `index-<n>` when the
    fault gave only its index. v2: as NodeFaultRate/v2."""

    key: str
    cluster: str
    node: str
    gpu: str
    gpu_index: int | None
    hour: Timestamp
    faults: int
    occurrences: int
    user: int
    warn: int
    critical: int
    xids: tuple[XidCount, ...]
    last_fault_at: Timestamp | None = None  # the latest first_seen counted in the hour


class QuarantineCandidate(_Record, tag="faultline.QuarantineCandidate/v1", tag_field="schema"):
    """`faultline.quarantine-candidates`, key `<cluster>/node/<node>` or
    `<cluster>/gpu/<node>/<gpu>`: a node or GPU with at least `threshold` distinct critical
    faults first seen within `window_seconds`. One record when it becomes a candidate
    (`at` = the first_seen of the fault that made it one), again with each fault it
    counts up to twice `threshold` and then each time its count doubles, and one when it
    stops (`at` = the moment, in stream time, the window slid past). `faults`,
    `fault_keys` (`faultline.faults` keys) and `codes`: what it counted in the window when
    the record was written. `action` (added to v1, optional): the strongest of NVIDIA's
    recommended actions among the counted faults (SPEC R14.3, app/core/base/xid.py
    `strongest`); UNKNOWN when none advises one."""

    key: str
    cluster: str
    scope: Scope
    node: str
    gpu: str  # "" for a node
    state: CandidateState
    at: Timestamp
    faults: int
    threshold: int
    window_seconds: int
    first_fault_at: Timestamp | None
    last_fault_at: Timestamp | None
    fault_keys: list[str]
    codes: list[str]  # "Xid 79", "SXid 20034", "Device health", … in time order
    action: str = "UNKNOWN"  # the Xid catalogue's vocabulary (app/core/base/xid.py XidAction)


class FailureRate(_Record, tag="faultline.FailureRate/v1", tag_field="schema"):
    """`faultline.failure-rates`, key `<cluster>/<namespace>/<hour>/<code>/<kind>`
    (`/<workload_kind>` after it for workload attempts): failures whose current verdict
    has this code and kind, by the hour of `failed_at`. A revision that changes the code
    moves the failure (both buckets are re-emitted). `gpu_seconds` and
    `gpu_seconds_unknown` (issue 30, added to v1, optional): the GPU-seconds those failures
    burned (their verdicts' `gpu_seconds`), and how many of them have none known."""

    key: str
    cluster: str
    namespace: str
    hour: Timestamp
    code: str
    kind: ErrorKind
    failures: int
    gpu_faults: int  # of those, verdicts that name a GPU fault
    # SPEC R13.3: the object kind of workload attempts (TrainJob, JobSet, Job, Pod, ...);
    # "" for attempts under the orchestrator's labels (the only ones before R13).
    workload_kind: str = ""
    gpu_seconds: int = 0
    gpu_seconds_unknown: int = 0


class NodeGpuTime(_Record, tag="faultline.NodeGpuTime/v1", tag_field="schema"):
    """`faultline.node-gpu-time`, key `<cluster>/<node>/<hour>` (issue 30): the GPU-seconds
    that failures of that hour (by `failed_at`) burned on the node, by their current
    verdict's kind: what each failure's pods on that node requested times how long they
    ran. `failures`: the failures with GPU time on the node; `system_failures` of them SYSTEM."""

    key: str
    cluster: str
    node: str
    hour: Timestamp
    failures: int
    system_failures: int
    user_gpu_seconds: int
    system_gpu_seconds: int


class PreemptionWait(_Record, tag="faultline.PreemptionWait/v1", tag_field="schema"):
    """`faultline.preemption-waits`, key `<cluster>/<queue>/<hour>`: Kueue evictions of
    gangs and their readmission waits in one hour (by the transition's `at`).
    `queue` is the JobSet's namespace until GangTransition carries its queue name
    (`queue_source` says which)."""

    key: str
    cluster: str
    queue: str
    queue_source: Literal["namespace", "queue-name"]
    hour: Timestamp
    evictions: int
    preemptions: int
    readmissions: int
    wait_seconds_total: float
    wait_seconds_max: float


class GangQueue(_Record, tag="faultline.GangQueue/v1", tag_field="schema"):
    """`faultline.gang-queues`, key `<cluster>/<queue>`: a queue now — how many gangs wait
    for readmission in it — and its totals since faultline first saw it."""

    key: str
    cluster: str
    queue: str
    queue_source: Literal["namespace", "queue-name"]
    waiting: int
    evictions: int
    preemptions: int
    readmissions: int
    wait_seconds_total: float


class Goodput(_Record, tag="faultline.Goodput/v1", tag_field="schema"):
    """`faultline.goodput`, key `<cluster>/<namespace>/<queue>/<hour>` (`queue` "" for
    attempts no Kueue Workload holds quota for), SPEC R17.4: where the GPU-seconds of that
    UTC hour went, over the attempts of the namespace and queue, each second counted in the
    hour it fell in once it has passed by the objects' own times (a pod's run once it
    ended, a hold once released: docs/fleet.md, *Goodput*). `reserved`: while a Workload
    held quota (R17.1); `running`: while the attempts' pods ran; `lost_*`: the running
    GPU-seconds of failed generations, by their verdicts' kind; `useful`: running - lost;
    `idle`: reserved - running, per attempt, never below 0; `wait_seconds`: time gangs
    waited from an eviction to the readmission, `waits` the readmissions in the hour;
    `goodput`: useful / reserved (useful / running where nothing was reserved; null when
    neither)."""

    key: str
    cluster: str
    namespace: str
    queue: str
    hour: Timestamp
    attempts: int
    reserved_gpu_seconds: int
    running_gpu_seconds: int
    useful_gpu_seconds: int
    lost_user_gpu_seconds: int
    lost_system_gpu_seconds: int
    idle_gpu_seconds: int
    wait_seconds: int
    waits: int
    goodput: float | None


DerivedRecord = NodeFaultRate | GpuFaultRate | QuarantineCandidate | FailureRate | PreemptionWait | GangQueue | NodeGpuTime | Goodput
DERIVED_RECORD_TYPES: tuple[type, ...] = (NodeFaultRate, GpuFaultRate, QuarantineCandidate, FailureRate, PreemptionWait, GangQueue, NodeGpuTime, Goodput)
