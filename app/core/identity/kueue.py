"""Reading a Kueue Workload: the job it belongs to, its eviction, and what that costs.

kueue.x-k8s.io v1beta1 and v1beta2 carry the same condition types and reasons (Kueue's
apis/kueue/*/workload_types.go), so one reading serves both; v1beta2 adds
`status.schedulingStats.evictions` (counts by reason and underlying cause). Kueue v0.19.2,
its newest release (no v0.20 exists; main is v0.20.0-devel), serves both versions,
v1beta1 deprecated and v1beta2 stored (SPEC R16.7 says v0.20 serves v1beta2 only): the
bridge prefers v1beta2. Pure functions, no I/O.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from app.core.base.rules import Rules
from app.core.kinds import registry
from app.model.k8s import Condition, Job, Workload
from app.model.records import Retry

# Workload condition types.
EVICTED = "Evicted"
PREEMPTED = "Preempted"
ADMITTED = "Admitted"
QUOTA_RESERVED = "QuotaReserved"
FINISHED = "Finished"
# SPEC R15.1: an elastic job's slice replaced by a newer Workload is finished with this
# reason (kueue pkg/workloadslicing/workloadslicing.go IsReplaced; the newer one carries
# the annotation kueue.x-k8s.io/workload-slice-replacement-for).
SLICE_REPLACED = "WorkloadSliceReplaced"

# Evicted reasons faultline treats specially; every other one is an eviction a workload
# attempt waits out (R15.2) and, under an orchestrator's labels, ends the attempt as a
# system retry (R9.5, R16.7). The reasons Kueue v0.19.2 writes (the same on main):
# apis/kueue/v1beta2/workload_types.go PodsReadyTimeout, AdmissionCheck,
# ClusterQueueStopped, LocalQueueStopped, NodeFailures, Deactivated, FlavorMigration (on a
# concurrent admission's variant Workload, whose controller is its parent Workload: no
# job's, so no gang reads it); pkg/controller/concurrentadmission/controller.go
# VariantEvicted, ConcurrentAdmission (literals, on the parent Workload, the job's);
# Deactivated<cause> as `DeactivatedDueTo<cause>` (pkg/workload/patching/
# patching.go ReasonWithCause), the cause the DeactivationTarget condition's reason:
# RequeuingLimitExceeded, MaximumExecutionTimeExceeded (the task's: below), AdmissionCheck,
# EvictedOnManagerCluster (MultiKueue); and InactiveWorkload (deprecated in v0.10, gone since
# v0.12: an older Kueue's), unknown reasons.
# WorkloadSliceReplaced is a Finished reason (R15.1), not an eviction.
PREEMPTION = "Preempted"
DEACTIVATED = "Deactivated"
MAX_EXECUTION_TIME = "DeactivatedDueToMaximumExecutionTimeExceeded"
# R9.4, R9.5: the task's own doing, so the ending spends one of its retries.
USER_CAUSED = frozenset({PREEMPTION, MAX_EXECUTION_TIME})

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"  # kueue pkg/controller/constants/constants.go JobUIDLabel
# The same file, ComponentWorkloadIndexAnnotation: a Workload of one component of a job (a
# LeaderWorkerSet's group: kueue v0.19.2 pkg/controller/jobs/leaderworkerset/leaderworkerset_reconciler.go
# makes one per group, labelled with the job's uid and owned, not controlled, by it).
COMPONENT_INDEX = "kueue.x-k8s.io/component-workload-index"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"  # the same file, QueueLabel: a job's LocalQueue


class Eviction(msgspec.Struct, frozen=True, gc=False):
    """The Workload's `Evicted=True` condition, with the `Preempted` condition's reason."""

    reason: str
    message: str
    detail: str  # Preempted condition reason (InClusterQueue, InCohortReclamation, …)
    since: datetime | None  # lastTransitionTime: tells one eviction from the next
    underlying: str = ""  # Kueue's underlyingCause of this eviction (schedulingStats), if it says one


class Classified(msgspec.Struct, frozen=True, gc=False):
    """An eviction as R9 reads it: what to say, and who pays for it."""

    reason: str
    detail: str
    message: str
    retry: Retry
    underlying: str = ""

    @property
    def is_preemption(self) -> bool:
        return self.reason == PREEMPTION


def find_condition(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def is_true(conditions: list[Condition], type_: str) -> bool:
    found = find_condition(conditions, type_)
    return found is not None and found.status == "True"


def _labelled(labels: dict[str, str], rules: Rules) -> bool:
    """R1, R13.1: the four orchestrator labels identify the attempt."""
    keys = rules.labels
    return labels.get(keys.managed) == "true" and all(labels.get(k) for k in (keys.run, keys.action, keys.attempt))


def job_uid_of(workload: Workload, rules: Rules) -> str | None:
    """R9.1, R15.1: the uid of the job a Workload belongs to: the `job-uid` label, else its
    controller ownerReference; only for the kinds Kueue suspends that faultline follows,
    and only when the job's pods ask for a GPU where that decides (a batch Job's, R13.2:
    a CronJob's Jobs under Kueue must not keep gang state); never for a Workload of one
    component of a job, or one a kind Kueue is not followed for owns (a LeaderWorkerSet's
    groups', R16.3). Without `workload_identity`,
    only a kind R9 follows under an orchestrator's labels (a JobSet): a Workload whose
    controller is another kind belongs to no gang, though Kueue labels it with that job's
    uid too."""
    meta = workload.metadata
    if COMPONENT_INDEX in meta.annotations:
        return None  # one group's Workload: no gang of the job as a whole is followed (docs/rules.md, R16.3)
    controller = next((o for o in meta.owner_references if o.controller), None)
    if controller is None:
        for ref in meta.owner_references:  # owned, not controlled, by a kind Kueue is not followed for
            kind = registry.kind_of(ref.api_version, ref.kind)
            if kind is not None and not kind.kueue:
                return None
    else:
        kind = registry.kind_of(controller.api_version, controller.kind)
        if kind is None or not kind.kueue or not (rules.workload_identity or kind.gang_under_labels):
            return None
        if not kind.workload_requests_gpu(workload, rules):
            return None
    labelled = meta.labels.get(JOB_UID_LABEL, "")
    if labelled:
        return labelled
    return controller.uid if controller is not None and controller.uid else None


def job_gang_uid(job: Job, rules: Rules) -> str | None:
    """The gang a job record belongs to (R9.1, R15), by the uid Kueue's Workload names: a
    JobSet's own under an orchestrator's labels (R9); under `workload_identity` the
    attempt it speaks for (a TrainJob's JobSet: the TrainJob's, whose Workload names the
    TrainJob and whose JobSet mirrors its suspension and carries its workers' status), or
    its own for a job Kueue suspends that is a workload attempt of its own (R13.2). A
    TrainJob's own record: none (its JobSet speaks for it)."""
    meta = job.metadata
    kind = registry.kind_of(job.api_version, job.kind)
    if kind is None or not meta.uid or not kind.kueue or not kind.observed_by_gang:
        return None
    labelled = _labelled(meta.labels, rules)
    owner = next((o for o in meta.owner_references if o.controller), None)
    owner_kind = registry.kind_of(owner.api_version, owner.kind) if owner is not None else None
    if kind.gang_under_labels:  # R9 follows it under an orchestrator's labels too
        if rules.workload_identity and not labelled and owner is not None and owner.uid:
            if owner_kind is not None and not owner_kind.observed_by_gang:
                return owner.uid  # it speaks for its owner (a TrainJob's JobSet)
        return meta.uid
    if not rules.workload_identity or labelled:
        return None
    if owner_kind is not None:
        return None  # a JobSet's Jobs, a RayJob's submitter, an MPIJob's launcher (R13.2)
    if not kind.requests_gpu(job, rules):
        return None  # R13.2: a Job without a GPU is no attempt
    return meta.uid


def is_replaced(workload: Workload) -> bool:
    """R15.1: a slice replaced by a newer Workload: neither an eviction nor an end."""
    finished = find_condition(workload.status.conditions, FINISHED)
    return finished is not None and finished.status == "True" and finished.reason == SLICE_REPLACED


def admitted_at(workload: Workload) -> datetime | None:
    """When Kueue admitted it, by Kueue's clock: `Admitted` True, else `QuotaReserved` True
    (its lastTransitionTime); None when neither holds."""
    for type_ in (ADMITTED, QUOTA_RESERVED):
        found = find_condition(workload.status.conditions, type_)
        if found is not None and found.status == "True":
            return found.last_transition_time
    return None


EvictionCounts = tuple[tuple[str, str, int], ...]  # (reason, underlying cause, count)
COUNTS_KEPT = 32  # the API allows 256 (MaxItems); a Workload is written by Kueue


def eviction_counts(workload: Workload) -> EvictionCounts:
    """v1beta2 `status.schedulingStats.evictions`, (reason, cause, count), in order."""
    stats = workload.status.scheduling_stats
    if stats is None:
        return ()
    return tuple(sorted((e.reason, e.underlying_cause, e.count) for e in stats.evictions[:COUNTS_KEPT]))


def requeues_of(workload: Workload) -> int | None:
    """`status.requeueState.count` (re-queued after a PodsReady timeout): the only count of
    evictions a v1beta1 Workload has."""
    state = workload.status.requeue_state
    return state.count if state is not None else None


def grown(now: EvictionCounts, before: EvictionCounts) -> tuple[str, str] | None:
    """The (reason, underlying cause) whose count grew between two observations, the
    largest growth first; None when none did."""
    earlier = {(r, cause): count for r, cause, count in before}
    growth = sorted(((count - earlier.get((r, cause), 0), r, cause) for r, cause, count in now), reverse=True)
    return (growth[0][1], growth[0][2]) if growth and growth[0][0] > 0 else None


def underlying_cause(reason: str, now: EvictionCounts, before: EvictionCounts) -> str:
    """Kueue's underlyingCause of an eviction for `reason`, from the counts as they stood
    when it was seen and just before: the one cause of that reason, or the one whose count
    grew; "" when Kueue counts none (v1beta1) or the counts do not tell which."""
    causes = [(cause, count) for r, cause, count in now if r == reason]
    if len(causes) == 1:
        return causes[0][0]
    earlier = {(r, cause): count for r, cause, count in before}
    grew = [cause for cause, count in causes if count > earlier.get((reason, cause), 0)]
    return grew[0] if len(grew) == 1 else ""


def eviction_of(workload: Workload) -> Eviction | None:
    conditions = workload.status.conditions
    evicted = find_condition(conditions, EVICTED)
    if evicted is None or evicted.status != "True":
        return None
    preempted = find_condition(conditions, PREEMPTED)
    detail = preempted.reason if preempted is not None and preempted.status == "True" else ""
    return Eviction(evicted.reason, evicted.message, detail, evicted.last_transition_time)


def clock_of(workload: Workload) -> datetime | None:
    """The latest time Kueue wrote on the Workload (its conditions' lastTransitionTimes,
    else the API server's creationTimestamp): R12.7, the Workload's own clock."""
    times = [c.last_transition_time for c in workload.status.conditions if c.last_transition_time is not None]
    created = workload.metadata.creation_timestamp
    if created is not None:
        times.append(created)
    return max(times) if times else None


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
    return Classified(eviction.reason, detail, eviction.message.strip(), retry, eviction.underlying)


def summary(evicted: Classified | None) -> str:
    """R9.6b: `gang evicted by kueue (<reason>[, <detail>])[: <message>]`; R15.2: with
    Kueue's underlying cause, where it gives one, after the reason."""
    if evicted is None:
        return "gang evicted by kueue"
    cause = f"{evicted.reason}, {evicted.detail}" if evicted.detail else evicted.reason
    if evicted.underlying:
        cause = f"{cause}; underlying cause {evicted.underlying}"
    text = f"gang evicted by kueue ({cause})"
    return f"{text}: {evicted.message}" if evicted.message else text


def ending_reason(evicted: Classified | None) -> str:
    """R9.6b; None (no Workload, or no eviction recorded) is a system retry (R9.6, R9.7)."""
    if evicted is not None and evicted.retry == "user":
        return f"{summary(evicted)}; this uses one of the task's retries"
    return f"{summary(evicted)}; this does not count against the task's retries"


def waiting_reason(evicted: Classified) -> str:
    """R9.4, policy on; R15.2, any eviction of a workload attempt (Kueue requeues it)."""
    return f"{summary(evicted)}; waiting for re-admission"
