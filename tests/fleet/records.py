"""Builders of the output records the fleet fold reads (as the core emits them)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from app.core.base.emit import Emit
from app.model.records import (
    CLASSIFIED_FAILURES,
    DEAD_LETTER,
    FAULTS,
    GANG_TRANSITIONS,
    ClassifiedFailure,
    DeadLetter,
    EvictionCause,
    Fault,
    GangTransition,
    GpuFault,
    NamespacedRef,
    ObjectRef,
    PodRef,
)

T0 = datetime(2026, 8, 25, 12, 0, tzinfo=timezone.utc)
CLUSTER = "prod-a"
NS = "ml"
RULES = "default@000000000000"
CRITICAL_XIDS = {79: "GPU has fallen off the bus", 48: "Double Bit ECC Error", 74: "NVLink Error", 94: "Contained ECC error"}


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def hours(n: float) -> timedelta:
    return timedelta(hours=n)


def gpu_fault(
    code: int = 79,
    *,
    severity: str = "CRITICAL",
    kind: str = "XID",
    node: str = "gpu-17",
    gpu_uuid: str = "GPU-aaaa",
    gpu_index: int | None = 0,
    first_seen: datetime = T0,
    last_seen: datetime | None = None,
    count: int = 1,
    pod: str = "train-0",
    pod_uid: str = "pod-1",
) -> GpuFault:
    return GpuFault(
        kind=kind,  # type: ignore[arg-type]
        code=code,
        name=CRITICAL_XIDS.get(code, f"Xid {code}"),
        severity=severity,  # type: ignore[arg-type]
        gpu_uuid=gpu_uuid,
        gpu_index=gpu_index,
        pci_bus_id="0000:3b:00.0",
        node=node,
        pid=None,
        process="",
        first_seen=first_seen,
        last_seen=last_seen or first_seen,
        count=count,
        pod=PodRef(name=pod, uid=pod_uid),
    )


def fault(event: str, attempt: str | None = None, cluster: str = CLUSTER, **kw: object) -> Emit:
    """A `faultline.faults` record for Event `event` (its key is `<cluster>/<event>`)."""
    key = f"{cluster}/{event}"
    record = Fault(key=key, cluster=cluster, namespace=NS, event_uid=event, attempt=attempt, fault=gpu_fault(**kw), rules_version=RULES)  # type: ignore[arg-type]
    return Emit(FAULTS, key, record)


def verdict(
    run: str = "r1",
    *,
    code: str = "Error",
    kind: str = "USER",
    failed_at: datetime = T0,
    revision: int = 0,
    generation: int = 0,
    terminal: bool = True,
    fault: GpuFault | None = None,
    faulted_pod: str | None = None,
    namespace: str = NS,
    pod: str | None = None,
) -> Emit:
    """`pod`: the tracked pod's name (another try of a pod task is another pod)."""
    key = f"{CLUSTER}/{namespace}/{run}/train/1"
    pod = pod or f"{run}-train-1"
    record = ClassifiedFailure(
        key=key,
        cluster=CLUSTER,
        namespace=namespace,
        identity="labels",
        run=run,
        action="train",
        attempt="1",
        tracked=ObjectRef(kind="Pod", name=pod, uid=f"uid-{pod}"),
        generation=generation,
        terminal=terminal,
        failed_at=failed_at,
        code=code,
        kind=kind,  # type: ignore[arg-type]
        message=f"{code} happened",
        gpu_fault=fault,
        faulted_pod=NamespacedRef(namespace=namespace, name=faulted_pod, uid=f"uid-{faulted_pod}") if faulted_pod else None,
        reasons=[],
        revision=revision,
        rules_version=RULES,
    )
    return Emit(CLASSIFIED_FAILURES, key, record)


def transition(
    jobset: str = "js",
    *,
    from_: str = "Running",
    to: str = "WaitingForReadmission",
    at: datetime = T0,
    code: str | None = None,
    retry: str | None = None,
    reason: str = "gang evicted by kueue (Preempted, InClusterQueue): preempted; waiting for re-admission",
    waited_seconds: float | None = None,
    namespace: str = "team-a",
    queue: str | None = None,
    cause: str | None = None,
) -> Emit:
    """`cause`: the Workload's Evicted reason (a wait is a preemption unless it says otherwise)."""
    key = f"{CLUSTER}/{namespace}/{jobset}"
    if cause is None and to == "WaitingForReadmission":
        cause = "Preempted"
    detail = "InClusterQueue" if cause == "Preempted" else ""
    record = GangTransition(
        key=key,
        cluster=CLUSTER,
        namespace=namespace,
        identity="labels",
        jobset=PodRef(name=jobset, uid=f"uid-{jobset}"),
        workload=PodRef(name=f"jobset-{jobset}-abc", uid=f"wl-{jobset}"),
        run="r",
        action="a",
        attempt="1",
        tracked=ObjectRef(kind="JobSet", name=jobset, uid=f"uid-{jobset}"),
        queue=queue,
        from_=from_,  # type: ignore[arg-type]
        to=to,  # type: ignore[arg-type]
        code=code,
        retry=retry,  # type: ignore[arg-type]
        cause=EvictionCause(reason=cause, detail=detail, message="") if cause is not None else None,
        reason=reason,
        at=at,
        waited_seconds=waited_seconds,
        rules_version=RULES,
    )
    return Emit(GANG_TRANSITIONS, key, record)


def dead_letter() -> Emit:
    return Emit(DEAD_LETTER, "k", DeadLetter(topic="k8s.pods", key="k", partition=0, offset=7, reason="not JSON", value="{"))


PREEMPTED_ENDING = "gang evicted by kueue (Preempted, InClusterQueue): preempted; this uses one of the task's retries"
TIMEOUT_ENDING = "gang evicted by kueue (PodsReadyTimeout): pods not ready; this does not count against the task's retries"
