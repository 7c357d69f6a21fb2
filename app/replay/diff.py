"""Compare two replays of the same history: which attempts' verdicts changed, and why
where the records themselves can tell (SPEC R10.2): the evidence that decided each side
(a GPU fault, a device's health, a disruption: R6, R14). A replay written before
workload attempts (ClassifiedFailure/v1) reads as v2 under the orchestrator's labels
(R13.3); a v1 fault carries no action (R14.3), which is advice and never a change.

`cost_of` (issue 30, `faultline diff --cost`) says what a change is worth: the GPU-seconds
of the attempts whose verdict moves between USER and SYSTEM and between codes (the final
verdicts' `gpu_seconds`), and the attempts that move the most."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

import msgspec

from app.core.fleet.goodput_rows import GoodputRow, goodput_row
from app.core.identity.attempt import attempt_name
from app.core.fleet.states import fault_label
from app.model.fleet_records import GOODPUT, DerivedRecord, Goodput
from app.model.records import CLASSIFIED_FAILURES, DEVICE_HEALTH, ClassifiedFailure, DeadLetter, Fault, GangTransition, GpuFault
from app.model import records_v1

# Any record a replay (file or topic) may hold, v1 records included (before R13 and R14).
ReplayRecord = (
    ClassifiedFailure | records_v1.ClassifiedFailure | Fault | records_v1.Fault | GangTransition | records_v1.GangTransition
    | DeadLetter | DerivedRecord | records_v1.DerivedRecordV1
)  # fmt: skip
Verdict = ClassifiedFailure | records_v1.ClassifiedFailure
# SPEC R14.1's reasons line: `pod <name> disrupted by the cluster (<reason>): <message>`.
_DISRUPTED = re.compile(r"^pod (?P<pod>\S+) disrupted by the cluster \((?P<reason>[^)]*)\)")


class VerdictSummary(msgspec.Struct, frozen=True):
    code: str
    kind: str
    fault: str | None  # e.g. "Xid 79 CRITICAL on pod w-0"
    faulted_pod: str | None
    rules_version: str
    # What decided it (R6, R14): "GPU fault: Xid 79 CRITICAL on pod w-0", "device health:
    # GPU unhealthy CRITICAL on pod w-0", "disruption: pod w-0 (EvictionByEvictionAPI)"; None: the base.
    evidence: str | None = None
    gpu_seconds: int | None = None  # what the failure cost (issue 30); None: unknown


class Change(msgspec.Struct, frozen=True):
    key: str
    base: VerdictSummary | None  # None: the attempt has no verdict in the base replay
    candidate: VerdictSummary | None
    because: str
    name: str = ""  # how people see the attempt: its key, or a workload's kind and name (R13.3)


class CostMove(msgspec.Struct, frozen=True):
    """The attempts whose verdict changed one way, and the GPU-seconds they carry."""

    change: str  # "Error (USER) -> GpuXidError (SYSTEM)"
    attempts: int
    gpu_seconds: int
    unknown: int = 0  # of those attempts, how many have no GPU-seconds known


class CostAttempt(msgspec.Struct, frozen=True):
    key: str
    name: str
    change: str
    gpu_seconds: int


class Cost(msgspec.Struct, frozen=True):
    """What a rule change is worth (issue 30), from the final verdicts of both replays:
    GPU-seconds of the changed attempts moving USER -> SYSTEM and back, by verdict change,
    the attempts carrying the most, and each kind's total in both replays."""

    user_to_system: int
    system_to_user: int
    moves: list[CostMove]  # most GPU-seconds first
    top: list[CostAttempt]
    base_totals: dict[str, int]  # kind -> GPU-seconds over every final verdict of the base
    candidate_totals: dict[str, int]
    unknown: int = 0  # changed attempts with no GPU-seconds known (counted nowhere above)
    # SPEC R17.4: where each replay's GPU-hours went (None: the replay holds no faultline.goodput,
    # e.g. a verdicts topic, or one written before R17).
    base_goodput: GoodputRow | None = None
    candidate_goodput: GoodputRow | None = None


class Diff(msgspec.Struct, frozen=True):
    base_rules: list[str]
    candidate_rules: list[str]
    attempts_compared: int
    changes: list[Change]
    transitions: dict[str, int]  # "Error (USER) -> GpuXidError (SYSTEM)": count
    cost: Cost | None = None  # with `faultline diff --cost`


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


def goodput_totals(records: Iterable[tuple[str, str, object]]) -> GoodputRow | None:
    """R17.4: the latest `faultline.goodput` record per key, added up as the fleet view adds
    them; None when there is none."""
    latest: dict[str, Goodput] = {}
    for topic, key, value in records:
        if topic == GOODPUT and isinstance(value, Goodput):
            latest[key] = value
    return goodput_row(list(latest.values())) if latest else None


def _fault_text(fault: GpuFault | None) -> str | None:
    if fault is None:
        return None
    return f"{fault_label(fault.kind, fault.code)} {fault.severity} on pod {fault.pod.name}"


def disruption_of(v: ClassifiedFailure) -> re.Match[str] | None:
    """The R14.1 line of a verdict a disruption decided (carried lines of earlier
    generations start otherwise: `generation N failed: ...`, `pod <name> failed: ...`)."""
    return next((m for line in v.reasons if (m := _DISRUPTED.match(line))), None)


def evidence_of(v: ClassifiedFailure) -> str | None:
    """Which evidence decided a verdict, as its record shows it: a disruption (its reasons
    line), else a critical or user fault (a device's health or a fault Event); a warning
    fault is data only (R6.6)."""
    disrupted = disruption_of(v)
    if disrupted is not None:
        return f"disruption: pod {disrupted['pod']} ({disrupted['reason']})"
    fault = v.gpu_fault
    if fault is None or fault.severity == "WARN":
        return None
    return f"{'device health' if fault.kind == DEVICE_HEALTH else 'GPU fault'}: {_fault_text(fault)}"


def _summary(v: ClassifiedFailure | None) -> VerdictSummary | None:
    if v is None:
        return None
    pod = v.faulted_pod.name if v.faulted_pod else None
    return VerdictSummary(v.code, v.kind, _fault_text(v.gpu_fault), pod, v.rules_version, evidence_of(v), v.gpu_seconds)


def _same_fault(a: GpuFault, b: GpuFault) -> bool:
    return (a.kind, a.code, a.gpu_uuid, a.pod.uid, a.first_seen) == (b.kind, b.code, b.gpu_uuid, b.pod.uid, b.first_seen)


def _disruption_change(base: ClassifiedFailure, candidate: ClassifiedFailure) -> str | None:
    """R14.1 on one side only: the pod's disruption decides one verdict and not the other."""
    a, b = disruption_of(base), disruption_of(candidate)
    if (a is None) == (b is None):
        return None
    if b is not None:
        before = evidence_of(base)
        was = f" (instead of {before})" if before else ""
        return (
            f"the pod was disrupted: pod {b['pod']} disrupted by the cluster ({b['reason']}) now decides{was}: "
            "disruption_reasons, relevance or the faults differ"
        )
    now = evidence_of(candidate)
    instead = f"; {now} decides" if now else ""
    return f"pod {a['pod']}'s disruption ({a['reason']}) no longer decides{instead}: disruption_reasons, relevance or the faults differ"


def explain(base: ClassifiedFailure | None, candidate: ClassifiedFailure | None) -> str:
    """The rule that made the difference, as far as the two verdicts show it."""
    if base is None or candidate is None:
        side = "base" if candidate is None else "candidate"
        return f"only the {side} replay has a verdict for this attempt (its records, retention or workload_identity differ)"
    disruption = _disruption_change(base, candidate)
    if disruption is not None:
        return disruption
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


def _without_advice(fault: GpuFault | None) -> GpuFault | None:
    """R14.3: an action is advice, not the verdict (and a v1 record carries none)."""
    return None if fault is None else msgspec.structs.replace(fault, action="")


def _differs(a: ClassifiedFailure | None, b: ClassifiedFailure | None) -> bool:
    if a is None or b is None:
        return a is not b
    return (a.code, a.kind, _without_advice(a.gpu_fault), a.faulted_pod, a.message, a.terminal, a.generation) != (
        b.code, b.kind, _without_advice(b.gpu_fault), b.faulted_pod, b.message, b.terminal, b.generation
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


# --- what a change is worth (issue 30) ---------------------------------------------------------


def moved_gpu_seconds(change: Change) -> int | None:
    """The GPU-seconds a changed attempt carries from one verdict to the other: the
    candidate's (its pods as the new rules select them), else the base's; None: unknown."""
    side = change.candidate if change.candidate is not None else change.base
    return side.gpu_seconds if side is not None else None


def _totals(verdicts: dict[str, ClassifiedFailure]) -> dict[str, int]:
    totals = {"SYSTEM": 0, "USER": 0}
    for v in verdicts.values():
        totals[v.kind] += v.gpu_seconds or 0
    return totals


def cost_of(result: Diff, base: dict[str, ClassifiedFailure], candidate: dict[str, ClassifiedFailure], top: int = 10) -> Cost:
    """The GPU-seconds behind each verdict change of `result` (the final verdicts', as diff
    compares them: an earlier generation of an attempt restarted in place, R8, is the fleet's
    to count, not the diff's)."""
    moves: dict[str, list[int]] = {}
    attempts: list[CostAttempt] = []
    kinds = {"USER -> SYSTEM": 0, "SYSTEM -> USER": 0}
    unknown = 0
    for change in result.changes:
        label = f"{_summary_label(change.base)} -> {_summary_label(change.candidate)}"
        seconds = moved_gpu_seconds(change)
        move = moves.setdefault(label, [0, 0, 0])
        move[0] += 1
        if seconds is None:
            move[2] += 1
            unknown += 1
            continue
        move[1] += seconds
        attempts.append(CostAttempt(change.key, change.name or change.key, label, seconds))
        if change.base is not None and change.candidate is not None and change.base.kind != change.candidate.kind:
            kinds[f"{change.base.kind} -> {change.candidate.kind}"] += seconds
    ranked = sorted(moves.items(), key=lambda item: (-item[1][1], -item[1][0], item[0]))
    return Cost(
        user_to_system=kinds["USER -> SYSTEM"],
        system_to_user=kinds["SYSTEM -> USER"],
        moves=[CostMove(label, n, seconds, unknown_here) for label, (n, seconds, unknown_here) in ranked],
        top=sorted(attempts, key=lambda a: (-a.gpu_seconds, a.key))[:top],
        base_totals=_totals(base),
        candidate_totals=_totals(candidate),
        unknown=unknown,
    )


def _summary_label(v: VerdictSummary | None) -> str:
    return f"{v.code} ({v.kind})" if v is not None else "(no verdict)"
