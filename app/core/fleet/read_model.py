"""The fleet read model: the derived records read back, what every fleet view is built on.

The fleet stage keeps its state per node, GPU, namespace-hour and queue (fleet_fold.py)
and writes each change to a derived topic, keyed so that the latest record per key is
current. `FleetState` is the read model: the latest derived record per key (within the
history kept), the quarantine history, the most recent verdicts and a count of dead
letters — what any reader of those topics can rebuild, so every worker serves the same
page. `read(state, emit)` takes one record in; fleet_summary.py turns the state into what
a person looks at. No I/O and no clock.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from app.core.identity.attempt import attempt_name
from app.core.base.emit import Emit
from app.core.base.clock import hour_of
from app.core.stages.fleet_inputs import gpu_id
from app.core.base.rules import DEFAULT_FLEET, FleetSettings
from app.core.fleet.states import fault_label, horizon
from app.model.fleet_records import (
    FailureRate,
    GangQueue,
    Goodput,
    GpuFaultRate,
    NodeFaultRate,
    NodeGpuTime,
    PreemptionWait,
    QuarantineCandidate,
)
from app.model import records_v1
from app.model.records import ClassifiedFailure, DeadLetter, Fault, ErrorKind, GpuFault, Identity, IdleQuota, StuckReadmission

QUARANTINE_LOG = 50  # quarantine records kept for the page
HourlyTable = Literal["nodes", "gpus", "failures", "gpu_time", "waits", "goodput"]  # FleetState's tables of hourly records


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
    attempt: str = ""  # as people see it: the key, or a workload's kind and name (SPEC R13.3)
    identity: Identity = "labels"
    gpu_seconds: int | None = None  # what the failure cost (issue 30); None: unknown


class FleetState(msgspec.Struct):
    """The read model: the latest derived record per key, and what the page lists."""

    stream_time: datetime | None = None  # the newest time any record read speaks of
    # Per cluster, the newest time its records speak of: each cluster's history is kept on
    # its own stream time (SPEC R12: clusters' watermarks are independent), so a cluster far
    # behind another keeps its faults beside its quarantine candidates.
    cluster_times: dict[str, datetime] = {}
    nodes: dict[str, NodeFaultRate] = {}
    gpus: dict[str, GpuFaultRate] = {}
    candidates: dict[str, QuarantineCandidate] = {}  # latest per node or GPU, candidate or cleared
    quarantine_log: list[QuarantineCandidate] = []  # newest first
    failures: dict[str, FailureRate] = {}
    gpu_time: dict[str, NodeGpuTime] = {}  # GPU-seconds failures burned per node-hour (issue 30)
    waits: dict[str, PreemptionWait] = {}
    queues: dict[str, GangQueue] = {}
    stuck: dict[str, StuckReadmission] = {}  # waits past max_readmission_wait now (SPEC R15.4)
    goodput: dict[str, Goodput] = {}  # where the GPU-seconds of each hour went (SPEC R17.4)
    idle: dict[str, IdleQuota] = {}  # quota idle now (SPEC R17.3), by attempt key
    recent: list[VerdictRow] = []  # newest first, one per attempt key
    recent_rows: dict[str, VerdictRow] = {}  # attempt key -> its row in `recent` (kept with it)
    dead_letters: int = 0
    # cluster -> hour -> (table, key) of each hourly record kept, under the hour it has: an
    # hour leaving the history forgets its own keys, not a scan of every table.
    hour_keys: dict[str, dict[datetime, list[tuple[HourlyTable, str]]]] = {}


def describe_gpu_fault(fault: GpuFault | None) -> str:
    return "" if fault is None else f"{fault_label(fault.kind, fault.code)} {fault.severity}"


def read(state: FleetState, emit: Emit, settings: FleetSettings = DEFAULT_FLEET) -> None:
    """Take one record in (derived records, verdicts, dead letters; others are ignored)."""
    value = emit.value
    kind = type(value)  # the busiest first: a failure-heavy stream is mostly these
    if kind is FailureRate:
        _keep(state, "failures", state.failures, emit.key, value, value.hour, settings)
        return
    if kind is NodeFaultRate:
        _keep(state, "nodes", state.nodes, emit.key, value, value.last_fault_at or value.hour, settings)
        return
    if kind is GpuFaultRate:
        _keep(state, "gpus", state.gpus, emit.key, value, value.last_fault_at or value.hour, settings)
        return
    if kind is ClassifiedFailure:
        _recent(state, value, settings)
        _advance(state, value.cluster, value.failed_at, settings)
        return
    if kind in _UNREAD:
        return
    if isinstance(value, records_v1.DerivedRecordV1):
        value = records_v1.upgraded(value)  # a v1 fault rate: Xids only (before SPEC R14.2)
    if isinstance(value, NodeFaultRate):
        _keep(state, "nodes", state.nodes, emit.key, value, value.last_fault_at or value.hour, settings)
    elif isinstance(value, GpuFaultRate):
        _keep(state, "gpus", state.gpus, emit.key, value, value.last_fault_at or value.hour, settings)
    elif isinstance(value, FailureRate):
        _keep(state, "failures", state.failures, emit.key, value, value.hour, settings)
    elif isinstance(value, NodeGpuTime):
        _keep(state, "gpu_time", state.gpu_time, emit.key, value, value.hour, settings)
    elif isinstance(value, PreemptionWait):
        _keep(state, "waits", state.waits, emit.key, value, value.hour, settings)
    elif isinstance(value, GangQueue):
        state.queues[emit.key] = value
    elif isinstance(value, Goodput):
        _keep(state, "goodput", state.goodput, emit.key, value, value.hour, settings)
    elif isinstance(value, IdleQuota):
        if value.idle:
            state.idle[emit.key] = value
        elif (kept := state.idle.get(emit.key)) is not None and kept.since <= value.since:
            del state.idle[emit.key]
        _advance(state, value.cluster, value.at, settings)
    elif isinstance(value, StuckReadmission):
        if value.stuck:
            state.stuck[emit.key] = value
        else:
            state.stuck.pop(emit.key, None)
    elif isinstance(value, QuarantineCandidate):
        state.candidates[emit.key] = value
        if not state.quarantine_log or state.quarantine_log[0] != value:
            state.quarantine_log.insert(0, value)
            del state.quarantine_log[QUARANTINE_LOG:]
        _advance(state, value.cluster, value.at, settings)
    elif isinstance(value, (ClassifiedFailure, records_v1.ClassifiedFailure)):
        value = records_v1.upgraded(value)  # a v1 verdict is an attempt under labels (R13.3)
        assert isinstance(value, ClassifiedFailure)
        _recent(state, value, settings)
        _advance(state, value.cluster, value.failed_at, settings)
    elif isinstance(value, DeadLetter):
        state.dead_letters += 1


# Records on the way that no view reads (the faults: their counts come as fault rates).
_UNREAD = frozenset({Fault})


def _keep(state: FleetState, name: HourlyTable, table: dict, key: str, record: Any, at: datetime, settings: FleetSettings) -> None:
    now = state.cluster_times.get(record.cluster)
    if now is not None and at < horizon(now, settings):  # the horizon is an hour's start: as hour_of(at) < it
        return  # older than the history its cluster keeps
    kept = table.get(key)
    if kept is None or kept.hour != record.hour or kept.cluster != record.cluster:
        state.hour_keys.setdefault(record.cluster, {}).setdefault(record.hour, []).append((name, key))
    table[key] = record
    _advance(state, record.cluster, at, settings)


def _advance(state: FleetState, cluster: str, at: datetime, settings: FleetSettings) -> None:
    """Move the view's time and the cluster's; forget the cluster's hours that fell out of
    its history (every new hour of its own)."""
    if state.stream_time is None or at > state.stream_time:
        state.stream_time = at
    now = state.cluster_times.get(cluster)
    if now is not None and at <= now:
        return
    state.cluster_times[cluster] = at
    if now is not None and hour_of(at) == hour_of(now):
        return
    oldest = horizon(at, settings)
    hours = state.hour_keys.get(cluster, {})
    for hour in [h for h in hours if h < oldest]:
        for name, key in hours.pop(hour):
            table: dict[str, Any] = getattr(state, name)
            r = table.get(key)
            if r is not None and r.cluster == cluster and r.hour < oldest:  # not since kept under another hour
                del table[key]


def oldest_hour(state: FleetState, settings: FleetSettings) -> datetime | None:
    """The oldest hour any cluster's history keeps (None before any record)."""
    return min((horizon(at, settings) for at in state.cluster_times.values()), default=None)


def _recent(state: FleetState, v: ClassifiedFailure, settings: FleetSettings) -> None:
    # Once per verdict: the key's row found by key and the new one placed by binary search
    # (the list is ordered by (failed_at, key), newest first), not a scan and a sort.
    rows = state.recent_rows
    old = rows.get(v.key)
    if old is not None and old.revision > v.revision:
        return  # an older revision read late
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
        attempt=attempt_name(v),
        identity=v.identity,
        gpu_seconds=v.gpu_seconds,
    )
    recent = list(state.recent)  # a new list: a reader holding the old one sees it whole
    if old is not None:
        del recent[_newer_than(recent, old.failed_at, old.key) - 1]
        del rows[old.key]
    at = _newer_than(recent, row.failed_at, row.key)
    if at < settings.recent_verdicts:
        recent.insert(at, row)
        rows[row.key] = row
    while len(recent) > settings.recent_verdicts:
        del rows[recent.pop().key]
    state.recent = recent


def _newer_than(recent: list[VerdictRow], failed_at: datetime, key: str) -> int:
    """How many rows of `recent` (newest first) sort at or before (failed_at, key)."""
    low, high = 0, len(recent)
    while low < high:
        mid = (low + high) // 2
        r = recent[mid]
        if (r.failed_at, r.key) >= (failed_at, key):
            low = mid + 1
        else:
            high = mid
    return low
