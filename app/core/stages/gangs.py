"""The Kueue preemption / readmission state machine of one JobSet (SPEC R9).

One fold per JobSet, keyed by `gang_key` (cluster + JobSet uid), over the JobSet's records
(k8s.jobs) and its Workloads' records (k8s.workloads); one `faultline.GangTransition/v2`
per state change (R9.11), keyed as v1 under the orchestrator's labels and by the
workload attempt key otherwise (R15.6, `attempt.gang_attempt`).

Order independence (R7.1, R12.7). The two topics interleave arbitrarily; records of one
object arrive in order. After a restart of `run` or the bridge, or a relist, each watch
delivers its backlog in one burst, before or after the other's: `observed_at` then says
when the burst came, not what Kueue did first. So the fold keeps each object's
observations (reduced to what R9 reads) and, on every record, replays the JobSet's
observations in order, setting them beside the Workload's by the times the objects carry:
the job's `Suspended` condition (its controller's clock: when a suspension or a resume
began, `job_times`) and the Workload's conditions (Kueue's clock: when each of its states
began, `WorkloadTimeline`). A change an object writes no time for is placed as late as its
own later records allow (before its next timed change, never after it was seen). The rule,
as a user would state it:

  A suspension of a started JobSet is explained by the Workload eviction in force when
  the JobSet was suspended or, failing that, by the first eviction Kueue records while
  the JobSet stays suspended (Kueue evicts, then suspends, but its write and the job
  controller's may land in either order within `watch_skew`). The eviction is classified
  by the Workload as it stood then, inactivity first (R9.8). Until then the gang waits (R9.6).

A decision is taken only once no record still in flight can change it: the Workload must
be known past the instant the decision reads it at — a record carrying a later time of
Kueue's has been read (watch order), or the k8s.workloads watermark passed it — and a
Workload fact dated after the suspension (an eviction, a deletion) counts only once the
JobSet is known to have stayed suspended until then (it ran again only later, or it is
known past that time). So an ending (Ended/Completed with its code and retry) is the same
in every arrival order; it is final, emitted once, never revised. Only non-final steps
(Running while awaiting the eviction, WaitingForReadmission) may be emitted in some orders
and not others. Ties at the second (both controllers' times are whole seconds) go to
Kueue: it evicts before it suspends and admits before it resumes.

One exception is unavoidable: "no Workload ever seen" (R9.7) cannot be told apart from
"every Workload record still in flight". With no Workload, the watermark decides.

Choices where SPEC is silent:
- `at` is when the decision became knowable: the latest `observed_at` among the
  observations it rests on (e.g. JobSet seen suspended, Workload seen evicted). That is
  the record that caused the transition in the bridge's order; a burst moves it (R12.7
  lists what must not move: `from`, `to`, `code`, `retry`, `waited_seconds`).
- `waited_seconds` on readmission: Kueue's, from its Evicted condition's time to its
  Admitted one; without them, its `at` − the `at` of the wait.
- Started (R9.3), "unsuspended while its Workload was admitted": the Workload as it stood
  when the job's controller says it resumed.
- The policy is read from the JobSet observation that starts the suspension (R9.2).
- With the policy off, R9.6 waits for the Workload too (setting
  `await_eviction_with_policy_off`, default on): ending at once would make one preemption
  `user` or `system` by arrival order. Off gives Flyte's immediate `system` ending.
- The wait for certainty is reported with R9.6's reason text.
- A JobSet deleted while waiting emits nothing; the gang expires after retention (R7.4).
- The initial Pending is not a change and is not emitted.
- A Workload replaced mid-attempt by a newer one (R9.1: the newest) is followed, but the
  order-independence guarantee does not cover that case.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal, NamedTuple

import msgspec

from app.core.identity import kueue
from app.core.identity.attempt import gang_attempt
from app.core.kinds import registry
from app.core.kinds.base import COMPLETED, End, clock_of
from app.core.kinds.jobset import JOBSET
from app.core.base.bounds import Trim
from app.core.base.clock import after
from app.core.base.emit import Emit
from app.core.stages.fleet_inputs import gang_change
from app.core.base.progress import ANY_PROGRESS, Watermarks
from app.core.base.rules import Rules
from app.model.decode import TypedEnvelope
from app.model.envelope import JOBS, WORKLOADS, ChangeType
from app.model.facts import GANG_INPUTS, GangInput
from app.model.k8s import Job, Timestamp, Workload, WorkloadSpec
from app.model.records import (
    GANG_EVICTED,
    GANG_TRANSITIONS,
    STUCK_READMISSIONS,
    WAITING_FOR_READMISSION,
    EvictionCause,
    GangState,
    GangTransition,
    Identity,
    ObjectRef,
    PodRef,
    Retry,
    StuckReadmission,
)

TERMINAL: frozenset[GangState] = frozenset({"Ended", "Completed"})

PENDING = "waiting for gang admission"
RUNNING = "running"
READMITTED = "re-admitted by kueue; running"
HELD = "suspended, and kueue recorded no eviction: held by its user or a controller"  # R15.5
RESUMED = "resumed; running"
DELETED = "the workload was deleted"  # R15.3
WORKLOAD_DELETED = "WorkloadDeleted"

FAILED = "Failed"


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


class WorkloadTimeline(NamedTuple):
    """A Workload's views with the time each state began (R12.7): the time its record
    carried, never later than any later state's (a change Kueue wrote no time for happened
    before the next one it did). A function of the Workload's own records in watch order,
    so the same whichever way its records and the job's interleave."""

    track: WorkloadTrack
    times: list[datetime]

    @classmethod
    def of(cls, track: WorkloadTrack) -> WorkloadTimeline:
        times = [v.at or v.observed_at for v in track.views]
        for k in range(len(times) - 2, -1, -1):
            times[k] = min(times[k], times[k + 1])
        return cls(track, times)

    @property
    def views(self) -> tuple[WorkloadView, ...]:
        return self.track.views

    @property
    def deleted_at(self) -> datetime | None:
        return self.times[-1] if self.views[-1].deleted else None

    def index_as_of(self, t: datetime, start: int = 0, stop: int | None = None) -> int | None:
        found = None
        for k in range(start, len(self.views) if stop is None else stop):
            if self.times[k] > t:
                break
            found = k
        return found

    def episode(self, k: int) -> tuple[int, int]:
        """[first, end) of the run of views showing the same eviction as view k."""
        views = self.views
        same = views[k].eviction
        first = k
        while first > 0 and _same_eviction(views[first - 1], same):
            first -= 1
        end = k + 1
        while end < len(views) and _same_eviction(views[end], same):
            end += 1
        return first, end

    def eviction_for(self, since: datetime, until: datetime | None, deadline: datetime) -> tuple[int, int] | None:
        """The eviction explaining a suspension that began at `since`: in force then, or the
        first recorded by `deadline` (R9.6) before the job ran again (at `until`)."""
        views = self.views
        now = self.index_as_of(since)
        if now is not None and views[now].eviction is not None and not views[now].deleted:
            return self.episode(now)
        for k in range(0 if now is None else now + 1, len(views)):
            at = self.times[k]
            if views[k].deleted or at > deadline or (until is not None and at >= until):
                return None
            if views[k].eviction is not None:
                return self.episode(k)
        return None

    def hidden_evictions(self, after: datetime, until: datetime | None) -> list[tuple[int, str, str]]:
        """Evictions Kueue counted between two observations of the Workload that neither
        shows (both without `Evicted=True`: evicted and readmitted while faultline was not
        watching, SPEC R15.7), whose later observation's state began in (`after`,
        `until`]: (that view's index, reason, cause)."""
        found = []
        views = self.views
        for k in range(1, len(views)):
            prev, cur = views[k - 1], views[k]
            if self.times[k] <= after or (until is not None and self.times[k] > until):
                continue
            if prev.deleted or cur.deleted or prev.eviction is not None or cur.eviction is not None:
                continue
            if cur.evictions <= prev.evictions:
                continue
            reason, cause = kueue.grown(cur.counts, prev.counts) or ("", "")
            found.append((k, reason, cause))
        return found

    def exit_after(self, k: int, requeued: bool = False) -> int | None:
        """While waiting (R9.8, R9.7, R9.9): first view after k that is gone, deactivated or
        readmitted. `requeued` (R15.3): any inactive Workload ends the wait, and a deleted
        one does not (Kueue makes another while its job is there)."""
        views = self.views
        for j in range(k + 1, len(views)):
            view = views[j]
            if view.readmitted:
                return j
            if requeued and not view.deleted and not view.active:
                return j
            if not requeued and (view.deleted or view.deactivated):
                return j
        return None


def _same_eviction(view: WorkloadView, eviction: kueue.Eviction | None) -> bool:
    other = view.eviction
    return (
        not view.deleted
        and other is not None
        and eviction is not None
        and (other.reason, other.since) == (eviction.reason, eviction.since)
    )


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

    @property
    def ended(self) -> bool:
        return self.status is not None and self.status.state in TERMINAL


# --- Public API ----------------------------------------------------------------------


def gang_key(cluster: str, obj: Job | Workload, rules: Rules) -> str | None:
    """`<cluster>/<job uid>` the record belongs to (the job Kueue's Workload names), None
    if it belongs to no gang faultline follows.

    UIDs are random per cluster, so a collision needs a cluster restored from another's
    backup; the cluster prefix rules even that out and costs nothing.
    """
    uid = kueue.job_uid_of(obj, rules) if isinstance(obj, Workload) else kueue.job_gang_uid(obj, rules)
    return f"{cluster}/{uid}" if uid else None


def gang_input_of(change: ChangeType, observed_at: datetime, cluster: str, obj: Job | Workload, rules: Rules) -> Emit | None:
    """A job or Workload record for the gang stage, keyed by its gang (None: it belongs to
    no gang faultline follows)."""
    key = gang_key(cluster, obj, rules)
    if key is None:
        return None
    jobset, workload = (obj, None) if isinstance(obj, Job) else (None, obj)
    if workload is not None and workload.spec.pod_sets:  # read for routing only: not carried on
        workload = msgspec.structs.replace(workload, spec=WorkloadSpec(active=workload.spec.active))
    return Emit(GANG_INPUTS, key, GangInput(change, observed_at, cluster, jobset=jobset, workload=workload))


def route_workload_record(
    _: None, __: str, envelope: TypedEnvelope[Workload], rules: Rules, marks: Watermarks
) -> tuple[None, list[Emit]]:
    """The jobs stage's fold for k8s.workloads: a Workload to its job's gang (R9.1, R15.1)."""
    gang = gang_input_of(envelope.type, envelope.observed_at, envelope.cluster, envelope.object, rules)
    return None, [gang] if gang is not None else []


def fold_gang(
    state: GangStateData | None, key: str, record: GangInput, rules: Rules, marks: Watermarks
) -> tuple[GangStateData | None, list[Emit]]:
    uid = key.partition("/")[2]
    if not uid:
        return state, []
    if state is None:
        state = GangStateData(cluster=record.cluster, uid=uid, last_seen=record.observed_at)
    trim = Trim(rules)
    state, emits = _decided(_observe(state, record, rules, trim), rules, marks)
    return state, emits + trim.dropped()


def settle_gang(state: GangStateData, _: str, rules: Rules, marks: Watermarks) -> tuple[GangStateData, list[Emit]]:
    """R12.4: a watermark moved; decide again what was waiting on it."""
    return _decided(state, rules, marks)


def gang_waits_until(state: GangStateData, rules: Rules) -> datetime | None:
    """A gang blocked on an absence settles on any progress of its cluster (R12.4); a
    workload attempt waiting for readmission, once stream time passes
    `max_readmission_wait` (R15.4: it is reported stuck)."""
    if state.blocked:
        return ANY_PROGRESS
    waiting = _waiting_since(state)
    if waiting is not None and state.stuck != waiting:
        return waiting + rules.max_readmission_wait
    return None


def _waiting_since(state: GangStateData) -> datetime | None:
    """When a workload attempt's wait for readmission began, if it waits now (R15.2)."""
    status, track = state.status, state.jobset
    if status is None or track is None or not track.requeued or status.state != WAITING_FOR_READMISSION:
        return None
    return status.at


def _decided(state: GangStateData, rules: Rules, marks: Watermarks) -> tuple[GangStateData, list[Emit]]:
    if state.ended and state.stuck is None:
        return msgspec.structs.replace(state, blocked=False) if state.blocked else state, []  # an ending is final (R7.1)
    emits = []
    if not state.ended:
        steps, blocked = decide(state, Horizon.of(marks, state.cluster), rules.watch_skew)
        status = state.status
        for step in steps[state.steps :]:  # R9.11: one record per state change, each once
            transition = _transition(state, status, step, rules)
            emits += [transition, *gang_change(step.at, transition.value, rules)]
            state, stuck = _wait_over(state, status, step, rules)
            emits += stuck
            status = step
        if emits or blocked != state.blocked:
            state = msgspec.structs.replace(state, status=status, steps=max(state.steps, len(steps)), blocked=blocked)
    stuck = _still_waiting(state, rules, marks.stream_time(state.cluster))
    if stuck is not None:
        state, record = stuck
        emits.append(record)
    return state, emits


# R15.4: a wait past `max_readmission_wait` is reported once, as of the moment it passed
# it, and its end once more; the wait itself goes on. Both records are read from the
# wait's own times, so they are the same whether the readmission or the progress that
# passes the limit is read first (R7.1).


def _still_waiting(state: GangStateData, rules: Rules, now: datetime | None) -> tuple[GangStateData, Emit] | None:
    """A wait still going on when stream time passes its limit: reported now."""
    waiting = _waiting_since(state)
    if waiting is None or state.stuck is not None or now is None or now - waiting < rules.max_readmission_wait:
        return None
    return msgspec.structs.replace(state, stuck=waiting), _stuck_record(state, state.status, waiting, True, rules)


def _wait_over(state: GangStateData, old: Status | None, new: Status, rules: Rules) -> tuple[GangStateData, list[Emit]]:
    """A wait of a workload attempt that `new` ends: its end, if it was reported stuck;
    if it was longer than the limit but not yet reported (the readmission read before
    the progress that passes the limit), both reports."""
    track = state.jobset
    if old is None or old.state != WAITING_FOR_READMISSION or track is None or not track.requeued or old.reconstructed:
        return state, []
    out = []
    if state.stuck != old.at:
        if new.at - old.at < rules.max_readmission_wait:
            return state, []
        out.append(_stuck_record(state, old, old.at, True, rules))
    out.append(_stuck_record(state, old, old.at, False, rules, ended=new.at))
    return msgspec.structs.replace(state, stuck=None), out


def _stuck_record(state: GangStateData, waiting: Status | None, since: datetime, stuck: bool, rules: Rules, ended: datetime | None = None) -> Emit:
    """The report of a wait (`waiting`, begun at `since`): stuck as of the moment it passed
    the limit, or over at `ended`."""
    track = state.jobset
    assert track is not None and waiting is not None
    key = track.key or f"{state.cluster}/{track.namespace}/{track.name}"
    at = ended if ended is not None else since + rules.max_readmission_wait
    record = StuckReadmission(
        key=key,
        cluster=state.cluster,
        namespace=track.namespace,
        identity=track.identity,
        tracked=track.tracked or ObjectRef(kind=track.kind, name=track.name, uid=state.uid),
        workload=waiting.workload,
        queue=track.queue,
        stuck=stuck,
        since=since,
        at=at,
        waited_seconds=(at - since).total_seconds(),
        cause=waiting.cause if stuck else None,
        reason=waiting.reason,
        rules_version=rules.version,
    )
    return Emit(STUCK_READMISSIONS, key, record)


def gang_expires_at(state: GangStateData, rules: Rules) -> datetime | None:
    """R7.4: ended, completed or deleted, and retention has passed in stream time (None:
    not while it lives)."""
    if state.jobset is None:
        done: datetime | None = state.last_seen  # a Workload whose JobSet never came
    else:
        times = [t for t in (state.deleted_at, state.status.at if state.ended and state.status else None) if t]
        done = min(times) if times else None
    return after(done, rules.retention) if done is not None else None


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


def _observe(state: GangStateData, record: GangInput, rules: Rules, trim: Trim) -> GangStateData:
    last_seen = max(state.last_seen, record.observed_at)
    deleted_at = state.deleted_at
    if record.jobset is not None and record.change == "DELETED" and deleted_at is None:
        deleted_at = record.observed_at
    state = msgspec.structs.replace(state, last_seen=last_seen, deleted_at=deleted_at)
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
    clock = _later(track.clock if track is not None else None, _capped(clock_of(jobset), record.observed_at))
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
    )


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


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
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
                clock=_later(track.clock, stamp),
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


# --- Deciding ------------------------------------------------------------------------

# How a suspension stands: settled for good, over (the JobSet runs again), waiting for a
# record (readmission), or blocked until progress shows what is still unknown.
Step = tuple[Literal["final", "resumed", "waiting", "blocked"], list[Status]]


class Horizon(NamedTuple):
    """How far each topic is known for the gang's cluster (R12.4): its watermark."""

    jobs: datetime | None
    workloads: datetime | None

    @classmethod
    def of(cls, marks: Watermarks, cluster: str) -> Horizon:
        return cls(marks.of(cluster, JOBS), marks.of(cluster, WORKLOADS))


class _Known(NamedTuple):
    """The JobSet's Workload (the newest, R9.1; None if none was seen) on its own clock, and
    how far it is known."""

    timeline: WorkloadTimeline | None
    horizon: datetime | None

    @classmethod
    def of(cls, track: WorkloadTrack | None, horizon: datetime | None) -> _Known:
        return cls(WorkloadTimeline.of(track) if track is not None else None, horizon)

    def through(self, t: datetime) -> bool:
        """R12.4, R12.7: the Workload as it stood at `t` is known: a record carrying a later
        time of Kueue's has been read, or the k8s.workloads watermark passed `t`."""
        if self.horizon is not None and self.horizon > t:
            return True
        return self.timeline is not None and self.timeline.track.known_through(t)

    def ref_at(self, t: datetime) -> PodRef | None:
        """The Workload that existed at `t`, if one did."""
        view = self.view_at(t)
        if self.timeline is None or view is None or view.deleted:
            return None
        return PodRef(name=self.timeline.track.name, uid=self.timeline.track.uid)

    def view_at(self, t: datetime) -> WorkloadView | None:
        """The Workload as it stood at `t` (None: not there, or not seen yet)."""
        if self.timeline is None:
            return None
        k = self.timeline.index_as_of(t)
        return self.timeline.views[k] if k is not None else None


def _phase(view: JobSetView) -> str:
    return "deleted" if view.deleted else "ended" if view.end is not None else "suspended" if view.suspended else "running"


def job_times(views: tuple[JobSetView, ...]) -> list[datetime]:
    """R12.7: when each view's state (suspended, running, ended, deleted) began by the job's
    own clock: for each run of views in one state, the time its controller wrote for that
    state where a view of the run carries one (`since`), never after the run was first
    seen; else when it was first seen. A function of the job's own records in watch order."""
    times: list[datetime] = []
    before: datetime | None = None
    i = 0
    while i < len(views):
        phase = _phase(views[i])
        j = i + 1
        while j < len(views) and _phase(views[j]) == phase:
            j += 1
        carried = next((v.since for v in views[i:j] if v.since is not None and (before is None or v.since > before)), None)
        began = views[i].observed_at if carried is None else min(carried, views[i].observed_at)
        began = began if before is None else max(began, before)
        times += [began] * (j - i)
        before = began
        i = j
    return times


def decide(state: GangStateData, horizon: Horizon, skew: timedelta) -> tuple[list[Status], bool]:
    """Every state the gang has passed through that the observations settle (from
    Pending on, not included), replaying the JobSet's views in order, and whether the
    rest is blocked until progress shows more (R12.4). The job's views and the Workload's
    are set side by side by the times the objects carry (R12.7: `job_times`,
    `WorkloadTimeline`), never by when a record arrived. A step is listed only once no
    record still in flight can change it, so the list only grows: the transitions are
    the same, in the same order, whatever order the records and progress arrive in."""
    if state.jobset is None:
        return [], False  # Workload records held until their JobSet is known (R9.1)
    track = state.jobset
    views = track.views
    times = job_times(views)
    requeued = track.requeued
    workload = _Known.of(newest_workload(state.workloads), horizon.workloads)
    steps: list[Status] = []
    started = False
    i = 0
    while i < len(views):
        view, began = views[i], times[i]
        if view.deleted:
            if requeued and started:  # R15.3: nobody deletes it but its user: it ends here
                return steps, not _step(steps, Status("Ended", DELETED, view.observed_at, code=WORKLOAD_DELETED, when=began), workload)
            return steps, False
        if view.end is not None:
            ended = msgspec.structs.replace(_jobset_ended(view.end, view.observed_at, track.kind), when=began)
            return steps, not _step(steps, ended, workload)  # R9.10
        if not started and not view.running and not view.suspended:
            # R9.3: resumed while its Workload, as it stood then, was admitted.
            if not workload.through(began):
                return steps, True
            admitted = workload.view_at(began)
            started = admitted is not None and admitted.readmitted
        started = started or view.running
        if not started:
            i += 1
        elif not view.suspended:
            if not steps and not _step(steps, Status("Running", RUNNING, view.observed_at, when=began), workload):
                return steps, True
            # Evictions Kueue counted while it ran, that no observation showed (R15.7).
            until = times[i + 1] if i + 1 < len(views) else _later(horizon.jobs, track.clock)
            if workload.timeline is not None and until is not None:
                timeline = workload.timeline
                for k, reason, cause in timeline.hidden_evictions(began, until):
                    for status in _reconstructed(timeline.views[k].observed_at, timeline.times[k], reason, cause):
                        if not _step(steps, status, workload):
                            return steps, True
            i += 1
        else:
            end = _end_of_suspension(views, i)
            after = _After(views[end], times[end]) if end < len(views) else None
            run = _Run(views[i:end], began, _later(horizon.jobs, track.clock))
            kind, taken = _suspension(run, after, workload, skew, requeued)
            for status in taken:
                if not _step(steps, status, workload):
                    return steps, True
            if kind != "resumed":
                return steps, kind == "blocked"
            i = end
    return steps, False


def _step(steps: list[Status], status: Status, workload: _Known) -> bool:
    """Take a step — a change of state, reason, code or retry; the same status again is
    none — naming the Workload as it stood when it happened (R9.11), so it waits until
    that is known (R12.4). False: not yet."""
    if steps and steps[-1].same_as(status):
        return True
    when = status.when if status.when is not None else status.at
    if not workload.through(when):
        return False
    steps.append(msgspec.structs.replace(status, workload=workload.ref_at(when)))
    return True


def _end_of_suspension(views: tuple[JobSetView, ...], i: int) -> int:
    end = i + 1
    while end < len(views) and views[end].suspended and views[end].end is None and not views[end].deleted:
        end += 1
    return end


class _Run(NamedTuple):
    """One suspension of a started job: its views, when it began by the job's clock, and
    how far the job is known (the k8s.jobs watermark, or the latest time the job wrote)."""

    views: tuple[JobSetView, ...]
    began: datetime
    known: datetime | None


class _After(NamedTuple):
    """The view that ended a suspension (running again, ended or deleted), and when that began."""

    view: JobSetView
    began: datetime


def _suspension(run: _Run, after: _After | None, workload: _Known, skew: timedelta, requeued: bool = False) -> Step:
    """R9.4–R9.9 for one suspension of a started JobSet. Returns how it stands and the
    steps it settled. `requeued` (R15, a workload attempt): any eviction is waited out, and
    a suspension Kueue recorded no eviction for is its user's (`Suspended`), never an
    ending. Kueue's eviction and the job's suspension are set side by side by their own
    times (R12.7); `at` of each step is still when the bridge could know it."""
    first = run.views[0]
    since, until = run.began, after.began if after is not None else None
    deadline = since + skew  # R9.6: Kueue's eviction record may lag the JobSet's by this much
    seen_since = first.observed_at
    seen_deadline = seen_since + skew

    def suspended_through(t: datetime) -> bool:
        """The job is known to have stayed suspended until `t` (R12.4): it ran again only
        after `t`, or, not running again yet, it is known past `t`."""
        if until is not None:
            return t < until
        return run.known is not None and run.known > t

    timeline = workload.timeline
    if timeline is not None and workload.through(since):
        at_since = workload.view_at(since)
        if at_since is not None and at_since.deactivated:  # R9.8 before anything else
            return "final", [_evicted(kueue.classify_eviction(at_since.eviction, at_since.active), seen_since, since)]
    episode = timeline.eviction_for(since, until, deadline) if timeline is not None else None
    if episode is not None and timeline is not None:
        first_k, end_k = episode
        evicted_at = timeline.times[first_k]
        if not suspended_through(evicted_at):
            return "blocked", []  # the JobSet may have run again before this eviction
        when = max(since, evicted_at)
        seen = max(seen_since, timeline.views[first_k].observed_at)
        k = timeline.index_as_of(when, first_k, end_k)
        assert k is not None  # views[first_k] began by `when`
        view = timeline.views[k]
        evicted = kueue.classify_eviction(view.eviction, view.active)
        assert evicted is not None  # the view shows the eviction
        if requeued and view.active:
            return _wait(timeline, k, evicted, seen, when, after, requeued)  # R15.2: requeued, it waits
        if evicted.is_preemption and first.resume:
            return _wait(timeline, k, evicted, seen, when, after)  # R9.4 policy on
        if not workload.through(when):
            return "blocked", []  # a Workload record in flight could still reclassify it
        return "final", [_evicted(evicted, seen, when)]  # R9.4 policy off, R9.5
    gone = timeline.deleted_at if timeline is not None else None
    if not requeued and timeline is not None and gone is not None and gone <= deadline and suspended_through(gone):
        return "final", [_evicted(None, max(seen_since, timeline.views[-1].observed_at), max(since, gone))]  # R9.7
    if not requeued and not first.resume and not first.await_eviction:
        return "final", [_evicted(None, seen_since, since)]  # R9.6, policy off without the wait (Flyte's)
    if until is not None and until <= deadline:
        # Running again before Kueue could have recorded an eviction: nothing evicted it.
        return ("resumed", []) if workload.through(until) else ("blocked", [])
    if suspended_through(deadline) and workload.through(deadline):
        if requeued:  # R15.5: Kueue recorded no eviction: its user's suspension, not an end
            return _held(seen_deadline, deadline, after)
        return "final", [_evicted(None, seen_deadline, deadline)]  # R9.6, R9.7: no eviction, or no Workload, recorded in time
    return "blocked", []


def _held(at: datetime, when: datetime, after: _After | None) -> Step:
    """R15.5: `Suspended` (known at `at`), until the job runs again (`Running`), ends or is
    deleted (the caller goes on with that view)."""
    held = Status("Suspended", HELD, at, when=when)
    if after is None:
        return "waiting", [held]
    view = after.view
    if view.suspended or view.end is not None or view.deleted:
        return "resumed", [held]
    return "resumed", [held, Status("Running", RESUMED, max(at, view.observed_at), when=max(when, after.began))]


def _wait(
    timeline: WorkloadTimeline,
    k: int,
    evicted: kueue.Classified,
    began: datetime,
    when: datetime,
    after: _After | None,
    requeued: bool = False,
) -> Step:
    """WaitingForReadmission, until the Workload is deactivated (R9.8, R15.3), deleted
    (R9.7; under R15 Kueue makes another: the wait goes on) or readmitted with the job
    running again (R9.9). The wait's length is Kueue's: from the eviction to the
    readmission by the Workload's own condition times, each capped by when it was seen
    (a restart of faultline during the wait does not lengthen it)."""
    waiting = Status("WaitingForReadmission", kueue.waiting_reason(evicted), began, cause=_cause(evicted), when=when)
    j = timeline.exit_after(k, requeued)
    view = after.view if after is not None else None
    if j is None:
        if requeued and view is not None and (view.end is not None or view.deleted):
            return "resumed", [waiting]  # R15.3: it ended or was deleted while waiting: the caller goes on there
        return "waiting", [waiting]
    exit_ = timeline.views[j]
    at = max(began, exit_.observed_at)
    exit_when = max(when, timeline.times[j])
    if exit_.deleted:
        return "final", [waiting, _evicted(None, at, exit_when)]
    if exit_.deactivated or (requeued and not exit_.active):
        return "final", [waiting, _evicted(kueue.classify_eviction(exit_.eviction, exit_.active), at, exit_when)]
    if after is None or view is None:
        return "waiting", [waiting]  # Evicted False but the JobSet is still suspended
    if view.suspended or view.end is not None or view.deleted:
        return "resumed", [waiting]
    resumed = max(exit_.observed_at, view.observed_at)
    evicted_at = timeline.views[k].eviction.since if timeline.views[k].eviction is not None else None
    waited = _waited(evicted_at, exit_.admitted_at) or (resumed - began).total_seconds()
    back = Status("Running", READMITTED, resumed, waited_seconds=waited, when=max(exit_when, after.began))
    return "resumed", [waiting, back]


def _reconstructed(at: datetime, when: datetime, reason: str, cause: str) -> list[Status]:
    """An eviction and readmission faultline did not see, from Kueue's counts (R15.7): the
    wait, and the gang running again, both at the observation that showed the count grown."""
    counted = kueue.Classified(reason or "Requeued", "", "", "system", cause)
    text = f"{kueue.summary(counted)}; reconstructed from kueue's eviction counts: it was evicted and readmitted while faultline did not see the workload"
    return [
        Status("WaitingForReadmission", text, at, cause=_cause(counted), reconstructed=True, when=when),
        Status("Running", f"{READMITTED} (reconstructed from kueue's eviction counts)", at, reconstructed=True, when=when),
    ]


def _waited(evicted_at: datetime | None, admitted_at: datetime | None) -> float | None:
    """The wait by Kueue's clock: its Evicted condition's time to its Admitted one."""
    if evicted_at is None or admitted_at is None or admitted_at < evicted_at:
        return None
    return (admitted_at - evicted_at).total_seconds()


def _evicted(evicted: kueue.Classified | None, at: datetime, when: datetime) -> Status:
    """R9.4–R9.7: the attempt ends; no Workload or no eviction recorded is a system retry."""
    retry: Retry = evicted.retry if evicted is not None else "system"
    return Status("Ended", kueue.ending_reason(evicted), at, code=GANG_EVICTED, retry=retry, cause=_cause(evicted), when=when)


def _cause(evicted: kueue.Classified | None) -> EvictionCause:
    if evicted is None:
        return EvictionCause(reason="", detail="", message="")  # R9.6, R9.7: none recorded
    return EvictionCause(reason=evicted.reason, detail=evicted.detail, message=evicted.message, underlying_cause=evicted.underlying)


def _jobset_ended(end: JobSetEnd, at: datetime, kind: str = JOBSET) -> Status:
    """R9.10, R15.3: Completed → Completed; Failed → Ended, its code the condition's reason (R6.1)."""
    word = "completed" if end.state == "Completed" else "failed"
    what = kind.lower()
    text = f"{what} {word} ({end.reason})" if end.reason else f"{what} {word}"
    text = f"{text}: {end.message}" if end.message else text
    if end.state == "Completed":
        return Status("Completed", text, at)
    return Status("Ended", text, at, code=end.reason or FAILED)


def _transition(state: GangStateData, old: Status | None, new: Status, rules: Rules) -> Emit:
    """R9.11."""
    track = state.jobset
    assert track is not None
    key = track.key or f"{state.cluster}/{track.namespace}/{track.name}"  # a state written before R13: v1's key
    identity: Identity = track.identity if track.key else "labels"
    value = GangTransition(
        key=key,
        cluster=state.cluster,
        namespace=track.namespace,
        identity=identity,
        jobset=PodRef(name=track.name, uid=track.uid or state.uid) if track.kind == JOBSET else None,
        workload=new.workload,
        run=track.run if identity == "labels" else None,
        action=track.action if identity == "labels" else None,
        attempt=track.attempt if identity == "labels" else None,
        tracked=track.tracked or ObjectRef(kind=JOBSET, name=track.name, uid=state.uid),
        queue=track.queue,
        from_=old.state if old is not None else "Pending",
        to=new.state,
        code=new.code,
        retry=new.retry,
        cause=new.cause,
        reason=new.reason,
        at=new.at,
        waited_seconds=new.waited_seconds,
        rules_version=rules.version,
        reconstructed=new.reconstructed,
    )
    return Emit(topic=GANG_TRANSITIONS, key=key, value=value)
