"""SPEC R14.2: a GPU the kubelet reports Unhealthy in a container's
`allocatedResourcesStatus` is a fault of its pod (kind DEVICE_HEALTH, critical, code
GpuUnhealthy), first and last seen by the bridge's clock, published to faultline.faults,
joined by R5-R6 and counted by the fleet; Unknown is data only. Bounded (R11.5)."""

from __future__ import annotations

from datetime import datetime

import msgspec
import orjson
import pytest

from app.core.base.rules import DEFAULT_RULES, FleetSettings, Rules
from app.model.fleet_records import GPU_FAULT_RATES, NODE_FAULT_RATES, QUARANTINE_CANDIDATES
from app.model.records import CLASSIFIED_FAILURES, FAULTS, Fault
from tests.unit import builders as b
from tests.unit.builders import T0, attempt_labels, event, minutes, pod, record, resource_status, running, terminated, updated, with_devices
from tests.unit.drivers import new_pipeline
from tests.unit.scenario import faults, only_verdict, run
from tests.unit.stories import bare_pod_dra_unhealthy, jobset_gpu_unhealthy

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver

GPU = "GPU-8f1c0000-0000-4000-8000-000000000017"


def observed(records: list[dict]) -> list[dict]:
    return b.with_progress(sorted(records, key=lambda r: r["value"]["observed_at"]))


def sick_pod_task(*shows: tuple[datetime, dict], exit_code: int = 1, end: datetime = T0, labels: dict | None = None) -> list[dict]:
    """A pod task whose container status shows `entries` at each time, then fails at T0
    (the failed record observed at `end` + 6 s, with the last entries)."""
    p = pod("gpu-task", labels=labels or attempt_labels(run="r142", action="fit"), containers={"main": running(T0 - minutes(30))})
    records = [record(p, T0 - minutes(30), "ADDED")]
    last: dict = {}
    for at, entry in shows:
        last = entry
        records.append(record(with_devices(p, entry), at))
    ended = updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(exit_code, T0)}])
    if last:
        ended = with_devices(ended, last)
    records.append(record(ended, end + minutes(0.1)))
    return records


def unhealthy(message: str | None = None, gpu: str = GPU, name: str = "nvidia.com/gpu") -> dict:
    return resource_status(name, message, **{gpu: "Unhealthy"})


# --- the fault -----------------------------------------------------------------------------


def test_r14_2_an_unhealthy_gpu_decides_a_bare_pods_failure() -> None:
    records = observed(bare_pod_dra_unhealthy())
    verdict = only_verdict(records)
    assert (verdict.identity, verdict.tracked.kind, verdict.code, verdict.kind) == ("workload", "Pod", "GpuUnhealthy", "SYSTEM")
    fault = verdict.gpu_fault
    assert fault is not None and (fault.kind, fault.code, fault.severity) == ("DEVICE_HEALTH", 0, "CRITICAL")
    assert (fault.gpu_uuid, fault.resource, fault.message) == ("gpu.nvidia.com/gpu-93/gpu-3", "claim:gpu/gpu", "uncorrectable ECC errors exceed threshold")
    assert (fault.node, fault.count, fault.action, fault.gpu_index) == ("gpu-93", 1, "RESET_GPU", None)
    # The bridge's clock: the first record showing it Unhealthy, the last one (the failed pod's).
    assert (fault.first_seen, fault.last_seen) == (T0 - minutes(2), T0 + minutes(0.1))
    assert verdict.faulted_pod is None  # a pod task names no pod (R6.7) ...
    assert verdict.reasons == [  # ... but says which evidence decided
        "device health: GPU gpu.nvidia.com/gpu-93/gpu-3 (claim:gpu/gpu) of pod vllm-bench-0 reported Unhealthy by the kubelet"
    ]
    assert verdict.message.startswith("[device-health] [CRITICAL] GPU unhealthy (claim:gpu/gpu gpu.nvidia.com/gpu-93/gpu-3): uncorrectable ECC")


def test_r14_2_a_child_pods_unhealthy_gpu_names_that_pod_under_labels() -> None:
    verdict = only_verdict(observed(jobset_gpu_unhealthy()))
    assert (verdict.identity, verdict.code, verdict.kind) == ("labels", "FailedJobs", "SYSTEM")  # R6.4: a specific code stays
    assert verdict.faulted_pod.name == "diffusion-3-train-workers-0-1"
    assert verdict.gpu_fault.gpu_uuid == "GPU-96bb0000-0000-4000-8000-000000000002"  # the Healthy one beside it is no fault
    assert verdict.reasons == [
        "device health: GPU GPU-96bb0000-0000-4000-8000-000000000002 (nvidia.com/gpu) of pod diffusion-3-train-workers-0-1 reported Unhealthy by the kubelet"
    ]


def test_r14_2_published_to_faultline_faults_keyed_by_pod_uid_and_resource_id() -> None:
    records = sick_pod_task((T0 - minutes(3), unhealthy()), (T0 - minutes(2), unhealthy()))
    uid = records[0]["value"]["object"]["metadata"]["uid"]
    published = faults(observed(records))
    assert [f.key for f in published] == [f"prod-a/{uid}/{GPU}"] * 3  # new, then each later record moves last_seen
    last = published[-1]
    assert isinstance(last, Fault) and last.event_uid is None and last.attempt == "prod-a/ml/r142/fit/1"
    assert (last.fault.first_seen, last.fault.last_seen) == (T0 - minutes(3), T0 + minutes(0.1))
    encoded = msgspec.json.decode(msgspec.json.encode(last))
    assert encoded["schema"] == "faultline.Fault/v2" and encoded["event_uid"] is None


def test_r14_2_an_otherwise_unchanged_record_still_moves_last_seen() -> None:
    """Pod records that change nothing the rules read are skipped (R7.4), except while a
    device is shown Unhealthy: each such record is a later last_seen."""
    p = pod("same", labels=attempt_labels(run="same"), containers={"main": running(T0 - minutes(30))})
    sick = with_devices(p, unhealthy())
    out = run([record(p, T0 - minutes(30), "ADDED"), record(sick, T0 - minutes(3)), record(sick, T0 - minutes(1))])
    last = [e.value for e in out if e.topic == FAULTS][-1]
    assert (last.fault.first_seen, last.fault.last_seen) == (T0 - minutes(3), T0 - minutes(1))


def test_r14_2_unknown_is_data_only() -> None:
    verdict = only_verdict(observed(sick_pod_task((T0 - minutes(2), resource_status(**{GPU: "Unknown"})))))
    assert (verdict.code, verdict.kind, verdict.reasons) == ("Error", "USER", [])
    fault = verdict.gpu_fault
    assert (fault.kind, fault.severity, fault.name, fault.action) == ("DEVICE_HEALTH", "WARN", "GPU health unknown", "UNKNOWN")


def test_r14_2_unknown_then_unhealthy_starts_its_interval_when_first_shown_unhealthy() -> None:
    records = sick_pod_task((T0 - minutes(50), resource_status(**{GPU: "Unknown"})), (T0 - minutes(1), unhealthy()))
    fault = only_verdict(observed(records)).gpu_fault
    assert (fault.severity, fault.first_seen) == ("CRITICAL", T0 - minutes(1))


def test_r14_2_what_was_seen_stands_when_the_device_is_healthy_again() -> None:
    records = sick_pod_task((T0 - minutes(3), unhealthy()), (T0 - minutes(2), resource_status(**{GPU: "Healthy"})))
    verdict = only_verdict(observed(records))
    assert verdict.code == "GpuUnhealthy"
    assert (verdict.gpu_fault.first_seen, verdict.gpu_fault.last_seen) == (T0 - minutes(3), T0 - minutes(3))


@pytest.mark.parametrize(
    ("name", "counts"),
    [("nvidia.com/gpu", True), ("claim:gpu", True), ("claim:gpus/first", True), ("example.com/fpga", False), ("nvidia.com/mig-1g.10gb", False)],
)
def test_r14_2_only_gpu_resources_and_dra_claims_are_read(name: str, counts: bool) -> None:
    verdict = only_verdict(observed(sick_pod_task((T0 - minutes(1), unhealthy(name=name)))))
    assert (verdict.code == "GpuUnhealthy") is counts
    mig = Rules(gpu_resources=("nvidia.com/gpu", "nvidia.com/mig-1g.10gb"))
    assert only_verdict(observed(sick_pod_task((T0 - minutes(1), unhealthy(name="nvidia.com/mig-1g.10gb")))), mig).code == "GpuUnhealthy"


def test_r14_2_unhealthy_only_after_the_slack_explains_nothing() -> None:
    """Shown Unhealthy first, on a container still running (a sidecar), in a record
    observed after anchor + slack (R5.3): the bridge's clock dates it, too late."""
    p = pod("late", labels=attempt_labels(run="late14"), containers={"main": running(T0 - minutes(30)), "sidecar": running(T0 - minutes(30))})
    statuses = [{"name": "main", "state": terminated(1, T0)}, {"name": "sidecar", **running(T0 - minutes(30))}]
    ended = updated(p, phase="Failed", containerStatuses=statuses)
    late = with_devices(ended, unhealthy(), container="sidecar")
    records = [record(p, T0 - minutes(30), "ADDED"), record(ended, T0 + minutes(0.1)), record(late, T0 + minutes(3))]
    verdict = only_verdict(observed(records))
    assert (verdict.code, verdict.gpu_fault) == ("Error", None)


def test_r14_2_first_shown_after_its_container_ended_is_dated_by_that_end() -> None:
    """A pod first listed after it failed (a restart of `run`, a relist, a burst after an
    outage): its terminated container still shows the GPU Unhealthy. The kubelet writes no
    device health after a container ended, so it was Unhealthy by then: the verdict is
    the uninterrupted watch's (R14.2, R12.7)."""
    p = pod("relisted", labels=attempt_labels(run="relist14"), containers={"main": running(T0 - minutes(30))})
    ended = with_devices(updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(1, T0)}]), unhealthy())
    watched = [record(p, T0 - minutes(30), "ADDED"), record(with_devices(p, unhealthy()), T0 - minutes(1)), record(ended, T0 + minutes(0.1))]
    listed_late = [record(ended, T0 + minutes(45), "ADDED")]
    verdicts = [only_verdict(observed(records)) for records in (watched, listed_late)]
    assert [(v.code, v.kind) for v in verdicts] == [("GpuUnhealthy", "SYSTEM")] * 2
    late = verdicts[1].gpu_fault
    assert late is not None and (late.first_seen, late.last_seen) == (T0, T0 + minutes(45))
    # A later record of a terminated container dates an interval first seen while it ran no later either.
    assert verdicts[0].gpu_fault is not None and verdicts[0].gpu_fault.first_seen == T0 - minutes(1)


@pytest.mark.parametrize(("xid_at", "code"), [(T0 - minutes(2), "GpuFallenOffBus"), (T0 - minutes(0.5), "GpuUnhealthy")])
def test_r14_2_the_earliest_critical_fault_decides_between_an_xid_and_a_device(xid_at: datetime, code: str) -> None:
    records = sick_pod_task((T0 - minutes(1), unhealthy()))
    target = records[0]["value"]["object"]
    records.append(record(event(target, code=79, first=xid_at), xid_at, "ADDED"))
    assert only_verdict(observed(records)).code == code  # R6.3: the earliest of the worst severity


# --- bounds (R11.5) ------------------------------------------------------------------------------


def test_r14_2_devices_per_pod_and_messages_are_bounded_and_what_is_dropped_is_counted() -> None:
    rules = Rules(max_faults_per_pod=8, max_message_chars=32)
    many = resource_status("nvidia.com/gpu", "m" * 100, **{f"GPU-{i:04d}": "Unhealthy" if i % 2 else "Unknown" for i in range(20)})
    records = sick_pod_task((T0 - minutes(1), many))
    pipeline = new_pipeline(rules)
    out = []
    for r in observed(records):
        out += pipeline.feed(r["topic"], r["key"], orjson.dumps(r["value"]))
    (state,) = [s for s in pipeline.states["pods"].values() if s.pod is not None]
    assert len(state.devices) == 8 and {d.health for d in state.devices.values()} == {"Unhealthy"}  # the ones that can decide
    assert pipeline.counts["dropped_device_health"] >= 12 and pipeline.counts["truncated_texts"] >= 20
    verdict = [e.value for e in out if e.topic == CLASSIFIED_FAILURES][-1]
    assert verdict.code == "GpuUnhealthy" and len(verdict.gpu_fault.message) == 32 and verdict.gpu_fault.message.endswith("…")


# --- the fleet (node = the pod's node, GPU = the resourceID) -------------------------------------


def test_r14_2_the_fleet_counts_device_faults_per_node_and_gpu() -> None:
    rules = Rules(fleet=FleetSettings(threshold=2))
    records = []
    for i in range(2):  # two pods, one after the other, on one GPU of gpu-17
        p = pod(f"p{i}", labels=attempt_labels(run=f"fleet{i}"), containers={"main": running(T0 - minutes(30))})
        records += [record(p, T0 - minutes(30 - i), "ADDED"), record(with_devices(p, unhealthy()), T0 - minutes(10 - i))]
    out = run(observed(records), rules, derived=True)
    latest = {(e.topic, e.key): e.value for e in out}
    gpu_rates = [v for (t, _), v in latest.items() if t == GPU_FAULT_RATES]
    assert [(r.node, r.gpu, r.critical, [(x.kind, x.code, x.name) for x in r.xids]) for r in gpu_rates] == [
        ("gpu-17", GPU, 2, [("DEVICE_HEALTH", 0, "GPU unhealthy")])
    ]
    assert [v.critical for (t, _), v in latest.items() if t == NODE_FAULT_RATES] == [2]
    candidates = {k: v for (t, k), v in latest.items() if t == QUARANTINE_CANDIDATES}
    assert set(candidates) == {"prod-a/node/gpu-17", f"prod-a/gpu/gpu-17/{GPU}"}
    for candidate in candidates.values():
        assert (candidate.state, candidate.codes, candidate.action) == ("candidate", ["Device health", "Device health"], "RESET_GPU")


def test_r14_2_unknown_and_unhealthy_are_counted_apart_in_the_rates() -> None:
    p = pod("mixed", labels=attempt_labels(run="mixed"), containers={"main": running(T0 - minutes(30))})
    both = resource_status(**{GPU: "Unhealthy", "GPU-other": "Unknown"})
    out = run(observed([record(p, T0 - minutes(30), "ADDED"), record(with_devices(p, both), T0 - minutes(1))]), derived=True)
    (node,) = {e.key: e.value for e in out if e.topic == NODE_FAULT_RATES}.values()
    assert [(x.name, x.severity, x.faults) for x in node.xids] == [("GPU unhealthy", "CRITICAL", 1), ("GPU health unknown", "WARN", 1)]
    assert (node.critical, node.warn) == (1, 1)


def test_r14_2_default_rules_keep_device_health_on() -> None:
    assert DEFAULT_RULES.gpu_resources == ("nvidia.com/gpu",) and DEFAULT_RULES.device_health_action == "RESET_GPU"
