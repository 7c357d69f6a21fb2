"""JobSet (`jobset.x-k8s.io/v1alpha2`, kubernetes-sigs/jobset api/jobset/v1alpha2): the
tracked resource under an orchestrator's labels (SPEC R1), a bare JobSet's own workload
attempt (R13), or the one a TrainJob controls (`trainjob.py`). Its child pods are the
current generation's (R4.2: `restart-attempt` = `status.restarts`; earlier generations are
R8's); Kueue suspends it (R9, R15)."""

from __future__ import annotations

from datetime import datetime
from typing import Final

from app.core.base.bounds import Trim
from app.core.base.rules import Rules
from app.core.kinds import trainjob
from app.core.kinds.base import COMPLETED, SUSPENDED, Api, End, Route, WorkloadKind, ended_by, ended_since, workload_attempt
from app.model.envelope import JOBS
from app.model.facts import AttemptId, JobFacts, OwnerFacts, PodFacts
from app.model.k8s import Condition, Job

JOBSET: Final = "JobSet"
GROUP: Final = "jobset.x-k8s.io"  # api/jobset/v1alpha2/groupversion_info.go
# api/jobset/v1alpha2/jobset_types.go (JobSetNameKey, JobSetUIDKey, RestartsKey): the JobSet
# controller sets them on every child Job and its pod template
# (pkg/controllers/jobset_controller.go, labelAndAnnotateObject); the uid since v0.9.0 (#862).
JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID: Final = "jobset.sigs.k8s.io/jobset-uid"
RESTART_ATTEMPT: Final = "jobset.sigs.k8s.io/restart-attempt"


def _newest_true(conditions: list[Condition]) -> str | None:
    """The type of the True condition with the latest lastTransitionTime (later in the list on ties)."""

    def order(item: tuple[int, Condition]) -> tuple[bool, float, int]:
        i, condition = item
        t = condition.last_transition_time
        return (t is not None, t.timestamp() if t is not None else 0.0, i)

    true = [(i, c) for i, c in enumerate(conditions) if c.status == "True"]
    return max(true, key=order)[1].type if true else None


class JobSet(WorkloadKind):
    api = Api(JOBSET, GROUP, ("v1alpha2",), "jobsets", JOBS)
    tracked_under_labels = True
    kueue = True
    gang_under_labels = True  # R9: Flyte's policy for JobSets under an orchestrator
    joins_any_pod = True
    pod_labels = (JOBSET_NAME, RESTART_ATTEMPT, JOBSET_UID)
    child_pod_labels = (JOBSET_NAME,)

    def owners_attempt(self, cluster: str, job: Job, owner: OwnerFacts | None, trim: Trim) -> AttemptId | None:
        """A TrainJob's JobSet tells the TrainJob's failure (trainjob.py)."""
        if owner is not None and (owner.group, owner.kind) == (trainjob.GROUP, trainjob.TRAINJOB):
            return workload_attempt(cluster, job.metadata.namespace, trainjob.TRAINJOB, owner.name, owner.uid)
        return None

    def join_key(self, cluster: str, job: Job, attempt: AttemptId, trim: Trim) -> str | None:
        """Its pods name the JobSet (by uid), not the TrainJob that may own it."""
        meta = job.metadata
        return workload_attempt(cluster, meta.namespace, JOBSET, meta.name, meta.uid).key

    def route_pod(self, pod: PodFacts, rules: Rules) -> Route | None:
        labels = pod.labels
        name, uid = labels.get(JOBSET_NAME), labels.get(JOBSET_UID)
        if not name or not uid:
            return None
        return Route(workload_attempt(pod.cluster, pod.namespace, JOBSET, name, uid).key, None)

    def selects(self, job: JobFacts, pod: PodFacts, generation: int) -> bool:
        """R4.2: its name and the generation's restart attempt."""
        if pod.namespace != job.namespace or not pod.is_child:
            return False
        labels = pod.labels
        return labels.get(JOBSET_NAME) == job.name and labels.get(RESTART_ATTEMPT) == str(generation)

    def generation(self, job: JobFacts) -> int:
        return job.restarts  # R8: status.restarts

    def completed(self, job: Job) -> bool:
        return any(c.type == COMPLETED and c.status == "True" for c in job.status.conditions)

    def suspended(self, job: Job) -> bool:
        """`spec.suspend`, or its newest True condition `Suspended` (R9.3: the controller
        may record the suspension before the spec is read back)."""
        return job.spec.suspend is True or _newest_true(job.status.conditions) == SUSPENDED

    def started(self, job: Job) -> bool:
        """Restarted, or a replicated job has a ready or succeeded Job."""
        status = job.status
        return status.restarts > 0 or any(r.ready > 0 or r.succeeded > 0 for r in status.replicated_jobs_status)

    def end(self, job: Job) -> End | None:
        return ended_by(job, COMPLETED)

    def end_since(self, job: Job) -> datetime | None:
        return ended_since(job, COMPLETED)
