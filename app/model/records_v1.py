"""The v1 output records that v2 replaced (SPEC R13.3), frozen: what faultline wrote
before workload attempts existed. Kept so that old records still read (a replay file,
a compacted topic not yet rewritten) and their JSON Schemas stay published. Never
written any more; `upgraded` reads one as the v2 record it stands for (`identity:
"labels"`). The class names are v1's own, so the schemas come out as they were.
"""

from __future__ import annotations

import msgspec

from app.model import records as v2
from app.model.k8s import Timestamp
from app.model.records import EvictionCause, ErrorKind, GangState, GpuFault, NamespacedRef, ObjectRef, PodRef, Retry


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


V1_RECORD_TYPES = (ClassifiedFailure, GangTransition)


def upgraded(record: object) -> object:
    """A v1 verdict or transition as the v2 record it stands for (v1 knew only the
    orchestrator's labels); any other record as it is."""
    if isinstance(record, ClassifiedFailure):
        fields = msgspec.structs.asdict(record)
        return v2.ClassifiedFailure(identity="labels", **fields)
    if isinstance(record, GangTransition):
        fields = msgspec.structs.asdict(record)
        tracked = ObjectRef(kind="JobSet", name=record.jobset.name, uid=record.jobset.uid)
        return v2.GangTransition(identity="labels", tracked=tracked, **fields)
    return record
