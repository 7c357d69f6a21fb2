"""The fleet stage on gang transitions: evictions, preemptions and readmission waits per
Kueue LocalQueue (R9, R15)."""

from __future__ import annotations

from datetime import datetime

import msgspec

from app.core.base.clock import hour_of
from app.core.base.emit import Emit
from app.core.base.progress import Watermarks
from app.core.base.rules import FleetSettings
from app.core.fleet.states import (
    FailureStats,
    QueueBucket,
    QueueStats,
    horizon,
    stream_now,
)
from app.core.identity.kueue import PREEMPTION
from app.core.stages.fleet_inputs import hour_text, queue_name
from app.model.facts import GangChange
from app.model.fleet_records import (
    GANG_QUEUES,
    PREEMPTION_WAITS,
    GangQueue,
    PreemptionWait,
)
from app.model.records import GANG_EVICTED, WAITING_FOR_READMISSION

# --- gang transitions: preemptions and waits per queue ----------------------------------------


def on_gang(state: QueueStats | None, key: str, change: GangChange, fleet: FleetSettings, marks: Watermarks) -> tuple[QueueStats, list[Emit]]:
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
    now = stream_now(state, marks)
    hour = hour_of(t.at)
    if (evicted or readmitted) and hour >= horizon(now, fleet):
        buckets = {b.hour: b for b in state.buckets}
        bucket = _add_wait(buckets.get(hour) or QueueBucket(hour), evicted, preempted, readmitted, waited)
        buckets[hour] = bucket
        state = msgspec.structs.replace(state, buckets=tuple(buckets[h] for h in sorted(buckets)))
        wait_key = f"{state.cluster}/{state.queue}/{hour_text(hour)}"
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
    return sweep(state, now, fleet), out


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



def sweep(state: FailureStats | QueueStats, now: datetime, fleet: FleetSettings) -> FailureStats | QueueStats:
    if isinstance(state, QueueStats):
        oldest = horizon(now, fleet)
        buckets = tuple(b for b in state.buckets if b.hour >= oldest)
        return msgspec.structs.replace(state, buckets=buckets) if buckets != state.buckets else state
    return state
