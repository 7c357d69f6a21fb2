"""JobSet (`jobset.x-k8s.io/v1alpha2`, kubernetes-sigs/jobset api/jobset/v1alpha2): the
tracked resource under an orchestrator's labels (SPEC R1), a bare JobSet's own workload
attempt (R13), or the one a TrainJob controls (`trainjob.py`). Kueue suspends it (R9, R15).

Its child pods are the current generation's (R4.2); it has three kinds of generation, each
ended by a counter its controller keeps (JobSet v0.12, pkg/controllers/failure_policy.go,
in_place_restart.go):
- the whole set restarted (`status.restarts`, pods' `restart-attempt`; R8.1);
- one child Job recreated alone (`RestartJob`, `RestartJobAndIgnoreMaxRestarts` actions:
  `replicatedJobsStatus[].jobRestarts[<job index>]`, pods' `job-restart-attempt`, the Job's
  name kept and its uid new; R16.1);
- its pods' containers restarted in place (`restartStrategy: InPlaceRestart`:
  `status.previousInPlaceRestartAttempt`; the pods are kept, so a fault seen before the
  restart explains that generation, not a later one; R16.2).
None of them carries a time: a generation ends when the record showing its counter passed
is observed (R8.1's anchor).
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from app.core.base.bounds import Trim
from app.core.base.rules import Rules
from app.core.kinds import trainjob
from app.core.kinds.base import COMPLETED, SUSPENDED, Api, End, Route, WorkloadKind, ended_by, ended_since, workload_attempt
from app.model.envelope import JOBS
from app.model.facts import AttemptId, GenerationEnd, JobFacts, OwnerFacts, PodFacts
from app.model.k8s import Condition, Job

JOBSET: Final = "JobSet"
GROUP: Final = "jobset.x-k8s.io"  # api/jobset/v1alpha2/groupversion_info.go
# api/jobset/v1alpha2/jobset_types.go (JobSetNameKey, JobSetUIDKey), pkg/constants (RestartsKey): the JobSet
# controller sets them on every child Job and its pod template
# (pkg/controllers/jobset_controller.go, labelAndAnnotateObject); the uid since v0.9.0 (#862).
JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID: Final = "jobset.sigs.k8s.io/jobset-uid"
RESTART_ATTEMPT: Final = "jobset.sigs.k8s.io/restart-attempt"  # pkg/constants RestartsKey
# jobset_types.go ReplicatedJobNameKey, JobIndexKey; pkg/constants JobRestartAttemptKey (set
# only while the alpha RestartJob feature gate is on).
REPLICATED_JOB: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX: Final = "jobset.sigs.k8s.io/job-index"
JOB_RESTART_ATTEMPT: Final = "jobset.sigs.k8s.io/job-restart-attempt"
# The counters of its generations (SPEC R8, R16.1, R16.2).
WHOLE: Final = "restarts"
IN_PLACE: Final = "in-place"
JOB: Final = "job"  # f"job/<replicated job>/<job index>"
MAX_JOB_COUNTERS = 4096  # child Jobs whose restarts are followed (a tenant writes the spec; R11.5)


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
    pod_labels = (JOBSET_NAME, RESTART_ATTEMPT, JOBSET_UID, REPLICATED_JOB, JOB_INDEX, JOB_RESTART_ATTEMPT)
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

    def selects(self, job: JobFacts, pod: PodFacts, ended: GenerationEnd | None = None) -> bool:
        """R4.2: its name and the generation's restart attempts: the whole set's, and its
        Job's where child Jobs restart alone (R16.1). Pods restarted in place are the
        same pods in every in-place generation (R16.2: their faults are cut by time)."""
        if pod.namespace != job.namespace or not pod.is_child:
            return False
        labels = pod.labels
        if labels.get(JOBSET_NAME) != job.name:
            return False
        if ended is None:  # the generation now running
            if labels.get(RESTART_ATTEMPT) != str(job.restarts):
                return False
            attempt = labels.get(JOB_RESTART_ATTEMPT)
            if attempt is None:
                return True
            counter = f"{JOB}/{labels.get(REPLICATED_JOB, '')}/{labels.get(JOB_INDEX, '')}"
            return attempt == str(job.counters.get(counter, 0))
        what, *rest = ended.scope
        if what == WHOLE:
            return labels.get(RESTART_ATTEMPT) == rest[0]
        if what == JOB:
            replicated, index, attempt, restarts = rest
            return (
                labels.get(RESTART_ATTEMPT) == restarts
                and labels.get(REPLICATED_JOB) == replicated
                and labels.get(JOB_INDEX) == index
                and labels.get(JOB_RESTART_ATTEMPT) == attempt
            )
        return labels.get(RESTART_ATTEMPT) == rest[1]  # in place: the pods of the set's generation then

    def generation(self, job: JobFacts) -> int:
        return job.restarts  # R8: status.restarts

    def counters(self, job: Job) -> dict[str, int]:
        status = job.status
        found = {WHOLE: status.restarts} if status.restarts else {}  # most JobSets: none (a smaller state)
        for replicated in status.replicated_jobs_status:
            for index, count in enumerate(replicated.job_restarts[:MAX_JOB_COUNTERS]):
                if count and len(found) <= MAX_JOB_COUNTERS:
                    found[f"{JOB}/{replicated.name}/{index}"] = count
        if status.previous_in_place_restart_attempt is not None:
            found[IN_PLACE] = status.previous_in_place_restart_attempt + 1  # attempts 0..previous ended
        return found

    def generation_ended(self, counter: str, value: int, job: JobFacts, at: datetime) -> GenerationEnd:
        if counter == WHOLE:  # R8.1
            reason = f"{JOBSET} {job.name} restarted in place after generation {value}"
            return GenerationEnd(str(value), value, f"generation {value}", reason, at, (WHOLE, str(value)))
        restarts = str(job.restarts)
        if counter == IN_PLACE:  # R16.2
            label = f"in-place restart attempt {value}"
            reason = f"{JOBSET} {job.name} restarted its pods' containers in place after attempt {value}"
            return GenerationEnd(f"{IN_PLACE}/{value}@{restarts}", job.restarts, label, reason, at, (IN_PLACE, str(value), restarts), kept_pods=True)
        _, replicated, index = counter.split("/", 2)  # R16.1: placement.GenJobName
        name = f"{job.name}-{replicated}-{index}"
        reason = f"{JOBSET} {job.name} recreated its Job {name} after its generation {value}"
        scope = (JOB, replicated, index, str(value), restarts)
        return GenerationEnd(f"{counter}/{value}@{restarts}", job.restarts, f"Job {name} generation {value}", reason, at, scope)

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
