"""The fleet stage on faults: fault rates per node and GPU by hour, and quarantine
candidates (critical faults within `window_seconds` of stream time, docs/fleet.md)."""

from __future__ import annotations

from bisect import bisect_left
from datetime import datetime

import msgspec

from app.core.base.emit import Emit
from app.core.base.progress import Watermarks
from app.core.base.rules import FleetSettings
from app.core.base.xid import strongest
from app.core.stages.fleet_inputs import hour_text
from app.core.fleet.states import (
    EPOCH,
    HITS_KEPT,
    SEVERITIES,
    Hit,
    RateStats,
    SourceStats,
    fault_label,
    horizon_at,
    stream_now,
)
from app.model.facts import FaultChange, FaultCount
from app.model.fleet_records import (
    GPU_FAULT_RATES,
    NODE_FAULT_RATES,
    QUARANTINE_CANDIDATES,
    CandidateState,
    GpuFaultRate,
    NodeFaultRate,
    QuarantineCandidate,
    Scope,
    XidCount,
)

# --- faults: rates and quarantine -----------------------------------------------------------


def on_fault(state: SourceStats | None, change: FaultChange, fleet: FleetSettings, marks: Watermarks) -> tuple[SourceStats, list[Emit]]:
    """A critical fault first seen anew, for the quarantine count of its node or GPU."""
    if state is None:
        state = SourceStats(change.cluster, change.node, change.gpu)
    state = msgspec.structs.replace(
        state,
        latest=max(state.latest, change.observed_at),
        gpu_index=change.gpu_index if change.gpu_index is not None else state.gpu_index,
    )
    now = stream_now(state, marks)
    state, out = slide(state, now, fleet)
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


def on_rate(
    state: RateStats | None, change: FaultChange, hour: datetime, fleet: FleetSettings, marks: Watermarks
) -> tuple[RateStats | None, list[Emit]]:
    """A fault counted in (`after`) or out of (`before`) the hour of this state."""
    latest = max(state.latest if state is not None else EPOCH, change.observed_at)
    if hour < horizon_at(marks.stream_time(change.cluster) or latest, fleet.history_hours):
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
    xids = state.xids  # the state's tuple, shared: a list per record kept the collector busy (a view keeps thousands)
    sev = dict.fromkeys(SEVERITIES, 0)
    faults = occurrences = 0
    for x in xids:  # one pass: the busiest hours have an entry per code
        sev[x.severity] += x.faults
        faults += x.faults
        occurrences += x.occurrences
    hour, last = state.hour, state.last_fault_at
    if state.gpu:
        key = f"{state.cluster}/{state.node}/{state.gpu}/{hour_text(hour)}"
        return Emit(
            GPU_FAULT_RATES,
            key,
            GpuFaultRate(key, state.cluster, state.node, state.gpu, state.gpu_index, hour, faults, occurrences, sev["USER"], sev["WARN"], sev["CRITICAL"], xids, last),
        )
    key = f"{state.cluster}/{state.node}/{hour_text(hour)}"
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


def slide(state: SourceStats, now: datetime, fleet: FleetSettings) -> tuple[SourceStats, list[Emit]]:
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
