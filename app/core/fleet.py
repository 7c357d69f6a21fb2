"""Fleet health: a pure fold over the output records (faults, verdicts, gang transitions).

`fold_fleet(state, emit, settings)` reads one output record and returns the derived
records it changes (app/model/fleet_records.py): hourly fault rates per node and per GPU,
quarantine candidates, failure rates per namespace, preemptions and readmission waits
per queue. `fleet_summary(state)` answers what a person looks at (the terminal tables and
the web page). No I/O and no clock: time is the records' own (a fault's first_seen and
last_seen, a verdict's failed_at, a transition's at), so a replay gives the same derived
records byte for byte.

Choices (docs/fleet.md says them for users):
- A fault is one Event (its `faultline.faults` key): it counts once, in the UTC hour of
  its first_seen, however often it repeats; repeats add to `occurrences` only.
- Quarantine counts distinct critical fault Events whose first_seen lies within the last
  `window_seconds` of stream time (the latest record time seen), per node and per GPU.
- A failure is one (attempt, generation); its latest verdict decides its code and kind.
  A terminal verdict after a non-terminal one of the same generation is a new failure
  (a pod task restarted in place, R8.2), not a revision.
- State is one object per driver, updated in place and returned (the attempt stage does
  the same); its parts are frozen Structs, and all of it encodes to JSON.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Annotated

import msgspec

from app.core.attempt_stage import AttemptState
from app.core.emit import Emit
from app.core.kueue import PREEMPTION
from app.model.fleet_records import (
    FAILURE_RATES,
    GPU_FAULT_RATES,
    NODE_FAULT_RATES,
    PREEMPTION_WAITS,
    QUARANTINE_CANDIDATES,
    CandidateState,
    FailureRate,
    GpuFaultRate,
    NodeFaultRate,
    PreemptionWait,
    QuarantineCandidate,
    Scope,
    XidCount,
)
from app.model.records import GANG_EVICTED, ClassifiedFailure, DeadLetter, ErrorKind, Fault, GangTransition, GpuFault
from app.model.records import WAITING_FOR_READMISSION as WAITING

UNKNOWN_NODE = "unknown-node"  # a fault whose message named no node
SEVERITIES = ("USER", "WARN", "CRITICAL")
QUARANTINE_LOG = 50  # quarantine records kept for the page
REVISIONS_KEPT = 20  # verdict revisions kept per attempt for its evidence


class FleetSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Settings of the fleet fold (to be folded into the rule set)."""

    threshold: Annotated[int, msgspec.Meta(ge=1, description="critical faults that make a node or GPU a quarantine candidate")] = 3
    window_seconds: Annotated[int, msgspec.Meta(ge=60, description="sliding window of the quarantine count, in stream time")] = 86_400
    history_hours: Annotated[int, msgspec.Meta(ge=1, le=24 * 90, description="hourly buckets kept (stream time)")] = 48
    evidence_hours: Annotated[int, msgspec.Meta(ge=1, description="an attempt's evidence is kept this long after its last change")] = 24
    recent_verdicts: Annotated[int, msgspec.Meta(ge=1, le=10_000, description="verdicts kept for the recent-verdicts view")] = 100

    def __post_init__(self) -> None:
        if self.window_seconds > self.history_hours * 3600:
            raise ValueError(
                f"window_seconds = {self.window_seconds} is longer than history_hours = {self.history_hours}: "
                "faults inside the quarantine window must still be kept; raise history_hours"
            )

    @property
    def window(self) -> timedelta:
        return timedelta(seconds=self.window_seconds)


DEFAULT_FLEET = FleetSettings()


# --- state -------------------------------------------------------------------------------


class Hit(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A critical fault that may count toward quarantine."""

    at: datetime  # the fault's first_seen
    fault: str  # its faultline.faults key
    label: str  # "Xid 79"


class Bucket(msgspec.Struct, frozen=True, gc=False):
    hour: datetime
    xids: tuple[XidCount, ...]  # ordered by (kind, code)


class Source(msgspec.Struct, frozen=True, gc=False):
    """A node (gpu == "") or one GPU of a node: where faults come from."""

    cluster: str
    node: str
    gpu: str = ""
    gpu_index: int | None = None
    buckets: tuple[Bucket, ...] = ()  # by hour
    hits: tuple[Hit, ...] = ()  # by (at, fault); a candidate's are never pruned past its count
    candidate_since: datetime | None = None
    last_fault_at: datetime | None = None


class Counted(msgspec.Struct, frozen=True, gc=False):
    """How a fault Event was counted, so its repeats add occurrences, never faults."""

    hour: datetime
    node: str  # key in FleetState.nodes
    gpu: str  # key in FleetState.gpus, "" for none
    count: int


class Trail(msgspec.Struct):
    """One attempt's evidence: its faults (latest version per Event) and verdict revisions."""

    cluster: str
    namespace: str
    changed_at: datetime
    faults: dict[str, Fault] = {}
    verdicts: list[ClassifiedFailure] = []


class Waiting(msgspec.Struct, frozen=True, gc=False):
    queue: str  # "<cluster>/<queue>"
    since: datetime


class QueueTotals(msgspec.Struct, gc=False):
    """Lifetime counters of a queue (for /metrics: counters never go down)."""

    preemptions: int = 0
    evictions: int = 0
    readmissions: int = 0
    wait_seconds: float = 0.0


class VerdictRow(msgspec.Struct, frozen=True):
    key: str
    cluster: str
    namespace: str
    code: str
    kind: ErrorKind
    failed_at: datetime
    revision: int
    generation: int
    terminal: bool
    fault: str  # "Xid 79 CRITICAL", "" without a GPU fault
    node: str
    gpu: str
    pod: str
    message: str


class FleetState(msgspec.Struct):
    stream_time: datetime | None = None
    next_sweep: datetime | None = None
    counted: dict[str, Counted] = {}  # faultline.faults key -> how it was counted
    nodes: dict[str, Source] = {}  # "<cluster>/<node>"
    gpus: dict[str, Source] = {}  # "<cluster>/<node>/<gpu>"
    candidates: dict[str, Scope] = {}  # source key -> scope, while a candidate
    quarantine_log: list[QuarantineCandidate] = []  # newest first
    failures: dict[str, FailureRate] = {}  # FailureRate key -> current record
    queues: dict[str, PreemptionWait] = {}  # PreemptionWait key -> current record
    queue_totals: dict[str, QueueTotals] = {}  # "<cluster>/<queue>"
    waiting: dict[str, Waiting] = {}  # gang key -> the wait it is in
    transitions_seen: dict[str, datetime] = {}  # redelivered transitions count once
    attempts: dict[str, Trail] = {}
    recent: list[VerdictRow] = []  # newest first, one per attempt key
    faults_total: dict[str, int] = {}  # severity -> distinct fault Events, lifetime
    verdicts_total: dict[str, dict[str, int]] = {}  # code -> kind -> verdict records, lifetime
    dead_letters: int = 0


# --- time ----------------------------------------------------------------------------------


def hour_of(at: datetime) -> datetime:
    """The start of the UTC hour holding `at`."""
    return at.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)


def _iso(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _horizon(state: FleetState, settings: FleetSettings) -> datetime | None:
    """The oldest hour still kept."""
    if state.stream_time is None:
        return None
    return hour_of(state.stream_time) - timedelta(hours=settings.history_hours - 1)


# --- the fold ------------------------------------------------------------------------------


def fold_fleet(state: FleetState | None, emit: Emit, settings: FleetSettings = DEFAULT_FLEET) -> tuple[FleetState, list[Emit]]:
    """One output record in; the derived records it changes out. Stream time moves first
    (so a window that slid past clears before the record is counted), then the record."""
    state = state if state is not None else FleetState()
    value = emit.value
    if isinstance(value, Fault):
        at, apply = value.fault.last_seen, _on_fault
    elif isinstance(value, ClassifiedFailure):
        at, apply = value.failed_at, _on_verdict
    elif isinstance(value, GangTransition):
        at, apply = value.at, _on_transition
    elif isinstance(value, DeadLetter):
        state.dead_letters += 1
        return state, []
    else:
        return state, []  # internal facts, derived records: not fleet inputs
    out = _advance(state, at, settings)
    out.extend(apply(state, emit.key, value, settings))
    return state, out


def _advance(state: FleetState, at: datetime, settings: FleetSettings) -> list[Emit]:
    if state.stream_time is not None and at <= state.stream_time:
        return []
    state.stream_time = at
    out = _slide(state, at, settings)
    if state.next_sweep is None or at >= state.next_sweep:
        _sweep(state, at, settings)
        state.next_sweep = hour_of(at) + timedelta(hours=1)
    return out


# --- faults: rates and quarantine ------------------------------------------------------------


def gpu_id(fault: GpuFault) -> str:
    """The GPU a fault names: its uuid, else its index; "" for none (an SXid names a switch)."""
    if fault.gpu_uuid:
        return fault.gpu_uuid
    return f"index-{fault.gpu_index}" if fault.gpu_index is not None else ""


def fault_label(kind: str, code: int) -> str:
    return f"{'SXid' if kind == 'SXID' else 'Xid'} {code}"


def _on_fault(state: FleetState, key: str, record: Fault, settings: FleetSettings) -> list[Emit]:
    fault = record.fault
    _remember_fault(state, key, record)
    counted = state.counted.get(key)
    out: list[Emit] = []
    if counted is not None:  # the same Event again: only its repeats grew (R2.4)
        grown = fault.count - counted.count
        if grown <= 0:
            return out
        state.counted[key] = msgspec.structs.replace(counted, count=fault.count)
        for table, source_key in ((state.nodes, counted.node), (state.gpus, counted.gpu)):
            source = table.get(source_key)
            if source is not None:
                table[source_key] = source = _add(source, counted.hour, fault, 0, grown)
                out.append(_rate(source_key, source, counted.hour))
        return out
    hour = hour_of(fault.first_seen)
    horizon = _horizon(state, settings)
    if horizon is not None and hour < horizon:
        return out  # older than the history kept: it would be swept at once
    node_key = f"{record.cluster}/{fault.node or UNKNOWN_NODE}"
    gpu = gpu_id(fault)
    gpu_key = f"{node_key}/{gpu}" if gpu else ""
    state.counted[key] = Counted(hour, node_key, gpu_key, fault.count)
    state.faults_total[fault.severity] = state.faults_total.get(fault.severity, 0) + 1
    targets: tuple[tuple[Scope, dict[str, Source], str], ...] = (("node", state.nodes, node_key), ("gpu", state.gpus, gpu_key))
    for scope, table, source_key in targets:
        if not source_key:
            continue
        source = table.get(source_key) or Source(record.cluster, fault.node or UNKNOWN_NODE, gpu if scope == "gpu" else "")
        source = _add(source, hour, fault, 1, fault.count)
        last = source.last_fault_at
        source = msgspec.structs.replace(
            source,
            last_fault_at=fault.first_seen if last is None or fault.first_seen > last else last,
            gpu_index=fault.gpu_index if scope == "gpu" and fault.gpu_index is not None else source.gpu_index,
        )
        became = False
        if fault.severity == "CRITICAL":
            source, became = _hit(source, Hit(fault.first_seen, key, fault_label(fault.kind, fault.code)), state, settings)
        table[source_key] = source
        out.append(_rate(source_key, source, hour))
        if became:
            state.candidates[source_key] = scope
            out.append(_quarantine(state, scope, source, "candidate", fault.first_seen, source.hits, settings))
    return out


def _add(source: Source, hour: datetime, fault: GpuFault, faults: int, occurrences: int) -> Source:
    buckets = list(source.buckets)
    index = next((i for i, b in enumerate(buckets) if b.hour == hour), None)
    xids = list(buckets[index].xids) if index is not None else []
    at = next((i for i, x in enumerate(xids) if (x.kind, x.code) == (fault.kind, fault.code)), None)
    if at is None:
        xids.append(XidCount(fault.kind, fault.code, fault.name, fault.severity, faults, occurrences))
        xids.sort(key=lambda x: (x.kind, x.code))
    else:
        x = xids[at]
        xids[at] = msgspec.structs.replace(x, faults=x.faults + faults, occurrences=x.occurrences + occurrences)
    bucket = Bucket(hour, tuple(xids))
    if index is None:
        buckets.append(bucket)
        buckets.sort(key=lambda b: b.hour)
    else:
        buckets[index] = bucket
    return msgspec.structs.replace(source, buckets=tuple(buckets))


def _severity_counts(xids: Iterable[XidCount]) -> dict[str, int]:
    counts = dict.fromkeys(SEVERITIES, 0)
    for x in xids:
        counts[x.severity] += x.faults
    return counts


def _rate(source_key: str, source: Source, hour: datetime) -> Emit:
    bucket = next(b for b in source.buckets if b.hour == hour)
    xids = list(bucket.xids)
    sev = _severity_counts(xids)
    faults, occurrences = sum(x.faults for x in xids), sum(x.occurrences for x in xids)
    key = f"{source_key}/{_iso(hour)}"
    if source.gpu:
        gpu_rate = GpuFaultRate(
            key, source.cluster, source.node, source.gpu, source.gpu_index, hour, faults, occurrences,
            sev["USER"], sev["WARN"], sev["CRITICAL"], xids,
        )
        return Emit(GPU_FAULT_RATES, key, gpu_rate)
    node_rate = NodeFaultRate(key, source.cluster, source.node, hour, faults, occurrences, sev["USER"], sev["WARN"], sev["CRITICAL"], xids)
    return Emit(NODE_FAULT_RATES, key, node_rate)


def _hit(source: Source, hit: Hit, state: FleetState, settings: FleetSettings) -> tuple[Source, bool]:
    """Count a critical fault; True when it makes the source a candidate."""
    assert state.stream_time is not None
    oldest = state.stream_time - settings.window
    hits = {h.fault: h for h in source.hits if h.at > oldest}
    if hit.at > oldest:
        hits[hit.fault] = hit
    ordered = tuple(sorted(hits.values(), key=lambda h: (h.at, h.fault)))
    source = msgspec.structs.replace(source, hits=ordered)
    if source.candidate_since is None and len(ordered) >= settings.threshold:
        return msgspec.structs.replace(source, candidate_since=hit.at), True
    return source, False


def candidate_key(scope: Scope, source: Source) -> str:
    return f"{source.cluster}/node/{source.node}" if scope == "node" else f"{source.cluster}/gpu/{source.node}/{source.gpu}"


def _quarantine(
    state: FleetState, scope: Scope, source: Source, what: CandidateState, at: datetime, hits: Iterable[Hit], settings: FleetSettings
) -> Emit:
    counted = list(hits)
    key = candidate_key(scope, source)
    record = QuarantineCandidate(
        key=key,
        cluster=source.cluster,
        scope=scope,
        node=source.node,
        gpu=source.gpu,
        state=what,
        at=at,
        faults=len(counted),
        threshold=settings.threshold,
        window_seconds=settings.window_seconds,
        first_fault_at=counted[0].at if counted else None,
        last_fault_at=counted[-1].at if counted else None,
        fault_keys=[h.fault for h in counted],
        codes=[h.label for h in counted],
    )
    state.quarantine_log.insert(0, record)
    del state.quarantine_log[QUARANTINE_LOG:]
    return Emit(QUARANTINE_CANDIDATES, key, record)


def _slide(state: FleetState, now: datetime, settings: FleetSettings) -> list[Emit]:
    """Clear every candidate whose window slid past: it stops being one at the instant the
    threshold-th newest counted fault leaves the window."""
    window, n = settings.window, settings.threshold
    ended: list[tuple[datetime, str]] = []
    for source_key, scope in state.candidates.items():
        source = (state.nodes if scope == "node" else state.gpus)[source_key]
        if sum(1 for h in source.hits if h.at > now - window) < n:
            ended.append((source.hits[-n].at + window, source_key))
    out = []
    for at, source_key in sorted(ended):
        scope = state.candidates.pop(source_key)
        table = state.nodes if scope == "node" else state.gpus
        source = table[source_key]
        remaining = [h for h in source.hits if h.at > at - window]
        table[source_key] = msgspec.structs.replace(
            source, candidate_since=None, hits=tuple(h for h in source.hits if h.at > now - window)
        )
        out.append(_quarantine(state, scope, source, "cleared", at, remaining, settings))
    return out


# --- verdicts: failure rates and evidence ------------------------------------------------------


def _trail(state: FleetState, key: str, cluster: str, namespace: str) -> Trail:
    trail = state.attempts.get(key)
    now = state.stream_time
    assert now is not None
    if trail is None:
        trail = state.attempts[key] = Trail(cluster, namespace, now)
    trail.changed_at = now
    return trail


def _remember_fault(state: FleetState, key: str, record: Fault) -> None:
    if record.attempt is None:
        return
    trail = _trail(state, record.attempt, record.cluster, record.namespace)
    known = trail.faults.get(key)
    if known is None or (record.fault.count, record.fault.last_seen) >= (known.fault.count, known.fault.last_seen):
        trail.faults[key] = record


def describe_gpu_fault(fault: GpuFault | None) -> str:
    return "" if fault is None else f"{fault_label(fault.kind, fault.code)} {fault.severity}"


def _on_verdict(state: FleetState, key: str, verdict: ClassifiedFailure, settings: FleetSettings) -> list[Emit]:
    trail = _trail(state, key, verdict.cluster, verdict.namespace)
    if trail.verdicts and trail.verdicts[-1] == verdict:
        return []  # redelivered (at-least-once): counted already
    previous = next((v for v in reversed(trail.verdicts) if v.generation == verdict.generation), None)
    trail.verdicts.append(verdict)
    del trail.verdicts[:-REVISIONS_KEPT]
    by_kind = state.verdicts_total.setdefault(verdict.code, {})
    by_kind[verdict.kind] = by_kind.get(verdict.kind, 0) + 1
    _recent(state, verdict, settings)

    out: list[Emit] = []
    if previous is not None and (previous.terminal or not verdict.terminal):  # a revision of the same failure
        if _failure_key(previous) == _failure_key(verdict) and (previous.gpu_fault is None) == (verdict.gpu_fault is None):
            return out
        out.extend(_count_failure(state, previous, -1, settings))
    out.extend(_count_failure(state, verdict, 1, settings))
    return out


def _failure_key(v: ClassifiedFailure) -> str:
    return f"{v.cluster}/{v.namespace}/{_iso(hour_of(v.failed_at))}/{v.code}/{v.kind}"


def _count_failure(state: FleetState, v: ClassifiedFailure, delta: int, settings: FleetSettings) -> list[Emit]:
    key = _failure_key(v)
    hour = hour_of(v.failed_at)
    known = state.failures.get(key)
    horizon = _horizon(state, settings)
    if known is None and (delta < 0 or (horizon is not None and hour < horizon)):
        return []  # outside the history kept
    if known is None:
        known = FailureRate(key, v.cluster, v.namespace, hour, v.code, v.kind, 0, 0)
    record = msgspec.structs.replace(
        known, failures=known.failures + delta, gpu_faults=known.gpu_faults + (delta if v.gpu_fault is not None else 0)
    )
    state.failures[key] = record
    return [Emit(FAILURE_RATES, key, record)]


def _recent(state: FleetState, v: ClassifiedFailure, settings: FleetSettings) -> None:
    fault = v.gpu_fault
    pod = v.faulted_pod.name if v.faulted_pod is not None else (fault.pod.name if fault is not None else "")
    row = VerdictRow(
        key=v.key,
        cluster=v.cluster,
        namespace=v.namespace,
        code=v.code,
        kind=v.kind,
        failed_at=v.failed_at,
        revision=v.revision,
        generation=v.generation,
        terminal=v.terminal,
        fault=describe_gpu_fault(fault),
        node=fault.node if fault is not None else "",
        gpu=gpu_id(fault) if fault is not None else "",
        pod=pod,
        message=v.message[:500],
    )
    state.recent = [row, *(r for r in state.recent if r.key != v.key)][: settings.recent_verdicts]


# --- gang transitions: preemptions and waits per queue ----------------------------------------


def queue_of(t: GangTransition) -> str:
    """The queue a gang waits in: its LocalQueue (`<namespace>/<queue>`), or the
    namespace when the JobSet names none."""
    return f"{t.namespace}/{t.queue}" if t.queue else t.namespace


def _queue_source(t: GangTransition) -> str:
    return "queue-name" if t.queue else "namespace"


def _on_transition(state: FleetState, key: str, t: GangTransition, settings: FleetSettings) -> list[Emit]:
    ident = f"{t.key}|{_iso(t.at)}|{t.from_}|{t.to}"
    if ident in state.transitions_seen:
        return []  # redelivered
    state.transitions_seen[ident] = t.at
    queue = f"{t.cluster}/{queue_of(t)}"
    if t.to == WAITING:
        state.waiting[t.key] = Waiting(queue, t.at)
    else:
        state.waiting.pop(t.key, None)
    evicted = t.to == WAITING or (t.code == GANG_EVICTED and t.from_ != WAITING)
    # R9.4: only a preemption waits; with the policy off it ends the attempt at once.
    preempted = t.to == WAITING or (evicted and t.cause is not None and t.cause.reason == PREEMPTION)
    readmitted = t.from_ == WAITING and t.to == "Running"
    if not (evicted or readmitted):
        return []
    waited = (t.waited_seconds or 0.0) if readmitted else 0.0
    totals = state.queue_totals.setdefault(queue, QueueTotals())
    totals.evictions += evicted
    totals.preemptions += preempted
    totals.readmissions += readmitted
    totals.wait_seconds += waited
    hour = hour_of(t.at)
    horizon = _horizon(state, settings)
    if horizon is not None and hour < horizon:
        return []
    bucket_key = f"{queue}/{_iso(hour)}"
    known = state.queues.get(bucket_key) or PreemptionWait(bucket_key, t.cluster, queue_of(t), _queue_source(t), hour, 0, 0, 0, 0.0, 0.0)
    record = msgspec.structs.replace(
        known,
        evictions=known.evictions + evicted,
        preemptions=known.preemptions + preempted,
        readmissions=known.readmissions + readmitted,
        wait_seconds_total=known.wait_seconds_total + waited,
        wait_seconds_max=max(known.wait_seconds_max, waited),
    )
    state.queues[bucket_key] = record
    return [Emit(PREEMPTION_WAITS, bucket_key, record)]


# --- expiry ------------------------------------------------------------------------------------


def _sweep(state: FleetState, now: datetime, settings: FleetSettings) -> None:
    """Drop what fell out of the history (hourly, in stream time): state stays bounded."""
    horizon = hour_of(now) - timedelta(hours=settings.history_hours - 1)
    oldest_hit = now - settings.window
    state.counted = {k: c for k, c in state.counted.items() if c.hour >= horizon}
    for table in (state.nodes, state.gpus):
        for key, source in list(table.items()):
            buckets = tuple(b for b in source.buckets if b.hour >= horizon)
            hits = source.hits if key in state.candidates else tuple(h for h in source.hits if h.at > oldest_hit)
            if not buckets and not hits and source.candidate_since is None:
                del table[key]
            elif buckets != source.buckets or hits != source.hits:
                table[key] = msgspec.structs.replace(source, buckets=buckets, hits=hits)
    state.failures = {k: r for k, r in state.failures.items() if r.hour >= horizon}
    state.queues = {k: r for k, r in state.queues.items() if r.hour >= horizon}
    state.transitions_seen = {k: at for k, at in state.transitions_seen.items() if at >= horizon}
    state.waiting = {k: w for k, w in state.waiting.items() if w.since >= horizon}
    keep = now - timedelta(hours=settings.evidence_hours)
    state.attempts = {k: t for k, t in state.attempts.items() if t.changed_at >= keep}


# --- what a person looks at ----------------------------------------------------------------------


class SeverityCounts(msgspec.Struct, frozen=True):
    user: int = 0
    warn: int = 0
    critical: int = 0


class HourPoint(msgspec.Struct, frozen=True):
    hour: datetime
    user: int
    warn: int
    critical: int
    failures: int
    system_failures: int


class SourceRow(msgspec.Struct, frozen=True):
    """A node (gpu == "") or a GPU, over the history kept."""

    key: str
    cluster: str
    node: str
    gpu: str
    gpu_index: int | None
    faults: int
    occurrences: int
    user: int
    warn: int
    critical: int
    top: str  # the most frequent code, e.g. "Xid 79"
    gpus: int  # GPUs of a node that had faults (0 for a GPU row)
    last_fault_at: datetime | None
    candidate: bool


class CandidateRow(msgspec.Struct, frozen=True):
    key: str
    scope: Scope
    cluster: str
    node: str
    gpu: str
    since: datetime
    faults: int  # counted within the window at stream time
    codes: list[str]
    last_fault_at: datetime | None


class FailureRow(msgspec.Struct, frozen=True):
    cluster: str
    namespace: str
    code: str
    kind: ErrorKind
    failures: int
    gpu_faults: int
    last_hour: datetime


class QueueRow(msgspec.Struct, frozen=True):
    cluster: str
    queue: str
    queue_source: str
    evictions: int
    preemptions: int
    readmissions: int
    waiting: int  # gangs waiting for readmission now
    wait_seconds_avg: float | None
    wait_seconds_max: float | None


class Totals(msgspec.Struct, frozen=True):
    faults: int
    occurrences: int
    severity: SeverityCounts
    failures: int
    system_failures: int
    user_failures: int
    gpu_failures: int
    candidates: int
    nodes: int
    gpus: int
    attempts: int
    dead_letters: int


class FleetSummary(msgspec.Struct, frozen=True):
    """Plain data for the terminal tables and the web page; counts cover the history kept."""

    stream_time: datetime | None
    threshold: int
    window_seconds: int
    history_hours: int
    totals: Totals
    hours: list[HourPoint]
    nodes: list[SourceRow]
    gpus: list[SourceRow]
    quarantine: list[CandidateRow]
    quarantine_events: list[QuarantineCandidate]
    failures: list[FailureRow]
    queues: list[QueueRow]
    recent: list[VerdictRow]


def _source_row(key: str, source: Source, state: FleetState, gpus: int = 0) -> SourceRow:
    xids: dict[tuple[str, int], int] = {}
    sev = dict.fromkeys(SEVERITIES, 0)
    occurrences = 0
    for bucket in source.buckets:
        for x in bucket.xids:
            xids[(x.kind, x.code)] = xids.get((x.kind, x.code), 0) + x.faults
            sev[x.severity] += x.faults
            occurrences += x.occurrences
    top = min(xids.items(), key=lambda item: (-item[1], item[0]), default=None)
    return SourceRow(
        key=key,
        cluster=source.cluster,
        node=source.node,
        gpu=source.gpu,
        gpu_index=source.gpu_index,
        faults=sum(sev.values()),
        occurrences=occurrences,
        user=sev["USER"],
        warn=sev["WARN"],
        critical=sev["CRITICAL"],
        top=fault_label(*top[0]) if top is not None else "",
        gpus=gpus,
        last_fault_at=source.last_fault_at,
        candidate=key in state.candidates,
    )


def _ranked(rows: list[SourceRow]) -> list[SourceRow]:
    return sorted(rows, key=lambda r: (-r.critical, -r.faults, r.key))


def node_rows(state: FleetState) -> list[SourceRow]:
    """Every node with faults in the history kept, worst first."""
    gpus: dict[str, int] = {}
    for key in state.gpus:
        node_key = key.rsplit("/", 1)[0]
        gpus[node_key] = gpus.get(node_key, 0) + 1
    return _ranked([_source_row(k, s, state, gpus.get(k, 0)) for k, s in state.nodes.items() if s.buckets])


def gpu_rows(state: FleetState) -> list[SourceRow]:
    return _ranked([_source_row(k, s, state) for k, s in state.gpus.items() if s.buckets])


def candidate_rows(state: FleetState, settings: FleetSettings = DEFAULT_FLEET) -> list[CandidateRow]:
    rows = []
    now = state.stream_time
    for source_key, scope in state.candidates.items():
        source = (state.nodes if scope == "node" else state.gpus)[source_key]
        hits = [h for h in source.hits if now is None or h.at > now - settings.window]
        assert source.candidate_since is not None
        rows.append(
            CandidateRow(
                key=candidate_key(scope, source),
                scope=scope,
                cluster=source.cluster,
                node=source.node,
                gpu=source.gpu,
                since=source.candidate_since,
                faults=len(hits),
                codes=[h.label for h in hits],
                last_fault_at=hits[-1].at if hits else None,
            )
        )
    return sorted(rows, key=lambda r: (r.scope != "node", -r.faults, r.key))


def failure_rows(state: FleetState) -> list[FailureRow]:
    grouped: dict[tuple[str, str, str, ErrorKind], list[FailureRate]] = {}
    for record in state.failures.values():
        grouped.setdefault((record.cluster, record.namespace, record.code, record.kind), []).append(record)
    rows = [
        FailureRow(c, ns, code, kind, sum(r.failures for r in rs), sum(r.gpu_faults for r in rs), max(r.hour for r in rs))
        for (c, ns, code, kind), rs in grouped.items()
    ]
    return sorted((r for r in rows if r.failures > 0), key=lambda r: (-r.failures, r.cluster, r.namespace, r.code, r.kind))


def queue_rows(state: FleetState) -> list[QueueRow]:
    grouped: dict[str, list[PreemptionWait]] = {}
    for record in state.queues.values():
        grouped.setdefault(f"{record.cluster}/{record.queue}", []).append(record)
    waiting: dict[str, int] = {}
    for wait in state.waiting.values():
        waiting[wait.queue] = waiting.get(wait.queue, 0) + 1
    rows = []
    for queue in sorted(set(grouped) | set(waiting)):
        records = grouped.get(queue, [])
        readmissions = sum(r.readmissions for r in records)
        cluster, name = queue.split("/", 1)
        rows.append(
            QueueRow(
                cluster=cluster,
                queue=name,
                queue_source=records[0].queue_source if records else "namespace",
                evictions=sum(r.evictions for r in records),
                preemptions=sum(r.preemptions for r in records),
                readmissions=readmissions,
                waiting=waiting.get(queue, 0),
                wait_seconds_avg=sum(r.wait_seconds_total for r in records) / readmissions if readmissions else None,
                wait_seconds_max=max(r.wait_seconds_max for r in records) if readmissions else None,
            )
        )
    return rows


def hour_points(state: FleetState, settings: FleetSettings = DEFAULT_FLEET) -> list[HourPoint]:
    """Fleet-wide faults (by severity) and failures per hour, from the oldest hour with data
    to the hour of stream time (empty hours included)."""
    if state.stream_time is None:
        return []
    faults: dict[datetime, dict[str, int]] = {}
    for source in state.nodes.values():
        for bucket in source.buckets:
            counts = faults.setdefault(bucket.hour, dict.fromkeys(SEVERITIES, 0))
            for severity, n in _severity_counts(bucket.xids).items():
                counts[severity] += n
    failures: dict[datetime, list[int]] = {}
    for record in state.failures.values():
        row = failures.setdefault(record.hour, [0, 0])
        row[0] += record.failures
        row[1] += record.failures if record.kind == "SYSTEM" else 0
    last = hour_of(state.stream_time)
    first = min([*faults, *failures], default=last)
    first = max(first, last - timedelta(hours=settings.history_hours - 1))
    points = []
    hour = first
    while hour <= last:
        sev = faults.get(hour, dict.fromkeys(SEVERITIES, 0))
        fail = failures.get(hour, [0, 0])
        points.append(HourPoint(hour, sev["USER"], sev["WARN"], sev["CRITICAL"], fail[0], fail[1]))
        hour += timedelta(hours=1)
    return points


def recent_verdicts(state: FleetState, limit: int | None = None) -> list[VerdictRow]:
    return state.recent[:limit] if limit is not None else list(state.recent)


def fleet_summary(state: FleetState, settings: FleetSettings = DEFAULT_FLEET, top: int = 10) -> FleetSummary:
    nodes, gpus, failures = node_rows(state), gpu_rows(state), failure_rows(state)
    failed = sum(r.failures for r in failures)
    system = sum(r.failures for r in failures if r.kind == "SYSTEM")
    totals = Totals(
        faults=sum(r.faults for r in nodes),
        occurrences=sum(r.occurrences for r in nodes),
        severity=SeverityCounts(sum(r.user for r in nodes), sum(r.warn for r in nodes), sum(r.critical for r in nodes)),
        failures=failed,
        system_failures=system,
        user_failures=failed - system,
        gpu_failures=sum(r.gpu_faults for r in failures),
        candidates=len(state.candidates),
        nodes=len(nodes),
        gpus=len(gpus),
        attempts=len(state.attempts),
        dead_letters=state.dead_letters,
    )
    return FleetSummary(
        stream_time=state.stream_time,
        threshold=settings.threshold,
        window_seconds=settings.window_seconds,
        history_hours=settings.history_hours,
        totals=totals,
        hours=hour_points(state, settings),
        nodes=nodes[:top],
        gpus=gpus[:top],
        quarantine=candidate_rows(state, settings),
        quarantine_events=state.quarantine_log[:top],
        failures=failures[:top],
        queues=queue_rows(state),
        recent=state.recent[:top],
    )


# --- one attempt's evidence ------------------------------------------------------------------------


class PodEvidence(msgspec.Struct, frozen=True):
    name: str
    uid: str
    node: str = ""
    phase: str = ""  # "" when the driver does not know the pod's state
    faults: int = 0


class AttemptEvidence(msgspec.Struct, frozen=True):
    key: str
    cluster: str
    namespace: str
    current: ClassifiedFailure | None
    pods: list[PodEvidence]
    faults: list[Fault]  # by first_seen, then pod name, then Event
    verdicts: list[ClassifiedFailure]  # revisions, oldest first


def attempt_pods(attempt: AttemptState | None) -> list[PodEvidence]:
    """The pods the attempt stage holds for an attempt (while its state is kept)."""
    if attempt is None:
        return []
    return [
        PodEvidence(pod.name, pod.uid, pod.node_name, pod.phase + (" (deleted)" if pod.deleted else ""))
        for pod in attempt.pods.values()
    ]


def evidence_of(state: FleetState, key: str, known_pods: Iterable[PodEvidence] = ()) -> AttemptEvidence | None:
    """An attempt's faults in time order and its verdict revisions; `known_pods` adds the
    pods a driver knows beyond those the faults and verdicts name (with their phase)."""
    trail = state.attempts.get(key)
    if trail is None:
        return None
    faults = sorted(trail.faults.items(), key=lambda item: (item[1].fault.first_seen, item[1].fault.pod.name, item[1].event_uid, item[0]))
    pods: dict[str, PodEvidence] = {p.uid: p for p in known_pods}
    for _, record in faults:
        pod = record.fault.pod
        known = pods.get(pod.uid) or PodEvidence(pod.name, pod.uid, record.fault.node)
        pods[pod.uid] = msgspec.structs.replace(known, faults=known.faults + 1, node=known.node or record.fault.node)
    for verdict in trail.verdicts:
        named = verdict.faulted_pod
        if named is not None and named.uid not in pods:
            pods[named.uid] = PodEvidence(named.name, named.uid)
    return AttemptEvidence(
        key=key,
        cluster=trail.cluster,
        namespace=trail.namespace,
        current=trail.verdicts[-1] if trail.verdicts else None,
        pods=sorted(pods.values(), key=lambda p: (p.name, p.uid)),
        faults=[record for _, record in faults],
        verdicts=list(trail.verdicts),
    )
