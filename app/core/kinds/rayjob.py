"""RayJob (`ray.io/v1`, ray-project/kuberay ray-operator/apis/ray/v1/rayjob_types.go): the
tracked resource under an orchestrator's labels (SPEC R1) or a workload attempt (R13).
Its pods belong to its RayCluster and name only the cluster (`ray.io/cluster`), so the
attempt stage meets them under the cluster's key (R13.4). Kueue suspends it (R15).

R16.4: with `spec.backoffLimit`, a failed try is retried on a new RayCluster. KubeRay
writes the try's failure straight as `jobDeploymentStatus: Retrying` (never `Failed`),
with `status.failed` counting it, while `rayClusterName` still names the try's cluster
(KubeRay v1.7.0 rayjob_controller.go checkBackoffLimitAndUpdateStatusIfNeeded): that
record ends the try, a generation of its own, whose verdict (`terminal: false`) is taken
over its cluster's pods under its cluster's key. The next try runs on another cluster,
under another key: its verdicts' revisions start above the earlier try's
(`tries_apart`), and the final verdict counts the tries before it.

R17 under Kueue: the job's one Workload holds quota across its tries. Each key the job
joined owns the Workload's holds within its window (stages/gang_quota.py `shares`): from
the try's `status.startTime` (KubeRay writes it with the try's `rayClusterName`; capped by
the record's `observed_at`, the record's `observed_at` where it is missing or not after the
earlier try's) until the next try's; the first try's from the start, the latest's open.
An earlier try's holds end where the next try began: its idle quota ends there, its
reserved stops, and every hour's reserved counts once across the tries. The final verdict's
`goodput` is its own try's (from its start); the hours (`faultline.goodput`) hold them all.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from app.core.base.bounds import Trim
from app.core.base.rules import Rules
from app.core.kinds.base import COMPLETED, ENDED, FAILED, Api, End, Route, WorkloadKind, _part, true_condition
from app.model.envelope import JOBS
from app.model.facts import AttemptId, CrdFailure, GenerationEnd, JobFacts, PodFacts
from app.model.k8s import Job

RAYJOB: Final = "RayJob"
GROUP: Final = "ray.io"
RAY_CLUSTER_KIND: Final = "RayCluster"
# ray-operator/controllers/ray/utils/constant.go RayClusterLabelKey: on every pod of a
# RayCluster (common/pod.go labelPod); a RayJob's cluster is its status.rayClusterName.
RAY_CLUSTER: Final = "ray.io/cluster"
# rayjob_types.go JobDeploymentStatus (KubeRay v1.7.0)
RUNNING: Final = "Running"
COMPLETE: Final = "Complete"
DEPLOYMENT_FAILED: Final = "Failed"
RETRYING: Final = "Retrying"
# SPEC R16.4: a RayJob that failed its validation (rayjob_controller.go, validateRayJob):
# reason ValidationFailed, no RayCluster, no endTime, and the controller never leaves it.
VALIDATION_FAILED: Final = "ValidationFailed"
# R16.4: what KubeRay still acts on: not an end, whatever `jobStatus` says (a try's
# jobStatus FAILED stays while KubeRay decides between Failed and Retrying, and `Retrying`
# keeps it until the retry resets the status; `Waiting`: InteractiveMode, for a job id).
NOT_ENDED: Final = frozenset({"", "Initializing", RUNNING, "Waiting", RETRYING, "Suspending", "Suspended"})
JOB_FAILED: Final = "FAILED"  # rayjob_types.go JobStatusFailed
JOB_SUCCEEDED: Final = "SUCCEEDED"


def ray_cluster_key(cluster: str, namespace: str, name: str) -> str:
    """R13.4: where a RayJob and its cluster's pods meet (a pod names only its cluster)."""
    return f"{cluster}/{_part('namespace', namespace)}/{RAY_CLUSTER_KIND}/{_part('RayCluster name', name)}"


class RayJob(WorkloadKind):
    api = Api(RAYJOB, GROUP, ("v1",), "rayjobs", JOBS)
    tracked_under_labels = True
    kueue = True
    tries_apart = True  # each try on a RayCluster of its own, under its own key (R16.4)
    restarted = "on a new RayCluster"  # a new try, not a generation of the old one
    pod_labels = (RAY_CLUSTER,)
    # common/pod.go labelPod: the cluster, the node type, the CRD the cluster came from.
    child_pod_labels = (RAY_CLUSTER, "ray.io/node-type", "ray.io/originated-from-crd")

    def join_key(self, cluster: str, job: Job, attempt: AttemptId, trim: Trim) -> str | None:
        """Its RayCluster's key; none while it has no cluster of its own yet, or when it runs
        on an existing RayCluster whose pods belong to the cluster, not to this job
        (docs/rules.md). R16.4: a RayJob that failed its validation before it had a cluster
        never will have one: its own key, where it fails with no pods."""
        ray_cluster = trim.token(job.status.ray_cluster_name)
        if not ray_cluster and job.status.job_deployment_status == VALIDATION_FAILED:
            return attempt.key
        if job.spec.cluster_selector or not ray_cluster:
            return None
        return ray_cluster_key(cluster, job.metadata.namespace, ray_cluster)

    def route_pod(self, pod: PodFacts, rules: Rules) -> Route | None:
        name = pod.labels.get(RAY_CLUSTER)
        return Route(ray_cluster_key(pod.cluster, pod.namespace, name), None) if name else None

    def selects(self, job: JobFacts, pod: PodFacts, ended: GenerationEnd | None = None) -> bool:
        """R4.2: its cluster's pods (a try that ended: that try's cluster's, R16.4); while the
        cluster name is empty no pod exists yet."""
        if pod.namespace != job.namespace or not pod.is_child:
            return False
        cluster = ended.scope[0] if ended is not None else job.ray_cluster_name
        return bool(cluster) and pod.labels.get(RAY_CLUSTER) == cluster

    def generation(self, job: JobFacts) -> int:
        """The try now ending: its index among the tries (`status.failed` counts it)."""
        return max(job.tries - 1, 0)

    def counters(self, job: Job) -> dict[str, int]:
        """R16.4: the record showing a try retried (`Retrying`) ends that try: counter
        `retrying/<try>` passes 0 under the try's own cluster's key, nowhere else."""
        status = job.status
        if status.job_deployment_status != RETRYING or not status.failed:
            return {}
        return {f"{RETRYING}/{status.failed - 1}": 1}

    def generation_ended(self, counter: str, value: int, job: JobFacts, at: datetime) -> GenerationEnd:
        attempt = int(counter.partition("/")[2])
        cluster = job.ray_cluster_name
        reason = f"{RAYJOB} {job.name} failed its try {attempt} on RayCluster {cluster} and is retried on a new one"
        return GenerationEnd(f"try/{attempt}", attempt, f"try {attempt} (RayCluster {cluster})", reason, at, (cluster,))

    def failure(self, job: Job) -> CrdFailure | None:
        """R6.1: `status.reason` (else `RayJobFailed`), dated by a Failed condition if any,
        else the RayJob's own `status.endTime` (R5.2, R12.7; none for ValidationFailed: the
        record that first showed it dates it).

        R16.4: the deployment status decides. `Failed` ends the attempt even when `jobStatus`
        is not terminal (ray-project/kuberay#2314: a failed submitter leaves it RUNNING);
        `ValidationFailed` ends it (a USER failure with no pods); `jobStatus: FAILED` ends it
        only once KubeRay no longer acts on it (a deployment `Complete`, as KubeRay before
        v1.1 wrote for any finished job): while `Running` KubeRay still chooses between
        `Failed` and `Retrying`, and `Retrying`, `Waiting` are no ends. KubeRay v1.7.0 writes
        no RayJob conditions (rayjob_types.go RayJobStatus has none): a `Failed` one is read as
        for the other kinds, for a controller that writes it."""
        failed = true_condition(job.status.conditions, FAILED)
        status = job.status
        deployment = status.job_deployment_status
        if deployment == RETRYING:
            return None  # R16.4: the try failed, the RayJob goes on (`counters`)
        if failed is None and deployment not in (DEPLOYMENT_FAILED, VALIDATION_FAILED):
            if status.job_status != JOB_FAILED or deployment in NOT_ENDED:
                return None
        message = status.message or (failed.message if failed else "")
        code = status.reason or (VALIDATION_FAILED if deployment == VALIDATION_FAILED else "RayJobFailed")
        return CrdFailure(code, message, failed.last_transition_time if failed else status.end_time)

    def completed(self, job: Job) -> bool:
        return job.status.job_status == JOB_SUCCEEDED or job.status.job_deployment_status == COMPLETE

    def started(self, job: Job) -> bool:
        return job.status.job_deployment_status == RUNNING  # Kueue's PodsReady for the kind

    def joined_since(self, job: Job) -> datetime | None:
        """R17: `status.startTime`, which KubeRay writes with the try's `rayClusterName`
        (rayjob_controller.go initRayJobStatusIfNeed): when the quota's share moved to the
        try's cluster."""
        return job.status.start_time

    def end(self, job: Job) -> End | None:
        """Kueue's Finished for a RayJob: the deployment status `Complete` or `Failed`
        (`Retrying`, `Waiting` are no ends, R16.4). And `ValidationFailed`, which Kueue does
        not count as finished (its quota stays held) but KubeRay never leaves: the RayJob's
        own end, as its verdict says (R15.3)."""
        status = job.status
        if status.job_deployment_status == COMPLETE:
            return End(COMPLETED, status.job_status or COMPLETE, status.message)
        if status.job_deployment_status == DEPLOYMENT_FAILED:
            return End(ENDED, status.reason or "RayJobFailed", status.message)
        if status.job_deployment_status == VALIDATION_FAILED:
            return End(ENDED, status.reason or VALIDATION_FAILED, status.message)
        return None
