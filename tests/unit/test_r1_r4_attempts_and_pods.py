"""SPEC R1 (attempt identity) and R4 (which pods and faults a failure may use)."""

from __future__ import annotations

import pytest

from app.core.base.rules import Rules
from tests.unit.builders import (
    T0,
    attempt_labels,
    condition,
    event,
    jobset,
    jobset_pod_labels,
    kubeflow,
    kubeflow_pod_labels,
    minutes,
    pod,
    ray_pod_labels,
    rayjob,
    record,
    running,
    terminated,
    updated,
)
from tests.unit.scenario import final_verdicts, only_verdict

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver

LABELS_ONLY = Rules(workload_identity=False)  # R13.1: orchestrator labels only, as before R13


def labelled(records: list[dict]) -> dict:
    """Verdicts of attempts named by the orchestrator's labels (R1); without them an
    object may still be a workload attempt (R13.1), which R1 does not speak of."""
    return {k: v for k, v in final_verdicts(records).items() if v.identity == "labels"}


def crd_failure(job, failed_job, pods_and_faults, *, failed_at=T0):
    """Records: the CRD, its pods, their faults, then the CRD's failure."""
    records = [record(job, T0 - minutes(120), "ADDED")]
    for p, evs in pods_and_faults:
        records.append(record(p, T0 - minutes(90), "ADDED"))
        records.extend(record(e, T0 - minutes(1), "ADDED") for e in evs)
    records.append(record(failed_job, failed_at + minutes(0.2)))
    return records


def failed_jobset(js, reason="FailedJobs", at=T0):
    return updated(js, conditions=[condition("Failed", reason, "jobset failed", at)])


def failed_kubeflow(job, reason="MPIJobFailed", at=T0):
    return updated(job, conditions=[condition("Created", "Created", "", at - minutes(100)), condition("Failed", reason, "job failed", at)])


# --- R1 ------------------------------------------------------------------------------------


def test_r1_attempt_key_is_cluster_namespace_run_action_attempt():
    p = pod(containers={"main": running()}, labels=attempt_labels("r9", "act", "3"))
    failed = updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(1)}])
    verdict = only_verdict([record(p, T0 - minutes(5)), record(failed, T0)])
    assert verdict.key == "prod-a/ml/r9/act/3"
    assert (verdict.cluster, verdict.namespace, verdict.run, verdict.action, verdict.attempt) == ("prod-a", "ml", "r9", "act", "3")


def test_r1_resource_missing_an_attempt_label_is_never_classified():
    for missing in ("run", "action", "attempt", "flyte.org/managed"):
        labels = attempt_labels()
        del labels[missing]
        p = pod(labels=labels)
        failed = updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(1)}])
        records = [record(p, T0 - minutes(5)), record(event(p), T0 - minutes(1)), record(failed, T0)]
        assert labelled(records) == {} and final_verdicts(records, LABELS_ONLY) == {}
    # S43: a CRD without its run label has no attempt, and so credits no pod.
    labels = attempt_labels()
    del labels["run"]
    js = jobset(labels=labels)
    worker = pod("js-workers-0-0", labels=jobset_pod_labels())
    records = crd_failure(js, failed_jobset(js), [(worker, [event(worker)])])
    assert labelled(records) == {} and final_verdicts(records, LABELS_ONLY) == {}
    # As a workload attempt (R13) the JobSet names only what its own pods show: not the labelled worker.
    assert [(v.identity, v.gpu_fault) for v in final_verdicts(records).values()] == [("workload", None)]


def test_r1_managed_label_must_be_true():
    labels = {**attempt_labels(), "flyte.org/managed": "false"}
    p = pod(labels=labels)
    failed = updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(1)}])
    records = [record(p, T0 - minutes(5)), record(failed, T0)]
    assert labelled(records) == {} and final_verdicts(records, LABELS_ONLY) == {}


# --- R4 ------------------------------------------------------------------------------------


def test_r4_1_pod_task_uses_its_own_faults_only():
    p = pod("p", containers={"main": running()})
    other = pod("other", labels=attempt_labels(action="a1"))
    failed = updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(1)}])
    records = [record(p, T0 - minutes(5)), record(other, T0 - minutes(5)), record(event(other), T0 - minutes(1)), record(failed, T0)]
    assert final_verdicts(records)["prod-a/ml/run-abc/a0/1"].gpu_fault is None


def test_r4_2_rayjob_selects_pods_of_its_ray_cluster():
    # S55: ray.io/cluster = status.rayClusterName; other clusters and the submitter never match.
    rj = rayjob(cluster_name="job-abcde")
    worker = pod("job-abcde-worker-0", labels=ray_pod_labels("job-abcde"))
    stranger = pod("other-fghij-worker-0", labels=ray_pod_labels("other-fghij"))
    failed = updated(rj, jobStatus="FAILED", jobDeploymentStatus="Failed", reason="AppFailed")
    verdict = only_verdict(crd_failure(rj, failed, [(worker, [event(worker, code=79)]), (stranger, [event(stranger, code=48)])]))
    assert (verdict.code, verdict.gpu_fault.code, verdict.faulted_pod.name) == ("AppFailed", 79, "job-abcde-worker-0")


def test_r4_2_rayjob_without_cluster_name_selects_nothing():
    rj = rayjob(cluster_name="")
    worker = pod("job-abcde-worker-0", labels=ray_pod_labels("job-abcde"))
    failed = updated(rj, jobStatus="FAILED", jobDeploymentStatus="Failed")
    verdict = only_verdict(crd_failure(rj, failed, [(worker, [event(worker)])]))
    assert verdict.gpu_fault is None and verdict.code == "RayJobFailed"


def test_r4_2_kubeflow_selects_by_job_name():
    # S56: job-name=job3 matches CR job3; job4 does not.
    job = kubeflow("PyTorchJob", "job3")
    mine = pod("job3-worker-0", labels=kubeflow_pod_labels("job3"))
    theirs = pod("job4-worker-0", labels=kubeflow_pod_labels("job4"))
    verdict = only_verdict(crd_failure(job, failed_kubeflow(job, "PyTorchJobFailed"), [(theirs, [event(theirs, code=48)]), (mine, [event(mine, code=79)])]))
    assert verdict.faulted_pod.name == "job3-worker-0" and verdict.gpu_fault.code == 79


def test_r4_2_jobset_selects_only_the_running_restart_generation():
    # S57: restarts=3 -> restart-attempt=3 only; a generation-2 pod is not consulted.
    js = jobset(restarts=3)
    gen2 = pod("js-workers-0-0-old", labels=jobset_pod_labels(restart_attempt=2))
    gen3 = pod("js-workers-0-0", labels=jobset_pod_labels(restart_attempt=3))
    gen4 = pod("js-workers-0-0-next", labels=jobset_pod_labels(restart_attempt=4))
    verdict = only_verdict(crd_failure(js, failed_jobset(js), [(gen2, [event(gen2, code=48)]), (gen3, []), (gen4, [event(gen4, code=79)])]))
    assert verdict.gpu_fault is None and verdict.generation == 3


def test_r4_2_jobset_with_restarts_unset_matches_generation_zero():
    js = jobset()
    worker = pod("js-workers-0-0", labels=jobset_pod_labels(restart_attempt=0))
    verdict = only_verdict(crd_failure(js, failed_jobset(js), [(worker, [event(worker)])]))
    assert verdict.gpu_fault.code == 79


def test_r4_3_succeeded_child_pod_is_skipped():
    # S38: a worker that finished its work is not why the job failed.
    job = kubeflow("MPIJob", "mpi")
    worker = pod("mpi-worker-0", labels=kubeflow_pod_labels(), phase="Succeeded", containers={"main": terminated(0, T0 - minutes(2), "Completed")})
    verdict = only_verdict(crd_failure(job, failed_kubeflow(job), [(worker, [event(worker)])]))
    assert verdict.gpu_fault is None


def test_r4_3_running_child_pod_is_kept():
    # S39: a worker wedged on a dead GPU is the case this exists for.
    job = kubeflow("MPIJob", "mpi")
    worker = pod("mpi-worker-0", labels=kubeflow_pod_labels(), containers={"main": running()})
    verdict = only_verdict(crd_failure(job, failed_kubeflow(job), [(worker, [event(worker)])]))
    assert verdict.code == "MPIJobFailed" and verdict.kind == "SYSTEM" and verdict.gpu_fault.code == 79


def test_r4_4_declared_primary_exited_zero_means_succeeded_despite_a_running_sidecar():
    # S40
    job = kubeflow("MPIJob", "mpi")
    worker = pod(
        "mpi-worker-0",
        labels=kubeflow_pod_labels(),
        annotations={"primary_container_name": "main"},
        containers={"main": terminated(0, T0 - minutes(3), "Completed"), "istio-proxy": running()},
    )
    assert only_verdict(crd_failure(job, failed_kubeflow(job), [(worker, [event(worker)])])).gpu_fault is None


def test_r4_4_flytes_primary_stamp_wins_over_kubectl_default():
    # S41
    job = kubeflow("MPIJob", "mpi")
    worker = pod(
        "mpi-worker-0",
        labels=kubeflow_pod_labels(),
        annotations={"primary_container_name": "main", "kubectl.kubernetes.io/default-container": "istio-proxy"},
        containers={"main": running(), "istio-proxy": terminated(0, T0 - minutes(3), "Completed")},
    )
    assert only_verdict(crd_failure(job, failed_kubeflow(job), [(worker, [event(worker)])])).gpu_fault.code == 79


def test_r4_4_without_declared_primary_every_container_must_exit_zero():
    # S42: main exited 0 but the sidecar runs: not succeeded, kept.
    job = kubeflow("MPIJob", "mpi")
    worker = pod("mpi-worker-0", labels=kubeflow_pod_labels(), containers={"main": terminated(0, T0 - minutes(3), "Completed"), "istio-proxy": running()})
    assert only_verdict(crd_failure(job, failed_kubeflow(job), [(worker, [event(worker)])])).gpu_fault.code == 79
    # All containers exited 0 in a Running pod: succeeded, skipped.
    done = pod("mpi-worker-1", labels=kubeflow_pod_labels(), containers={"main": terminated(0, T0 - minutes(3), "Completed")})
    assert only_verdict(crd_failure(job, failed_kubeflow(job), [(done, [event(done)])])).gpu_fault is None


def test_r4_5_pods_deleted_before_the_failure_still_count():
    job = kubeflow("MPIJob", "mpi")
    worker = pod("mpi-worker-0", labels=kubeflow_pod_labels(), phase="Failed", containers={"main": terminated(1, T0 - minutes(2))})
    records = [
        record(job, T0 - minutes(120), "ADDED"),
        record(worker, T0 - minutes(90), "ADDED"),
        record(event(worker, first=T0 - minutes(3)), T0 - minutes(3), "ADDED"),
        record(worker, T0 - minutes(1), "DELETED"),
        record(failed_kubeflow(job), T0 + minutes(0.1)),
    ]
    verdict = only_verdict(records)
    assert verdict.gpu_fault.code == 79 and verdict.faulted_pod.name == "mpi-worker-0"


def test_r4_6_pod_of_another_attempt_is_never_consulted():
    # S46: same run and action, attempt=1 while the job is attempt 2.
    job = kubeflow("MPIJob", "mpi", labels=attempt_labels(attempt="2"))
    old = pod("mpi-worker-0", labels=kubeflow_pod_labels(attempt="1"))
    verdict = final_verdicts(crd_failure(job, failed_kubeflow(job), [(old, [event(old)])]))["prod-a/ml/run-abc/a0/2"]
    assert verdict.gpu_fault is None
