"""Reading a Kueue Workload: its link to a JobSet, its eviction, and what that eviction costs.

kueue.x-k8s.io v1beta1 and v1beta2 carry the same condition types and reasons (Kueue's
apis/kueue/*/workload_types.go), so one reading serves both. Pure functions, no I/O.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from app.model.k8s import Condition, Workload
from app.model.records import Retry

# Workload condition types.
EVICTED = "Evicted"
PREEMPTED = "Preempted"
ADMITTED = "Admitted"

# Evicted reasons faultline treats specially; every other one ends the attempt as a system
# retry (R9.5): PodsReadyTimeout, AdmissionCheck, ClusterQueueStopped, LocalQueueStopped,
# NodeFailures, WorkloadSliceReplaced, EvictedOnManagerCluster, FlavorMigration,
# Deactivated, DeactivatedDueTo<cause>, v1beta1's InactiveWorkload, unknown reasons.
PREEMPTION = "Preempted"
DEACTIVATED = "Deactivated"
MAX_EXECUTION_TIME = "DeactivatedDueToMaximumExecutionTimeExceeded"
# R9.4, R9.5: the task's own doing, so the ending spends one of its retries.
USER_CAUSED = frozenset({PREEMPTION, MAX_EXECUTION_TIME})

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
JOBSET_KIND = "JobSet"


class Eviction(msgspec.Struct, frozen=True, gc=False):
    """The Workload's `Evicted=True` condition, with the `Preempted` condition's reason."""

    reason: str
    message: str
    detail: str  # Preempted condition reason (InClusterQueue, InCohortReclamation, …)
    since: datetime | None  # lastTransitionTime: tells one eviction from the next


class Classified(msgspec.Struct, frozen=True, gc=False):
    """An eviction as R9 reads it: what to say, and who pays for it."""

    reason: str
    detail: str
    message: str
    retry: Retry

    @property
    def is_preemption(self) -> bool:
        return self.reason == PREEMPTION


def find_condition(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def is_true(conditions: list[Condition], type_: str) -> bool:
    found = find_condition(conditions, type_)
    return found is not None and found.status == "True"


def jobset_uid_of(workload: Workload) -> str | None:
    """R9.1: the `job-uid` label, else a controller ownerReference of kind JobSet.

    A Workload whose controller is another kind (a batch Job, a RayJob, …) belongs to no
    JobSet, even though Kueue labels it with that job's uid too.
    """
    controller = next((o for o in workload.metadata.owner_references if o.controller), None)
    if controller is not None and controller.kind != JOBSET_KIND:
        return None
    labelled = workload.metadata.labels.get(JOB_UID_LABEL, "")
    if labelled:
        return labelled
    return controller.uid if controller is not None and controller.uid else None


def eviction_of(workload: Workload) -> Eviction | None:
    conditions = workload.status.conditions
    evicted = find_condition(conditions, EVICTED)
    if evicted is None or evicted.status != "True":
        return None
    preempted = find_condition(conditions, PREEMPTED)
    detail = preempted.reason if preempted is not None and preempted.status == "True" else ""
    return Eviction(evicted.reason, evicted.message, detail, evicted.last_transition_time)


def is_admitted(workload: Workload) -> bool:
    return is_true(workload.status.conditions, ADMITTED)


def is_deactivation(eviction: Eviction | None, active: bool) -> bool:
    """R9.8: inactive, and not already evicted for a `Deactivated…` reason."""
    return not active and (eviction is None or not eviction.reason.startswith(DEACTIVATED))


def classify_eviction(eviction: Eviction | None, active: bool) -> Classified | None:
    """R9.4, R9.5, R9.8 (inactivity checked first); None when nothing evicted it."""
    if is_deactivation(eviction, active):
        # R9.8: a stale reason (e.g. Preempted) and its message are not carried.
        return Classified(DEACTIVATED, "", "", "system")
    if eviction is None:
        return None
    retry: Retry = "user" if eviction.reason in USER_CAUSED else "system"
    detail = eviction.detail if eviction.reason == PREEMPTION else ""
    return Classified(eviction.reason, detail, eviction.message.strip(), retry)


def summary(evicted: Classified | None) -> str:
    """R9.6b: `gang evicted by kueue (<reason>[, <detail>])[: <message>]`."""
    if evicted is None:
        return "gang evicted by kueue"
    cause = f"{evicted.reason}, {evicted.detail}" if evicted.detail else evicted.reason
    text = f"gang evicted by kueue ({cause})"
    return f"{text}: {evicted.message}" if evicted.message else text


def ending_reason(evicted: Classified | None) -> str:
    """R9.6b; None (no Workload, or no eviction recorded) is a system retry (R9.6, R9.7)."""
    if evicted is not None and evicted.retry == "user":
        return f"{summary(evicted)}; this uses one of the task's retries"
    return f"{summary(evicted)}; this does not count against the task's retries"


def waiting_reason(evicted: Classified) -> str:
    """R9.4, policy on."""
    return f"{summary(evicted)}; waiting for re-admission"
