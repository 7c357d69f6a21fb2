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
    <cluster>/goodput/<ns>/<queue>/<hour>    where the GPU-seconds of one hour went (SPEC R17.4)

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

from datetime import datetime, timedelta
from functools import lru_cache

from app.core.base.clock import after, hour_of
from app.core.base.emit import Emit
from app.core.base.progress import Watermarks
from app.core.base.rules import Rules
from app.core.fleet.failures import on_failure, on_gpu_time
from app.core.fleet.goodput import on_goodput
from app.core.fleet.faults import on_fault, on_rate, slide
from app.core.fleet.queues import on_gang, sweep
from app.core.fleet.states import (
    AT_ONCE,
    FailureStats,
    FleetStats,
    GoodputStats,
    GpuTimeStats,
    QueueStats,
    RateStats,
    SourceStats,
    stream_now,
)
from app.model.facts import FailureChange, FaultChange, GangChange, GoodputChange, GpuTimeChange

# --- keys ------------------------------------------------------------------------------------


# --- the fold ---------------------------------------------------------------------------------


def fold_fleet(
    state: FleetStats | None, key: str, record: FaultChange | FailureChange | GpuTimeChange | GoodputChange | GangChange, rules: Rules, marks: Watermarks
) -> tuple[FleetStats | None, list[Emit]]:
    fleet = rules.fleet
    if fleet is None:
        return state, []
    if isinstance(record, FaultChange) and record.hour is not None:
        return on_rate(state if isinstance(state, RateStats) else None, record, record.hour, fleet, marks)
    if isinstance(record, FaultChange):
        return on_fault(state if isinstance(state, SourceStats) else None, record, fleet, marks)
    if isinstance(record, FailureChange):
        return on_failure(state if isinstance(state, FailureStats) else None, record, fleet, marks)
    if isinstance(record, GpuTimeChange):
        return on_gpu_time(state if isinstance(state, GpuTimeStats) else None, record)
    if isinstance(record, GoodputChange):
        return on_goodput(state if isinstance(state, GoodputStats) else None, record, fleet, marks)
    return on_gang(state if isinstance(state, QueueStats) else None, key, record, fleet, marks)


def settle_fleet(state: FleetStats, key: str, rules: Rules, marks: Watermarks) -> tuple[FleetStats, list[Emit]]:
    """Stream time moved (R12.4): slide the quarantine window, drop hours past the history."""
    fleet = rules.fleet
    if fleet is None:
        return state, []
    now = stream_now(state, marks)
    if isinstance(state, SourceStats):
        return slide(state, now, fleet)
    if isinstance(state, RateStats | GpuTimeStats | GoodputStats):
        return state, []
    return sweep(state, now, fleet), []


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
    if isinstance(state, (RateStats, FailureStats, GpuTimeStats, GoodputStats)):
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
