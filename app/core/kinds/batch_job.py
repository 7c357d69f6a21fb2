"""batch/v1 Job (kubernetes/api batch/v1/types.go): a workload attempt when its pod
template asks for a GPU (SPEC R13.2: most Jobs — a CronJob's among them — do not, and
create no state at all). Its pods are all its children, joined by the Job controller's
labels or ownerReference (R13.4); Kueue suspends it (R15). Under an orchestrator's labels
it is no tracked resource of R1's. It fails with its `Failed` condition (R13.5: reasons
BackoffLimitExceeded, DeadlineExceeded, PodFailurePolicy, MaxFailedIndexesExceeded,
FailedIndexes, batch/v1/types.go JobReason*); its earlier `FailureTarget` is not the
failure yet."""

from __future__ import annotations

from datetime import datetime
from typing import Final

from app.core.base.rules import Rules
from app.core.kinds.base import Api, End, Route, WorkloadKind, ended_by, ended_since, requests_gpu, workload_attempt
from app.model.envelope import JOBS
from app.model.facts import GenerationEnd, JobFacts, PodFacts
from app.model.k8s import Job, Workload

JOB: Final = "Job"
GROUP: Final = "batch"
# kubernetes/api batch/v1/types.go (ControllerUidLabel, JobNameLabel): the Job controller
# labels its pods with both, and still with the unprefixed names of older releases.
CONTROLLER_UID: Final = ("batch.kubernetes.io/controller-uid", "controller-uid")
JOB_NAME: Final = ("batch.kubernetes.io/job-name", "job-name")
COMPLETE: Final = "Complete"  # JobComplete


class BatchJob(WorkloadKind):
    # Served by every API server; numerous (CronJobs make one per run): R13.2 keeps only
    # those that request a GPU, which the rules decide, not the bridge.
    api = Api(JOB, GROUP, ("v1",), "jobs", JOBS, optional=False)
    kueue = True
    joins_pods_by_owner = True
    pod_labels = (*CONTROLLER_UID, *JOB_NAME)
    child_pod_labels = JOB_NAME

    def requests_gpu(self, job: Job, rules: Rules) -> bool:
        template = job.spec.template
        return template is not None and requests_gpu(template.spec, rules)

    def workload_requests_gpu(self, workload: Workload, rules: Rules) -> bool:
        return any(requests_gpu(s.template.spec, rules) for s in workload.spec.pod_sets)

    def route_pod(self, pod: PodFacts, rules: Rules) -> Route | None:
        """Its Job, by the Job controller's labels, else by its controller ownerReference."""
        labels = pod.labels
        uid = next((labels[k] for k in CONTROLLER_UID if labels.get(k)), "")
        name = next((labels[k] for k in JOB_NAME if labels.get(k)), "")
        if not (uid and name):
            owner = pod.owner
            if owner is None or (owner.group, owner.kind) != (GROUP, JOB):
                return None
            name, uid = owner.name, owner.uid
        attempt = workload_attempt(pod.cluster, pod.namespace, JOB, name, uid)
        return Route(attempt.key, attempt)

    def selects(self, job: JobFacts, pod: PodFacts, ended: GenerationEnd | None = None) -> bool:
        return pod.namespace == job.namespace  # joined by label or by ownerReference alone

    def completed(self, job: Job) -> bool:
        return any(c.type == COMPLETE and c.status == "True" for c in job.status.conditions)

    def started(self, job: Job) -> bool:
        status = job.status
        return (status.ready or 0) > 0 or status.succeeded > 0

    def end(self, job: Job) -> End | None:
        return ended_by(job, COMPLETE)

    def end_since(self, job: Job) -> datetime | None:
        return ended_since(job, COMPLETE)
