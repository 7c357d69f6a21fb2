"""Whether a GPU fault marks its pod (SPEC R18.1, R18.2): a pure rule over one
`faultline.faults` record and the pod as the API server serves it now.

A trusted critical fault on a pod that is a candidate of a tracked attempt (R4, R13) and
has not ended marks the pod once: a condition `faultline.io/GPUFault` (setting
`mark_condition_type`) that a Job's `podFailurePolicy` can match. Everything else is a
skip with one of five reasons, counted by the drivers (docs/mark.md). The driver
(app/mark) fetches the pod, asks `decide`, and patches what it answers; the pod's
resourceVersion makes the patch conditional on the pod this rule read.
"""

from __future__ import annotations

import unicodedata
from typing import Final, Literal, get_args

import msgspec

from app.core.identity.attempt import pod_route
from app.core.base.bounds import Trim
from app.core.verdicts.child_pods import has_succeeded
from app.core.stages.pods import pod_facts_of
from app.core.base.rules import Rules
from app.core.verdicts.classify import failure_code, fault_sentence
from app.model.decode import BadRecord
from app.model.facts import PodFacts
from app.model.k8s import Pod
from app.model.records import DEVICE_HEALTH, Fault

SkipReason = Literal["not_critical", "untrusted", "not_a_candidate", "ended", "already_marked"]
SKIP_REASONS: Final[tuple[SkipReason, ...]] = get_args(SkipReason)
# R18.1: the condition the drivers add, unless `mark_condition_type` names another.
GPU_FAULT_CONDITION: Final = "faultline.io/GPUFault"
MESSAGE_CHARS: Final = 1024  # R18.1: the condition's message is the fault's sentence, cut to this
# kubernetes/api core/v1/types.go ConditionStatus (ConditionTrue): what a podFailurePolicy's
# onPodConditions pattern matches by default (kubernetes/api, the Job API types.go: PodFailurePolicyOnPodConditionsPattern).
CONDITION_TRUE: Final = "True"


class MarkCondition(msgspec.Struct, frozen=True):
    """The pod condition to add (kubernetes/api core/v1/types.go PodCondition); the driver
    stamps `lastTransitionTime` when the API server takes it."""

    type: str
    status: str
    reason: str
    message: str


class Mark(msgspec.Struct, frozen=True):
    condition: MarkCondition


class Skip(msgspec.Struct, frozen=True):
    """No mark, and why: `reason` is counted, `detail` is the log line's words. `final`: no
    later state of the same pod uid can undo it (the condition is never removed, R18.1; a
    pod gone, replaced or in a terminal phase never runs again), so a driver may remember
    it instead of asking the API server again. A pod whose containers have all stopped
    while its phase is still Running has ended for R18.1 but may run again (restartPolicy
    Always or OnFailure restarts them): not final."""

    reason: SkipReason
    detail: str
    final: bool = False


def printable(text: str) -> str:
    """`text` with every control and format character and line or paragraph separator
    (Unicode Cc, Cf, Zl, Zp: escapes, newlines, NUL, bidirectional overrides) as U+FFFD: a fault's sentence quotes an Event a tenant
    may have written, and the condition is read in terminals (`kubectl describe`) and in
    the mark's log lines."""
    if text.isprintable():
        return text
    return "".join(c if c == " " or unicodedata.category(c) not in ("Cc", "Cf", "Zl", "Zp") else "\ufffd" for c in text)


def screen(fault: Fault, rules: Rules) -> Skip | None:
    """What the record alone decides, before the pod is fetched: a fault that is not
    critical never marks (R18.1), nor one the rule set could not have made critical (the
    message tail may lower the table's severity, never raise it, R2.3), nor one that names
    no pod or no node (R2.5, R2.5b: no fault is trusted from a pod without a node)."""
    gpu = fault.fault
    if gpu.severity != "CRITICAL":
        return Skip("not_critical", f"a {gpu.severity} fault")
    if gpu.kind != DEVICE_HEALTH and rules.xid.severity(gpu.kind, gpu.code) != "CRITICAL":
        return Skip(
            "untrusted",
            f"the record calls {gpu.kind} {gpu.code} CRITICAL where the rule set {rules.version} says "
            f"{rules.xid.severity(gpu.kind, gpu.code)} (R2.3: never raised)",
        )
    if not fault.namespace or not gpu.pod.name or not gpu.pod.uid:
        return Skip("untrusted", "the record names no pod")
    if not gpu.node:
        return Skip("untrusted", "the record names no node (R2.5b)")
    return None


def has_ended(pod: PodFacts) -> bool:
    """A pod that ended: phase Succeeded or Failed, finished its work (R4.4), or every
    regular container the kubelet reports is terminated (the phase follows)."""
    if pod.phase in ("Succeeded", "Failed") or pod.deleted or has_succeeded(pod):
        return True
    reported = [c for c in pod.containers if c.reported]
    return bool(reported) and len(reported) == len(pod.containers) and all(c.terminated for c in reported)


def _is_candidate(pod: PodFacts, rules: Rules) -> bool:
    """R4, R13: the pod belongs to a tracked attempt, as far as the pod alone tells (the
    orchestrator's labels, a tracked operator's labels or controller, a GPU batch Job's
    pod, a bare GPU pod). A label a tenant made unreadable (R11.3) makes no candidate."""
    try:
        return pod_route(pod, rules) is not None
    except BadRecord:
        return False


def decide(fault: Fault, pod: Pod | None, condition_type: str, rules: Rules) -> Mark | Skip:
    """R18.1: mark `pod` for `fault`, or skip and say why. `pod` is the object named by the
    fault's namespace and pod name as the API server serves it now (None: there is none)."""
    early = screen(fault, rules)
    if early is not None:
        return early
    gpu = fault.fault
    if pod is None:
        return Skip("ended", "the pod is gone", final=True)
    meta = pod.metadata
    if meta.uid != gpu.pod.uid:
        # R2.5: a pod of the same name is another pod; the faulted one is gone.
        return Skip("ended", f"the pod of that name now has uid {printable(meta.uid[:64])}: the faulted pod is gone", final=True)
    if meta.namespace != fault.namespace:
        return Skip("untrusted", printable(f"the pod is in namespace {meta.namespace[:64]}, the record says {fault.namespace[:64]} (R2.7a)"))
    if pod.spec.node_name != gpu.node:
        # R2.5b, R2.7b: a trusted fault's node is the pod's; a record naming another node
        # was not trusted from this pod's node.
        return Skip("untrusted", printable(f"the record names node {gpu.node[:64]}, the pod runs on {pod.spec.node_name[:64] or 'no node'}"))
    if any(c.type == condition_type for c in pod.status.conditions):
        return Skip("already_marked", f"the pod has a {condition_type} condition", final=True)
    facts = pod_facts_of("MODIFIED", gpu.last_seen, fault.cluster, pod, None, rules, Trim(rules))
    if has_ended(facts):
        terminal = facts.phase in ("Succeeded", "Failed")  # read as MODIFIED: never `deleted` here
        return Skip("ended", f"the pod ended (phase {printable(facts.phase[:64]) or 'unknown'})", final=terminal)
    if not _is_candidate(facts, rules):
        return Skip("not_a_candidate", "the pod belongs to no tracked attempt")
    sentence = printable(fault_sentence(gpu))
    if len(sentence) > MESSAGE_CHARS:
        sentence = sentence[: MESSAGE_CHARS - 1] + "…"
    return Mark(MarkCondition(type=condition_type, status=CONDITION_TRUE, reason=failure_code(gpu, rules.xid), message=sentence))
