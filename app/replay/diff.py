"""Compare two replays of the same history: which attempts' verdicts changed, and why
where the records themselves can tell (SPEC R10.2)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import msgspec

from app.core.fleet_fold import fault_label
from app.model.records import CLASSIFIED_FAILURES, ClassifiedFailure, GpuFault


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


class Diff(msgspec.Struct, frozen=True):
    base_rules: list[str]
    candidate_rules: list[str]
    attempts_compared: int
    changes: list[Change]
    transitions: dict[str, int]  # "Error (USER) -> GpuXidError (SYSTEM)": count


def final_verdicts(records: Iterable[tuple[str, str, ClassifiedFailure]]) -> dict[str, ClassifiedFailure]:
    """The latest verdict per attempt key: what a consumer of the compacted topic keeps."""
    latest: dict[str, ClassifiedFailure] = {}
    for topic, key, value in records:
        if topic == CLASSIFIED_FAILURES:
            latest[key] = value
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
        return f"only the {side} replay has a verdict for this attempt (its records or retention differ)"
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
        changes.append(Change(key, _summary(a), _summary(b), explain(a, b)))
        transitions[f"{_verdict_label(a)} -> {_verdict_label(b)}"] += 1
    return Diff(
        base_rules=sorted({v.rules_version for v in base.values()}),
        candidate_rules=sorted({v.rules_version for v in candidate.values()}),
        attempts_compared=len(keys),
        changes=changes,
        transitions=dict(sorted(transitions.items(), key=lambda item: (-item[1], item[0]))),
    )
