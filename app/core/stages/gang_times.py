"""The objects' own clocks (SPEC R12.7): when each of a job's and its Workload's observed
states began, by the times the objects carry — the job controller's `Suspended`
condition, Kueue's condition times — so that `gang_decisions.decide` sets them side by
side the same way whichever kind's burst of records arrived first. Each is a function of
one object's records in its own watch order.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from app.core.identity import kueue
from app.core.stages.gang_observations import JobSetView, WorkloadTrack, WorkloadView


def _phase(view: JobSetView) -> str:
    return "deleted" if view.deleted else "ended" if view.end is not None else "suspended" if view.suspended else "running"


def job_times(views: tuple[JobSetView, ...]) -> list[datetime]:
    """R12.7: when each view's state (suspended, running, ended, deleted) began by the job's
    own clock: for each run of views in one state, the time its controller wrote for that
    state where a view of the run carries one (`since`), never after the run was first
    seen; else as late as the job's own records allow: when it was first seen, but not
    after the next state's time (a JobSet created suspended carries no time; in a burst it
    is first seen with the changes that followed it). A function of the job's own records
    in watch order."""
    times: list[datetime] = []
    before: datetime | None = None  # the latest time a run is known to have begun by
    untimed: list[tuple[int, int]] = []  # runs with no time of their own, since the last timed one
    i = 0
    while i < len(views):
        phase = _phase(views[i])
        j = i + 1
        while j < len(views) and _phase(views[j]) == phase and not resumed_unseen(views[j - 1], views[j]):
            j += 1
        carried = next((v.since for v in views[i:j] if v.since is not None and (before is None or v.since > before)), None)
        began = views[i].observed_at if carried is None else min(carried, views[i].observed_at)
        began = began if before is None else max(began, before)
        times += [began] * (j - i)
        if carried is None:
            untimed.append((i, j))
        else:
            for a, b in untimed:  # no later than this run, which came after them
                times[a:b] = [min(times[a], began)] * (b - a)
            untimed = []
            before = began
        i = j
    return times


def resumed_unseen(before: JobSetView, view: JobSetView) -> bool:
    """R12.7: two views of a running job, the later one's `Suspended=False` condition newer
    than the earlier one's: the job was suspended and resumed in between (a condition's
    time moves only when its status does), and a relist folded both changes into one
    record. Not when the earlier time was capped by when it was seen (R2.7c): a
    controller's clock ahead of the bridge's would move with each record."""
    return (
        _phase(before) == _phase(view) == "running"
        and before.since is not None
        and view.since is not None
        and before.since < before.observed_at
        and view.since > before.since
    )


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
        while first > 0 and same_eviction(views[first - 1], same):
            first -= 1
        end = k + 1
        while end < len(views) and same_eviction(views[end], same):
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

    def hidden_evictions(self, after: datetime, until: datetime | None, suspension_next: bool = False) -> list[tuple[int, str, str]]:
        """Evictions Kueue counted between two observations of the Workload that neither
        shows (both without `Evicted=True`: evicted and readmitted while faultline was not
        watching, SPEC R15.7), whose later observation's state began in (`after`,
        `until`] — (`after`, `until`) when a suspension the job's records show begins at
        `until`: one that began with it is that suspension's (`hidden_eviction_during`).
        Each as (that view's index, reason, cause)."""
        found = []
        for k in self._counted_unseen():
            at = self.times[k]
            if at <= after or (until is not None and (at > until or (suspension_next and at == until))):
                continue
            found.append((k, *self._grown(k)))
        return found

    def hidden_eviction_during(self, since: datetime, until: datetime | None, deadline: datetime) -> tuple[int, str, str] | None:
        """R15.7 for a suspension the job's records show: the first eviction Kueue counted
        between two observations neither showing it, the later one's state beginning once
        the suspension had begun (the readmission) and the earlier one's by `deadline`
        (R9.6) and before the job ran again (`until`): evicted and readmitted while a relist
        folded the Workload's records. (that view's index, reason, cause)."""
        for k in self._counted_unseen():
            prev_at, at = self.times[k - 1], self.times[k]
            if at >= since and prev_at <= deadline and (until is None or prev_at < until):
                return (k, *self._grown(k))
        return None

    def _counted_unseen(self) -> list[int]:
        """The views whose eviction count grew since the view before, neither showing an eviction."""
        views = self.views
        return [
            k
            for k in range(1, len(views))
            if not (views[k - 1].deleted or views[k].deleted or views[k - 1].eviction is not None or views[k].eviction is not None)
            and views[k].evictions > views[k - 1].evictions
        ]

    def _grown(self, k: int) -> tuple[str, str]:
        return kueue.grown(self.views[k].counts, self.views[k - 1].counts) or ("", "")

    def first_eviction_in(self, after: datetime, before: datetime) -> int | None:
        """The first view showing an eviction whose state began in (`after`, `before`)."""
        return next((k for k, view in enumerate(self.views) if view.eviction is not None and not view.deleted and after < self.times[k] < before), None)

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


def same_eviction(view: WorkloadView, eviction: kueue.Eviction | None) -> bool:
    other = view.eviction
    return (
        not view.deleted
        and other is not None
        and eviction is not None
        and (other.reason, other.since) == (eviction.reason, eviction.since)
    )
