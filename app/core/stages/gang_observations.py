"""The gang stage's state (SPEC R9, R15): what it keeps of a job and its Kueue Workloads —
each object's observations reduced to what R9 and R15 read, timed by the object's own
clock (R12.7) — and how a record becomes an observation. Deciding what they mean is
`gang_decisions.py`; the fold and its records are `gangs.py`.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from app.core.base.bounds import Trim
from app.core.base.rules import Rules
from app.core.identity import kueue
from app.core.identity.attempt import gang_attempt
from app.core.stages.gang_quota import Join, joined, replace_quota
from app.core.kinds import registry
from app.core.kinds.base import COMPLETED, End, clock_of
from app.core.kinds.jobset import JOBSET
from app.model.facts import GangInput, WorkloadQuota
from app.model.k8s import Job, Timestamp, Workload
from app.model.records import (
    EvictionCause,
    GangState,
    Identity,
    ObjectRef,
    PodRef,
    Retry,
)

TERMINAL: frozenset[GangState] = frozenset({"Ended", "Completed"})



# --- State ---------------------------------------------------------------------------


class JobSetEnd(msgspec.Struct, frozen=True, gc=False):
    """A terminal JobSet condition (R9.10)."""

    state: GangState
    reason: str
    message: str


class JobSetView(msgspec.Struct, frozen=True, gc=False):
    """One observation of the job Kueue suspends (a JobSet, a TrainJob's JobSet, a batch
    Job, a RayJob, a Kubeflow job), reduced to what R9 and R15 read (each kind's own module in app/core/kinds)."""

    observed_at: Timestamp
    suspended: bool = False
    running: bool = False  # R9.3, R15.2: its workers ran
    resume: bool = False  # R9.2: the policy at this observation
    await_eviction: bool = True  # R9.6: wait for Kueue's eviction record (see Rules)
    end: JobSetEnd | None = None
    deleted: bool = False
    # R12.7: when its own controller says this state began (its Suspended condition, or its
    # terminal one), capped by `observed_at`; None where it says nothing (yet).
    since: Timestamp | None = None


class WorkloadView(msgspec.Struct, frozen=True, gc=False):
    """One Workload observation, reduced to what R9 and R15 read."""

    observed_at: Timestamp
    eviction: kueue.Eviction | None = None
    active: bool = True
    admitted: bool = False
    deleted: bool = False
    # When Kueue admitted it, by its own clock, capped by `observed_at` (R2.7c): a wait's
    # length is read from the Workload's conditions, not from when they were seen.
    admitted_at: Timestamp | None = None
    replaced: bool = False  # R15.1: an elastic job's slice replaced by a newer Workload
    counts: kueue.EvictionCounts = ()  # v1beta2 schedulingStats: evictions by reason and cause
    requeues: int | None = None  # requeueState.count, where that is all Kueue counts (v1beta1)
    # R12.7: when this state began by Kueue's clock: the new time its record carried (a
    # condition's lastTransitionTime, capped by `observed_at`), else `observed_at` (a change
    # Kueue wrote no time for, e.g. `spec.active` set false on a Workload already evicted).
    at: Timestamp | None = None

    @property
    def evictions(self) -> int:
        """How many evictions Kueue has counted for it. SPEC R15.7: absent is 0, as Kueue
        writes its counts only after a first eviction."""
        if self.counts:
            return sum(n for _, _, n in self.counts)
        return self.requeues or 0

    @property
    def deactivated(self) -> bool:
        return not self.deleted and kueue.is_deactivation(self.eviction, self.active)

    @property
    def readmitted(self) -> bool:
        return not self.deleted and self.eviction is None and self.admitted


class JobSetTrack(msgspec.Struct, frozen=True, gc=False):
    """The job's observations (a JobSet's for a TrainJob: it mirrors the TrainJob's
    suspension and carries its workers' status), and how its transitions are named."""

    name: str
    namespace: str
    run: str | None
    action: str | None
    attempt: str | None
    queue: str | None = None  # its Kueue LocalQueue (kueue.QUEUE_LABEL)
    views: tuple[JobSetView, ...] = ()
    # R15.6: the transitions' key, identity and tracked object (app/core/identity/attempt.py gang_attempt).
    key: str = ""
    identity: Identity = "labels"
    tracked: ObjectRef | None = None
    kind: str = JOBSET  # the observed job's kind
    uid: str = ""  # the observed job's uid ("": the gang's)
    # R12.7: the latest time any of its records carried (its conditions'): every change of
    # the job made before it has been read.
    clock: Timestamp | None = None
    joins: tuple[Join, ...] = ()  # R17: the attempt stage's keys of its attempt, where its quota goes, the latest last
    join: str = ""  # its one key, in a state stored before `joins` (empty in states written since)

    @property
    def joined_keys(self) -> tuple[Join, ...]:
        """`joins`, or a stored state's one key: its quota goes on reaching it after an
        upgrade, before the job's next record."""
        return self.joins or ((Join(self.join),) if self.join else ())

    @property
    def requeued(self) -> bool:
        """R15: a workload attempt: Kueue requeues it and nobody deletes it, so any eviction
        is waited out; R9 (the orchestrator's labels) keeps Flyte's policy."""
        return self.identity == "workload"


class WorkloadTrack(msgspec.Struct, frozen=True, gc=False):
    name: str
    uid: str
    created: Timestamp | None
    last_seen: Timestamp
    views: tuple[WorkloadView, ...] = ()  # consecutive identical views kept once
    # R12.7: the latest time Kueue wrote on it in any record read: every change made before
    # it has been read (a record's own times, not when a burst delivered it).
    clock: Timestamp | None = None

    def known_through(self, t: datetime) -> bool:
        """No record still in flight can show this Workload as it stood at `t`: it is gone,
        or a record carrying a later time of Kueue's has been read (watch order)."""
        return self.views[-1].deleted or (self.clock is not None and self.clock > t)


class Status(msgspec.Struct, frozen=True, gc=False):
    """Where the gang stands; a change of state, reason, code or retry is a transition."""

    state: GangState
    reason: str
    at: Timestamp
    code: str | None = None
    retry: Retry | None = None
    cause: EvictionCause | None = None
    waited_seconds: float | None = None
    workload: PodRef | None = None  # the Workload as it stood at `when`
    reconstructed: bool = False  # from Kueue's eviction counts, not seen (R15.7)
    # R12.7: when it happened by the objects' own clocks, which `decide` orders by (`at`
    # says when the bridge could know it); the Workload is named as it stood then.
    when: Timestamp | None = None

    def same_as(self, other: Status) -> bool:
        return (self.state, self.reason, self.code, self.retry) == (other.state, other.reason, other.code, other.retry)


class GangStateData(msgspec.Struct, frozen=True, gc=False):
    """The per-job state: what has been observed, and the last emitted status."""

    cluster: str
    uid: str  # the uid of the job Kueue's Workload names (a TrainJob's for its JobSet)
    last_seen: Timestamp
    jobset: JobSetTrack | None = None  # None: Workload records held until the JobSet arrives
    workloads: tuple[WorkloadTrack, ...] = ()
    status: Status | None = None
    deleted_at: Timestamp | None = None  # the JobSet's DELETED record (R7.4)
    steps: int = 0  # steps of `decide` emitted so far (each a transition)
    blocked: bool = False  # a decision waits on progress (R12.4): settle it when a watermark moves
    stuck: Timestamp | None = None  # R15.4: the `at` of the wait reported stuck, until it ends
    quota: tuple[WorkloadQuota, ...] = ()  # R17: what its Workloads held, and when

    @property
    def ended(self) -> bool:
        return self.status is not None and self.status.state in TERMINAL



# --- Reading a JobSet ----------------------------------------------------------------


def resume_after_preemption(jobset: Job, rules: Rules) -> bool:
    """R9.2: the annotation when it says "true" or "false", else the configured default."""
    value = jobset.metadata.annotations.get(rules.resume_annotation)
    return {"true": True, "false": False}.get(value or "", rules.resume_after_preemption)


def _jobset_view(record: GangInput, jobset: Job, rules: Rules, trim: Trim) -> JobSetView:
    observed_at = record.observed_at
    if record.change == "DELETED":
        return JobSetView(observed_at, deleted=True)
    kind = registry.kind_of(jobset.api_version, jobset.kind)
    assert kind is not None  # a job of a kind faultline does not know has no gang (kueue.job_gang_uid)
    suspended = kind.suspended(jobset)
    end = _trimmed_end(kind.end(jobset), trim)
    since = kind.end_since(jobset) if end is not None else kind.suspension_since(jobset, suspended)
    return JobSetView(
        observed_at,
        suspended=suspended,
        running=kind.started(jobset),
        resume=resume_after_preemption(jobset, rules),
        await_eviction=rules.await_eviction_with_policy_off,
        end=end,
        since=_capped(since, observed_at),
    )


def _trimmed_end(end: End | None, trim: Trim) -> JobSetEnd | None:
    if end is None:
        return None
    state: GangState = "Completed" if end.state == COMPLETED else "Ended"
    return JobSetEnd(state, trim.token(end.reason), trim.message(end.message))


def _capped(at: datetime | None, observed_at: datetime) -> datetime | None:
    """R2.7c: a time a client wrote is never after the bridge saw it."""
    return min(at, observed_at) if at is not None else None


def _workload_view(record: GangInput, workload: Workload, trim: Trim, before: WorkloadTrack | None) -> WorkloadView:
    """The Workload as R9 and R15 read it; `before`: what was known of it, which tells
    which of Kueue's eviction counts grew (the eviction's underlying cause, R15.2) and
    whether this record carried a time of Kueue's that no earlier one did (R12.7)."""
    observed_at = record.observed_at
    clock = before.clock if before is not None else None
    stamp = _capped(kueue.clock_of(workload), observed_at)
    at = stamp if stamp is not None and (clock is None or stamp > clock) else observed_at
    if record.change == "DELETED":
        deleting = _capped(workload.metadata.deletion_timestamp, observed_at)  # a finalizer held it
        return WorkloadView(observed_at, deleted=True, at=deleting or observed_at)
    counts = tuple((trim.token(r), trim.token(c), n) for r, c, n in kueue.eviction_counts(workload))
    eviction = kueue.eviction_of(workload)
    if eviction is not None:
        reason = trim.token(eviction.reason)
        eviction = kueue.Eviction(
            reason,
            trim.message(eviction.message),
            trim.token(eviction.detail),
            _capped(eviction.since, observed_at),
            kueue.underlying_cause(reason, counts, before.views[-1].counts if before is not None else ()),
        )
    return WorkloadView(
        observed_at,
        eviction=eviction,
        active=workload.spec.active,
        admitted=kueue.is_admitted(workload),
        admitted_at=_capped(kueue.admitted_at(workload), observed_at),
        replaced=kueue.is_replaced(workload),
        counts=counts,
        requeues=kueue.requeues_of(workload),
        at=at,
    )



# --- Folding a record into the observations ------------------------------------------


def observe(state: GangStateData, record: GangInput, rules: Rules, trim: Trim) -> GangStateData:
    last_seen = max(state.last_seen, record.observed_at)
    deleted_at = state.deleted_at
    if record.jobset is not None and record.change == "DELETED" and deleted_at is None:
        deleted_at = record.observed_at
    state = msgspec.structs.replace(state, last_seen=last_seen, deleted_at=deleted_at)
    if record.workload is not None:
        state = replace_quota(state, record)  # R17: a Workload's quota, the job ended or not
    if state.ended:
        return state
    if record.jobset is not None:
        return msgspec.structs.replace(state, jobset=_add_jobset(state.jobset, record, record.jobset, rules, trim))
    assert record.workload is not None
    return msgspec.structs.replace(state, workloads=_add_workload(state.workloads, record, record.workload, trim))


def _add_jobset(track: JobSetTrack | None, record: GangInput, jobset: Job, rules: Rules, trim: Trim) -> JobSetTrack:
    labels = jobset.metadata.labels
    keys = rules.labels
    views = _compact(track.views if track is not None else (), _jobset_view(record, jobset, rules, trim))
    key, identity, tracked = gang_attempt(record.cluster, jobset, rules, trim)
    clock = later_of(track.clock if track is not None else None, _capped(clock_of(jobset), record.observed_at))
    return JobSetTrack(
        key=key,
        identity=identity,
        tracked=tracked,
        kind=jobset.kind,
        uid=jobset.metadata.uid,
        name=jobset.metadata.name,
        namespace=jobset.metadata.namespace,
        run=labels.get(keys.run),
        action=labels.get(keys.action),
        attempt=labels.get(keys.attempt),
        queue=labels.get(kueue.QUEUE_LABEL),
        views=views,
        clock=clock,
        joins=joined(track.joined_keys if track is not None else (), record.join, _joined_since(record, jobset), record.observed_at),
    )


def _joined_since(record: GangInput, jobset: Job) -> datetime | None:
    kind = registry.kind_of(jobset.api_version, jobset.kind)
    return kind.joined_since(jobset) if kind is not None and record.change != "DELETED" else None


def _compact(views: tuple[JobSetView, ...], view: JobSetView) -> tuple[JobSetView, ...]:
    """Append; of a run of identical observations keep the first and the latest, which is
    all `decide` reads (when it began, that it was seen again, until when)."""
    if len(views) >= 2 and _same_view(views[-1], view) and _same_view(views[-2], view):
        return views[:-1] + (view,)
    return views + (view,)


def _same_view(old: JobSetView | WorkloadView, new: JobSetView | WorkloadView) -> bool:
    """The same state (when it was seen and when it began aside): the first is kept."""
    if isinstance(old, WorkloadView):
        old = msgspec.structs.replace(old, at=new.at)  # type: ignore[union-attr]
    return msgspec.structs.replace(old, observed_at=new.observed_at) == new


def later_of(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else max(a, b)


def _add_workload(tracks: tuple[WorkloadTrack, ...], record: GangInput, workload: Workload, trim: Trim) -> tuple[WorkloadTrack, ...]:
    meta = workload.metadata
    stamp = _capped(kueue.clock_of(workload), record.observed_at)
    for i, track in enumerate(tracks):
        if track.uid == meta.uid:
            view = _workload_view(record, workload, trim, track)
            updated = msgspec.structs.replace(
                track,
                last_seen=max(track.last_seen, view.observed_at),
                views=track.views if _same_view(track.views[-1], view) else track.views + (view,),
                clock=later_of(track.clock, stamp),
            )
            return tracks[:i] + (updated,) + tracks[i + 1 :]
    view = _workload_view(record, workload, trim, None)
    new = WorkloadTrack(meta.name, meta.uid, meta.creation_timestamp, record.observed_at, (view,), clock=stamp)
    return tracks + (new,)


def newest_workload(tracks: tuple[WorkloadTrack, ...]) -> WorkloadTrack | None:
    """R9.1: the newest by creationTimestamp (then name, uid, for a total order); R15.1:
    of those not replaced by a newer slice (an elastic job's), when there is one."""
    live = [t for t in tracks if not any(v.replaced for v in t.views)] or list(tracks)
    if not live:
        return None
    return max(live, key=lambda t: (t.created is not None, t.created.timestamp() if t.created else 0.0, t.name, t.uid))


