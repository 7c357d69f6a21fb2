"""Stage 2, keyed by the attempt's join key (the attempt key, or for a workload the
object its pods name, SPEC R13.4): join an attempt's pods, their faults and its tracked
resource, and keep its verdicts current (SPEC R4–R8). Verdicts are keyed by the attempt
key (`AttemptState.identity`), whatever the state's key.

The verdicts are a pure function of the state (`verdicts_of`), so the final verdict
depends only on the set of facts seen, never on their order (R7.1). The attempt's
current verdict is the last of them (earlier generations ride in its `reasons`, R8); the
fold emits it whenever it differs from the last one emitted, with the next revision
(R7.2). An identical recomputation emits nothing. So the latest record per key on the
compacted topic is always the attempt's current verdict.
"""

from __future__ import annotations

from datetime import datetime, timezone

import msgspec

from app.core.identity.attempt import AttemptId, pod_route
from app.core.kinds import registry
from app.core.kinds.pod import POD
from app.core.verdicts.child_pods import has_succeeded
from app.core.base.clock import after, hour_of
from app.core.base.emit import Emit, dropped
from app.core.stages.fleet_inputs import failure_changes, gpu_time_changes
from app.core.verdicts.gpu_time import GpuTime, gpu_time_of
from app.core.base.progress import Watermarks
from app.core.verdicts.relevance import anchor_of, crd_failed_at, disrupted_within, is_relevant, pod_task_failed_at, run_began
from app.core.base.rules import Rules
from app.core.verdicts.classify import BaseFailure, Outcome, classify, pod_base_failure, previous_run_failure
from app.model.facts import AttemptFact, AttributedFault, Counted, GenerationEnd, JobFacts, PodFacts, QuotaFacts
from app.core.stages.attempt_goodput import AttemptUsage, accounted, terminal_goodput, with_quota
from app.model.records import CLASSIFIED_FAILURES, ClassifiedFailure, ObjectRef

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

# R8.1: a JobSet restarted in place says nothing of why; faults may (generic, so they can).
RESTART_FAILURE_CODE = "Unknown"
REVISIONS_KEPT = 20  # verdict revisions kept per attempt, for its evidence
TRY_REVISIONS = 1000  # R16.4: revisions one try of a RayJob may emit before the next try's


class AttemptState(msgspec.Struct, frozen=True, omit_defaults=True):
    """One attempt's state; folds return a new one (see PodState). Stored without the
    fields it holds at their defaults (most attempts have no ended generation, no pod
    generation dropped): a state written with them decodes the same."""

    key: str  # the join key (R13.4)
    last_activity: datetime
    identity: AttemptId | None = None  # which attempt: from the tracked object, or the pod task's pod
    job: JobFacts | None = None
    job_failed_seen_at: datetime | None = None  # R5.2: first record that showed the failure
    # R8, R16: the generations that ended without the attempt ending, by id (at most
    # `max_generations`, the latest kept: R11.5).
    ended: dict[str, GenerationEnd] = {}
    pods: dict[str, PodFacts] = {}
    emitted: ClassifiedFailure | None = None  # the last verdict emitted for this key
    # Its revisions, oldest first (the last REVISIONS_KEPT): (revision, code, kind, generation, terminal, failed_at).
    revisions: tuple[tuple[int, str, str, int, bool, datetime], ...] = ()
    # How each of its failures counts in the fleet's rates: "<tracked uid>/<generation>" -> count.
    counted: dict[str, Counted] = {}
    # R16.3 under R11.5: generations told by pods whose pods were left out (the oldest):
    # the later ones are numbered after them.
    pod_generations_dropped: int = 0
    usage: AttemptUsage | None = None  # SPEC R17: its Workloads' quota, its hours told the fleet, its idle quota


class _Verdict(msgspec.Struct, frozen=True):
    """A verdict before it gets its revision; `id`: which failure it is (its generation's)."""

    id: str
    tracked: ObjectRef
    generation: int
    terminal: bool
    failed_at: datetime
    outcome: Outcome
    carried: tuple[str, ...]
    gpu: GpuTime  # what the failure cost: its candidate pods' GPU-seconds (issue 30)


# --- evidence that may explain a pod's failure (R4, R5, R14) ---------------------------------


def _relevant_faults(pods: list[PodFacts], failed_at: datetime, clamp: bool, since: datetime | None, rules: Rules) -> list[AttributedFault]:
    """R5.3; `since`: pods restarted in place keep their faults, and one that ended before
    their last restart explained that generation, not this one (R16.2)."""
    relevant = []
    for pod in pods:
        anchor, began = anchor_of(pod, failed_at, clamp), run_began(pod, since)
        relevant.extend(f for f in pod.faults if is_relevant(f.fault, anchor, rules) and (began is None or f.fault.last_seen >= began))
    return relevant


def _disrupted(pods: list[PodFacts], failed_at: datetime, clamp: bool, rules: Rules) -> list[PodFacts]:
    """R14.1, R16.6: the candidate pods disrupted by the cluster within their relevance
    interval, each as its deciding disruption shows it."""
    disrupted = (disrupted_within(p, anchor_of(p, failed_at, clamp), rules) for p in pods if p.disruption is not None or p.force_deleted is not None)
    return [p for p in disrupted if p is not None]


def _outcome(
    base: BaseFailure, pods: list[PodFacts], failed_at: datetime, child_pod_namespace: str | None, rules: Rules, since: datetime | None = None
) -> Outcome:
    """The verdict of one failure over its candidate pods: faults first, then disruptions
    (verdict.classify). A child pod's anchor is clamped to the failure (R5.1)."""
    clamp = child_pod_namespace is not None
    relevant = _relevant_faults(pods, failed_at, clamp, since, rules)
    return classify(base, relevant, _disrupted(pods, failed_at, clamp, rules), child_pod_namespace, rules.xid)


def _child_pods(state: AttemptState, job: JobFacts, ended: GenerationEnd | None = None) -> list[PodFacts]:
    # R4.2, R4.3; R4.5: deleted pods keep their last known state and still count.
    kind = registry.kind_named(job.kind)
    if kind is None:
        return []
    return [p for p in state.pods.values() if kind.selects(job, p, ended) and not has_succeeded(p)]


def _carried_line(label: str, outcome: Outcome) -> str:
    line = f"{label} failed: {outcome.code} ({outcome.kind})"
    return f"{line}; {outcome.evidence}" if outcome.evidence else line


# --- verdicts of a CRD task (R6, R8.1) -------------------------------------------------------


def _crd_verdicts(state: AttemptState, job: JobFacts, rules: Rules) -> list[_Verdict]:
    # R13.3: a workload attempt's verdict names its object (a TrainJob for its JobSet).
    workload = job.attempt.tracked if job.attempt is not None else None
    tracked = workload or ObjectRef(kind=job.kind, name=job.name, uid=job.uid)
    verdicts: list[_Verdict] = []
    kind = registry.kind_named(job.kind)
    carried = _earlier_tries(state, job) if kind is not None and kind.tries_apart else []
    kept_since: datetime | None = None  # the end of the latest in-place generation so far
    generations = [(ended, _child_pods(state, job, ended)) for ended in state.ended.values()]  # R8.1, R16.1, R16.2
    if kind is not None and kind.generations_by_pods:  # R16.3: told by its pods
        found = kind.pod_generations(job, state.pods.values(), state.pod_generations_dropped)
        generations += [(g.end, [p for p in g.pods if not has_succeeded(p)]) for g in found]
    for ended, pods in sorted(generations, key=lambda g: _ended_order(g[0])):
        base = _generation_base(ended, state.pods)
        since = kept_since if ended.kept_pods else None
        outcome = _outcome(base, pods, ended.at, job.namespace, rules, since)
        verdicts.append(_Verdict(ended.id, tracked, ended.number, False, ended.at, outcome, tuple(carried), gpu_time_of(pods, ended.at, since)))
        carried.append(_carried_line(ended.label, outcome))
        if ended.kept_pods:
            kept_since = ended.at
    failed_at = crd_failed_at(job, state.job_failed_seen_at)
    if job.failure is not None and failed_at is not None:
        generation = kind.generation(job) if kind is not None else 0
        base = BaseFailure(job.failure.code, "USER", job.failure.message)
        pods = _child_pods(state, job)
        outcome = _outcome(base, pods, failed_at, job.namespace, rules, kept_since)
        verdicts.append(_Verdict(str(generation), tracked, generation, True, failed_at, outcome, tuple(carried), gpu_time_of(pods, failed_at, kept_since)))
    return verdicts


def _generation_base(ended: GenerationEnd, pods: dict[str, PodFacts]) -> BaseFailure:
    """A generation's own failure: R8.1's `Unknown` (a restart says nothing of why), or
    where its pods tell what failed (R16.3), how that container's previous run ended."""
    failed = pods.get(ended.failed_pod) if ended.failed_container else None
    container = next((c for c in failed.containers if c.name == ended.failed_container), None) if failed is not None else None
    if container is None:
        return BaseFailure(RESTART_FAILURE_CODE, "USER", ended.reason)
    base = previous_run_failure(container)
    return BaseFailure(base.code, base.kind, f"{ended.reason}: {base.message}")


def _earlier_tries(state: AttemptState, job: JobFacts) -> list[str]:
    """R16.4: tries joined under keys of their own (a RayJob's, each on its own RayCluster)
    before this key's first: each has its own verdict; this one counts them."""
    first = min((g.number for g in state.ended.values()), default=max(job.tries - 1, 0))
    if first <= 0:
        return []
    which = "generation 0" if first == 1 else f"generations 0 to {first - 1}"
    return [f"{first} earlier {'try' if first == 1 else 'tries'} failed, each with a verdict of its own ({which})"]


def _tries_apart(state: AttemptState) -> bool:
    kind = registry.kind_named(state.job.kind) if state.job is not None else None
    return kind is not None and kind.tries_apart


def _first_revision(state: AttemptState, verdict: _Verdict) -> int:
    """The first revision this key emits: 0, or for tries joined under keys of their own
    (R16.4) the try's number × TRY_REVISIONS, so an attempt's revisions grow across tries."""
    return verdict.generation * TRY_REVISIONS if _tries_apart(state) else 0


def _verdict_key(state: AttemptState, ident: AttemptId, verdict: _Verdict) -> str:
    """The key a verdict is written under: the attempt key, or, for a try joined under a
    key of its own that ended without ending the attempt (R16.4), `<attempt key>/try/<n>`.
    So one state writes each key: the earlier try's state, whose pods and faults may come
    in after the attempt's terminal verdict (a burst, a late Event: R7.2, R12.7), can not
    write its interim verdict over the terminal one it never sees."""
    return f"{ident.key}/try/{verdict.generation}" if not verdict.terminal and _tries_apart(state) else ident.key


def _ended_order(ended: GenerationEnd) -> tuple[datetime, int, str]:
    """Generations in the order they ended (several seen in one record: by number, then id)."""
    return (ended.at, ended.number, ended.id)


# --- verdicts of a pod task (R6, R8.2) -------------------------------------------------------


def _creation_order(pod: PodFacts) -> tuple:
    return pod.created_at or _EPOCH, pod.name, pod.uid


def _pod_task_verdicts(state: AttemptState, rules: Rules, bare: bool) -> list[_Verdict]:
    # A bare pod's state holds that pod alone (its key has its uid, R13.3), whatever its labels.
    tries = sorted((p for p in state.pods.values() if bare or not p.is_child), key=_creation_order)
    verdicts: list[_Verdict] = []
    carried: list[str] = []
    for index, pod in enumerate(tries):
        failed_at = pod_task_failed_at(pod) if pod.phase == "Failed" else None
        if failed_at is None:
            continue
        outcome = _outcome(pod_base_failure(pod), [pod], failed_at, None, rules)
        terminal = index == len(tries) - 1  # R8.2: a newer pod of the attempt makes it non-terminal
        tracked = ObjectRef(kind=POD, name=pod.name, uid=pod.uid)
        verdicts.append(_Verdict("0", tracked, 0, terminal, failed_at, outcome, tuple(carried), gpu_time_of((pod,), failed_at)))
        carried.append(_carried_line(f"pod {pod.name}", outcome))
    return verdicts


def verdicts_of(state: AttemptState, rules: Rules) -> list[_Verdict]:
    """Every verdict the attempt's facts support now, in emission order."""
    if state.job is not None:
        return _crd_verdicts(state, state.job, rules)
    ident = state.identity
    if ident is None or ident.kind not in ("", POD):
        return []  # R13.4: a workload's pods alone are no verdict; its tracked object's failure is
    return _pod_task_verdicts(state, rules, bare=ident.kind == POD)


def _record(key: str, ident: AttemptId, verdict: _Verdict, revision: int, rules: Rules) -> ClassifiedFailure:
    outcome = verdict.outcome
    reasons = list(verdict.carried)
    if outcome.evidence:
        reasons.append(outcome.evidence)  # which evidence decided (R6.7, R14.1, R14.2)
    labels = ident.identity == "labels"
    return ClassifiedFailure(
        key=key,
        cluster=ident.cluster,
        namespace=ident.namespace,
        identity=ident.identity,
        run=ident.run if labels else None,
        action=ident.action if labels else None,
        attempt=ident.attempt if labels else None,
        tracked=verdict.tracked,
        generation=verdict.generation,
        terminal=verdict.terminal,
        failed_at=verdict.failed_at,
        code=outcome.code,
        kind=outcome.kind,
        message=outcome.message,
        gpu_fault=outcome.gpu_fault,
        faulted_pod=outcome.faulted_pod,
        reasons=reasons,
        revision=revision,
        rules_version=rules.version,
        gpu_seconds=verdict.gpu.gpu_seconds,
    )


# --- the fold ------------------------------------------------------------------------------


def _absorb(state: AttemptState, fact: AttemptFact, rules: Rules) -> tuple[AttemptState, int]:
    """The state with `fact` taken in, and how many generations it dropped (R11.5)."""
    last_activity = max(state.last_activity, fact.observed_at)
    if isinstance(fact, QuotaFacts):  # R17: the quota of its Workloads, from the gang stage
        return msgspec.structs.replace(state, usage=with_quota(state.usage, fact), last_activity=last_activity), 0
    if isinstance(fact, PodFacts):
        identity = state.identity
        if identity is None:  # the pod may say which attempt it is (labels, a bare pod, R13.1)
            route = pod_route(fact, rules)
            identity = route.attempt if route is not None else None
        pods, lost = _kept_pods(state, fact, {**state.pods, fact.uid: fact}, rules)
        state = msgspec.structs.replace(state, pods=pods, identity=identity, last_activity=last_activity)
        return (msgspec.structs.replace(state, pod_generations_dropped=state.pod_generations_dropped + lost) if lost else state), lost
    previous = state.job
    kind = registry.kind_named(fact.kind)
    if previous is not None and previous.uid != fact.uid and kind is not None and kind.keys_outlive_objects:
        if _made(fact) < _made(previous):
            return msgspec.structs.replace(state, last_activity=last_activity), 0  # R13.3: the object this key held before
        # R13.3: another object of its name, another attempt: nothing of the earlier one carries over.
        state = AttemptState(key=state.key, last_activity=last_activity, pods=state.pods)
        previous = None
    failed_seen_at = state.job_failed_seen_at
    if fact.failure is not None and (previous is None or previous.failure is None) and failed_seen_at is None:
        failed_seen_at = fact.observed_at
    ended, lost = generations_seen(state.ended, previous, fact, rules)
    state = msgspec.structs.replace(
        state,
        identity=fact.attempt or state.identity,  # the tracked object knows its attempt (R13.4)
        job=fact,
        job_failed_seen_at=failed_seen_at,
        ended=ended,
        last_activity=last_activity,
    )
    if kind is not None and kind.generations_by_pods:
        pods, dropped_pods = kind.kept_pods(fact, state.pods, rules)
        if pods is not state.pods:
            state = msgspec.structs.replace(state, pods=pods, pod_generations_dropped=state.pod_generations_dropped + dropped_pods)
            lost += dropped_pods
    return state, lost


def _made(job: JobFacts) -> tuple[datetime, str]:
    """R13.3: which of two objects under one key is the later (created later; then by uid)."""
    return job.created_at or _EPOCH, job.uid


def _kept_pods(state: AttemptState, fact: PodFacts, pods: dict[str, PodFacts], rules: Rules) -> tuple[dict[str, PodFacts], int]:
    """R11.5 where a kind's pods tell its generations (R16.3): the pods of the latest ones.
    Before its object is known the kind is the one that claims the pod, asked only once
    the state holds many pods."""
    job = state.job
    if job is not None:
        kind = registry.kind_named(job.kind)
    elif len(pods) > rules.max_generations:
        claimed = registry.claiming_kind(fact, rules)
        kind = claimed[0] if claimed is not None else None
    else:
        return pods, 0
    if kind is None or not kind.generations_by_pods:
        return pods, 0
    return kind.kept_pods(job, pods, rules)


def _may_have_failed(state: AttemptState) -> bool:
    # Cheap gate: most facts belong to attempts that are running fine.
    job = state.job
    if job is not None:
        if job.failure is not None or state.ended:
            return True
        kind = registry.kind_named(job.kind)  # R16.3: a restarted container or a disrupted pod (R14.1, R16.6)
        return kind is not None and kind.generations_by_pods and any(_troubled(p) for p in state.pods.values())
    return any(p.phase == "Failed" for p in state.pods.values())


def _troubled(pod: PodFacts) -> bool:
    return pod.disruption is not None or pod.force_deleted is not None or any(c.restarted_at is not None for c in pod.containers)


def fold_attempt(
    state: AttemptState | None, key: str, fact: AttemptFact, rules: Rules, marks: Watermarks
) -> tuple[AttemptState, list[Emit]]:
    if state is None:
        state = AttemptState(key=key, last_activity=fact.observed_at)
    before = state
    state, lost = _absorb(state, fact, rules)
    emits = dropped(DROPPED_GENERATIONS, lost)
    if not _may_have_failed(state):
        return accounted(before, state, fact, (), rules, marks, emits)  # R17
    ident = state.identity
    verdicts = verdicts_of(state, rules) if ident is not None else []
    if ident is None or not verdicts:
        return accounted(before, state, fact, verdicts, rules, marks, emits)
    counted = {f"{v.tracked.uid}/{v.id}": _counted(v, ident) for v in verdicts}
    if counted != state.counted:
        emits = [
            *emits,
            *failure_changes(ident.cluster, ident.namespace, fact.observed_at, state.counted, counted, rules),
            *gpu_time_changes(ident.cluster, fact.observed_at, state.counted, counted, rules),
        ]
        state = msgspec.structs.replace(state, counted=counted)
    last = state.emitted
    revision = last.revision + 1 if last is not None else _first_revision(state, verdicts[-1])
    record = _record(_verdict_key(state, ident, verdicts[-1]), ident, verdicts[-1], revision, rules)
    record = msgspec.structs.replace(record, goodput=terminal_goodput(state, verdicts))  # R17.4
    if last is not None and msgspec.structs.replace(last, revision=revision) == record:
        return accounted(before, state, fact, verdicts, rules, marks, emits)  # R7.2: an identical recomputation emits no verdict
    step = (record.revision, record.code, record.kind, record.generation, record.terminal, record.failed_at)
    state = msgspec.structs.replace(state, emitted=record, revisions=(*state.revisions, step)[-REVISIONS_KEPT:])
    return accounted(before, state, fact, verdicts, rules, marks, [Emit(CLASSIFIED_FAILURES, record.key, record), *emits])


def _counted(v: _Verdict, ident: AttemptId) -> Counted:
    workload_kind = v.tracked.kind if ident.identity == "workload" else ""
    outcome = v.outcome
    return Counted(hour_of(v.failed_at), outcome.code, outcome.kind, outcome.gpu_fault is not None, workload_kind, v.gpu.gpu_seconds, v.gpu.nodes)


def attempt_expires_at(state: AttemptState, rules: Rules) -> datetime | None:
    """R7.4: drop an attempt once it has ended (or all its objects are gone) and the
    retention has passed in stream time since anything happened to it (None: not while
    it runs)."""
    job = state.job
    if job is not None:
        ended = job.failure is not None or job.completed or job.deleted
        if not ended and state.pods and all(p.deleted for p in state.pods.values()):
            kind = registry.kind_named(job.kind)  # R16.3: a group scaled away lives on in no pod
            ended = kind is not None and kind.generations_by_pods
    else:
        ended = all(p.deleted or p.phase in ("Succeeded", "Failed") for p in state.pods.values())
    return after(state.last_activity, rules.retention) if ended else None


# --- R8, R16 under R11.5: the generations kept per attempt ---------------------------------------

DROPPED_GENERATIONS = "dropped_generations"


def generations_seen(
    ended: dict[str, GenerationEnd], previous: JobFacts | None, fact: JobFacts, rules: Rules
) -> tuple[dict[str, GenerationEnd], int]:
    """R8.1, R16.1, R16.2 under R11.5: `ended` with every generation `fact` shows ended
    since `previous` (each value a restart counter passed: a generation that died without
    the attempt failing, seen at `fact.observed_at`; one seen before keeps its time),
    keeping the latest `max_generations`; and how many are dropped. Facts written by an
    earlier release carry no counters: their counters are taken as they stand."""
    kind = registry.kind_named(fact.kind)
    if kind is None or not fact.counters:
        return ended, 0
    limit, lost = rules.max_generations, 0
    if previous is None:
        before: dict[str, int] = {}
    elif previous.counters or not previous.restarts:
        before = previous.counters
    else:
        before = fact.counters  # written before counters were kept: no generation inferred
    found = dict(ended)
    for counter, value in fact.counters.items():
        last = before.get(counter, 0)
        first = max(last, value - limit)  # a counter far ahead: its oldest values are dropped
        lost += first - last
        for n in range(first, value):
            generation = kind.generation_ended(counter, n, fact, fact.observed_at)
            found.setdefault(generation.id, generation)
    if len(found) > limit:
        keep = sorted(found.values(), key=_ended_order)[-limit:]
        lost += len(found) - limit
        found = {g.id: g for g in keep}
    return found, lost
