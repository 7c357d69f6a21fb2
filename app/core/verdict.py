"""The verdict (SPEC R6): the base failure, then what the settled GPU fault does to it."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Final

import msgspec

from app.core.xid import DEFAULT_XID_TABLE, XidTable
from app.model.facts import AttributedFault, ContainerFacts, PodFacts
from app.model.k8s import Job
from app.model.records import ErrorKind, GpuFault, NamespacedRef, Severity

SYSTEM_POD_REASONS: Final = frozenset({"Shutdown", "Terminated", "NodeShutdown", "NodeAffinity"})
GENERIC_CODES: Final = frozenset({"", "Unknown", "UnknownError", "Error", "Interrupted"})
_NUMERIC_CODE: Final = re.compile(r"^(exit[ _-]?code[ _-]?)?[0-9]+$", re.IGNORECASE)

# R6.3 ranks the worst severity first: critical > user > warn.
_CHOICE_RANK: Final[dict[Severity, int]] = {"CRITICAL": 0, "USER": 1, "WARN": 2}


class BaseFailure(msgspec.Struct, frozen=True):
    code: str
    kind: ErrorKind
    message: str


class Outcome(msgspec.Struct, frozen=True):
    code: str
    kind: ErrorKind
    message: str
    gpu_fault: GpuFault | None
    faulted_pod: NamespacedRef | None
    pod_reason: str | None  # "GPU fault recorded on pod <name>" (R6.7), if any


def is_generic(code: str) -> bool:
    """R6.2: codes that say nothing a GPU fault could contradict."""
    return code in GENERIC_CODES or _NUMERIC_CODE.match(code) is not None


# --- R6.1 base failures --------------------------------------------------------------


def _container_failure(container: ContainerFacts) -> BaseFailure | None:
    if not container.terminated:
        return None
    if container.reason == "OOMKilled":
        return BaseFailure("OOMKilled", "USER", _container_message(container))
    if container.exit_code == 137:
        return BaseFailure("Interrupted", "SYSTEM", _container_message(container))
    if container.exit_code != 0:
        return BaseFailure(container.reason or f"ExitCode{container.exit_code}", "USER", _container_message(container))
    return None


def _container_message(container: ContainerFacts) -> str:
    text = f"container {container.name} terminated with exit code {container.exit_code}"
    if container.reason:
        text += f" ({container.reason})"
    return f"{text}: {container.message}" if container.message else text


def pod_base_failure(pod: PodFacts) -> BaseFailure:
    """R6.1 pod: a system status reason, else the primary container's termination."""
    if pod.reason in SYSTEM_POD_REASONS:
        return BaseFailure(pod.reason, "SYSTEM", pod.message)
    primary_name = pod.primary_container or (pod.containers[0].name if pod.containers else "")
    primary = next((c for c in pod.containers if c.name == primary_name), None)
    if primary is None or not primary.terminated:
        return BaseFailure("Interrupted", "SYSTEM", pod.message or "pod failed with no container termination recorded")
    failure = _container_failure(primary)
    if failure is not None:
        return failure
    # The primary exited 0, yet the pod failed: blame the first other container that did not.
    for container in pod.containers:
        failure = _container_failure(container)
        if failure is not None:
            return failure
    return BaseFailure("Interrupted", "SYSTEM", pod.message or "pod failed although its containers exited 0")


def _true_condition(job: Job, type_: str):
    return next((c for c in job.status.conditions if c.type == type_ and c.status == "True"), None)


def crd_failure_of(job: Job) -> tuple[BaseFailure, datetime | None] | None:
    """R6.1 CRDs, R13.5 batch Jobs: (base failure, the failed condition's
    lastTransitionTime or None). A batch/v1 Job's `Failed` reasons are
    BackoffLimitExceeded, DeadlineExceeded, PodFailurePolicy, MaxFailedIndexesExceeded,
    FailedIndexes (kubernetes/api batch/v1/types.go, JobReason*); its earlier
    `FailureTarget` condition is not the failure yet."""
    if job.kind == "RayJob":
        failed = _true_condition(job, "Failed")
        status = job.status
        if failed is None and status.job_deployment_status != "Failed" and status.job_status != "FAILED":
            return None
        message = status.message or (failed.message if failed else "")
        return BaseFailure(status.reason or "RayJobFailed", "USER", message), (failed.last_transition_time if failed else None)
    failed = _true_condition(job, "Failed")
    if failed is None:
        return None
    return BaseFailure(failed.reason or "Failed", "USER", failed.message), failed.last_transition_time


def is_completed(job: Job) -> bool:
    if job.kind == "RayJob":
        return job.status.job_status == "SUCCEEDED" or job.status.job_deployment_status == "Complete"
    # Kubeflow `Succeeded`, JobSet `Completed`, batch/v1 Job `Complete` (kubernetes/api batch/v1/types.go JobComplete).
    return any(_true_condition(job, type_) is not None for type_ in ("Succeeded", "Completed", "Complete"))


# --- R6.3–R6.7 faults ------------------------------------------------------------------


def fault_sentence(fault: GpuFault) -> str:
    """The human sentence a verdict's message starts with, e.g.
    `[gpu-health] [CRITICAL] Xid 79 (GPU has fallen off the bus) on GPU 0 GPU-1234.`"""
    if fault.kind == "SXID":
        where = f" on NVSwitch {fault.pci_bus_id}" if fault.pci_bus_id else ""
        return f"[gpu-health] [{fault.severity}] SXid {fault.code}{where}."
    label = f"Xid {fault.code}"
    what = label if fault.name == label else f"{label} ({fault.name})"
    gpu = " ".join(str(part) for part in (fault.gpu_index, fault.gpu_uuid) if part not in (None, ""))
    if not gpu and fault.pci_bus_id:
        gpu = fault.pci_bus_id
    where = f" on GPU {gpu}" if gpu else ""
    return f"[gpu-health] [{fault.severity}] {what}{where}."


def _order(candidate: AttributedFault) -> tuple:
    return candidate.fault.first_seen, candidate.fault.pod.name, candidate.event_uid


def settle(candidates: list[AttributedFault]) -> AttributedFault | None:
    """R6.3: merge and order by first_seen (ties: pod name, event uid); the worst
    severity decides and the earliest fault of it is the fault."""
    if not candidates:
        return None
    return min(candidates, key=lambda c: (_CHOICE_RANK[c.fault.severity], *_order(c)))


def apply_fault(
    base: BaseFailure,
    settled: AttributedFault | None,
    earliest: AttributedFault | None,
    child_pod_namespace: str | None,
    table: XidTable = DEFAULT_XID_TABLE,
) -> Outcome:
    """R6.4–R6.7. `child_pod_namespace` is the namespace of a CRD task's child pods, or
    None for a pod task (which names no pod)."""
    if settled is None:
        return Outcome(base.code, base.kind, base.message, None, None, None)
    fault = settled.fault
    if fault.severity == "WARN":
        # R6.6: warnings ride along as data; the earliest fault is attached.
        attached = earliest.fault if earliest is not None else fault
        return Outcome(base.code, base.kind, base.message, attached, None, None)
    sentence = fault_sentence(fault)
    message = f"{sentence} {base.message}" if base.message else sentence
    if fault.severity == "CRITICAL":  # R6.4
        code = table.failure_code(fault.kind, fault.code) if is_generic(base.code) else base.code
        kind: ErrorKind = "SYSTEM"
    elif is_generic(base.code):  # R6.5, the Interrupted rule
        code, kind = table.default_code, "USER"
    else:
        code, kind = base.code, base.kind
    if child_pod_namespace is None:
        return Outcome(code, kind, message, fault, None, None)
    pod = NamespacedRef(namespace=child_pod_namespace, name=fault.pod.name, uid=fault.pod.uid)
    return Outcome(code, kind, message, fault, pod, f"GPU fault recorded on pod {fault.pod.name}")


def classify(
    base: BaseFailure, relevant: list[AttributedFault], child_pod_namespace: str | None, table: XidTable = DEFAULT_XID_TABLE
) -> Outcome:
    settled = settle(relevant)
    earliest = min(relevant, key=_order) if relevant else None
    return apply_fault(base, settled, earliest, child_pod_namespace, table)
