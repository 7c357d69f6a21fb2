"""What a gang's observations settle (SPEC R9.3–R9.9, R15.2–R15.7): `decide` replays the
job's observations beside its Workload's and lists every state the gang has passed through.

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
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal, NamedTuple

import msgspec

from app.core.base.progress import Watermarks
from app.core.identity import kueue
from app.core.kinds.jobset import JOBSET
from app.core.stages.gang_observations import (
    GangStateData,
    JobSetEnd,
    JobSetView,
    Status,
    WorkloadTrack,
    WorkloadView,
    later_of,
    newest_workload,
)
from app.core.stages.gang_times import WorkloadTimeline, job_times, resumed_unseen
from app.model.envelope import JOBS, WORKLOADS
from app.model.records import (
    GANG_EVICTED,
    EvictionCause,
    PodRef,
    Retry,
)

RUNNING = "running"
READMITTED = "re-admitted by kueue; running"
HELD = "suspended, and kueue recorded no eviction: held by its user or a controller"  # R15.5
RESUMED = "resumed; running"
DELETED = "the workload was deleted"  # R15.3
WORKLOAD_DELETED = "WorkloadDeleted"
FAILED = "Failed"



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
    claimed: set[int] = set()  # Workload views whose counted eviction explained a suspension (R15.7)
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
            until = times[i + 1] if i + 1 < len(views) else later_of(horizon.jobs, track.clock)
            suspension_next = i + 1 < len(views) and views[i + 1].suspended
            if workload.timeline is not None and until is not None:
                timeline = workload.timeline
                for k, reason, cause in timeline.hidden_evictions(began, until, suspension_next):
                    if k in claimed:
                        continue  # the suspension before this stretch was explained by it
                    for status in _reconstructed(timeline.views[k].observed_at, timeline.times[k], reason, cause):
                        if not _step(steps, status, workload):
                            return steps, True
            if i + 1 < len(views) and resumed_unseen(view, views[i + 1]):
                # R12.7: a suspension the job's records folded away, shown by the Workload's.
                kind, taken = _unseen_suspension(views[i + 1], began, _After(views[i + 1], times[i + 1]), workload, skew, requeued)
                for status in taken:
                    if not _step(steps, status, workload):
                        return steps, True
                if kind != "resumed":
                    return steps, kind == "blocked"
            i += 1
        else:
            end = _end_of_suspension(views, i)
            after = _After(views[end], times[end]) if end < len(views) else None
            run = _Run(views[i:end], began, later_of(horizon.jobs, track.clock))
            kind, taken = _suspension(run, after, workload, skew, requeued)
            for status in taken:
                if not _step(steps, status, workload):
                    return steps, True
            if kind != "resumed":
                return steps, kind == "blocked"
            if workload.timeline is not None and any(status.reconstructed for status in taken):
                hidden = workload.timeline.hidden_eviction_during(began, after.began if after is not None else None, began + skew)
                claimed.add(hidden[0] if hidden is not None else -1)
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
    hidden = timeline.hidden_eviction_during(since, until, deadline) if timeline is not None else None
    if hidden is not None and timeline is not None:
        return _counted_wait(timeline, hidden, run, seen_since, after, requeued)
    if until is not None and until <= deadline:
        # Running again before Kueue could have recorded an eviction: nothing evicted it.
        return ("resumed", []) if workload.through(until) else ("blocked", [])
    if suspended_through(deadline) and workload.through(deadline):
        if requeued:  # R15.5: Kueue recorded no eviction: its user's suspension, not an end
            return _held(seen_deadline, deadline, after)
        return "final", [_evicted(None, seen_deadline, deadline)]  # R9.6, R9.7: no eviction, or no Workload, recorded in time
    return "blocked", []


def _unseen_suspension(seen: JobSetView, ran: datetime, after: _After, workload: _Known, skew: timedelta, requeued: bool) -> Step:
    """R12.7: the job was seen running since `ran`, then running again since `after.began`
    (its `Suspended` condition moved on: a relist folded its suspension and resumption).
    An eviction the Workload's records show in between explains the suspension: it began
    with that eviction (Kueue evicts, then suspends) and is decided as one seen (R9.4–R9.9,
    R15.2), known when the record that folded it was read. With none, nothing is reported:
    whatever suspended it is not known (counted evictions are R15.7's, in the running stretch)."""
    if not workload.through(after.began):
        return "blocked", []
    timeline = workload.timeline
    k = timeline.first_eviction_in(ran, after.began) if timeline is not None else None
    if timeline is None or k is None:
        return "resumed", []
    began = timeline.times[k]
    suspended = msgspec.structs.replace(seen, suspended=True, running=False, since=began)
    return _suspension(_Run((suspended,), began, after.began), after, workload, skew, requeued)


def _counted_wait(timeline: WorkloadTimeline, hidden: tuple[int, str, str], run: _Run, seen_since: datetime, after: _After | None, requeued: bool) -> Step:
    """R15.7 for a suspension the job's records show, explained by an eviction only Kueue's
    counts record (the Workload's records folded it): waited out as a seen one would be
    (R15.2, R9.4), reconstructed."""
    since = run.began
    k, reason, cause = hidden
    counted = kueue.Classified(reason or "Requeued", "", "", "system", cause)
    at = max(seen_since, timeline.views[k].observed_at)
    if not requeued and not (counted.is_preemption and run.views[0].resume):
        return "final", [_evicted(counted, at, since)]  # R9.4 policy off, R9.5
    waiting, back = _reconstructed(at, since, reason, cause)
    if after is None:
        return "waiting", [waiting]
    view = after.view
    if view.suspended or view.end is not None or view.deleted:
        return "resumed", [waiting]
    # No length, as for any reconstructed wait: the job's condition saying when it resumed
    # may come only with a later record than the one that shows it running.
    return "resumed", [waiting, msgspec.structs.replace(back, at=max(at, view.observed_at), when=max(since, after.began))]


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


