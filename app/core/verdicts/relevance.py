"""When a pod's trouble happened, and which faults and disruptions that time can blame
(SPEC R5, R14.1, R16.6)."""

from __future__ import annotations

from datetime import datetime

import msgspec

from app.core.base.rules import Rules
from app.model.facts import JobFacts, PodDisruption, PodFacts
from app.model.records import GpuFault


def latest_finish(pod: PodFacts) -> datetime | None:
    """The latest finishedAt among regular containers' current terminated states
    (never init containers, never lastState, never a start time)."""
    finished = [c.finished_at for c in pod.containers if c.terminated and c.finished_at is not None]
    return max(finished) if finished else None


def anchor_of(pod: PodFacts, failed_at: datetime, clamp: bool) -> datetime:
    """R5.1: the first of the pod's last finish, its deletionTimestamp, the failure time.

    A child pod's anchor is never later than the attempt's failure (a deletionTimestamp
    is the end of the grace period and can lie in the future); a pod task's is not clamped.
    """
    anchor = latest_finish(pod) or pod.deletion_timestamp or failed_at
    return min(anchor, failed_at) if clamp else anchor


def pod_task_failed_at(pod: PodFacts) -> datetime | None:
    """R5.2 pod task: latest container finish, else when the log first showed Failed."""
    return latest_finish(pod) or pod.failed_observed_at


def crd_failed_at(job: JobFacts, first_failed_observed_at: datetime | None) -> datetime | None:
    """R5.2 CRD task: the failed condition's lastTransitionTime, else when the log first
    showed the failure."""
    if job.failure is not None and job.failure.at is not None:
        return job.failure.at
    return first_failed_observed_at


def run_began(pod: PodFacts, restarted: datetime | None) -> datetime | None:
    """R16.2: when the current run of a pod restarted in place began, by its own containers'
    times (the latest end of a previous run: R12.7, not when the restart was seen); None
    when its attempt was not restarted in place (`restarted` None) or the pod shows no
    restart (a pod made after it)."""
    if restarted is None:
        return None
    ends = [c.restarted_at for c in pod.containers if c.restarted_at is not None]
    return max(ends) if ends else None


def is_relevant(fault: GpuFault, anchor: datetime, rules: Rules) -> bool:
    """R5.3: [first_seen, last_seen] overlaps [anchor - window, anchor + slack], inclusive.
    An interval that ends before it starts explains nothing."""
    if fault.last_seen < fault.first_seen:
        return False
    # As differences of two times: an object time at the calendar's ends cannot overflow (R11.3).
    return fault.first_seen - anchor <= rules.slack and anchor - fault.last_seen <= rules.window


def _within(disruption: PodDisruption | None, anchor: datetime, rules: Rules) -> bool:
    """Its reason is in `disruption_reasons` and its time lies inside the pod's relevance
    interval [anchor - window, anchor + slack] (R5.3)."""
    if disruption is None or disruption.reason not in rules.disruption_reasons:
        return False
    return disruption.at - anchor <= rules.slack and anchor - disruption.at <= rules.window


def disrupted_within(pod: PodFacts, anchor: datetime, rules: Rules) -> PodFacts | None:
    """R14.1, R16.6: the pod as its deciding disruption shows it (in `disruption`), or None.
    A force deletion by Kueue's failure recovery inside the interval decides (it says why
    the pod's removal ended: its node was unreachable); else the DisruptionTarget condition
    (reason and time, lastTransitionTime capped by the bridge's clock) inside it."""
    if _within(pod.force_deleted, anchor, rules):
        return msgspec.structs.replace(pod, disruption=pod.force_deleted)
    return pod if _within(pod.disruption, anchor, rules) else None
