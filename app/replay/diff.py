"""Compare two replays of the same history: which attempts' verdicts changed, and why
where the records themselves can tell (SPEC R10.2). A replay written before workload
attempts (ClassifiedFailure/v1) reads as v2 under the orchestrator's labels (R13.3)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import msgspec

from app.core.attempt import attempt_name
from app.core.fleet_fold import fault_label
from app.model.fleet_records import DerivedRecord
from app.model.records import CLASSIFIED_FAILURES, ClassifiedFailure, DeadLetter, Fault, GangTransition, GpuFault
from app.model import records_v1

# Any record a replay (file or topic) may hold, v1 verdicts and transitions included.
ReplayRecord = ClassifiedFailure | records_v1.ClassifiedFailure | Fault | GangTransition | records_v1.GangTransition | DeadLetter | DerivedRecord
Verdict = ClassifiedFailure | records_v1.ClassifiedFailure


class VerdictSummary(msgspec.Struct, frozen=True):
    code: str
    kind: str
    fault: str | None  # e.g. "Xid 79 CRITICAL on pod w-0"
    faulted_pod: str | None
    rules_version: str


class Change(msgspec.Struct, frozen=True):
    key: str
    base: VerdictSummary | None  # None: the attempt has no verdict in the base replay
    candidate: VerdictSummary | None
    because: str
    name: str = ""  # how people see the attempt: its key, or a workload's kind and name (R13.3)


class Diff(msgspec.Struct, frozen=True):
    base_rules: list[str]
    candidate_rules: list[str]
    attempts_compared: int
    changes: list[Change]
    transitions: dict[str, int]  # "Error (USER) -> GpuXidError (SYSTEM)": count


def as_v2(verdict: Verdict) -> ClassifiedFailure:
    """A verdict as v2: a v1 record is an attempt under the orchestrator's labels."""
    if isinstance(verdict, records_v1.ClassifiedFailure):
        upgraded = records_v1.upgraded(verdict)
        assert isinstance(upgraded, ClassifiedFailure)
        return upgraded
    return verdict


def final_verdicts(records: Iterable[tuple[str, str, object]]) -> dict[str, ClassifiedFailure]:
    """The latest verdict per attempt key: what a consumer of the compacted topic keeps
    (v1 verdicts read as v2)."""
    latest: dict[str, ClassifiedFailure] = {}
    for topic, key, value in records:
        if topic == CLASSIFIED_FAILURES and isinstance(value, (ClassifiedFailure, records_v1.ClassifiedFailure)):
            latest[key] = as_v2(value)
    return latest


def _fault_text(fault: GpuFault | None) -> str | None:
    if fault is None:
        return None
    return f"{fault_label(fault.kind, fault.code)} {fault.severity} on pod {fault.pod.name}"


def _summary(v: ClassifiedFailure | None) -> VerdictSummary | None:
    if v is None:
        return None
    pod = v.faulted_pod.name if v.faulted_pod else None
    return VerdictSummary(v.code, v.kind, _fault_text(v.gpu_fault), pod, v.rules_version)


def _same_fault(a: GpuFault, b: GpuFault) -> bool:
    return (a.kind, a.code, a.pod.uid, a.first_seen) == (b.kind, b.code, b.pod.uid, b.first_seen)


def explain(base: ClassifiedFailure | None, candidate: ClassifiedFailure | None) -> str:
    """The rule that made the difference, as far as the two verdicts show it."""
    if base is None or candidate is None:
        side = "base" if candidate is None else "candidate"
        return f"only the {side} replay has a verdict for this attempt (its records, retention or workload_identity differ)"
    a, b = base.gpu_fault, candidate.gpu_fault
    if a is not None and b is not None and _same_fault(a, b):
        label = fault_label(a.kind, a.code)
        if a.severity != b.severity:
            return f"the Xid table's severity for {label} changed ({a.severity} -> {b.severity})"
        if base.code != candidate.code:
            return f"the Xid table's failure code for {label} changed"
        return "same fault, different outcome: the verdict rules (R6) or labels differ"
    if a is None and b is not None:
        return f"{_fault_text(b)} now explains the failure: relevance window, slack, node trust or pod selection differ"
    if a is not None and b is None:
        return f"{_fault_text(a)} no longer explains the failure: relevance window, slack, node trust or pod selection differ"
    if a is not None and b is not None:
        return f"a different fault settles it ({_fault_text(a)} -> {_fault_text(b)}): severities or relevance differ"
    return "no GPU fault on either side: the base failure itself differs (labels or failure rules)"


def _differs(a: ClassifiedFailure | None, b: ClassifiedFailure | None) -> bool:
    if a is None or b is None:
        return a is not b
    return (a.code, a.kind, a.gpu_fault, a.faulted_pod, a.message, a.terminal, a.generation) != (
        b.code, b.kind, b.gpu_fault, b.faulted_pod, b.message, b.terminal, b.generation
    )  # fmt: skip


def _verdict_label(v: ClassifiedFailure | None) -> str:
    return f"{v.code} ({v.kind})" if v is not None else "(no verdict)"


def diff(base: dict[str, ClassifiedFailure], candidate: dict[str, ClassifiedFailure]) -> Diff:
    changes: list[Change] = []
    transitions: Counter[str] = Counter()
    keys = sorted(base.keys() | candidate.keys())
    for key in keys:
        a, b = base.get(key), candidate.get(key)
        if not _differs(a, b):
            continue
        name = attempt_name(b if b is not None else a)  # type: ignore[arg-type]  # one of them is set
        changes.append(Change(key, _summary(a), _summary(b), explain(a, b), name))
        transitions[f"{_verdict_label(a)} -> {_verdict_label(b)}"] += 1
    return Diff(
        base_rules=sorted({v.rules_version for v in base.values()}),
        candidate_rules=sorted({v.rules_version for v in candidate.values()}),
        attempts_compared=len(keys),
        changes=changes,
        transitions=dict(sorted(transitions.items(), key=lambda item: (-item[1], item[0]))),
    )
