"""SPEC R16.4, KubeRay v1.7.0 (ray-operator/apis/ray/v1/rayjob_types.go,
controllers/ray/rayjob_controller.go): `Waiting` and `Retrying` are no ends; `ValidationFailed`
is a USER failure with no pods; `Failed` ends the attempt even when `jobStatus` stays
non-terminal (ray-project/kuberay#2314); the reasons pass through as codes. (A `Retrying`
try's own interim verdict is R16.4's generation, tested with R8's.) Every rule through
every driver, under both identities."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec
import pytest

from app.core.base.rules import DEFAULT_RULES
from app.core.kinds.registry import RAYJOB
from app.model.k8s import Job
from tests.unit import builders as b
from tests.unit.builders import T0, attempt_labels, event, minutes, pod, ray_pod_labels, rayjob, record, running, terminated, ts, updated
from tests.unit.gang_builders import NAMESPACE, GangWorld, feed
from tests.unit.scenario import final_verdicts, only_verdict

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver

CLUSTER = "rl-9-tune-raycluster-x7k2p"


def observed(records: list[dict]) -> list[dict]:
    return b.with_progress(sorted(records, key=lambda r: r["value"]["observed_at"]))


def workload_rayjob(name: str = "tune", **status: Any) -> dict:
    """A RayJob with no orchestrator's labels (a workload attempt, R13)."""
    rj = rayjob(name, labels={}, job_status="", deployment="")
    rj["status"] = {k: v for k, v in rj["status"].items() if k not in ("jobStatus", "jobDeploymentStatus", "jobId")}
    rj["status"].update(status)
    return rj


def a_try(rj: dict, t0: datetime = T0) -> tuple[list[dict], dict]:
    """A RayJob's try on its cluster, up to its worker running (and its Xid 79), as
    KubeRay v1.7 writes it: Initializing with the cluster's name, then Running."""
    worker = pod(f"{CLUSTER}-worker-0", labels={**ray_pod_labels(CLUSTER), **rj["metadata"]["labels"]} if rj["metadata"]["labels"] else
                 {"ray.io/cluster": CLUSTER, "ray.io/node-type": "worker"}, containers={"ray-worker": running(t0 - minutes(20))})
    records = [
        record(rj, t0 - minutes(25), "ADDED"),
        record(updated(rj, jobDeploymentStatus="Initializing", rayClusterName=CLUSTER, startTime=ts(t0 - minutes(25))), t0 - minutes(24)),
        record(worker, t0 - minutes(20), "ADDED"),
        record(updated(rj, jobDeploymentStatus="Running", rayClusterName=CLUSTER, jobStatus="RUNNING"), t0 - minutes(19)),
        record(event(worker, code=79, first=t0 - minutes(1)), t0 - minutes(1), "ADDED"),
        record(updated(worker, phase="Failed", containerStatuses=[{"name": "ray-worker", "state": terminated(1, t0 - minutes(0.8))}]), t0 - minutes(0.7)),
    ]
    return records, worker


def _job(obj: dict) -> Job:
    return msgspec.json.decode(msgspec.json.encode(obj), type=Job)


# --- not ends ---------------------------------------------------------------------------------


@pytest.mark.parametrize("deployment", ["Retrying", "Waiting", "Running"])
def test_r16_4_retrying_waiting_and_a_running_deployment_whose_ray_job_failed_are_no_ends(deployment: str) -> None:
    """A try whose Ray job failed (jobStatus FAILED) is no end while KubeRay still acts on
    it: `Running` (it decides between Failed and Retrying once the submitter finished),
    `Retrying` (a new cluster comes: the try's own verdict is interim, R16.4), `Waiting`
    (InteractiveMode, for a job id)."""
    records, _ = a_try(workload_rayjob())
    rj = records[0]["value"]["object"]
    job_status = "PENDING" if deployment == "Waiting" else "FAILED"
    still = updated(rj, jobDeploymentStatus=deployment, rayClusterName=CLUSTER, jobStatus=job_status, reason="AppFailed" if deployment == "Retrying" else "", failed=1 if deployment == "Retrying" else 0)
    records.append(record(still, T0))
    # `Retrying`: the failed try gets its own interim verdict (terminal false), the attempt none.
    assert all(not v.terminal for v in final_verdicts(observed(records)).values())
    assert deployment == "Retrying" or final_verdicts(observed(records)) == {}
    assert RAYJOB.failure(_job(still)) is None and RAYJOB.end(_job(still)) is None


def test_r16_4_failed_ends_the_attempt_though_the_ray_job_is_still_running_kuberay_2314() -> None:
    """The submitter Job failed while Ray still reports RUNNING: KubeRay writes Failed,
    SubmissionFailed, and leaves jobStatus RUNNING (rayjob_controller.go
    checkSubmitterAndUpdateStatusIfNeeded)."""
    records, worker = a_try(workload_rayjob())
    rj = records[0]["value"]["object"]
    message = "Job submission has failed. Reason: BackoffLimitExceeded. Message: Job has reached the specified backoff limit"
    records.append(record(updated(rj, jobDeploymentStatus="Failed", rayClusterName=CLUSTER, jobStatus="RUNNING", reason="SubmissionFailed",
                                  message=message, failed=1, endTime=ts(T0)), T0 + minutes(0.05)))
    verdict = only_verdict(observed(records))
    assert (verdict.code, verdict.kind, verdict.tracked.kind) == ("SubmissionFailed", "SYSTEM", "RayJob")  # the Xid 79 decides the kind
    assert verdict.failed_at == T0 and verdict.faulted_pod is not None and verdict.faulted_pod.name == worker["metadata"]["name"]
    assert verdict.message.endswith(message)


@pytest.mark.parametrize("reason", ["PreRunningDeadlineExceeded", "JobStatusCheckTimeoutExceeded", "DeadlineExceeded", "AppFailed",
                                    "JobDeploymentStatusTransitionGracePeriodExceeded", "SomethingKubeRayAddsLater"])
def test_r16_4_each_reason_kuberay_writes_passes_through_as_the_code(reason: str) -> None:
    records, _ = a_try(workload_rayjob())
    rj = records[0]["value"]["object"]
    records.pop(4)  # no GPU fault: the base verdict, R6.1
    records.append(record(updated(rj, jobDeploymentStatus="Failed", rayClusterName=CLUSTER, jobStatus="FAILED", reason=reason, message="m", endTime=ts(T0)), T0))
    verdict = only_verdict(observed(records))
    assert (verdict.code, verdict.kind, verdict.message) == (reason, "USER", "m")


# --- ValidationFailed -------------------------------------------------------------------------

INVALID = "The RayJob spec is invalid: BackoffLimit is incompatible with InteractiveMode"


def test_r16_4_validation_failed_is_a_user_failure_with_no_pods_dated_when_first_seen() -> None:
    """KubeRay fails the RayJob at its first reconcile (no RayCluster, no endTime) and never
    leaves ValidationFailed: the verdict is its own, keyed by the RayJob, at the record that
    first showed it."""
    rj = workload_rayjob("bad-spec")
    failed = updated(rj, jobDeploymentStatus="ValidationFailed", reason="ValidationFailed", message=INVALID)
    verdict = only_verdict(observed([record(rj, T0 - minutes(0.1), "ADDED"), record(failed, T0), record(updated(failed), T0 + minutes(5))]))
    assert verdict.key == f"prod-a/ml/RayJob/bad-spec/{rj['metadata']['uid']}" and verdict.tracked.kind == "RayJob"
    assert (verdict.code, verdict.kind, verdict.message, verdict.terminal) == ("ValidationFailed", "USER", INVALID, True)
    assert (verdict.failed_at, verdict.gpu_fault, verdict.faulted_pod, verdict.gpu_seconds) == (T0, None, None, 0)


def test_r16_4_validation_failed_under_an_orchestrators_labels_fails_the_attempt() -> None:
    rj = rayjob("bad-spec", labels=attempt_labels(run="r16", action="tune"), job_status="", deployment="ValidationFailed", reason="ValidationFailed", message=INVALID)
    verdict = only_verdict(observed([record(rj, T0)]))
    assert (verdict.identity, verdict.key, verdict.code, verdict.kind) == ("labels", "prod-a/ml/r16/tune/1", "ValidationFailed", "USER")


def test_r16_4_validation_failed_without_a_reason_says_so() -> None:
    failed = workload_rayjob("bad-spec", jobDeploymentStatus="ValidationFailed", message=INVALID)
    assert RAYJOB.failure(_job(failed)).code == "ValidationFailed"  # type: ignore[union-attr]
    assert RAYJOB.end(_job(failed)) == ("Ended", "ValidationFailed", INVALID)


# --- the gang (R15): Retrying and Waiting do not end it -----------------------------------------

RJ_NAME = "tune"
RJ_UID = "7c8d9e0f-1a2b-4c3d-9e4f-5a6b7c8d9e0f"


class RayWorld(GangWorld):
    """A RayJob under Kueue (its `ray.io/rayjob` integration): Kueue suspends it in
    `spec.suspend`; it has started once `jobDeploymentStatus` is `Running` (R15.2)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(labels={}, workload_name=f"rayjob-{RJ_NAME}-2c7e9", **kw)
        rj = workload_rayjob(RJ_NAME)
        rj["metadata"].update(uid=RJ_UID, namespace=NAMESPACE, labels={"kueue.x-k8s.io/queue-name": "team-a"})
        rj["spec"] = {"suspend": True, "backoffLimit": 1, "shutdownAfterJobFinishes": True}
        self.js = rj
        meta = self.wl["metadata"]
        meta["labels"] = {"kueue.x-k8s.io/job-uid": RJ_UID}
        meta["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": RJ_NAME, "uid": RJ_UID, "controller": True, "blockOwnerDeletion": True}]

    def status(self, **status: Any) -> GangWorld:
        self.js["status"] = status
        return self._jobset()

    def create_jobset(self) -> GangWorld:
        self._jobset("ADDED")
        return self.status(jobDeploymentStatus="Suspended")

    def unsuspend(self) -> GangWorld:
        self._set_spec(self.js, "suspend", False)
        return self.status(jobDeploymentStatus="Initializing", rayClusterName=CLUSTER, failed=0)

    def workers_ready(self) -> GangWorld:
        return self.status(jobDeploymentStatus="Running", rayClusterName=CLUSTER, jobStatus="RUNNING", failed=0)


def test_r16_4_a_retrying_rayjob_keeps_its_gang_running_until_its_last_try_fails() -> None:
    world = RayWorld().start()
    world.status(jobDeploymentStatus="Running", rayClusterName=CLUSTER, jobStatus="FAILED", failed=0)
    world.status(jobDeploymentStatus="Retrying", rayClusterName=CLUSTER, jobStatus="FAILED", reason="AppFailed", failed=1)
    world.status(failed=1)  # KubeRay's reset, once the cluster is gone
    world.status(jobDeploymentStatus="Initializing", rayClusterName="tune-rc2", failed=1)
    world.status(jobDeploymentStatus="Running", rayClusterName="tune-rc2", jobStatus="RUNNING", failed=1)
    got = [e.value for e in feed(world.records, DEFAULT_RULES)[1]]
    assert [(t.from_, t.to) for t in got] == [("Pending", "Running")]
    world.status(jobDeploymentStatus="Failed", rayClusterName="tune-rc2", jobStatus="FAILED", reason="AppFailed", failed=2, endTime="2026-09-15T11:00:00Z")
    got = [e.value for e in feed(world.records, DEFAULT_RULES)[1]]
    assert [(t.from_, t.to, t.code) for t in got] == [("Pending", "Running", None), ("Running", "Ended", "AppFailed")]
