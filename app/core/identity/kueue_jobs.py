"""Reading the jobs Kueue suspends (SPEC R9.3, R15.2): whether one is suspended, has
started, has ended — for a JobSet (a TrainJob's through its JobSet), a batch/v1 Job, a
RayJob and a Kubeflow job. Each reading follows Kueue's own integration for the kind
(kubernetes-sigs/kueue pkg/controller/jobs/<kind>: IsSuspended, PodsReady, Finished) and
the kind's API types. Pure functions over the slim `Job` view.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final, NamedTuple

from app.core.identity import workload as w
from app.model.k8s import Condition, Job

# JobSet conditions (kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go).
COMPLETED: Final = "Completed"
FAILED: Final = "Failed"
SUSPENDED: Final = "Suspended"
# batch/v1 Job conditions (kubernetes/api batch/v1/types.go JobComplete, JobFailed).
JOB_COMPLETE: Final = "Complete"
# Kubeflow training-operator v1 conditions (pkg/apis/kubeflow.org/v1/common_types.go).
KUBEFLOW_RUNNING: Final = "Running"
KUBEFLOW_SUCCEEDED: Final = "Succeeded"
# KubeRay rayjob_types.go JobDeploymentStatus.
RAY_RUNNING: Final = "Running"
RAY_COMPLETE: Final = "Complete"
RAY_FAILED: Final = "Failed"
RAY_SUSPENDED: Final = "Suspended"


class End(NamedTuple):
    """A terminal condition of the job (R9.10, R15.3): Completed, or Ended with a reason."""

    state: str  # "Completed" | "Ended"
    reason: str
    message: str


def true_condition(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_ and c.status == "True"), None)


def _newest_true(conditions: list[Condition]) -> str | None:
    """The type of the True condition with the latest lastTransitionTime (later in the list on ties)."""

    def order(item: tuple[int, Condition]) -> tuple[bool, float, int]:
        i, condition = item
        t = condition.last_transition_time
        return (t is not None, t.timestamp() if t is not None else 0.0, i)

    true = [(i, c) for i, c in enumerate(conditions) if c.status == "True"]
    return max(true, key=order)[1].type if true else None


def is_suspended(job: Job) -> bool:
    """Kueue holds it: `spec.suspend` (`spec.runPolicy.suspend` for a Kubeflow job); for a
    JobSet also its newest True condition `Suspended` (R9.3: the controller may record
    the suspension before the spec is read back)."""
    if job.kind in w.KUBEFLOW_KINDS:
        return job.spec.run_policy is not None and job.spec.run_policy.suspend is True
    if job.spec.suspend is True:
        return True
    return job.kind == w.JOBSET and _newest_true(job.status.conditions) == SUSPENDED


def suspension_since(job: Job, suspended: bool) -> datetime | None:
    """R12.7: when the job's own controller says its suspension state began: the
    lastTransitionTime of its `Suspended` condition where that condition agrees with the
    state (True while suspended, False while running) — the JobSet controller
    (api/jobset/v1alpha2/jobset_types.go JobSetSuspended), the Job controller (kubernetes/api
    batch/v1/types.go JobSuspended) and the Kubeflow training-operator (common_types.go
    JobSuspended) all write one. None when it does not agree yet (the spec changed first) or
    the kind writes none (a RayJob)."""
    for condition in job.status.conditions:
        if condition.type == SUSPENDED:
            agrees = condition.status == ("True" if suspended else "False")
            return condition.last_transition_time if agrees else None
    return None


def end_since(job: Job) -> datetime | None:
    """When the job's own ending was recorded (its terminal condition's time), if it says."""
    end = end_of(job)
    if end is None or job.kind == w.RAYJOB:
        return None
    done = {w.JOB: JOB_COMPLETE}.get(job.kind, KUBEFLOW_SUCCEEDED if job.kind in w.KUBEFLOW_KINDS else COMPLETED)
    found = true_condition(job.status.conditions, done if end.state == COMPLETED else FAILED)
    return found.last_transition_time if found is not None else None


def clock_of(job: Job) -> datetime | None:
    """The latest time the job's conditions carry: a record that shows it was written after
    every change of the job made before then (R12.7: how far the job is known)."""
    times = [c.last_transition_time for c in job.status.conditions if c.last_transition_time is not None]
    return max(times) if times else None


def has_started(job: Job) -> bool:
    """R9.3, R15.2: its workers ran. A JobSet: restarted, or a replicated job has a ready or
    succeeded Job; a batch Job: ready or succeeded pods; a RayJob: deployment Running; a
    Kubeflow job: condition Running True (Kueue's PodsReady for the kind)."""
    status = job.status
    if job.kind == w.JOBSET:
        return status.restarts > 0 or any(r.ready > 0 or r.succeeded > 0 for r in status.replicated_jobs_status)
    if job.kind == w.JOB:
        return (status.ready or 0) > 0 or status.succeeded > 0
    if job.kind == w.RAYJOB:
        return status.job_deployment_status == RAY_RUNNING
    if job.kind in w.KUBEFLOW_KINDS:
        return true_condition(status.conditions, KUBEFLOW_RUNNING) is not None
    return False


def end_of(job: Job) -> End | None:
    """R9.10, R15.3: the job's own ending, if it has one."""
    conditions = job.status.conditions
    if job.kind == w.RAYJOB:  # Kueue's Finished for a RayJob: the deployment status
        status = job.status
        if status.job_deployment_status == RAY_COMPLETE:
            return End(COMPLETED, status.job_status or RAY_COMPLETE, status.message)
        if status.job_deployment_status == RAY_FAILED:
            return End("Ended", status.reason or "RayJobFailed", status.message)
        return None
    done = {w.JOB: JOB_COMPLETE}.get(job.kind, KUBEFLOW_SUCCEEDED if job.kind in w.KUBEFLOW_KINDS else COMPLETED)
    for type_, state in ((done, COMPLETED), (FAILED, "Ended")):
        found = true_condition(conditions, type_)
        if found is not None:
            return End(state, found.reason, found.message)
    return None
