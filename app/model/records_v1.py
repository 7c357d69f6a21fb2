"""The v1 output records that v2 replaced (SPEC R13.3, R14), frozen: what faultline wrote
before workload attempts and device health existed. Kept so that old records still read (a replay file,
a compacted topic not yet rewritten) and their JSON Schemas stay published. Never
written any more; `upgraded` reads one as the v2 record it stands for (`identity:
"labels"`). The class names are v1's own, so the schemas come out as they were.
"""

from __future__ import annotations

import msgspec

from app.model import fleet_records as fleet_v2
from app.model import records as v2
from app.model.k8s import Timestamp
from typing import Literal

from app.model.records import ErrorKind, FaultKind, NamespacedRef, ObjectRef, PodRef, Retry, Severity

# v1's states and eviction cause, as they were (v2 added `Suspended` and Kueue's underlying cause).
GangState = Literal["Pending", "Running", "WaitingForReadmission", "Ended", "Completed"]


class EvictionCause(v2._Record):
    """Why Kueue stopped a gang, as data (SPEC R9.4-R9.8): the Workload's `Evicted`
    reason (`Preempted`, `PodsReadyTimeout`, `Deactivated`, …; "" when no eviction was
    recorded, R9.6/R9.7), the `Preempted` condition's reason (`InClusterQueue`, …) and
    Kueue's message. `reason` is the transition's text; read this, never that."""

    reason: str
    detail: str
    message: str


# v1's GpuFault, before device health (R14.2) and NVIDIA's actions (R14.3); its docstring
# is v1's own, so the frozen schemas come out as they were.
class GpuFault(v2._Record):
    """One GPU fault as parsed from its Event (SPEC R2, R6.8)."""

    kind: FaultKind
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


class Fault(v2._Record, tag="faultline.Fault/v1", tag_field="schema"):
    """`faultline.faults`: every trusted fault, with its pod and attempt (SPEC R2.6)."""

    key: str
    cluster: str
    namespace: str
    event_uid: str
    attempt: str | None
    fault: GpuFault
    rules_version: str


class XidCount(v2._Record):
    """Fault events of one code in one bucket. `faults` counts distinct Events (a
    repeating Event is one fault, SPEC R2.4); `occurrences` sums their `count`."""

    kind: FaultKind
    code: int
    name: str
    severity: Severity
    faults: int
    occurrences: int


class NodeFaultRate(v2._Record, tag="faultline.NodeFaultRate/v1", tag_field="schema"):
    """`faultline.node-fault-rates`, key `<cluster>/<node>/<hour>`: the faults first seen
    on a node within one UTC hour."""

    key: str
    cluster: str
    node: str
    hour: Timestamp
    faults: int
    occurrences: int
    user: int
    warn: int
    critical: int
    xids: list[XidCount]
    last_fault_at: Timestamp | None = None  # the latest first_seen counted in the hour


class GpuFaultRate(v2._Record, tag="faultline.GpuFaultRate/v1", tag_field="schema"):
    """`faultline.gpu-fault-rates`, key `<cluster>/<node>/<gpu>/<hour>`: the same per GPU.
    `gpu` is the GPU's uuid, or `index-<n>` when the fault gave only its index."""

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
    xids: list[XidCount]
    last_fault_at: Timestamp | None = None  # the latest first_seen counted in the hour


class ClassifiedFailure(v2._Record, tag="faultline.ClassifiedFailure/v1", tag_field="schema"):
    """`faultline.classified-failures`: the verdict for a failed attempt (SPEC R6.8)."""

    key: str
    cluster: str
    namespace: str
    run: str
    action: str
    attempt: str
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


class GangTransition(v2._Record, tag="faultline.GangTransition/v1", tag_field="schema"):
    """`faultline.gang-transitions`: one state change of a JobSet under Kueue (SPEC R9.11)."""

    key: str
    cluster: str
    namespace: str
    jobset: PodRef
    workload: PodRef | None
    run: str | None
    action: str | None
    attempt: str | None
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


V1_RECORD_TYPES = (ClassifiedFailure, GangTransition, Fault, NodeFaultRate, GpuFaultRate)
# What a reader of the derived topics may find there (a compacted topic keeps v1 records).
DerivedRecordV1 = NodeFaultRate | GpuFaultRate


def _gpu_fault(fault: GpuFault | None) -> v2.GpuFault | None:
    """A v1 fault as v2's: an Event's fault, its action not recorded (UNKNOWN)."""
    return None if fault is None else v2.GpuFault(**msgspec.structs.asdict(fault))


def _xids(xids: list[XidCount]) -> tuple[fleet_v2.XidCount, ...]:
    return tuple(fleet_v2.XidCount(**msgspec.structs.asdict(x)) for x in xids)


def upgraded(record: object) -> object:
    """A v1 record as the v2 record it stands for (v1 knew only the orchestrator's labels
    and fault Events); any other record as it is."""
    if isinstance(record, ClassifiedFailure):
        fields = msgspec.structs.asdict(record)
        return v2.ClassifiedFailure(identity="labels", **{**fields, "gpu_fault": _gpu_fault(record.gpu_fault)})
    if isinstance(record, GangTransition):
        fields = msgspec.structs.asdict(record)
        tracked = ObjectRef(kind="JobSet", name=record.jobset.name, uid=record.jobset.uid)
        cause = record.cause
        fields["cause"] = v2.EvictionCause(cause.reason, cause.detail, cause.message) if cause is not None else None
        return v2.GangTransition(identity="labels", tracked=tracked, **fields)
    if isinstance(record, Fault):
        return v2.Fault(**{**msgspec.structs.asdict(record), "fault": _gpu_fault(record.fault)})
    if isinstance(record, NodeFaultRate):
        return fleet_v2.NodeFaultRate(**{**msgspec.structs.asdict(record), "xids": _xids(record.xids)})
    if isinstance(record, GpuFaultRate):
        return fleet_v2.GpuFaultRate(**{**msgspec.structs.asdict(record), "xids": _xids(record.xids)})
    return record
