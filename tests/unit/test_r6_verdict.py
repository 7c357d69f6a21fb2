"""SPEC R6: the verdict."""

from __future__ import annotations

import msgspec
import pytest

from app.core.verdicts.classify import is_generic
from app.model.records import ClassifiedFailure
from tests.unit.builders import (
    T0,
    condition,
    event,
    jobset,
    jobset_pod_labels,
    kubeflow,
    kubeflow_pod_labels,
    minutes,
    pod,
    rayjob,
    record,
    running,
    sxid_message,
    terminated,
    updated,
)
from tests.unit.scenario import only_verdict

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver


def pod_task(final_status: dict, faults=(), *, annotations=None, containers=("main",)):
    """A pod task whose final status is `final_status`; `faults` are (code, severity, minutes before t0)."""
    p = pod("p", containers={c: running() for c in containers}, annotations=annotations)
    failed = updated(p, phase="Failed", **final_status)
    records = [record(p, T0 - minutes(100), "ADDED")]
    for code, severity, before in faults:
        message = sxid_message(code, severity) if code > 10000 else None
        ev = event(p, code=code, severity=severity, first=T0 - minutes(before), message=message, reason="GPUSXidError" if message else "GPUXidError")
        records.append(record(ev, T0 - minutes(before), "ADDED"))
    records.append(record(failed, T0 + minutes(0.5)))
    return only_verdict(records)


def exited(code: int, reason: str = "Error", name: str = "main") -> dict:
    return {"containerStatuses": [{"name": name, "state": terminated(code, T0, reason)}]}


# --- R6.1 base failures ------------------------------------------------------------------


@pytest.mark.parametrize("reason", ["Shutdown", "Terminated", "NodeShutdown", "NodeAffinity"])
def test_r6_1_pod_status_reason_is_a_system_failure(reason):
    verdict = pod_task({"reason": reason, "message": "node went away", **exited(1)})
    assert (verdict.code, verdict.kind, verdict.message) == (reason, "SYSTEM", "node went away")


def test_r6_1_oomkilled_is_the_users():
    verdict = pod_task(exited(137, "OOMKilled"))
    assert (verdict.code, verdict.kind) == ("OOMKilled", "USER")


def test_r6_1_exit_137_or_no_termination_is_interrupted_system():
    assert (pod_task(exited(137, "Error")).code, pod_task(exited(137, "Error")).kind) == ("Interrupted", "SYSTEM")
    verdict = pod_task({"containerStatuses": [{"name": "main", "state": running()}]})
    assert (verdict.code, verdict.kind) == ("Interrupted", "SYSTEM")


def test_r6_1_other_exit_is_its_reason_else_exit_code():
    assert (pod_task(exited(3, "Error")).code, pod_task(exited(3, "Error")).kind) == ("Error", "USER")
    assert pod_task(exited(3, "")).code == "ExitCode3"


def test_r6_1_declared_primary_container_decides_the_pod_failure():
    status = {"containerStatuses": [{"name": "sidecar", "state": terminated(2, T0, "SidecarDied")}, {"name": "main", "state": terminated(3, T0, "")}]}
    verdict = pod_task(status, annotations={"primary_container_name": "main"}, containers=("sidecar", "main"))
    assert verdict.code == "ExitCode3"
    # Undeclared: the first regular container.
    assert pod_task(status, containers=("sidecar", "main")).code == "SidecarDied"


def test_r6_1_failure_without_fault_still_yields_a_verdict():
    verdict = pod_task(exited(1))  # S25
    assert verdict.gpu_fault is None and verdict.terminal and verdict.reasons == []


def crd(job, failed_job, worker=None, faults=()):
    records = [record(job, T0 - minutes(100), "ADDED")]
    if worker is not None:
        records.append(record(worker, T0 - minutes(90), "ADDED"))
        records.extend(record(event(worker, code=c, severity=s, first=T0 - minutes(b)), T0 - minutes(b), "ADDED") for c, s, b in faults)
    records.append(record(failed_job, T0 + minutes(0.3)))
    return only_verdict(records)


def test_r6_1_rayjob_reason_else_rayjobfailed():
    rj = rayjob(cluster_name="rc")
    assert crd(rj, updated(rj, jobStatus="FAILED", jobDeploymentStatus="Failed", reason="AppFailed", message="boom")).code == "AppFailed"
    verdict = crd(rj, updated(rj, jobStatus="FAILED", jobDeploymentStatus="Failed"))
    assert (verdict.code, verdict.kind, verdict.tracked.kind) == ("RayJobFailed", "USER", "RayJob")


def test_r6_1_kubeflow_and_jobset_use_the_failed_condition_reason():
    tf = kubeflow("TFJob", "tf")
    verdict = crd(tf, updated(tf, conditions=[condition("Failed", "TFJobFailed", "worker 0 failed", T0)]))
    assert (verdict.code, verdict.kind, verdict.message) == ("TFJobFailed", "USER", "worker 0 failed")
    js = jobset()
    verdict = crd(js, updated(js, conditions=[condition("Failed", "ReachedMaxRestarts", "jobset failed", T0)]))
    assert (verdict.code, verdict.kind, verdict.tracked.kind) == ("ReachedMaxRestarts", "USER", "JobSet")


# --- R6.2 ----------------------------------------------------------------------------------


@pytest.mark.parametrize("code", ["", "Unknown", "UnknownError", "Error", "Interrupted", "1", "137", "ExitCode1", "exit-code-137", "EXIT_CODE_2", "exitcode 3"])
def test_r6_2_generic_codes(code):
    assert is_generic(code)


@pytest.mark.parametrize("code", ["OOMKilled", "NodeShutdown", "TaskFailedWithError", "DownstreamSystemError", "FailedJobs", "ExitCode", "code1"])
def test_r6_2_specific_codes_are_not_generic(code):
    assert not is_generic(code)


# --- R6.3 choosing the fault ------------------------------------------------------------------


def test_r6_3_worst_severity_decides_before_time():
    verdict = pod_task(exited(1), [(31, "user", 3), (63, "critical", 1)])  # S11
    assert (verdict.code, verdict.gpu_fault.code) == ("GpuRowRemapPending", 63)


def test_r6_3_earliest_of_the_worst_severity_wins():
    verdict = pod_task(exited(1), [(74, "critical", 3), (79, "critical", 1)])  # S12
    assert (verdict.code, verdict.gpu_fault.code) == ("GpuNvlinkError", 74)


def test_r6_3_ordered_by_first_seen_not_last_seen_across_pods():
    # S37: w0's fault started t0-10m and repeats until t0-1m; w1's one-shot at t0-5m.
    js = jobset()
    w0 = pod("js-w-0", labels=jobset_pod_labels())
    w1 = pod("js-w-1", labels=jobset_pod_labels())
    records = [
        record(js, T0 - minutes(100), "ADDED"),
        record(w0, T0 - minutes(90), "ADDED"),
        record(w1, T0 - minutes(90), "ADDED"),
        record(event(w0, code=79, first=T0 - minutes(10), last=T0 - minutes(1), count=9), T0 - minutes(1), "ADDED"),
        record(event(w1, code=48, first=T0 - minutes(5)), T0 - minutes(5), "ADDED"),
        record(updated(js, conditions=[condition("Failed", "FailedJobs", "", T0)]), T0),
    ]
    verdict = only_verdict(records)
    assert (verdict.code, verdict.kind, verdict.gpu_fault.code, verdict.faulted_pod.name) == ("FailedJobs", "SYSTEM", 79, "js-w-0")


def test_r6_3_ties_break_by_pod_name_then_event_uid():
    js = jobset()
    wb = pod("js-w-b", labels=jobset_pod_labels())
    wa = pod("js-w-a", labels=jobset_pod_labels())
    records = [
        record(js, T0 - minutes(100), "ADDED"),
        record(wb, T0 - minutes(90), "ADDED"),
        record(wa, T0 - minutes(90), "ADDED"),
        record(event(wb, code=79, first=T0 - minutes(2), event_uid="ev-a"), T0 - minutes(2), "ADDED"),
        record(event(wa, code=48, first=T0 - minutes(2), event_uid="ev-b"), T0 - minutes(2), "ADDED"),
        record(updated(js, conditions=[condition("Failed", "FailedJobs", "", T0)]), T0),
    ]
    assert only_verdict(records).faulted_pod.name == "js-w-a"


# --- R6.4–R6.6 --------------------------------------------------------------------------------


def test_r6_4_critical_fault_makes_a_generic_failure_the_systems_with_the_fault_code():
    verdict = pod_task(exited(1, "Error"), [(79, "critical", 1)])  # S1
    assert (verdict.code, verdict.kind) == ("GpuFallenOffBus", "SYSTEM")
    assert verdict.message == "[gpu-health] [CRITICAL] Xid 79 (GPU has fallen off the bus) on GPU 0 GPU-1234. container main terminated with exit code 1 (Error)"
    assert pod_task(exited(1), [(48, "critical", 1)]).code == "GpuEccUncorrectable"  # S2


def test_r6_4_critical_fault_keeps_a_specific_code_but_makes_it_system():
    verdict = pod_task(exited(137, "OOMKilled"), [(79, "critical", 1)])  # S3
    assert (verdict.code, verdict.kind, verdict.gpu_fault.code) == ("OOMKilled", "SYSTEM", 79)
    assert verdict.message.startswith("[gpu-health] [CRITICAL] Xid 79")


def test_r6_4_sxid_sentence_names_the_nvswitch():
    verdict = pod_task(exited(1), [(12028, "critical", 1)])  # S13
    assert (verdict.code, verdict.kind) == ("GpuNvlinkError", "SYSTEM")
    assert verdict.message.startswith("[gpu-health] [CRITICAL] SXid 12028 on NVSwitch 0000:05:00.0. ")


def test_r6_5_user_fault_on_a_generic_code_is_gpuxiderror_user():
    verdict = pod_task(exited(1, "Error"), [(92, "warn", 3), (31, "user", 2)])  # S4
    assert (verdict.code, verdict.kind, verdict.gpu_fault.code) == ("GpuXidError", "USER", 31)
    assert verdict.message.startswith("[gpu-health] [USER] Xid 31 (GPU memory page fault) on GPU 0 GPU-1234. ")
    assert pod_task(exited(137), [(31, "user", 1)]).kind == "USER"  # S7: the Interrupted rule


def test_r6_5_user_fault_keeps_a_specific_code_and_kind():
    verdict = pod_task({"reason": "NodeShutdown", **exited(1)}, [(31, "user", 1)])  # S8
    assert (verdict.code, verdict.kind) == ("NodeShutdown", "SYSTEM")
    assert verdict.message.startswith("[gpu-health] [USER] Xid 31")


def test_r6_6_warn_only_changes_nothing_but_attaches_the_earliest_fault():
    plain = pod_task(exited(137, "OOMKilled"))
    verdict = pod_task(exited(137, "OOMKilled"), [(92, "warn", 2), (4242, "warn", 1)])  # S10
    assert (verdict.code, verdict.kind, verdict.message) == (plain.code, plain.kind, plain.message)
    assert verdict.gpu_fault.code == 92 and verdict.faulted_pod is None
    lowered = pod_task(exited(1), [(12028, "warn", 1)])  # S14
    assert (lowered.code, lowered.kind, lowered.gpu_fault.severity) == ("Error", "USER", "WARN")


# --- R6.7 naming the pod ---------------------------------------------------------------------


def test_r6_7_child_pod_of_the_settled_fault_is_named_once():
    # S35, S53: two faulted workers; only the settling one is named.
    job = kubeflow("MPIJob", "mpi")
    w0 = pod("job-worker-0", labels=kubeflow_pod_labels(), containers={"main": terminated(1, T0 - minutes(3))})
    w1 = pod("job-worker-1", labels=kubeflow_pod_labels(), containers={"main": terminated(1, T0 - minutes(1))})
    records = [
        record(job, T0 - minutes(100), "ADDED"),
        record(w0, T0 - minutes(90), "ADDED"),
        record(w1, T0 - minutes(90), "ADDED"),
        record(event(w0, code=79, first=T0 - minutes(3)), T0 - minutes(3), "ADDED"),
        record(event(w1, code=92, severity="warn", first=T0 - minutes(4)), T0 - minutes(1), "ADDED"),
        record(updated(job, conditions=[condition("Failed", "Error", "launcher failed", T0)]), T0),
    ]
    verdict = only_verdict(records)
    assert (verdict.code, verdict.kind) == ("GpuFallenOffBus", "SYSTEM")
    assert verdict.faulted_pod.name == "job-worker-0" and verdict.faulted_pod.uid == w0["metadata"]["uid"] and verdict.faulted_pod.namespace == "ml"
    assert verdict.reasons == ["GPU fault recorded on pod job-worker-0"]


def test_r6_7_naming_is_independent_of_the_code():
    # S56: DownstreamSystemError is kept, but the worker is still named.
    job = kubeflow("PyTorchJob", "job3")
    w = pod("job3-worker-0", labels=kubeflow_pod_labels("job3"))
    verdict = crd(job, updated(job, conditions=[condition("Failed", "DownstreamSystemError", "", T0)]), w, [(79, "critical", 1)])
    assert (verdict.code, verdict.kind, verdict.faulted_pod.name) == ("DownstreamSystemError", "SYSTEM", "job3-worker-0")


def test_r6_7_warn_only_and_pod_tasks_name_nothing():
    job = kubeflow("MPIJob", "mpi")
    w = pod("mpi-worker-0", labels=kubeflow_pod_labels())
    verdict = crd(job, updated(job, conditions=[condition("Failed", "OOMKilled", "", T0)]), w, [(92, "warn", 1)])  # S54
    assert (verdict.code, verdict.gpu_fault.code, verdict.faulted_pod, verdict.reasons) == ("OOMKilled", 92, None, [])
    verdict = pod_task(exited(1), [(79, "critical", 1)])
    assert verdict.faulted_pod is None and verdict.reasons == []


# --- R6.8 the record ----------------------------------------------------------------------------


def test_r6_8_record_carries_every_field_in_contract_order():
    verdict = pod_task(exited(1), [(79, "critical", 1)])
    body = msgspec.json.decode(msgspec.json.encode(verdict))
    assert list(body) == [
        "schema", "key", "cluster", "namespace", "identity", "run", "action", "attempt", "tracked", "generation", "terminal",
        "failed_at", "code", "kind", "message", "gpu_fault", "faulted_pod", "reasons", "revision", "rules_version",
        "gpu_seconds",  # issue 30 (v2 before release)
        "goodput",  # SPEC R17.4 (added to v2, optional)
    ]  # fmt: skip
    assert body["schema"] == "faultline.ClassifiedFailure/v2" and body["identity"] == "labels"
    assert list(body["gpu_fault"]) == [
        "kind", "code", "name", "severity", "gpu_uuid", "gpu_index", "pci_bus_id", "node", "pid", "process",
        "first_seen", "last_seen", "count", "pod", "action", "resource", "message",  # R14.2, R14.3 (v2 before release)
    ]  # fmt: skip
    assert body["gpu_fault"]["kind"] == "XID" and body["failed_at"] == "2026-08-25T12:00:00Z"
    assert (body["gpu_fault"]["action"], body["gpu_fault"]["resource"], body["gpu_fault"]["message"]) == ("RESTART_BM", "", "")
    assert msgspec.json.decode(msgspec.json.encode(verdict), type=ClassifiedFailure) == verdict
