"""The quota a job's Kueue Workloads held (SPEC R17.1, R17.3), read by the gang stage from
every Workload record — after the job ended too: a Workload's last records (`Finished`,
its deletion) say when the quota went — and sent to the attempt stage (`QuotaFacts`,
under the attempt's join key), which sets it beside the pods' running time.

Each Workload's quota is a function of its own records in its watch order, timed by its
own conditions (R12.7): a hold begins at `QuotaReserved` True (its lastTransitionTime, or
the `Evicted` False of a readmission that kept the reservation) and ends at `Evicted` or
`Finished` True, the deletion, or `QuotaReserved` False; every time is capped by the
`observed_at` of the record that showed it (R2.7c). Choices (docs/rules.md, *Goodput*):

- A new reservation whose record is the first to show it after an unseen release (a
  relist gap) ends the hold before it where the new one begins: the gap is counted held.
- A Workload deleted with no `deletionTimestamp` (Kueue's finalizer makes the API server
  set one, so only a force deletion lacks it) ended its hold at the latest time it
  carries (its last condition's): the bridge's clock would move it with a burst (R12.7).
- A wait (R17.2) runs from `Evicted` True to the readmission (`Admitted` True, else the
  new hold's start), as R9.9's `waited_seconds` does; one cut short by the Workload's end
  or deletion is no wait.

Where it goes (R17, R16.4): a job whose join moves (a RayJob's tries, each on a RayCluster
of its own) has one Workload across its tries. Each key it joined gets the Workloads'
holds, waits and evicted holds clipped to its window (`shares`): from when the job began
joining it (its own time, `joined_since`, else its record's `observed_at`) until it began
joining the next; the first from the start, the latest open. The job's joins are kept
with their times (the latest `JOINS_KEPT`), so a Workload read after the job's records
splits the same way (R12.7); each key is sent its share whenever it changes. A job that
joined one key sends its whole quota, as it always did.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

import msgspec

from app.core.base.emit import Emit
from app.core.identity import kueue
from app.model.facts import ATTEMPT_FACTS, EvictedHold, GangInput, QuotaFacts, QuotaHold, WorkloadQuota
from app.model.k8s import Condition, Workload

if TYPE_CHECKING:
    from app.core.stages.gang_observations import GangStateData

# R11.5: what one Workload's quota keeps (the latest): a hold and a wait per preemption and
# readmission; Kueue's backoff makes more than a few an hour impossible.
HOLDS_KEPT = 32
EVICTED_KEPT = 8
WORKLOADS_KEPT = 4  # a job's Workloads (Kueue makes another after a deletion; R15.3)
# The keys a job joined, the latest (R11.5): a RayJob's tries (R16.4); a job renaming its
# cluster endlessly keeps these, the keys before them have had their last share.
JOINS_KEPT = 4


class Join(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """An attempt stage key the job joined (R17), from `since` (None: its first, whose share
    has no start) until the next join's."""

    key: str
    since: datetime | None = None


def joined(joins: tuple[Join, ...], key: str, since: datetime | None, observed_at: datetime) -> tuple[Join, ...]:
    """The job's joins with its record's: a key other than the latest begins at the job's
    own time for it (`since`, capped by `observed_at`, R2.7c), or at `observed_at` where it
    says none or one not after the latest join's (a time from before that try)."""
    if not key or (joins and joins[-1].key == key):
        return joins
    if not joins:
        return (Join(key),)
    last = joins[-1].since
    at = observed_at if since is None else min(since, observed_at)
    if last is not None and at <= last:
        at = max(observed_at, last)
    return (*joins, Join(key, at))[-JOINS_KEPT:]


def _at(condition: Condition | None, observed_at: datetime) -> datetime:
    """A condition's lastTransitionTime, capped by the bridge's clock (R2.7c); the
    record's `observed_at` when it carries none."""
    at = condition.last_transition_time if condition is not None else None
    return observed_at if at is None else min(at, observed_at)


def _true(condition: Condition | None) -> bool:
    return condition is not None and condition.status == "True"


def _seen(quota: WorkloadQuota, workload: Workload, deleted: bool, observed_at: datetime, gpus: int) -> WorkloadQuota:
    """One Workload's quota with one more of its records (in watch order)."""
    conditions = workload.status.conditions
    reserved = kueue.find_condition(conditions, kueue.QUOTA_RESERVED)
    evicted = kueue.find_condition(conditions, kueue.EVICTED)
    finished = kueue.find_condition(conditions, kueue.FINISHED)
    admitted = kueue.find_condition(conditions, kueue.ADMITTED)
    gone = _true(finished) or deleted
    holding = _true(reserved) and not _true(evicted) and not gone
    holds = list(quota.holds)
    last = holds[-1] if holds else None
    open_ = last if last is not None and last.end is None else None
    if holding:
        start = _at(reserved, observed_at)
        if evicted is not None and evicted.status == "False":  # readmitted: the reservation may be older
            start = max(start, _at(evicted, observed_at))
        if open_ is not None and start > open_.start:  # released and reserved again, unseen
            holds[-1] = QuotaHold(open_.start, start)
            open_ = None
        if open_ is None and (last is None or last.end is None or start >= last.end):
            holds.append(QuotaHold(start, None))
    elif open_ is not None:
        holds[-1] = QuotaHold(open_.start, max(open_.start, _ended_at(workload, deleted, observed_at)))
    waits, since = quota.waits, quota.evicted_since
    if _true(evicted) and since is None:
        since = _at(evicted, observed_at)
    elif holding and since is not None and holds[-1].start >= since:  # R17.2: readmitted
        readmitted = kueue.admitted_at(workload)
        end = min(readmitted, observed_at) if readmitted is not None and readmitted >= since else holds[-1].start
        waits, since = (*waits, QuotaHold(since, end))[-HOLDS_KEPT:], None
    elif gone:
        since = None  # it ended while waiting: no readmission, no wait
    return WorkloadQuota(
        quota.name,
        quota.uid,
        gpus or quota.gpus,
        tuple(holds[-HOLDS_KEPT:]),
        waits,
        _evicted_holds(quota.evicted, workload, evicted, reserved, admitted, gone, deleted, observed_at),
        since,
    )


def _ended_at(workload: Workload, deleted: bool, observed_at: datetime) -> datetime:
    """When a hold ended: the first of `Evicted` and `Finished` True, the deletion,
    `QuotaReserved` not True, by Kueue's clock; the record's `observed_at` if none says."""
    conditions = workload.status.conditions
    ends = [
        _at(c, observed_at)
        for c in (kueue.find_condition(conditions, kueue.EVICTED), kueue.find_condition(conditions, kueue.FINISHED))
        if _true(c)
    ]
    reserved = kueue.find_condition(conditions, kueue.QUOTA_RESERVED)
    if reserved is not None and reserved.status != "True":
        ends.append(_at(reserved, observed_at))
    if deleted:
        deletion = workload.metadata.deletion_timestamp or kueue.clock_of(workload)  # Kueue's finalizer sets the first
        ends.append(observed_at if deletion is None else min(deletion, observed_at))
    return min(ends) if ends else observed_at


def _evicted_holds(
    known: tuple[EvictedHold, ...],
    workload: Workload,
    evicted: Condition | None,
    reserved: Condition | None,
    admitted: Condition | None,
    gone: bool,
    deleted: bool,
    observed_at: datetime,
) -> tuple[EvictedHold, ...]:
    """R17.3, kubernetes-sigs/kueue#14811: `Evicted` True while `QuotaReserved` or
    `Admitted` stays True: from the eviction until a record shows them agree."""
    contradicts = _true(evicted) and (_true(reserved) or _true(admitted)) and not gone
    last = known[-1] if known else None
    open_ = last if last is not None and last.end is None else None
    state = workload.status.requeue_state
    requeue_at = state.requeue_at if state is not None else None
    if contradicts:
        start = _at(evicted, observed_at)
        if open_ is not None and open_.start == start:
            return known if open_.requeue_at == requeue_at else (*known[:-1], EvictedHold(start, None, requeue_at))
        closed = (*known[:-1], EvictedHold(open_.start, start, open_.requeue_at)) if open_ is not None else known
        return (*closed, EvictedHold(start, None, requeue_at))[-EVICTED_KEPT:]
    if open_ is None:
        return known
    ends = [_at(c, observed_at) for c in (evicted, reserved, admitted) if c is not None and c.status != "True"]
    if deleted or gone:
        ends.append(_ended_at(workload, deleted, observed_at))
    end = max(open_.start, min(ends) if ends else observed_at)
    return (*known[:-1], EvictedHold(open_.start, end, open_.requeue_at))


def quota_seen(quotas: tuple[WorkloadQuota, ...], record: GangInput) -> tuple[WorkloadQuota, ...]:
    """The job's Workloads' quota with one Workload record more (SPEC R17.1)."""
    workload = record.workload
    assert workload is not None
    meta = workload.metadata
    deleted = record.change == "DELETED"
    for i, quota in enumerate(quotas):
        if quota.uid == meta.uid:
            seen = _seen(quota, workload, deleted, record.observed_at, record.gpus)
            return quotas if seen == quota else quotas[:i] + (seen,) + quotas[i + 1 :]
    fresh = _seen(WorkloadQuota(meta.name, meta.uid), workload, deleted, record.observed_at, record.gpus)
    if fresh == WorkloadQuota(meta.name, meta.uid, record.gpus):
        return quotas  # nothing held yet: kept once it is
    return (*quotas, fresh)[-WORKLOADS_KEPT:]


def quota_facts(before: GangStateData, after: GangStateData, observed_at: datetime) -> list[Emit]:
    """R17: each key the job joined its share of the quota, when it changed or the key
    became known (a job record naming where its attempt joins); nothing for a job with no
    attempt."""
    track = after.jobset
    if track is None or not track.joined_keys or not after.quota:
        return []
    old = before.jobset
    was = shares(before.quota, old.joined_keys) if old is not None and before.quota and old.queue == track.queue else {}
    return [
        Emit(ATTEMPT_FACTS, key, QuotaFacts(after.cluster, track.namespace, observed_at, track.queue or "", workloads))
        for key, workloads in shares(after.quota, track.joined_keys).items()
        if was.get(key) != workloads
    ]


Window = tuple[datetime | None, datetime | None]  # [start, end); None: unbounded


def shares(quota: tuple[WorkloadQuota, ...], joins: tuple[Join, ...]) -> dict[str, tuple[WorkloadQuota, ...]]:
    """Each joined key's share of the quota, in join order: what its windows hold."""
    windows: dict[str, list[Window]] = {}
    for i, join in enumerate(joins):
        windows.setdefault(join.key, []).append((join.since, joins[i + 1].since if i + 1 < len(joins) else None))
    return {key: _share(quota, spans) for key, spans in windows.items()}


def _share(quota: tuple[WorkloadQuota, ...], windows: list[Window]) -> tuple[WorkloadQuota, ...]:
    if windows == [(None, None)]:
        return quota  # one join: the whole
    open_ = windows[-1][1] is None
    return tuple(
        WorkloadQuota(
            q.name,
            q.uid,
            q.gpus,
            _within(q.holds, windows),
            _within(q.waits, windows),
            _within(q.evicted, windows),
            q.evicted_since if open_ else None,  # a window that ended waits for no readmission
        )
        for q in quota
    )


Span = TypeVar("Span", QuotaHold, EvictedHold)


def _within(spans: tuple[Span, ...], windows: list[Window]) -> tuple[Span, ...]:
    """The parts of `spans` (holds, waits, evicted holds: in time order) in `windows` (in
    time order): an open span ends where its window does; nothing empty is kept."""
    out: list[Span] = []
    for start, end in windows:
        for span in spans:
            a = span.start if start is None else max(span.start, start)
            b = span.end if end is None else end if span.end is None else min(span.end, end)
            if b is not None and b <= a:
                continue
            out.append(span if (a, b) == (span.start, span.end) else msgspec.structs.replace(span, start=a, end=b))
    return tuple(out)


def replace_quota(state: GangStateData, record: GangInput) -> GangStateData:
    quota = quota_seen(state.quota, record)
    return state if quota is state.quota else msgspec.structs.replace(state, quota=quota)
