"""The Kueue preemption / readmission state machine of one JobSet (SPEC R9).

One fold per JobSet, keyed by `gang_key` (cluster + JobSet uid), over the JobSet's records
(k8s.jobs) and its Workloads' records (k8s.workloads); one `faultline.GangTransition/v2`
per state change (R9.11), keyed as v1 under the orchestrator's labels and by the
workload attempt key otherwise (R15.6, `attempt.gang_attempt`).

Order independence (R7.1). The two topics interleave arbitrarily; records of one object
arrive in order. Deciding on each arrival is not order independent, so the fold keeps each
object's observations (reduced to what R9 reads) and, on every record, replays the
JobSet's observations in order, reading the Workload as it stood at the same instant by
the bridge's clock (`observed_at`: one bridge stamps both topics of a cluster). The rule,
as a user would state it:

  A suspension of a started JobSet is explained by the Workload eviction in force when
  the JobSet was seen suspended or, failing that, by the first eviction Kueue records
  while the JobSet is known to stay suspended (Kueue evicts, then suspends, but the
  JobSet's watch may run ahead). The eviction is classified by the Workload as it stood
  when both had been seen, inactivity first (R9.8). Until then the gang waits (R9.6).

A decision is taken only once no record still in flight can change it: the Workload must
be known past the instant the decision reads it at, and a Workload fact dated after the
suspension (an eviction, a deletion) counts only once the JobSet is known to have stayed
suspended until then. So an ending (Ended/Completed with its code, retry, reason and `at`)
is the same in every arrival order; it is final, emitted once, never revised. Only
non-final steps (Running while awaiting the eviction, WaitingForReadmission) may be
emitted in some orders and not others. The waits are short in practice because both
objects keep changing while a gang stops: the JobSet controller records its Jobs
suspended, Kueue releases the quota once they have stopped, and readmits before it
unsuspends.

One exception is unavoidable: "no Workload ever seen" (R9.7) cannot be told apart from
"every Workload record still in flight". With no Workload, the JobSet's next observation
after the suspension decides (R9.6's one-observation wait): still suspended ends the
attempt (R9.7), running again goes on. The guarantee therefore covers every interleaving
that delivers some Workload record before that next observation. Kueue creates the
Workload with the JobSet, so only a driver letting k8s.jobs run far ahead of
k8s.workloads (e.g. a replay from offset 0 reading the topics unevenly) falls outside it.

Choices where SPEC is silent:
- `at` is when the decision became knowable: the latest `observed_at` among the
  observations it rests on (e.g. JobSet seen suspended, Workload seen evicted). That is
  the record that caused the transition in the bridge's order, whatever the arrival order.
- `waited_seconds` on readmission = its `at` − the `at` of the wait.
- Started (R9.3), "seen unsuspended after its Workload was admitted", is read from the
  JobSet alone: seen suspended, then unsuspended (Kueue releases a JobSet only after
  admitting its Workload), so Started is a fact of one stream.
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

from app.core import kueue
from app.core.attempt import gang_attempt
from app.core.bounds import Trim
from app.core.emit import Emit
from app.core.fleet_inputs import gang_change
from app.core.progress import ANY_PROGRESS, Watermarks
from app.core.rules import Rules
from app.model.decode import TypedEnvelope
from app.model.envelope import JOBS, WORKLOADS, ChangeType
from app.model.facts import GANG_INPUTS, GangInput
from app.model.k8s import Condition, Job, Timestamp, Workload
from app.model.records import GANG_EVICTED, GANG_TRANSITIONS, EvictionCause, GangState, GangTransition, Identity, ObjectRef, PodRef, Retry

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
TERMINAL: frozenset[GangState] = frozenset({"Ended", "Completed"})

PENDING = "waiting for gang admission"
RUNNING = "running"
READMITTED = "re-admitted by kueue; running"

JOBSET_KIND = "JobSet"
COMPLETED = "Completed"
FAILED = "Failed"
SUSPENDED = "Suspended"


# --- State ---------------------------------------------------------------------------


class JobSetEnd(msgspec.Struct, frozen=True, gc=False):
    """A terminal JobSet condition (R9.10)."""

    state: GangState
    reason: str
    message: str


class JobSetView(msgspec.Struct, frozen=True, gc=False):
    """One JobSet observation, reduced to what R9 reads."""

    observed_at: Timestamp
    suspended: bool = False
    running: bool = False  # R9.3: restarts, or a replicated job ready or succeeded
    resume: bool = False  # R9.2: the policy at this observation
    await_eviction: bool = True  # R9.6: wait for Kueue's eviction record (see Rules)
    end: JobSetEnd | None = None
    deleted: bool = False


class WorkloadView(msgspec.Struct, frozen=True, gc=False):
    """One Workload observation, reduced to what R9 reads."""

    observed_at: Timestamp
    eviction: kueue.Eviction | None = None
    active: bool = True
    admitted: bool = False
    deleted: bool = False

    @property
    def deactivated(self) -> bool:
        return not self.deleted and kueue.is_deactivation(self.eviction, self.active)

    @property
    def readmitted(self) -> bool:
        return not self.deleted and self.eviction is None and self.admitted


class JobSetTrack(msgspec.Struct, frozen=True, gc=False):
    name: str
    namespace: str
    run: str | None
    action: str | None
    attempt: str | None
    queue: str | None = None  # the kueue.x-k8s.io/queue-name label
    views: tuple[JobSetView, ...] = ()
    # R15.6: the transitions' key, identity and tracked object (app/core/attempt.py gang_attempt).
    key: str = ""
    identity: Identity = "labels"
    tracked: ObjectRef | None = None


class WorkloadTrack(msgspec.Struct, frozen=True, gc=False):
    name: str
    uid: str
    created: Timestamp | None
    last_seen: Timestamp
    views: tuple[WorkloadView, ...] = ()  # consecutive identical views kept once

    @property
    def deleted_at(self) -> datetime | None:
        last = self.views[-1]
        return last.observed_at if last.deleted else None

    def known_after(self, t: datetime) -> bool:
        """No record still in flight can show this Workload as it stood at `t`."""
        return self.views[-1].deleted or self.last_seen > t

    def index_as_of(self, t: datetime, start: int = 0, stop: int | None = None) -> int | None:
        found = None
        for k in range(start, len(self.views) if stop is None else stop):
            if self.views[k].observed_at > t:
                break
            found = k
        return found

    def episode(self, k: int) -> tuple[int, int]:
        """[first, end) of the run of views showing the same eviction as view k."""
        same = self.views[k].eviction
        first = k
        while first > 0 and _same_eviction(self.views[first - 1], same):
            first -= 1
        end = k + 1
        while end < len(self.views) and _same_eviction(self.views[end], same):
            end += 1
        return first, end

    def eviction_for(self, since: datetime, until: datetime | None, deadline: datetime) -> tuple[int, int] | None:
        """The eviction explaining a suspension seen at `since`: in force then, or the first
        recorded by `deadline` (R9.6) while the JobSet had not run again (at `until`)."""
        now = self.index_as_of(since)
        if now is not None and self.views[now].eviction is not None and not self.views[now].deleted:
            return self.episode(now)
        for k in range(0 if now is None else now + 1, len(self.views)):
            view = self.views[k]
            if view.deleted or view.observed_at > deadline or (until is not None and view.observed_at >= until):
                return None
            if view.eviction is not None:
                return self.episode(k)
        return None

    def exit_after(self, k: int) -> int | None:
        """While waiting (R9.8, R9.7, R9.9): first view after k that is gone, deactivated or readmitted."""
        for j in range(k + 1, len(self.views)):
            view = self.views[j]
            if view.deleted or view.deactivated or view.readmitted:
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
    workload: PodRef | None = None  # the Workload as it stood at `at`

    def same_as(self, other: Status) -> bool:
        return (self.state, self.reason, self.code, self.retry) == (other.state, other.reason, other.code, other.retry)


class GangStateData(msgspec.Struct, frozen=True, gc=False):
    """The per-JobSet state: what has been observed, and the last emitted status."""

    cluster: str
    uid: str  # the JobSet's uid
    last_seen: Timestamp
    jobset: JobSetTrack | None = None  # None: Workload records held until the JobSet arrives
    workloads: tuple[WorkloadTrack, ...] = ()
    status: Status | None = None
    deleted_at: Timestamp | None = None  # the JobSet's DELETED record (R7.4)
    steps: int = 0  # steps of `decide` emitted so far (each a transition)
    blocked: bool = False  # a decision waits on progress (R12.4): settle it when a watermark moves

    @property
    def ended(self) -> bool:
        return self.status is not None and self.status.state in TERMINAL


# --- Public API ----------------------------------------------------------------------


def gang_key(cluster: str, obj: Job | Workload) -> str | None:
    """`<cluster>/<JobSet uid>` the record belongs to, None if it belongs to no JobSet.

    UIDs are random per cluster, so a collision needs a cluster restored from another's
    backup; the cluster prefix rules even that out and costs nothing.
    """
    uid = _jobset_uid(obj)
    return f"{cluster}/{uid}" if uid else None


def gang_input_of(change: ChangeType, observed_at: datetime, cluster: str, obj: Job | Workload) -> Emit | None:
    """A JobSet or Workload record for the gang stage, keyed by its gang (None: it
    belongs to no JobSet)."""
    key = gang_key(cluster, obj)
    if key is None:
        return None
    jobset, workload = (obj, None) if isinstance(obj, Job) else (None, obj)
    return Emit(GANG_INPUTS, key, GangInput(change, observed_at, cluster, jobset=jobset, workload=workload))


def route_workload_record(
    _: None, __: str, envelope: TypedEnvelope[Workload], rules: Rules, marks: Watermarks
) -> tuple[None, list[Emit]]:
    """The jobs stage's fold for k8s.workloads: a JobSet's Workload to its gang (R9.1)."""
    gang = gang_input_of(envelope.type, envelope.observed_at, envelope.cluster, envelope.object)
    return None, [gang] if gang is not None else []


def fold_gang(
    state: GangStateData | None, _: str, record: GangInput, rules: Rules, marks: Watermarks
) -> tuple[GangStateData | None, list[Emit]]:
    obj = record.jobset if record.jobset is not None else record.workload
    assert obj is not None  # GangInput guarantees one of them
    uid = _jobset_uid(obj)
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
    """A gang blocked on an absence settles on any progress of its cluster (R12.4)."""
    return ANY_PROGRESS if state.blocked else None


def _decided(state: GangStateData, rules: Rules, marks: Watermarks) -> tuple[GangStateData, list[Emit]]:
    if state.ended:
        return msgspec.structs.replace(state, blocked=False) if state.blocked else state, []  # an ending is final (R7.1)
    steps, blocked = decide(state, Horizon.of(marks, state.cluster), rules.watch_skew)
    emits = []
    status = state.status
    for step in steps[state.steps :]:  # R9.11: one record per state change, each once
        transition = _transition(state, status, step, rules)
        emits += [transition, *gang_change(step.at, transition.value, rules)]
        status = step
    if emits or blocked != state.blocked:
        state = msgspec.structs.replace(state, status=status, steps=max(state.steps, len(steps)), blocked=blocked)
    return state, emits


def gang_expired(state: GangStateData, stream_time: datetime, rules: Rules) -> bool:
    """R7.4: ended, completed or deleted, and retention has passed in stream time."""
    if state.jobset is None:
        done: datetime | None = state.last_seen  # a Workload whose JobSet never came
    else:
        times = [t for t in (state.deleted_at, state.status.at if state.ended and state.status else None) if t]
        done = min(times) if times else None
    return done is not None and stream_time - done >= rules.retention


# --- Reading a JobSet ----------------------------------------------------------------


def _jobset_uid(obj: Job | Workload) -> str | None:
    if isinstance(obj, Workload):
        return kueue.jobset_uid_of(obj)
    if obj.kind != JOBSET_KIND:
        return None
    return obj.metadata.uid or None


def is_suspended(jobset: Job) -> bool:
    """R9.3: `spec.suspend`, or its newest True condition is `Suspended`."""
    return jobset.spec.suspend is True or _newest_true(jobset.status.conditions) == SUSPENDED


def _newest_true(conditions: list[Condition]) -> str | None:
    """The type of the True condition with the latest lastTransitionTime (later in the list on ties)."""

    def order(item: tuple[int, Condition]) -> tuple[bool, float, int]:
        i, condition = item
        t = condition.last_transition_time
        return (t is not None, t.timestamp() if t is not None else 0.0, i)

    true = [(i, c) for i, c in enumerate(conditions) if c.status == "True"]
    return max(true, key=order)[1].type if true else None


def has_run(jobset: Job) -> bool:
    """R9.3: restarted, or a replicated job has a ready or succeeded Job."""
    status = jobset.status
    return status.restarts > 0 or any(r.ready > 0 or r.succeeded > 0 for r in status.replicated_jobs_status)


def resume_after_preemption(jobset: Job, rules: Rules) -> bool:
    """R9.2: the annotation when it says "true" or "false", else the configured default."""
    value = jobset.metadata.annotations.get(rules.resume_annotation)
    return {"true": True, "false": False}.get(value or "", rules.resume_after_preemption)


def end_of(jobset: Job) -> JobSetEnd | None:
    """R9.10: a True `Completed` or `Failed` condition."""
    for type_, state in ((COMPLETED, "Completed"), (FAILED, "Ended")):
        found = kueue.find_condition(jobset.status.conditions, type_)
        if found is not None and found.status == "True":
            return JobSetEnd(state, found.reason, found.message)
    return None


def _jobset_view(record: GangInput, jobset: Job, rules: Rules, trim: Trim) -> JobSetView:
    if record.change == "DELETED":
        return JobSetView(record.observed_at, deleted=True)
    return JobSetView(
        record.observed_at,
        suspended=is_suspended(jobset),
        running=has_run(jobset),
        resume=resume_after_preemption(jobset, rules),
        await_eviction=rules.await_eviction_with_policy_off,
        end=_trimmed_end(end_of(jobset), trim),
    )


def _trimmed_end(end: JobSetEnd | None, trim: Trim) -> JobSetEnd | None:
    return JobSetEnd(end.state, trim.token(end.reason), trim.message(end.message)) if end is not None else None


def _trimmed_eviction(eviction: kueue.Eviction | None, trim: Trim) -> kueue.Eviction | None:
    if eviction is None:
        return None
    return kueue.Eviction(trim.token(eviction.reason), trim.message(eviction.message), trim.token(eviction.detail), eviction.since)


def _workload_view(record: GangInput, workload: Workload, trim: Trim) -> WorkloadView:
    if record.change == "DELETED":
        return WorkloadView(record.observed_at, deleted=True)
    return WorkloadView(
        record.observed_at,
        eviction=_trimmed_eviction(kueue.eviction_of(workload), trim),
        active=workload.spec.active,
        admitted=kueue.is_admitted(workload),
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
    return JobSetTrack(
        key=key,
        identity=identity,
        tracked=tracked,
        name=jobset.metadata.name,
        namespace=jobset.metadata.namespace,
        run=labels.get(keys.run),
        action=labels.get(keys.action),
        attempt=labels.get(keys.attempt),
        queue=labels.get(QUEUE_LABEL),
        views=views,
    )


def _compact(views: tuple[JobSetView, ...], view: JobSetView) -> tuple[JobSetView, ...]:
    """Append; of a run of identical observations keep the first and the latest, which is
    all `decide` reads (when it began, that it was seen again, until when)."""
    if len(views) >= 2 and _same_view(views[-1], view) and _same_view(views[-2], view):
        return views[:-1] + (view,)
    return views + (view,)


def _same_view(old: JobSetView | WorkloadView, new: JobSetView | WorkloadView) -> bool:
    return msgspec.structs.replace(old, observed_at=new.observed_at) == new


def _add_workload(tracks: tuple[WorkloadTrack, ...], record: GangInput, workload: Workload, trim: Trim) -> tuple[WorkloadTrack, ...]:
    meta = workload.metadata
    view = _workload_view(record, workload, trim)
    for i, track in enumerate(tracks):
        if track.uid == meta.uid:
            updated = msgspec.structs.replace(
                track,
                last_seen=max(track.last_seen, view.observed_at),
                views=track.views if _same_view(track.views[-1], view) else track.views + (view,),
            )
            return tracks[:i] + (updated,) + tracks[i + 1 :]
    new = WorkloadTrack(meta.name, meta.uid, meta.creation_timestamp, record.observed_at, (view,))
    return tracks + (new,)


def newest_workload(tracks: tuple[WorkloadTrack, ...]) -> WorkloadTrack | None:
    """R9.1: the newest by creationTimestamp (then name, uid, for a total order)."""
    if not tracks:
        return None
    return max(tracks, key=lambda w: (w.created is not None, w.created.timestamp() if w.created else 0.0, w.name, w.uid))


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
    """The JobSet's Workload (the newest, R9.1; None if none was seen) and how far it is known."""

    track: WorkloadTrack | None
    horizon: datetime | None

    def through(self, t: datetime) -> bool:
        """R12.4: the Workload as it stood at `t` is known: its own later record, or the
        k8s.workloads watermark past `t`."""
        if self.horizon is not None and self.horizon > t:
            return True
        return self.track is not None and self.track.known_after(t)

    def ref_at(self, t: datetime) -> PodRef | None:
        """The Workload that existed at `t`, if one did."""
        view = self.view_at(t)
        if self.track is None or view is None or view.deleted:
            return None
        return PodRef(name=self.track.name, uid=self.track.uid)

    def view_at(self, t: datetime) -> WorkloadView | None:
        """The Workload as it stood at `t` (None: not there, or not seen yet)."""
        if self.track is None:
            return None
        k = self.track.index_as_of(t)
        return self.track.views[k] if k is not None else None


def decide(state: GangStateData, horizon: Horizon, skew: timedelta) -> tuple[list[Status], bool]:
    """Every state the gang has passed through that the observations settle (from
    Pending on, not included), replaying the JobSet's views in order, and whether the
    rest is blocked until progress shows more (R12.4). A step is listed only once no
    record still in flight can change it, so the list only grows: the transitions are
    the same, in the same order, whatever order the records and progress arrive in."""
    if state.jobset is None:
        return [], False  # Workload records held until their JobSet is known (R9.1)
    views = state.jobset.views
    workload = _Known(newest_workload(state.workloads), horizon.workloads)
    steps: list[Status] = []
    started = False
    i = 0
    while i < len(views):
        view = views[i]
        if view.deleted:
            return steps, False
        if view.end is not None:
            return steps, not _step(steps, _jobset_ended(view.end, view.observed_at), workload)  # R9.10
        if not started and not view.running and not view.suspended:
            # R9.3: resumed while its Workload, as it stood then, was admitted.
            if not workload.through(view.observed_at):
                return steps, True
            admitted = workload.view_at(view.observed_at)
            started = admitted is not None and admitted.readmitted
        started = started or view.running
        if not started:
            i += 1
        elif not view.suspended:
            if not steps and not _step(steps, Status("Running", RUNNING, view.observed_at), workload):
                return steps, True
            i += 1
        else:
            end = _end_of_suspension(views, i)
            after = views[end] if end < len(views) else None
            kind, taken = _suspension(views[i:end], after, workload, horizon.jobs, skew)
            for status in taken:
                if not _step(steps, status, workload):
                    return steps, True
            if kind != "resumed":
                return steps, kind == "blocked"
            i = end
    return steps, False


def _step(steps: list[Status], status: Status, workload: _Known) -> bool:
    """Take a step — a change of state, reason, code or retry; the same status again is
    none — naming the Workload as it stood then (R9.11), so it waits until that is known
    (R12.4). False: not yet."""
    if steps and steps[-1].same_as(status):
        return True
    if not workload.through(status.at):
        return False
    steps.append(msgspec.structs.replace(status, workload=workload.ref_at(status.at)))
    return True


def _end_of_suspension(views: tuple[JobSetView, ...], i: int) -> int:
    end = i + 1
    while end < len(views) and views[end].suspended and views[end].end is None and not views[end].deleted:
        end += 1
    return end


def _suspension(
    run: tuple[JobSetView, ...], after: JobSetView | None, workload: _Known, jobs: datetime | None, skew: timedelta
) -> Step:
    """R9.4–R9.9 for one suspension of a started JobSet: `run` are its suspended views,
    `after` the view that ended the suspension (running again, ended or deleted), if any;
    `jobs` the k8s.jobs watermark. Returns how it stands and the steps it settled."""
    since = run[0].observed_at
    until = after.observed_at if after is not None else None
    deadline = since + skew  # R9.6: Kueue's eviction record may lag the JobSet's by this much

    def suspended_through(t: datetime) -> bool:
        """The JobSet is known to have stayed suspended until `t` (R12.4)."""
        if t <= run[-1].observed_at or (until is not None and t < until):
            return True
        return until is None and jobs is not None and jobs > t

    track = workload.track
    if track is not None and workload.through(since):
        at_since = workload.view_at(since)
        if at_since is not None and at_since.deactivated:  # R9.8 before anything else
            return "final", [_evicted(kueue.classify_eviction(at_since.eviction, at_since.active), since)]
    episode = track.eviction_for(since, until, deadline) if track is not None else None
    if episode is not None and track is not None:
        first, end = episode
        seen = track.views[first].observed_at
        if not suspended_through(seen):
            return "blocked", []  # the JobSet may have run again before this eviction
        decided = max(since, seen)
        k = track.index_as_of(decided, first, end)
        assert k is not None  # views[first] was seen by `decided`
        view = track.views[k]
        evicted = kueue.classify_eviction(view.eviction, view.active)
        assert evicted is not None  # the view shows the eviction
        if evicted.is_preemption and run[0].resume:
            return _wait(track, k, evicted, decided, after)  # R9.4 policy on
        if not workload.through(decided):
            return "blocked", []  # a Workload record in flight could still reclassify it
        return "final", [_evicted(evicted, decided)]  # R9.4 policy off, R9.5
    gone = track.deleted_at if track is not None else None
    if gone is not None and gone <= deadline and suspended_through(gone):
        return "final", [_evicted(None, max(since, gone))]  # R9.7: deleted while suspended
    if not run[0].resume and not run[0].await_eviction:
        return "final", [_evicted(None, since)]  # R9.6, policy off without the wait (Flyte's)
    if until is not None and until <= deadline:
        # Running again before Kueue could have recorded an eviction: nothing evicted it.
        return ("resumed", []) if workload.through(until) else ("blocked", [])
    if suspended_through(deadline) and workload.through(deadline):
        return "final", [_evicted(None, deadline)]  # R9.6, R9.7: no eviction, or no Workload, recorded in time
    return "blocked", []


def _wait(workload: WorkloadTrack, k: int, evicted: kueue.Classified, began: datetime, after: JobSetView | None) -> Step:
    """WaitingForReadmission, until the Workload is deactivated (R9.8), deleted (R9.7) or
    readmitted with the JobSet running again (R9.9)."""
    waiting = Status("WaitingForReadmission", kueue.waiting_reason(evicted), began, cause=_cause(evicted))
    j = workload.exit_after(k)
    if j is None:
        return "waiting", [waiting]
    exit_ = workload.views[j]
    at = max(began, exit_.observed_at)
    if exit_.deleted:
        return "final", [waiting, _evicted(None, at)]
    if exit_.deactivated:
        return "final", [waiting, _evicted(kueue.classify_eviction(exit_.eviction, exit_.active), at)]
    if after is None:
        return "waiting", [waiting]  # Evicted False but the JobSet is still suspended
    if after.suspended or after.end is not None or after.deleted:
        return "resumed", [waiting]
    resumed = max(exit_.observed_at, after.observed_at)
    return "resumed", [waiting, Status("Running", READMITTED, resumed, waited_seconds=(resumed - began).total_seconds())]


def _evicted(evicted: kueue.Classified | None, at: datetime) -> Status:
    """R9.4–R9.7: the attempt ends; no Workload or no eviction recorded is a system retry."""
    retry: Retry = evicted.retry if evicted is not None else "system"
    return Status("Ended", kueue.ending_reason(evicted), at, code=GANG_EVICTED, retry=retry, cause=_cause(evicted))


def _cause(evicted: kueue.Classified | None) -> EvictionCause:
    if evicted is None:
        return EvictionCause(reason="", detail="", message="")  # R9.6, R9.7: none recorded
    return EvictionCause(reason=evicted.reason, detail=evicted.detail, message=evicted.message)


def _jobset_ended(end: JobSetEnd, at: datetime) -> Status:
    """R9.10: Completed → Completed; Failed → Ended, its code the condition's reason (R6.1)."""
    word = "completed" if end.state == "Completed" else "failed"
    text = f"jobset {word} ({end.reason})" if end.reason else f"jobset {word}"
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
        jobset=PodRef(name=track.name, uid=state.uid),
        workload=new.workload,
        run=track.run if identity == "labels" else None,
        action=track.action if identity == "labels" else None,
        attempt=track.attempt if identity == "labels" else None,
        tracked=track.tracked or ObjectRef(kind=JOBSET_KIND, name=track.name, uid=state.uid),
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
    )
    return Emit(topic=GANG_TRANSITIONS, key=key, value=value)
