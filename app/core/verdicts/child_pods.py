"""Which pods an attempt's failure may use (SPEC R4)."""

from __future__ import annotations

from typing import Final

from app.core.base.rules import OPERATOR_SELECTOR_LABELS
from app.model.facts import ContainerFacts, JobFacts, PodFacts

RAY_CLUSTER, KUBEFLOW_JOB_NAME, JOBSET_NAME, JOBSET_RESTART_ATTEMPT = OPERATOR_SELECTOR_LABELS

KUBEFLOW_KINDS: Final = frozenset({"PyTorchJob", "MPIJob", "TFJob"})
TRACKED_KINDS: Final = frozenset({"RayJob", "JobSet"}) | KUBEFLOW_KINDS
# Any served version of these groups is read the same way (R11.2: unknown versions are
# ignored, not fatal; the fields the rules read are stable across them).
TRACKED_GROUPS: Final = frozenset({"ray.io", "kubeflow.org", "jobset.x-k8s.io"})

PRIMARY_ANNOTATIONS: Final = ("primary_container_name", "kubectl.kubernetes.io/default-container")


def declared_primary(annotations: dict[str, str]) -> str:
    """R4.4: Flyte's stamp wins over kubectl's default; no guessing beyond those two."""
    for key in PRIMARY_ANNOTATIONS:
        if annotations.get(key):
            return annotations[key]
    return ""


def is_selected(job: JobFacts, pod: PodFacts, generation: int) -> bool:
    """R4.2: the operator's own label on top of the attempt labels (the caller joins
    by attempt key, so the four attempt labels already match, R4.6). R13.4: a workload's
    pods are joined by the uid they name, then selected the same way; a batch Job's
    are all its pods (joined by its controller uid)."""
    if job.kind == "Job":
        return pod.namespace == job.namespace  # by label or by ownerReference alone
    if pod.namespace != job.namespace or not pod.is_child:
        return False
    labels = pod.labels
    if job.kind == "RayJob":
        # While the cluster name is empty no pod exists yet: select nothing.
        return bool(job.ray_cluster_name) and labels.get(RAY_CLUSTER) == job.ray_cluster_name
    if job.kind in KUBEFLOW_KINDS:
        return labels.get(KUBEFLOW_JOB_NAME) == job.name
    if job.kind == "JobSet":
        return labels.get(JOBSET_NAME) == job.name and labels.get(JOBSET_RESTART_ATTEMPT) == str(generation)
    return False


def _exited_zero(container: ContainerFacts | None) -> bool:
    return container is not None and container.terminated and container.exit_code == 0


def has_succeeded(pod: PodFacts) -> bool:
    """R4.3/R4.4: a pod that finished its work contributes nothing."""
    if pod.phase == "Succeeded":
        return True
    if pod.primary_container:
        primary = next((c for c in pod.containers if c.name == pod.primary_container), None)
        return _exited_zero(primary)
    statuses = [c for c in pod.containers if c.reported]
    return pod.phase == "Running" and bool(statuses) and all(_exited_zero(c) for c in statuses)
