"""SPEC R16.5: a Kubeflow JAXJob (`kubeflow.org/v1`, kubeflow/trainer v1.9.4) is tracked like
a PyTorchJob: a workload attempt of its own (R13), the tracked resource under an
orchestrator's labels (R1), its pods its children by the operator's labels (R4.2), and
Kueue suspends it in `spec.runPolicy.suspend` (R15). Every rule through every driver."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.base.rules import DEFAULT_RULES
from app.core.identity.attempt import is_child_pod
from app.core.kinds import registry
from app.core.kinds.kubeflow import JAXJOB
from app.model.envelope import JOBS
from tests.unit import builders as b
from tests.unit.builders import T0, attempt_labels, condition, event, jax_pod_labels, jaxjob, minutes, owned_by, pod, record, running, terminated, updated
from tests.unit.gang_builders import NAMESPACE, GangWorld, feed
from tests.unit.scenario import faults, only_verdict
from tests.unit.stories import jaxjob_fell_off_the_bus

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver


def observed(records: list[dict]) -> list[dict]:
    return b.with_progress(sorted(records, key=lambda r: r["value"]["observed_at"]))


def test_r16_5_a_jaxjob_is_a_workload_attempt_and_its_workers_gpu_fault_decides() -> None:
    """The example trace's story: worker 1's GPU fell off the bus; the JAXJob fails with
    kubeflow/trainer's reason, now SYSTEM, naming the worker."""
    records = observed(jaxjob_fell_off_the_bus())
    job = records[0]["value"]["object"]
    verdict = only_verdict(records)
    assert verdict.key == f"prod-a/ml/JAXJob/gemma-sft/{job['metadata']['uid']}"
    assert (verdict.identity, verdict.tracked.kind, verdict.tracked.name) == ("workload", "JAXJob", "gemma-sft")
    assert (verdict.code, verdict.kind, verdict.terminal) == ("JAXJobFailed", "SYSTEM", True)
    assert verdict.gpu_fault is not None and (verdict.gpu_fault.code, verdict.gpu_fault.node) == (79, "gpu-111")
    assert verdict.faulted_pod is not None and verdict.faulted_pod.name == "gemma-sft-worker-1"
    assert verdict.reasons == ["GPU fault recorded on pod gemma-sft-worker-1"]
    assert verdict.message.endswith("JAXJob gemma-sft is failed because 1 Worker replica(s) failed.")
    # The pod names its JAXJob as controller: its fault names the attempt (R2.6, R13.4).
    [fault] = faults(records)
    assert fault.attempt == verdict.key


def test_r16_5_under_an_orchestrators_labels_a_jaxjob_is_the_tracked_resource() -> None:
    labels = attempt_labels(run="jax-7", action="sft", attempt="2")
    job = jaxjob("jax-7-sft", labels=labels)
    worker = pod("jax-7-sft-worker-0", labels={**jax_pod_labels(job, 0), **labels}, owners=owned_by(job), containers={"jax": running(T0 - minutes(20))})
    failed = updated(job, conditions=[condition("Failed", "JAXJobFailed", "JAXJob jax-7-sft is failed because 1 Worker replica(s) failed.", T0)])
    ended = updated(worker, phase="Failed", containerStatuses=[{"name": "jax", "state": terminated(1, T0 - minutes(0.5))}])
    verdict = only_verdict(observed([
        record(job, T0 - minutes(25), "ADDED"),
        record(worker, T0 - minutes(20), "ADDED"),
        record(event(worker, code=48, first=T0 - minutes(1)), T0 - minutes(1), "ADDED"),
        record(ended, T0 - minutes(0.4)),
        record(failed, T0 + minutes(0.1)),
    ]))
    assert (verdict.identity, verdict.key) == ("labels", "prod-a/ml/jax-7/sft/2")
    assert (verdict.code, verdict.kind, verdict.faulted_pod.name) == ("JAXJobFailed", "SYSTEM", "jax-7-sft-worker-0")  # type: ignore[union-attr]


def test_r16_5_a_jaxjobs_pods_are_its_child_pods_by_the_operators_labels() -> None:
    job = jaxjob("j")
    labels = jax_pod_labels(job, 1)
    assert is_child_pod(labels, DEFAULT_RULES)  # never a pod task's own pod (R4)
    assert {"training.kubeflow.org/job-name", "training.kubeflow.org/operator-name"} <= set(JAXJOB.child_pod_labels)
    assert labels["training.kubeflow.org/operator-name"] == "jaxjob-controller"


def test_r16_5_the_bridge_watches_jaxjobs_at_kubeflow_org_v1_on_k8s_jobs() -> None:
    assert registry.kind_of("kubeflow.org/v1", "JAXJob") is JAXJOB
    [api] = [a for a in registry.WATCHED if a.name == "JAXJob"]
    assert (api.group, api.versions, api.plural, api.topic, api.optional) == ("kubeflow.org", ("v1",), "jaxjobs", JOBS, True)
    assert api.resource() == "jaxjobs.kubeflow.org"
    assert JAXJOB.kueue and JAXJOB.tracked_under_labels and JAXJOB.joins_pods_by_owner


def test_r16_5_a_jaxjob_without_its_worker_s_fault_fails_as_the_operator_says() -> None:
    records = [r for r in jaxjob_fell_off_the_bus() if r["topic"] != "k8s.events" or r["value"]["object"]["reason"] != "GPUXidError"]
    verdict = only_verdict(observed(records))
    assert (verdict.code, verdict.kind, verdict.gpu_fault, verdict.faulted_pod) == ("JAXJobFailed", "USER", None, None)


# --- R15 under Kueue: suspended in spec.runPolicy.suspend --------------------------------------

JAX_NAME = "gemma-sft"
JAX_UID = "6a7b8c9d-0e1f-4a2b-8c3d-4e5f6a7b8c9d"


class JaxWorld(GangWorld):
    """A JAXJob under Kueue (its `kubeflow.org/jaxjob` integration, Kueue v0.19.2
    pkg/controller/jobs/kubeflow/jobs/jaxjob/): Kueue suspends it in
    `spec.runPolicy.suspend` and owns its Workload by it; the operator writes `Running`,
    `Suspended` (JAXJobSuspended / JAXJobResumed), `Succeeded` and `Failed` conditions
    (kubeflow/trainer v1.9.4 pkg/controller.v1/common/job.go)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(labels={}, workload_name=f"jaxjob-{JAX_NAME}-8d1f4", **kw)
        job = jaxjob(JAX_NAME, job_uid=JAX_UID, workers=self.workers, created=self.now)
        job["metadata"].update(namespace=NAMESPACE, labels={"kueue.x-k8s.io/queue-name": "team-a"})
        job["spec"]["runPolicy"]["suspend"] = True
        self.js = job
        meta = self.wl["metadata"]
        meta["labels"] = {"kueue.x-k8s.io/job-uid": JAX_UID}
        meta["ownerReferences"] = [{"apiVersion": "kubeflow.org/v1", "kind": "JAXJob", "name": JAX_NAME, "uid": JAX_UID, "controller": True, "blockOwnerDeletion": True}]

    def _run_policy(self, suspend: bool) -> None:
        if self.js["spec"]["runPolicy"]["suspend"] != suspend:
            self.js["spec"]["runPolicy"]["suspend"] = suspend
            self.js["metadata"]["generation"] += 1

    def create_jobset(self) -> GangWorld:
        self._jobset("ADDED")
        self._js_condition("Created", "True", "JAXJobCreated", f"JAXJob {JAX_NAME} is created.")
        self._js_condition("Suspended", "True", "JAXJobSuspended", f"JAXJob {JAX_NAME} is suspended.")
        return self._jobset()

    def unsuspend(self) -> GangWorld:
        self._run_policy(False)
        self._js_condition("Suspended", "False", "JAXJobResumed", f"JAXJob {JAX_NAME} is resumed.")
        return self._jobset()

    def workers_ready(self) -> GangWorld:
        self._js_condition("Running", "True", "JAXJobRunning", f"JAXJob {NAMESPACE}/{JAX_NAME} is running.")
        return self._jobset()

    def suspend(self, *, status_update: bool = True) -> GangWorld:
        self._run_policy(True)
        self._jobset()
        if status_update:
            self._js_condition("Running", "False", "JAXJobSuspended", f"JAXJob {JAX_NAME} is suspended.")
            self._js_condition("Suspended", "True", "JAXJobSuspended", f"JAXJob {JAX_NAME} is suspended.")
            self._jobset()
        return self

    def jobs_stopped(self) -> GangWorld:
        return self._jobset()

    def complete(self) -> GangWorld:
        self._js_condition("Running", "False", "JAXJobSucceeded", f"JAXJob {NAMESPACE}/{JAX_NAME} successfully completed.")
        self._js_condition("Succeeded", "True", "JAXJobSucceeded", f"JAXJob {NAMESPACE}/{JAX_NAME} successfully completed.")
        return self._jobset()

    def fail(self) -> GangWorld:
        self._js_condition("Running", "False", "JAXJobFailed", f"JAXJob {JAX_NAME} is failed because 1 Worker replica(s) failed.")
        self._js_condition("Failed", "True", "JAXJobFailed", f"JAXJob {JAX_NAME} is failed because 1 Worker replica(s) failed.")
        return self._jobset()


def test_r16_5_kueue_suspends_a_jaxjob_in_its_run_policy_and_the_requeue_is_waited_out() -> None:
    world = JaxWorld().start().preempt().suspend().release_quota().pause(120)
    world.readmit().unsuspend().workers_ready().complete()
    got = [e.value for e in feed(world.records, DEFAULT_RULES)[1]]
    assert [(t.from_, t.to) for t in got] == [
        ("Pending", "Running"), ("Running", "WaitingForReadmission"), ("WaitingForReadmission", "Running"), ("Running", "Completed"),
    ]
    assert got[0].key == f"prod-a/{NAMESPACE}/JAXJob/{JAX_NAME}/{JAX_UID}" and got[0].tracked.kind == "JAXJob"
    assert got[2].waited_seconds is not None and got[2].waited_seconds >= 120


def test_r16_5_its_own_failure_ends_its_gang_with_the_operators_reason() -> None:
    world = JaxWorld().start().fail()
    got = [e.value for e in feed(world.records, DEFAULT_RULES)[1]]
    assert [(t.to, t.code) for t in got] == [("Running", None), ("Ended", "JAXJobFailed")]
