"""The fleet stage on verdicts: failure rates per namespace-hour by code and kind, and the
GPU time failures burned per node-hour (issue 30)."""

from __future__ import annotations

from bisect import bisect_left

import msgspec

from app.core.base.emit import Emit
from app.core.stages.fleet_inputs import hour_text
from app.core.base.progress import Watermarks
from app.core.base.rules import FleetSettings
from app.core.fleet.states import FailureCount, FailureStats, GpuTimeStats
from app.model.facts import FailureChange, GpuTimeChange
from app.model.fleet_records import (
    FAILURE_RATES,
    NODE_GPU_TIME,
    FailureRate,
    NodeGpuTime,
)

# --- verdicts: failure rates ------------------------------------------------------------------


def _order(c: FailureCount) -> tuple[str, str, str]:
    return (c.code, c.kind, c.workload_kind)


def on_failure(
    state: FailureStats | None, change: FailureChange, fleet: FleetSettings, marks: Watermarks
) -> tuple[FailureStats | None, list[Emit]]:
    if state is None:
        if change.failures < 0:
            return None, []  # counted out of an hour no longer kept
        state = FailureStats(change.cluster, change.namespace, change.hour)
    which = (change.code, change.kind, change.workload_kind)
    counts = list(state.counts)  # by (code, kind, workload kind): found by binary search
    at = bisect_left(counts, which, key=_order)
    known = counts[at] if at < len(counts) and _order(counts[at]) == which else None
    count = FailureCount(
        change.code,
        change.kind,
        change.failures + (known.failures if known is not None else 0),
        change.gpu_faults + (known.gpu_faults if known is not None else 0),
        change.workload_kind,
        change.gpu_seconds + (known.gpu_seconds if known is not None else 0),
        change.gpu_seconds_unknown + (known.gpu_seconds_unknown if known is not None else 0),
    )
    if known is not None:
        counts[at] = count
    else:
        counts.insert(at, count)
    state = FailureStats(state.cluster, state.namespace, state.hour, max(state.latest, change.observed_at), tuple(counts))
    key = f"{state.cluster}/{state.namespace}/{hour_text(state.hour)}/{count.code}/{count.kind}"
    if count.workload_kind:
        key += f"/{count.workload_kind}"  # under labels, the key is as before SPEC R13
    record = FailureRate(
        key, state.cluster, state.namespace, state.hour, count.code, count.kind, count.failures, count.gpu_faults, count.workload_kind,
        count.gpu_seconds, count.gpu_seconds_unknown,
    )  # fmt: skip
    return state, [Emit(FAILURE_RATES, key, record)]


# --- verdicts: GPU time by node (issue 30) --------------------------------------------------


def on_gpu_time(state: GpuTimeStats | None, change: GpuTimeChange) -> tuple[GpuTimeStats | None, list[Emit]]:
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
    key = f"{state.cluster}/{state.node}/{hour_text(state.hour)}"
    record = NodeGpuTime(
        key, state.cluster, state.node, state.hour, state.failures, state.system_failures, state.user_gpu_seconds, state.system_gpu_seconds
    )
    return state, [Emit(NODE_GPU_TIME, key, record)]
