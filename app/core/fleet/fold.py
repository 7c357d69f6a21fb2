"""The fleet stage: fleet health folded per key, never one value for the whole fleet.

Its inputs (`faultline.fleet-inputs`) come from the other stages, each keyed by what it
counts toward (`app/core/stages/fleet_inputs.py`):

    <cluster>/node/<node>                    a node's quarantine count (R2.7b: by the pod's node)
    <cluster>/gpu/<node>/<gpu>               one GPU of a node: the same
    <cluster>/rate/<hour>/node/<node>        the faults first seen on a node in one hour, by code
    <cluster>/rate/<hour>/gpu/<node>/<gpu>   the same for one GPU
    <cluster>/failures/<ns>/<hour>           failed attempts of a namespace in one hour, by code and kind
    <cluster>/gpu-time/<node>/<hour>         the GPU-seconds failures of one hour burned on a node (issue 30)
    <cluster>/queue/<ns>/<queue>             a LocalQueue: Kueue evictions, preemptions, readmission waits

Each state is bounded by the settings, not by the fleet: one hour's counts by code (an
hour past `history_hours` is dropped), at most `HITS_KEPT` critical faults for the
quarantine count, the gangs waiting in one queue. A node's hours are separate states: a
node with faults of many codes in every hour of the history would otherwise hold them
all in one value (history_hours × codes: over 64 KB at the default 48 h). Every change emits the derived record it changed (the derived
topics, app/model/fleet_records.py); the fleet-wide views are assembled from those
records at read time (app/core/fleet/read_model.py, fleet_summary.py), so any worker can serve them.

Time is stream time (SPEC R12.5): the fleet stage's watermark, else the latest record
time folded into the state; never a timestamp written inside an object. The quarantine
window slides on it, so a state with critical faults waits on progress (`due`).

Choices (docs/fleet.md says them for users):
- A fault is one Event: it counts once, in the UTC hour of its first_seen, however often
  it repeats; repeats add to `occurrences` only.
- Quarantine counts distinct critical fault Events whose first_seen lies within the last
  `window_seconds` of stream time, per node and per GPU.
- A failure is one (attempt, generation); its latest verdict decides its code and kind.
- A failure's GPU-seconds (issue 30) count in the hour it failed: by code and kind with the
  failure rates, and by node (the nodes its pods ran on) and kind apart.
"""

from __future__ import annotations

from bisect import bisect_left
from datetime import datetime, timedelta, timezone
from functools import lru_cache

import msgspec

from app.core.base.clock import after, hour_of, iso
from app.core.stages.fleet_inputs import queue_name
from app.core.base.emit import Emit
from app.core.identity.kueue import PREEMPTION
from app.core.base.progress import Watermarks
from app.core.base.rules import FleetSettings, Rules
from app.core.base.xid import strongest
from app.model.facts import FailureChange, FaultChange, FaultCount, GangChange, GpuTimeChange
from app.model.fleet_records import (
    FAILURE_RATES,
    GANG_QUEUES,
    GPU_FAULT_RATES,
    NODE_FAULT_RATES,
    NODE_GPU_TIME,
    PREEMPTION_WAITS,
    QUARANTINE_CANDIDATES,
    CandidateState,
    FailureRate,
    GangQueue,
    GpuFaultRate,
    NodeFaultRate,
    NodeGpuTime,
    PreemptionWait,
    QuarantineCandidate,
    Scope,
    XidCount,
)
from app.model.records import DEVICE_HEALTH, GANG_EVICTED, WAITING_FOR_READMISSION, ErrorKind, GangTransition

SEVERITIES = ("USER", "WARN", "CRITICAL")
HITS_KEPT = 100  # critical faults kept per node or GPU for its quarantine count
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
AT_ONCE = datetime.min.replace(tzinfo=timezone.utc)  # expires at any stream time




def fault_label(kind: str, code: int) -> str:
    """`Xid 79`, `SXid 20034`, or `Device health` for a device the kubelet reported (R14.2)."""
    if kind == DEVICE_HEALTH:
        return "Device health"
    return f"{'SXid' if kind == 'SXID' else 'Xid'} {code}"


# --- states ------------------------------------------------------------------------------------


class Hit(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A critical fault that may count toward quarantine."""

    at: datetime  # the fault's first_seen
    fault: str  # its faultline.faults key
    label: str  # "Xid 79"
    action: str = "UNKNOWN"  # NVIDIA's recommended action for it (SPEC R14.3)


class SourceStats(msgspec.Struct, frozen=True, gc=False, tag="source"):
    """The quarantine count of a node (gpu == "") or one GPU of a node."""

    cluster: str
    node: str
    gpu: str = ""
    gpu_index: int | None = None
    latest: datetime = _EPOCH  # the latest record time folded in (stream time without progress)
    hits: tuple[Hit, ...] = ()  # by (at, fault): the newest HITS_KEPT critical faults in the window
    candidate_since: datetime | None = None
    reported: int = 0  # the faults its latest candidate record counted (0: none since it became one)

    @property
    def scope(self) -> Scope:
        return "gpu" if self.gpu else "node"


class RateStats(msgspec.Struct, frozen=True, gc=False, tag="rate"):
    """The faults first seen on a node (gpu == "") or one GPU of a node in one UTC hour."""

    cluster: str
    node: str
    hour: datetime
    gpu: str = ""
    gpu_index: int | None = None
    latest: datetime = _EPOCH
    xids: tuple[XidCount, ...] = ()  # ordered by (kind, code, severity)
    last_fault_at: datetime | None = None


class FailureCount(msgspec.Struct, frozen=True, gc=False, array_like=True):
    code: str
    kind: ErrorKind
    failures: int
    gpu_faults: int
    workload_kind: str = ""  # SPEC R13.3: a workload attempt's object kind; "" under labels
    gpu_seconds: int = 0  # issue 30: what those failures burned
    gpu_seconds_unknown: int = 0  # failures whose GPU-seconds are unknown


class FailureStats(msgspec.Struct, frozen=True, gc=False, tag="failures"):
    """Failed attempts of one namespace in one UTC hour."""

    cluster: str
    namespace: str
    hour: datetime
    latest: datetime = _EPOCH
    counts: tuple[FailureCount, ...] = ()  # by (code, kind, workload kind)


class GpuTimeStats(msgspec.Struct, frozen=True, gc=False, tag="gpu-time"):
    """Issue 30: the GPU-seconds that failures of one UTC hour burned on one node, by kind."""

    cluster: str
    node: str
    hour: datetime
    latest: datetime = _EPOCH
    failures: int = 0
    system_failures: int = 0
    user_gpu_seconds: int = 0
    system_gpu_seconds: int = 0


class QueueBucket(msgspec.Struct, frozen=True, gc=False, array_like=True):
    hour: datetime
    evictions: int = 0
    preemptions: int = 0
    readmissions: int = 0
    wait_seconds_total: float = 0.0
    wait_seconds_max: float = 0.0


class QueueStats(msgspec.Struct, frozen=True, gc=False, tag="queue"):
    """One LocalQueue (or a namespace, for JobSets that name none)."""

    cluster: str
    queue: str  # "<namespace>/<queue>", or "<namespace>"
    queue_source: str  # "queue-name" | "namespace"
    latest: datetime = _EPOCH
    buckets: tuple[QueueBucket, ...] = ()
    waiting: dict[str, datetime] = {}  # gang key -> since (WaitingForReadmission now)
    totals: QueueBucket = QueueBucket(_EPOCH)  # lifetime (counters never go down)


FleetStats = SourceStats | RateStats | FailureStats | GpuTimeStats | QueueStats


# --- keys ------------------------------------------------------------------------------------


# --- the fold ---------------------------------------------------------------------------------


def _now(state: FleetStats, marks: Watermarks) -> datetime:
    """R12.5: the stage's watermark for the cluster, else the latest record time."""
    return marks.stream_time(state.cluster) or state.latest


def _horizon(now: datetime, fleet: FleetSettings) -> datetime:
    """The oldest hour still kept."""
    return _horizon_at(now, fleet.history_hours)


@lru_cache(maxsize=256)  # one stream time for every state of a sweep (an int hashes faster than the settings)
def _horizon_at(now: datetime, history_hours: int) -> datetime:
    return hour_of(now) - timedelta(hours=history_hours - 1)


def fold_fleet(
    state: FleetStats | None, key: str, record: FaultChange | FailureChange | GpuTimeChange | GangChange, rules: Rules, marks: Watermarks
) -> tuple[FleetStats | None, list[Emit]]:
    fleet = rules.fleet
    if fleet is None:
        return state, []
    if isinstance(record, FaultChange) and record.hour is not None:
        return _on_rate(state if isinstance(state, RateStats) else None, record, record.hour, fleet, marks)
    if isinstance(record, FaultChange):
        return _on_fault(state if isinstance(state, SourceStats) else None, record, fleet, marks)
    if isinstance(record, FailureChange):
        return _on_failure(state if isinstance(state, FailureStats) else None, record, fleet, marks)
    if isinstance(record, GpuTimeChange):
        return _on_gpu_time(state if isinstance(state, GpuTimeStats) else None, record)
    return _on_gang(state if isinstance(state, QueueStats) else None, key, record, fleet, marks)


def settle_fleet(state: FleetStats, key: str, rules: Rules, marks: Watermarks) -> tuple[FleetStats, list[Emit]]:
    """Stream time moved (R12.4): slide the quarantine window, drop hours past the history."""
    fleet = rules.fleet
    if fleet is None:
        return state, []
    now = _now(state, marks)
    if isinstance(state, SourceStats):
        return _slide(state, now, fleet)
    if isinstance(state, RateStats | GpuTimeStats):
        return state, []
    return _sweep(state, now, fleet), []


def fleet_waits_until(state: FleetStats, rules: Rules) -> datetime | None:
    """A node or GPU with critical faults waits on stream time: when its candidacy ends
    (the threshold-th newest fault leaves the window), else when its oldest fault does."""
    if not isinstance(state, SourceStats) or not state.hits or rules.fleet is None:
        return None
    fleet = rules.fleet
    if state.candidate_since is not None and len(state.hits) >= fleet.threshold:
        return state.hits[-fleet.threshold].at + fleet.window
    return state.hits[0].at + fleet.window


def fleet_expires_at(state: FleetStats, rules: Rules) -> datetime | None:
    """Nothing left within the history, no quarantine, no gang waiting (None: not while
    it has faults, a candidacy or a waiting gang)."""
    fleet = rules.fleet
    if fleet is None:
        return AT_ONCE
    if isinstance(state, (RateStats, FailureStats, GpuTimeStats)):
        return _leaves_history(state.hour, fleet.history_hours)
    if isinstance(state, SourceStats):
        return AT_ONCE if not state.hits and state.candidate_since is None else None
    if state.waiting:
        return None
    if not state.buckets:
        return AT_ONCE
    return _leaves_history(max(b.hour for b in state.buckets), fleet.history_hours)


@lru_cache(maxsize=4096)  # the same few hours, written again and again
def _leaves_history(hour: datetime, history_hours: int) -> datetime | None:
    """The first stream time whose horizon is past `hour`: `hour < hour_of(t) - (h - 1)
    hours` holds from the first hour start after `hour + (h - 1) hours` on."""
    last = after(hour, timedelta(hours=history_hours - 1))
    return after(hour_of(last), timedelta(hours=1)) if last is not None else None


# --- faults: rates and quarantine -----------------------------------------------------------


def _on_fault(state: SourceStats | None, change: FaultChange, fleet: FleetSettings, marks: Watermarks) -> tuple[SourceStats, list[Emit]]:
    """A critical fault first seen anew, for the quarantine count of its node or GPU."""
    if state is None:
        state = SourceStats(change.cluster, change.node, change.gpu)
    state = msgspec.structs.replace(
        state,
        latest=max(state.latest, change.observed_at),
        gpu_index=change.gpu_index if change.gpu_index is not None else state.gpu_index,
    )
    now = _now(state, marks)
    state, out = _slide(state, now, fleet)
    before, after = change.before, change.after
    if after.severity == "CRITICAL" and (before is None or before.first_seen != after.first_seen):
        state, became = _hit(state, Hit(after.first_seen, change.fault, fault_label(after.kind, after.code), after.action), now, fleet)
        if state.candidate_since is not None:
            record = _quarantine(state, "candidate", state.candidate_since, now, fleet)
            # Reported with each fault up to twice the threshold, then each time its count
            # doubles: a consumer sees the escalation, not a record per fault of a storm.
            if became or record.faults <= 2 * fleet.threshold or record.faults >= 2 * state.reported:
                out.append(Emit(QUARANTINE_CANDIDATES, record.key, record))
                state = msgspec.structs.replace(state, reported=record.faults)
    return state, out


def _on_rate(
    state: RateStats | None, change: FaultChange, hour: datetime, fleet: FleetSettings, marks: Watermarks
) -> tuple[RateStats | None, list[Emit]]:
    """A fault counted in (`after`) or out of (`before`) the hour of this state."""
    latest = max(state.latest if state is not None else _EPOCH, change.observed_at)
    if hour < _horizon_at(marks.stream_time(change.cluster) or latest, fleet.history_hours):
        return state, []  # past the history: no longer kept
    if state is None:
        state = RateStats(change.cluster, change.node, hour, change.gpu)
    before, after = change.before, change.after
    xids, last = list(state.xids), state.last_fault_at
    if before is not None and before.hour == hour:
        last = _count(xids, last, before, -1, -before.occurrences)
    if after.hour == hour:
        last = _count(xids, last, after, 1, after.occurrences)
    state = msgspec.structs.replace(
        state,
        latest=latest,
        gpu_index=change.gpu_index if change.gpu_index is not None else state.gpu_index,
        xids=tuple(xids),
        last_fault_at=last,
    )
    return state, [_rate(state)]


def _xid_order(x: XidCount) -> tuple[str, int, str]:
    return (x.kind, x.code, x.severity)


def _count(xids: list[XidCount], last: datetime | None, fault: FaultCount, faults: int, occurrences: int) -> datetime | None:
    """Count a fault in or out of `xids` (in place; ordered by kind, code and severity, an
    entry with nothing left dropped), and the hour's `last_fault_at` after it. Found by
    binary search: a node in a fault storm has an entry per code in its busiest hours."""
    # By code and severity: a device Unhealthy (critical) and Unknown (warn) share kind and
    # code (R14.2), and an Xid's tail may lower its severity (R2.3).
    which = (fault.kind, fault.code, fault.severity)
    at = bisect_left(xids, which, key=_xid_order)
    if at < len(xids) and _xid_order(xids[at]) == which:
        x = xids[at]
        x = msgspec.structs.replace(x, faults=x.faults + faults, occurrences=x.occurrences + occurrences)
        if x.faults > 0 or x.occurrences > 0:
            xids[at] = x
        else:
            del xids[at]
    elif faults > 0 or occurrences > 0:
        xids.insert(at, XidCount(fault.kind, fault.code, fault.name, fault.severity, faults, occurrences))
    if last is None:
        return fault.first_seen
    return max(last, fault.first_seen) if faults >= 0 else last


def _rate(state: RateStats) -> Emit:
    xids = list(state.xids)
    sev = dict.fromkeys(SEVERITIES, 0)
    faults = occurrences = 0
    for x in xids:  # one pass: the busiest hours have an entry per code
        sev[x.severity] += x.faults
        faults += x.faults
        occurrences += x.occurrences
    hour, last = state.hour, state.last_fault_at
    if state.gpu:
        key = f"{state.cluster}/{state.node}/{state.gpu}/{iso(hour)}"
        return Emit(
            GPU_FAULT_RATES,
            key,
            GpuFaultRate(key, state.cluster, state.node, state.gpu, state.gpu_index, hour, faults, occurrences, sev["USER"], sev["WARN"], sev["CRITICAL"], xids, last),
        )
    key = f"{state.cluster}/{state.node}/{iso(hour)}"
    return Emit(
        NODE_FAULT_RATES, key, NodeFaultRate(key, state.cluster, state.node, hour, faults, occurrences, sev["USER"], sev["WARN"], sev["CRITICAL"], xids, last)
    )


def _hit(state: SourceStats, hit: Hit, now: datetime, fleet: FleetSettings) -> tuple[SourceStats, bool]:
    """Count a critical fault; True when it makes the source a candidate. When it became
    one is read from the faults themselves (the first instant `threshold` of them lay
    within one window), so it does not depend on the order they arrived in."""
    oldest = now - fleet.window
    hits = {h.fault: h for h in state.hits if h.at > oldest}
    if hit.at > oldest:
        hits[hit.fault] = hit
    ordered = tuple(sorted(hits.values(), key=lambda h: (h.at, h.fault)))[-HITS_KEPT:]
    since = _candidate_since(ordered, fleet)
    became = state.candidate_since is None and since is not None
    return msgspec.structs.replace(state, hits=ordered, candidate_since=since), became


def _candidate_since(hits: tuple[Hit, ...], fleet: FleetSettings) -> datetime | None:
    n, window = fleet.threshold, fleet.window
    for i in range(n - 1, len(hits)):
        if hits[i].at - hits[i - n + 1].at < window:
            return hits[i].at
    return None


def candidate_key(scope: Scope, cluster: str, node: str, gpu: str) -> str:
    return f"{cluster}/node/{node}" if scope == "node" else f"{cluster}/gpu/{node}/{gpu}"


def _quarantine(state: SourceStats, what: CandidateState, at: datetime, now: datetime, fleet: FleetSettings) -> QuarantineCandidate:
    oldest = min(at, now) - fleet.window
    counted = [h for h in state.hits if h.at > oldest]
    key = candidate_key(state.scope, state.cluster, state.node, state.gpu)
    return QuarantineCandidate(
        key=key,
        cluster=state.cluster,
        scope=state.scope,
        node=state.node,
        gpu=state.gpu,
        state=what,
        at=at,
        faults=len(counted),
        threshold=fleet.threshold,
        window_seconds=fleet.window_seconds,
        first_fault_at=counted[0].at if counted else None,
        last_fault_at=counted[-1].at if counted else None,
        fault_keys=[h.fault for h in counted],
        codes=[h.label for h in counted],
        action=strongest(h.action for h in counted),  # R14.3: the strongest advice among them
    )


def _slide(state: SourceStats, now: datetime, fleet: FleetSettings) -> tuple[SourceStats, list[Emit]]:
    """Clear a candidate whose window slid past — at the instant the threshold-th newest
    counted fault left it — and forget faults out of the window."""
    out: list[Emit] = []
    window, n = fleet.window, fleet.threshold
    oldest = now - window
    if state.candidate_since is not None and sum(1 for h in state.hits if h.at > oldest) < n:
        at = state.hits[-n].at + window
        cleared = msgspec.structs.replace(state, hits=tuple(h for h in state.hits if h.at > at - window))
        record = _quarantine(cleared, "cleared", at, at, fleet)
        out.append(Emit(QUARANTINE_CANDIDATES, record.key, record))
        state = msgspec.structs.replace(state, candidate_since=None, reported=0)
    kept = tuple(h for h in state.hits if h.at > oldest) if state.candidate_since is None else state.hits
    if kept != state.hits:
        state = msgspec.structs.replace(state, hits=kept)
    return state, out


# --- verdicts: failure rates ------------------------------------------------------------------


def _on_failure(
    state: FailureStats | None, change: FailureChange, fleet: FleetSettings, marks: Watermarks
) -> tuple[FailureStats | None, list[Emit]]:
    if state is None:
        if change.failures < 0:
            return None, []  # counted out of an hour no longer kept
        state = FailureStats(change.cluster, change.namespace, change.hour)
    state = msgspec.structs.replace(state, latest=max(state.latest, change.observed_at))
    counts = {(c.code, c.kind, c.workload_kind): c for c in state.counts}
    which = (change.code, change.kind, change.workload_kind)
    known = counts.get(which) or FailureCount(*which[:2], 0, 0, change.workload_kind)
    counts[which] = FailureCount(
        change.code,
        change.kind,
        known.failures + change.failures,
        known.gpu_faults + change.gpu_faults,
        change.workload_kind,
        known.gpu_seconds + change.gpu_seconds,
        known.gpu_seconds_unknown + change.gpu_seconds_unknown,
    )
    state = msgspec.structs.replace(state, counts=tuple(counts[k] for k in sorted(counts)))
    count = counts[which]
    key = f"{state.cluster}/{state.namespace}/{iso(state.hour)}/{count.code}/{count.kind}"
    if count.workload_kind:
        key += f"/{count.workload_kind}"  # under labels, the key is as before SPEC R13
    record = FailureRate(
        key, state.cluster, state.namespace, state.hour, count.code, count.kind, count.failures, count.gpu_faults, count.workload_kind,
        count.gpu_seconds, count.gpu_seconds_unknown,
    )  # fmt: skip
    return state, [Emit(FAILURE_RATES, key, record)]


# --- verdicts: GPU time by node (issue 30) --------------------------------------------------


def _on_gpu_time(state: GpuTimeStats | None, change: GpuTimeChange) -> tuple[GpuTimeStats | None, list[Emit]]:
    """A failure's GPU-seconds on this node counted in or out of its hour, by kind."""
    if state is None:
        if change.failures < 0:
            return None, []  # counted out of an hour no longer kept
        state = GpuTimeStats(change.cluster, change.node, change.hour)
    system = change.kind == "SYSTEM"
    state = msgspec.structs.replace(
        state,
        latest=max(state.latest, change.observed_at),
        failures=state.failures + change.failures,
        system_failures=state.system_failures + (change.failures if system else 0),
        user_gpu_seconds=state.user_gpu_seconds + (0 if system else change.gpu_seconds),
        system_gpu_seconds=state.system_gpu_seconds + (change.gpu_seconds if system else 0),
    )
    key = f"{state.cluster}/{state.node}/{iso(state.hour)}"
    record = NodeGpuTime(
        key, state.cluster, state.node, state.hour, state.failures, state.system_failures, state.user_gpu_seconds, state.system_gpu_seconds
    )
    return state, [Emit(NODE_GPU_TIME, key, record)]


# --- gang transitions: preemptions and waits per queue ----------------------------------------


def _on_gang(state: QueueStats | None, key: str, change: GangChange, fleet: FleetSettings, marks: Watermarks) -> tuple[QueueStats, list[Emit]]:
    t = change.transition
    if state is None:
        state = QueueStats(t.cluster, queue_name(t), "queue-name" if t.queue else "namespace")
    state = msgspec.structs.replace(state, latest=max(state.latest, change.observed_at))
    waiting = dict(state.waiting)
    if t.to == WAITING_FOR_READMISSION:
        waiting[t.key] = t.at
    else:
        waiting.pop(t.key, None)
    evicted = t.to == WAITING_FOR_READMISSION or (t.code == GANG_EVICTED and t.from_ != WAITING_FOR_READMISSION)
    # A preemption by its cause: under R9 only a preemption waits, under R15 every eviction does.
    preempted = evicted and t.cause is not None and t.cause.reason == PREEMPTION
    # A wait reconstructed from Kueue's counts has no length: its eviction counts, not its wait.
    readmitted = t.from_ == WAITING_FOR_READMISSION and t.to == "Running" and not t.reconstructed
    waited = (t.waited_seconds or 0.0) if readmitted else 0.0
    state = msgspec.structs.replace(state, waiting=waiting, totals=_add_wait(state.totals, evicted, preempted, readmitted, waited))
    out: list[Emit] = []
    now = _now(state, marks)
    hour = hour_of(t.at)
    if (evicted or readmitted) and hour >= _horizon(now, fleet):
        buckets = {b.hour: b for b in state.buckets}
        bucket = _add_wait(buckets.get(hour) or QueueBucket(hour), evicted, preempted, readmitted, waited)
        buckets[hour] = bucket
        state = msgspec.structs.replace(state, buckets=tuple(buckets[h] for h in sorted(buckets)))
        wait_key = f"{state.cluster}/{state.queue}/{iso(hour)}"
        out.append(
            Emit(
                PREEMPTION_WAITS,
                wait_key,
                PreemptionWait(
                    wait_key, state.cluster, state.queue, state.queue_source, hour, bucket.evictions, bucket.preemptions,  # type: ignore[arg-type]
                    bucket.readmissions, bucket.wait_seconds_total, bucket.wait_seconds_max,
                ),
            )
        )
    out.append(_queue_record(state))
    return _sweep(state, now, fleet), out


def _add_wait(bucket: QueueBucket, evicted: bool, preempted: bool, readmitted: bool, waited: float) -> QueueBucket:
    return msgspec.structs.replace(
        bucket,
        evictions=bucket.evictions + evicted,
        preemptions=bucket.preemptions + preempted,
        readmissions=bucket.readmissions + readmitted,
        wait_seconds_total=bucket.wait_seconds_total + waited,
        wait_seconds_max=max(bucket.wait_seconds_max, waited),
    )


def _queue_record(state: QueueStats) -> Emit:
    key = f"{state.cluster}/{state.queue}"
    t = state.totals
    record = GangQueue(
        key, state.cluster, state.queue, state.queue_source, len(state.waiting),  # type: ignore[arg-type]
        t.evictions, t.preemptions, t.readmissions, t.wait_seconds_total,
    )
    return Emit(GANG_QUEUES, key, record)


def _sweep(state: FailureStats | QueueStats, now: datetime, fleet: FleetSettings) -> FailureStats | QueueStats:
    if isinstance(state, QueueStats):
        horizon = _horizon(now, fleet)
        buckets = tuple(b for b in state.buckets if b.hour >= horizon)
        return msgspec.structs.replace(state, buckets=buckets) if buckets != state.buckets else state
    return state
