"""Kubeflow training-operator v1 jobs (`kubeflow.org`: PyTorchJob, TFJob, MPIJob — MPIJob
also at mpi-operator's `v2beta1` — and JAXJob, SPEC R16.5): tracked resources under an
orchestrator's labels (SPEC R1) or workload attempts (R13). Their pods name the job as
controller and carry `training.kubeflow.org/job-name` (R4.2, R13.4); Kueue suspends them
in `spec.runPolicy.suspend` (R15).

The v1 operator's newest release is kubeflow/trainer v1.9.4 (branch release-1.9; the
kubeflow/training-operator repository's tags stop at v1.9.0): its
pkg/apis/kubeflow.org/v1/common_types.go holds the labels and condition types read here,
and pkg/util/status.go names each reason `<Kind><Reason>` (`JAXJobFailed`, …)."""

from __future__ import annotations

from datetime import datetime
from typing import Final

from app.core.base.rules import Rules
from app.core.kinds.base import Api, End, Route, WorkloadKind, ended_by, ended_since, true_condition, workload_attempt
from app.model.envelope import JOBS
from app.model.facts import GenerationEnd, JobFacts, PodFacts
from app.model.k8s import Job

GROUP: Final = "kubeflow.org"
# kubeflow/trainer v1.9.4 pkg/apis/kubeflow.org/v1/common_types.go: JobNameLabel; the conditions.
JOB_NAME: Final = "training.kubeflow.org/job-name"
RUNNING: Final = "Running"
SUCCEEDED: Final = "Succeeded"


class KubeflowJob(WorkloadKind):
    tracked_under_labels = True
    kueue = True
    joins_pods_by_owner = True
    joins_any_pod = True
    pod_labels = (JOB_NAME,)
    child_pod_labels = (JOB_NAME, "training.kubeflow.org/operator-name")  # common_types.go OperatorNameLabel

    def __init__(self, kind: str, versions: tuple[str, ...], plural: str) -> None:
        self.api = Api(kind, GROUP, versions, plural, JOBS)

    def route_pod(self, pod: PodFacts, rules: Rules) -> Route | None:
        owner = pod.owner
        if owner is None or owner.group != GROUP or owner.kind != self.api.name:
            return None
        attempt = workload_attempt(pod.cluster, pod.namespace, owner.kind, owner.name, owner.uid)
        return Route(attempt.key, attempt)

    def selects(self, job: JobFacts, pod: PodFacts, ended: GenerationEnd | None = None) -> bool:
        if pod.namespace != job.namespace or not pod.is_child:
            return False
        return pod.labels.get(JOB_NAME) == job.name

    def completed(self, job: Job) -> bool:
        return true_condition(job.status.conditions, SUCCEEDED) is not None

    def suspended(self, job: Job) -> bool:
        return job.spec.run_policy is not None and job.spec.run_policy.suspend is True

    def started(self, job: Job) -> bool:
        return true_condition(job.status.conditions, RUNNING) is not None  # Kueue's PodsReady for the kind

    def end(self, job: Job) -> End | None:
        return ended_by(job, SUCCEEDED)

    def end_since(self, job: Job) -> datetime | None:
        return ended_since(job, SUCCEEDED)


PYTORCHJOB = KubeflowJob("PyTorchJob", ("v1",), "pytorchjobs")
TFJOB = KubeflowJob("TFJob", ("v1",), "tfjobs")
MPIJOB = KubeflowJob("MPIJob", ("v2beta1", "v1"), "mpijobs")
# R16.5: kubeflow/trainer v1.9.4 pkg/apis/kubeflow.org/v1/jax_types.go (JAXJobKind, JAXJobPlural;
# served at v1 only, manifests/base/crds/kubeflow.org_jaxjobs.yaml). One replica type, Worker;
# its pods `<job>-worker-<i>`, labelled `training.kubeflow.org/operator-name: jaxjob-controller`.
JAXJOB = KubeflowJob("JAXJob", ("v1",), "jaxjobs")
