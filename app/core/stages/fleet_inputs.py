"""What the pods, attempts and gangs stages tell the fleet stage (app/core/fleet/fold.py):
each change keyed by the node, GPU, namespace-hour or queue it counts toward. Each stage
knows what it emitted before, so it says what changed (`before` → `after`) and the fleet
stage never has to remember every fault or verdict."""

from __future__ import annotations

from datetime import datetime
from functools import lru_cache

import msgspec

from app.core.base.emit import Emit
from app.core.verdicts.goodput import HourFigures
from app.core.verdicts.gpu_time import UNKNOWN_NODE
from app.core.base.clock import hour_of, iso
from app.core.base.rules import Rules
from app.model.facts import FLEET_INPUTS, Counted, FailureChange, FaultChange, FaultCount, GangChange, GoodputChange, GpuTimeChange
from app.model.records import ClassifiedFailure, GangTransition, GpuFault



# --- where each input goes: the fleet stage's keys -----------------------------------------


@lru_cache(maxsize=4096)  # the few hours of the history, written in a key per record
def hour_text(hour: datetime) -> str:
    """An hour as keys write it (`2026-08-25T12:00:00Z`)."""
    return iso(hour)


def node_key(cluster: str, node: str) -> str:
    return f"{cluster}/node/{node}"


def gpu_key(cluster: str, node: str, gpu: str) -> str:
    return f"{cluster}/gpu/{node}/{gpu}"


def rate_key(cluster: str, node: str, gpu: str, hour: datetime) -> str:
    """The fault rate of a node (gpu "") or one of its GPUs in one hour."""
    return f"{cluster}/rate/{hour_text(hour)}/gpu/{node}/{gpu}" if gpu else f"{cluster}/rate/{hour_text(hour)}/node/{node}"


def failures_key(cluster: str, namespace: str, hour: datetime) -> str:
    return f"{cluster}/failures/{namespace}/{hour_text(hour)}"


def gpu_time_key(cluster: str, node: str, hour: datetime) -> str:
    return f"{cluster}/gpu-time/{node}/{hour_text(hour)}"


def goodput_key(cluster: str, namespace: str, queue: str, hour: datetime) -> str:
    """SPEC R17.4: one namespace and queue in one hour (queue "": no Workload held quota)."""
    return f"{cluster}/goodput/{namespace}/{queue}/{hour_text(hour)}"


def queue_name(t: GangTransition) -> str:
    """The queue a gang waits in: its LocalQueue (`<namespace>/<queue>`), or the namespace."""
    return f"{t.namespace}/{t.queue}" if t.queue else t.namespace


def queue_key(t: GangTransition) -> str:
    return f"{t.cluster}/queue/{queue_name(t)}"


def gpu_id(fault: GpuFault) -> str:
    """The GPU a fault names: its uuid (a device-health fault's resourceID, R14.2), else
    its index; "" for none (an SXid names a switch)."""
    if fault.gpu_uuid:
        return fault.gpu_uuid
    return f"index-{fault.gpu_index}" if fault.gpu_index is not None else ""


def _count(fault: GpuFault) -> FaultCount:
    return FaultCount(hour_of(fault.first_seen), fault.first_seen, fault.kind, fault.code, fault.name, fault.severity, fault.count, fault.action)


def fault_changes(
    cluster: str, observed_at: datetime, fault_key: str, before: GpuFault | None, after: GpuFault, rules: Rules, *, for_gpu: bool = True
) -> list[Emit]:
    """A trusted fault, new or changed, for its node and its GPU (R2.7b: the pod's node):
    for the fault rate of each hour it leaves or enters, and for the quarantine count when
    it is a critical fault first seen anew. `for_gpu` False: for its node only (its pod's
    faults named more GPUs than a node has: `pods.GPUS_PER_POD`)."""
    if rules.fleet is None:
        return []
    old = _count(before) if before is not None else None
    new = _count(after)
    if old == new:
        return []  # e.g. the pod was relabelled: nothing the fleet counts changed
    node = after.node or UNKNOWN_NODE
    gpu = gpu_id(after) if for_gpu else ""
    hours = sorted({new.hour} | ({old.hour} if old is not None else set()))
    counts_hit = new.severity == "CRITICAL" and (old is None or old.first_seen != new.first_seen)
    out = []
    for source, index in [("", None), *([(gpu, after.gpu_index)] if gpu else [])]:
        change = FaultChange(cluster, observed_at, fault_key, node, source, index, old, new)
        if counts_hit:
            out.append(Emit(FLEET_INPUTS, gpu_key(cluster, node, source) if source else node_key(cluster, node), change))
        out += [Emit(FLEET_INPUTS, rate_key(cluster, node, source, hour), msgspec.structs.replace(change, hour=hour)) for hour in hours]
    return out


def counted_failure(v: ClassifiedFailure) -> Counted:
    """How a verdict counts, as far as the record tells (its GPU-seconds' nodes it does not)."""
    workload_kind = v.tracked.kind if v.identity == "workload" else ""
    return Counted(hour_of(v.failed_at), v.code, v.kind, v.gpu_fault is not None, workload_kind, v.gpu_seconds)


def failure_changes(
    cluster: str, namespace: str, observed_at: datetime, before: dict[str, Counted], after: dict[str, Counted], rules: Rules
) -> list[Emit]:
    """A failure is one generation of an attempt (or one try of a pod task, R8.2), counted
    by its verdict: the attempt stage keeps how each counts, and says what changed. A
    revision moves a failure; a late fault that reclassifies an earlier generation moves
    that one, so the counts depend only on the records, never on their order."""
    if rules.fleet is None:
        return []
    out = []
    for failure in sorted(before.keys() | after.keys()):
        old, new = before.get(failure), after.get(failure)
        if old == new:
            continue
        for counted, sign in ((old, -1), (new, 1)):
            if counted is not None:
                seconds = counted.gpu_seconds
                change = FailureChange(
                    cluster, observed_at, namespace, counted.hour, counted.code, counted.kind, sign, sign if counted.gpu_fault else 0,
                    counted.workload_kind, sign * (seconds or 0), sign if seconds is None else 0,
                )
                out.append(Emit(FLEET_INPUTS, failures_key(cluster, namespace, counted.hour), change))
    return out


def _on_nodes(counted: Counted | None) -> tuple | None:
    return (counted.hour, counted.kind, counted.nodes) if counted is not None and counted.nodes else None


def gpu_time_changes(cluster: str, observed_at: datetime, before: dict[str, Counted], after: dict[str, Counted], rules: Rules) -> list[Emit]:
    """Issue 30: a failure's GPU-seconds on each node its pods ran on, in the hour of the
    failure by its verdict's kind; like `failure_changes`, what changed (out, then in)."""
    if rules.fleet is None:
        return []
    out = []
    for failure in sorted(before.keys() | after.keys()):
        old, new = before.get(failure), after.get(failure)
        if _on_nodes(old) == _on_nodes(new):
            continue  # e.g. only its code changed: its nodes' hours count the same
        for counted, sign in ((old, -1), (new, 1)):
            if counted is None:
                continue
            for part in counted.nodes:
                change = GpuTimeChange(cluster, observed_at, part.node, counted.hour, counted.kind, sign, sign * part.gpu_seconds)
                out.append(Emit(FLEET_INPUTS, gpu_time_key(cluster, part.node, counted.hour), change))
    return out


def gang_change(observed_at: datetime, transition: GangTransition, rules: Rules) -> list[Emit]:
    """A gang transition, for its queue's counts."""
    if rules.fleet is None:
        return []
    return [Emit(FLEET_INPUTS, queue_key(transition), GangChange(observed_at, transition))]


_NO_HOUR = HourFigures(datetime.min)


def goodput_changes(
    cluster: str,
    observed_at: datetime,
    before_where: tuple[str, str] | None,
    before: tuple[HourFigures, ...],
    where: tuple[str, str],
    after: tuple[HourFigures, ...],
    rules: Rules,
) -> list[Emit]:
    """SPEC R17.4: an attempt's figures per hour, what changed since it last told the fleet
    (each figure signed; `attempts` +1 for an hour it enters, -1 for one it leaves). A
    change of namespace or queue (the quota's facts came after its pods') moves it whole."""
    if rules.fleet is None:
        return []
    if not before or before_where is None:  # told nothing yet (most tellings): every hour enters
        return [
            Emit(FLEET_INPUTS, goodput_key(cluster, where[0], where[1], h.hour), GoodputChange(
                cluster, observed_at, where[0], where[1], h.hour, 1, h.reserved, h.running, h.useful,
                h.lost_user, h.lost_system, h.idle, h.wait_seconds, h.waits,
            ))  # fmt: skip
            for h in after
        ]
    old = {h.hour: h for h in before}
    if before_where != where:
        moves = [(before_where, h.hour, h, _NO_HOUR) for h in before] + [(where, h.hour, _NO_HOUR, h) for h in after]
    else:
        new = {h.hour: h for h in after}
        moves = [(where, hour, old.get(hour, _NO_HOUR), new.get(hour, _NO_HOUR)) for hour in sorted(old.keys() | new.keys())]
    out = []
    for (namespace, queue), hour, was, now in moves:
        if was == now:
            continue
        entered = (now is not _NO_HOUR) - (was is not _NO_HOUR)
        change = GoodputChange(
            cluster, observed_at, namespace, queue, hour, entered,
            now.reserved - was.reserved, now.running - was.running, now.useful - was.useful,
            now.lost_user - was.lost_user, now.lost_system - was.lost_system, now.idle - was.idle,
            now.wait_seconds - was.wait_seconds, now.waits - was.waits,
        )  # fmt: skip
        out.append(Emit(FLEET_INPUTS, goodput_key(cluster, namespace, queue, hour), change))
    return out
