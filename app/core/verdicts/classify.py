"""The verdict (SPEC R6, R14): the base failure, then the evidence that decides it.

Evidence order (docs/rules.md, *Evidence*): a critical fault (an Xid, an SXid, or a GPU
the kubelet reports Unhealthy), then a user fault, then a disruption of a pod by the
cluster (R14.1); a warning fault (an Unknown device health too) is data only."""

from __future__ import annotations

import re
from typing import Final

import msgspec

from app.core.evidence.device_health import GPU_UNHEALTHY
from app.core.evidence.force_deletion import REASON as FORCE_DELETED
from app.core.base.xid import DEFAULT_XID_TABLE, XidTable
from app.model.facts import AttributedFault, ContainerFacts, PodFacts
from app.model.records import DEVICE_HEALTH, ErrorKind, GpuFault, NamespacedRef, Severity

SYSTEM_POD_REASONS: Final = frozenset({"Shutdown", "Terminated", "NodeShutdown", "NodeAffinity"})
POD_DISRUPTED: Final = "PodDisrupted"  # R14.1
KILLED_EXIT_CODES: Final = frozenset({137, 143})  # SIGKILL, SIGTERM: how a disrupted pod's container ends (R14.1)
# R16.6: a DRA device taint's eviction (kubernetes v1.37.2 pkg/controller/devicetainteviction/
# device_taint_eviction.go, a literal there, no core/v1 constant). Its message names no
# device ("Device Taint manager: deleting due to NoExecute taint"): the line says what it was.
DEVICE_TAINT: Final = "DeletionByDeviceTaintManager"
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
    # The reasons line saying which evidence decided, if any: R6.7's `GPU fault recorded on
    # pod <name>`, a device's (R14.2) or a disruption's (R14.1), `evidence_line` below.
    evidence: str | None


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


def previous_run_failure(container: ContainerFacts) -> BaseFailure:
    """R6.1's container rules over how a restarted container's previous run ended
    (`lastState.terminated`, R16.3); one that exited 0 says nothing of why (`Unknown`)."""
    last = ContainerFacts(
        name=container.name, terminated=True, exit_code=container.last_exit_code, reason=container.last_reason, message=container.last_message
    )
    return _container_failure(last) or BaseFailure("Unknown", "USER", _container_message(last))


def primary_of(pod: PodFacts) -> ContainerFacts | None:
    """R6.1: the declared primary container (R4.4), else the first regular container."""
    primary_name = pod.primary_container or (pod.containers[0].name if pod.containers else "")
    return next((c for c in pod.containers if c.name == primary_name), None)


def pod_base_failure(pod: PodFacts) -> BaseFailure:
    """R6.1 pod: a system status reason, else the primary container's termination."""
    if pod.reason in SYSTEM_POD_REASONS:
        return BaseFailure(pod.reason, "SYSTEM", pod.message)
    primary = primary_of(pod)
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


# --- R6.3–R6.7 faults, R14.2 device health --------------------------------------------------


def fault_sentence(fault: GpuFault) -> str:
    """The human sentence a verdict's message starts with, e.g.
    `[gpu-health] [CRITICAL] Xid 79 (GPU has fallen off the bus) on GPU 0 GPU-1234.` or
    `[device-health] [CRITICAL] GPU unhealthy (nvidia.com/gpu GPU-1234): <kubelet's message>.`"""
    if fault.kind == DEVICE_HEALTH:
        said = f": {fault.message}" if fault.message else ""
        return f"[device-health] [{fault.severity}] {fault.name} ({fault.resource} {fault.gpu_uuid}){said}."
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


def failure_code(fault: GpuFault, table: XidTable) -> str:
    """R3's failure code of a fault; R14.2: a device the kubelet reports Unhealthy is `GpuUnhealthy`."""
    if fault.kind == DEVICE_HEALTH:
        return GPU_UNHEALTHY
    return table.failure_code(fault.kind, fault.code)


def fault_line(fault: GpuFault, child_pod: bool) -> str | None:
    """The reasons line of a deciding fault: R6.7's for a child pod's fault Event (a pod
    task names nothing); R14.2's for a device, pod task or child pod, so the reasons say
    the kubelet's device health decided."""
    if fault.kind == DEVICE_HEALTH:
        return f"device health: GPU {fault.gpu_uuid} ({fault.resource}) of pod {fault.pod.name} reported Unhealthy by the kubelet"
    return f"GPU fault recorded on pod {fault.pod.name}" if child_pod else None


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
        code = failure_code(fault, table) if is_generic(base.code) else base.code
        kind: ErrorKind = "SYSTEM"
    elif is_generic(base.code):  # R6.5, the Interrupted rule
        code, kind = table.default_code, "USER"
    else:
        code, kind = base.code, base.kind
    line = fault_line(fault, child_pod_namespace is not None)
    if child_pod_namespace is None:
        return Outcome(code, kind, message, fault, None, line)
    pod = NamespacedRef(namespace=child_pod_namespace, name=fault.pod.name, uid=fault.pod.uid)
    return Outcome(code, kind, message, fault, pod, line)


# --- R14.1 disruptions ---------------------------------------------------------------------------


def was_killed(pod: PodFacts) -> bool:
    """R14.1: the pod's primary container was killed (exit 137 or 143) or has no
    termination recorded; an OOMKilled one was not (the workload's memory, R6.1)."""
    primary = primary_of(pod)
    if primary is None or not primary.terminated:
        return True
    return primary.reason != "OOMKilled" and primary.exit_code in KILLED_EXIT_CODES


def _oom_killed(pod: PodFacts) -> bool:
    primary = primary_of(pod)
    return primary is not None and primary.terminated and primary.reason == "OOMKilled"


def disruption_decides(base: BaseFailure, pod: PodFacts) -> bool:
    """R14.1: a disrupted pod decides when the base code is generic or the pod was
    killed; a primary container terminated OOMKilled stays the workload's."""
    return not _oom_killed(pod) and (is_generic(base.code) or was_killed(pod))


def deciding_disruption(base: BaseFailure, disrupted: list[PodFacts]) -> PodFacts | None:
    """Of the candidate pods disrupted within their relevance interval, the one that
    decides: the earliest disruption (ties: pod name, uid)."""
    deciding = [p for p in disrupted if p.disruption is not None and disruption_decides(base, p)]
    return min(deciding, key=lambda p: (p.disruption.at, p.name, p.uid), default=None)  # type: ignore[union-attr]


def disruption_line(pod: PodFacts) -> str:
    """R14.1's reasons line: `pod <name> disrupted by the cluster (<reason>): <message>`.
    R16.6: a device taint's says a device of the pod was tainted NoExecute; Kueue's force
    deletion names Kueue and the pod's node (`spec.nodeName`, never the message's words:
    an Event's text is its writer's)."""
    disruption = pod.disruption
    assert disruption is not None
    reason = disruption.reason
    if reason == FORCE_DELETED:
        node = f"node {pod.node_name}" if pod.node_name else "its node"
        return f"pod {pod.name} disrupted by the cluster ({reason}): force-deleted by Kueue's failure recovery, {node} unreachable"
    said = f": {disruption.message}" if disruption.message else ""
    if reason == DEVICE_TAINT:
        said = f": a DRA device allocated to it was tainted NoExecute{said}"
    return f"pod {pod.name} disrupted by the cluster ({reason}){said}"


def apply_disruption(base: BaseFailure, pod: PodFacts, earliest: AttributedFault | None, child_pod_namespace: str | None) -> Outcome:
    """R14.1: code PodDisrupted, kind SYSTEM, the pod named as R6.7 names a faulted child
    pod (a pod task names nothing: its pod is the attempt's), the line in the reasons and
    at the head of the message. A warning fault still rides along as data (R6.6)."""
    line = disruption_line(pod)
    message = f"{line}. {base.message}" if base.message else line
    named = NamespacedRef(namespace=child_pod_namespace, name=pod.name, uid=pod.uid) if child_pod_namespace is not None else None
    return Outcome(POD_DISRUPTED, "SYSTEM", message, earliest.fault if earliest is not None else None, named, line)


def classify(
    base: BaseFailure,
    relevant: list[AttributedFault],
    disrupted: list[PodFacts],
    child_pod_namespace: str | None,
    table: XidTable = DEFAULT_XID_TABLE,
) -> Outcome:
    """The evidence order: a critical or user fault decides (R6.3–R6.7, R14.2); else a
    relevant disruption of a candidate pod (R14.1); else the base stands, a warning fault
    attached as data (R6.6). `disrupted`: candidate pods disrupted within their relevance
    interval with a listed reason (relevance.disrupted_within)."""
    settled = settle(relevant)
    earliest = min(relevant, key=_order) if relevant else None
    if settled is None or settled.fault.severity == "WARN":
        pod = deciding_disruption(base, disrupted)
        if pod is not None:
            return apply_disruption(base, pod, earliest, child_pod_namespace)
    return apply_fault(base, settled, earliest, child_pod_namespace, table)
