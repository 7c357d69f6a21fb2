"""SPEC R2: which Events are GPU faults, how they are parsed, timed and attributed."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.evidence.fault_events import fault_event_of
from app.core.evidence.fault_message import parse_fault_message
from app.core.base.rules import Rules
from app.model.k8s import Event
from tests.unit.builders import (
    NODE,
    T0,
    event,
    minutes,
    owner,
    pod,
    record,
    running,
    sxid_message,
    terminated,
    ts,
    updated,
    xid_message,
)
from tests.unit.scenario import faults, only_verdict

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver


SEEN = T0 + minutes(600)  # when the bridge saw the events of the parsing tests: after all of them


def decode_event(body: dict) -> Event:
    return msgspec.json.decode(msgspec.json.encode(body), type=Event)


def failed_pod_task(extra_records, *, p=None, finished=T0):
    p = p or pod("p", containers={"main": running()})
    failed = updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(1, finished, "Error")}])
    return [record(p, T0 - minutes(100), "ADDED"), *extra_records(p), record(failed, finished + minutes(0.5))]


# --- R2.1 ---------------------------------------------------------------------------------


def test_r2_1_only_warning_gpu_reasons_about_pods_are_faults():
    p = pod()
    assert fault_event_of(decode_event(event(p)), SEEN) is not None
    assert fault_event_of(decode_event(event(p, reason="BackOff")), SEEN) is None  # S18
    assert fault_event_of(decode_event(event(p, type_="Normal")), SEEN) is None
    node_event = event(p)
    node_event["involvedObject"]["kind"] = "Node"
    assert fault_event_of(decode_event(node_event), SEEN) is None
    assert fault_event_of(decode_event(event(p, reason="GPUSXidError", message=sxid_message(20034))), SEEN) is not None


def test_r2_1_events_k8s_io_v1_maps_to_the_same_fields():
    p = pod()
    body = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "p.1", "namespace": "ml", "uid": "ev-new", "creationTimestamp": ts(T0)},
        "regarding": {"kind": "Pod", "namespace": "ml", "name": "p", "uid": p["metadata"]["uid"]},
        "reason": "GPUXidError",
        "note": xid_message(48),
        "type": "Warning",
        "eventTime": "2026-08-25T11:58:00.000000Z",
        "series": {"count": 3, "lastObservedTime": "2026-08-25T11:59:30.000000Z"},
        "reportingController": "gpu-health-agent",
        "reportingInstance": NODE,
        "action": "Detected",
    }
    fault = fault_event_of(decode_event(body), SEEN)
    assert fault is not None
    assert (fault.parsed.code, fault.pod_uid, fault.reported_from, fault.count) == (48, p["metadata"]["uid"], NODE, 3)
    assert fault.first_seen == T0 - minutes(2) and fault.last_seen == T0 - minutes(0.5)


# --- R2.2, R2.3 -----------------------------------------------------------------------------


def test_r2_2_marker_may_follow_the_combined_events_prefix():
    parsed = parse_fault_message("(combined from similar events): " + xid_message(79))  # S20
    assert parsed is not None and parsed.code == 79


def test_r2_2_message_without_marker_or_code_is_not_a_fault():
    assert parse_fault_message(xid_message(79).replace("[gpu-health]", "")) is None
    assert parse_fault_message("[gpu-health] [CRITICAL] something bad severity=critical") is None
    assert parse_fault_message("Back-off restarting failed container") is None  # S19


def test_r2_3_tail_fields_are_parsed():
    parsed = parse_fault_message(
        "[gpu-health] [CRITICAL] Xid 79 (GPU has fallen off the bus) on GPU 3 GPU-8f1c. "
        "xid=79 severity=critical gpu_uuid=GPU-8f1c gpu_index=3 junk pci=0000:3b:00.0 node=gpu-17 pid=4242 process=python3"
    )
    assert parsed is not None
    assert (parsed.kind, parsed.code, parsed.severity, parsed.gpu_uuid, parsed.gpu_index) == ("XID", 79, "CRITICAL", "GPU-8f1c", 3)
    assert (parsed.pci_bus_id, parsed.node, parsed.pid, parsed.process) == ("0000:3b:00.0", "gpu-17", 4242, "python3")


def test_r2_3_absent_gpu_index_is_unknown_not_zero():
    parsed = parse_fault_message("[gpu-health] Xid 79 xid=79 gpu_uuid=GPU-1")
    assert parsed is not None and parsed.gpu_index is None


def test_r2_3_sxid_tail_starts_at_sxid():
    parsed = parse_fault_message(sxid_message(20034))
    assert parsed is not None and (parsed.kind, parsed.code, parsed.severity, parsed.pci_bus_id) == ("SXID", 20034, "CRITICAL", "0000:05:00.0")


def test_r2_3_code_that_is_not_an_integer_is_not_a_fault():
    assert parse_fault_message("[gpu-health] [WARN] Xid ?? xid=notanumber severity=warn") is None  # S21
    assert parse_fault_message("[gpu-health] Xid xid=+7") is None


def test_r2_3_tail_may_lower_severity_but_never_raise_it():
    def severity(code, wire):
        return parse_fault_message(f"[gpu-health] x xid={code} severity={wire}").severity

    assert severity(79, "warn") == "WARN"  # lowered
    assert severity(79, "user") == "USER"
    assert severity(31, "critical") == "USER"  # S15: never raised
    assert severity(92, "user") == "USER"  # S16
    assert severity(79, "bogus") == "CRITICAL"  # S17: unknown -> the table's
    assert parse_fault_message("[gpu-health] x sxid=12028 severity=warn").severity == "WARN"  # S14


@settings(max_examples=400)
@given(st.text(), st.text(alphabet=" =xidsevrtyucal0123456789-[]gpuhealth_", max_size=80))
def test_r2_3_parsing_never_raises(noise, tail):
    for message in (noise, "[gpu-health]" + noise, f"[gpu-health] {noise} xid={tail}", f"[gpu-health] sxid={tail} {noise}"):
        parsed = parse_fault_message(message)
        assert parsed is None or parsed.code >= 0


@settings(max_examples=200)
@given(st.dictionaries(st.sampled_from(["xid", "sxid", "severity", "gpu_index", "pid", "node", "pci"]), st.text(max_size=12)))
def test_r2_3_random_tails_parse_or_are_rejected(fields):
    message = "[gpu-health] " + " ".join(f"{k}={v}" for k, v in fields.items())
    parsed = parse_fault_message(" " + message)
    if parsed is not None:
        assert parsed.severity in ("USER", "WARN", "CRITICAL")


# --- R2.4 ---------------------------------------------------------------------------------


def test_r2_4_timing_falls_back_event_time_first_timestamp_creation():
    p = pod()
    body = event(p, first=T0 - minutes(5), last=T0 - minutes(1), count=4)
    body["eventTime"] = ts(T0 - minutes(7))
    fault = fault_event_of(decode_event(body), SEEN)
    assert (fault.first_seen, fault.last_seen, fault.count) == (T0 - minutes(7), T0 - minutes(1), 4)
    body = event(p, first=T0 - minutes(5))
    del body["firstTimestamp"], body["lastTimestamp"], body["count"]
    fault = fault_event_of(decode_event(body), SEEN)
    assert fault.first_seen == fault.last_seen == T0 - minutes(5) and fault.count == 1  # creationTimestamp


def test_r2_4_repeating_fault_is_one_fault_updated_never_walked_back():
    # S34: ADDED at t0-10m, then series grows to t0-1m, then a stale update.
    def extra(p):
        first = event(p, first=T0 - minutes(10), event_uid="ev-rep", count=1)
        grown = dict(first, lastTimestamp=ts(T0 - minutes(1)), count=5)
        stale = dict(first, lastTimestamp=ts(T0 - minutes(10)), count=2)
        return [record(first, T0 - minutes(10), "ADDED"), record(grown, T0 - minutes(1)), record(stale, T0 - minutes(0.8))]

    published = faults(failed_pod_task(extra))
    assert {f.event_uid for f in published} == {"ev-rep"}
    last = published[-1].fault
    assert (last.first_seen, last.last_seen, last.count) == (T0 - minutes(10), T0 - minutes(1), 5)


# --- R2.5, R2.5b --------------------------------------------------------------------------


def test_r2_5_fault_naming_the_pod_with_another_uid_is_never_credited():
    verdict = only_verdict(failed_pod_task(lambda p: [record(event(p, regarding_uid="old-uid"), T0 - minutes(1), "ADDED")]))  # S22
    assert verdict.gpu_fault is None


def test_r2_5_empty_uid_is_rejected():
    p = pod()
    assert fault_event_of(decode_event(event(p, regarding_uid="")), SEEN) is None  # S23


def test_r2_5b_fault_reported_from_another_node_is_not_trusted():
    verdict = only_verdict(failed_pod_task(lambda p: [record(event(p, reporting="gpu-99"), T0 - minutes(1), "ADDED")]))
    assert verdict.gpu_fault is None
    verdict = only_verdict(failed_pod_task(lambda p: [record(event(p, reporting=None), T0 - minutes(1), "ADDED")]))
    assert verdict.gpu_fault is None


def test_r2_5b_pod_with_no_node_trusts_no_fault():
    unscheduled = pod("p", node=None, containers={"main": running()})
    verdict = only_verdict(failed_pod_task(lambda p: [record(event(p), T0 - minutes(1), "ADDED")], p=unscheduled))
    assert verdict.gpu_fault is None


def test_r2_5b_node_trust_is_a_setting():
    lax = Rules(node_trust=False)
    verdict = only_verdict(failed_pod_task(lambda p: [record(event(p, reporting="gpu-99"), T0 - minutes(1), "ADDED")]), lax)
    assert verdict.code == "GpuFallenOffBus"


def test_r2_5b_legacy_source_host_names_the_node():
    def extra(p):
        body = event(p)
        body["reportingInstance"] = ""
        return [record(body, T0 - minutes(1), "ADDED")]

    assert only_verdict(failed_pod_task(extra)).code == "GpuFallenOffBus"


# --- R2.6 ---------------------------------------------------------------------------------


def test_r2_6_every_trusted_fault_is_published_with_pod_and_attempt_even_without_a_failure():
    p = pod("healthy", containers={"main": running()})
    ev = event(p, code=92, severity="warn")
    published = faults([record(p, T0 - minutes(5), "ADDED"), record(ev, T0 - minutes(1), "ADDED")])
    assert len(published) == 1
    fault = published[0]
    assert fault.attempt == "prod-a/ml/run-abc/a0/1"
    assert (fault.fault.code, fault.fault.pod.name, fault.fault.pod.uid) == (92, "healthy", p["metadata"]["uid"])


def test_r2_6_fault_of_a_pod_without_attempt_is_published_with_null_attempt():
    # A ReplicaSet's pod (SPEC R13.2: no attempt of any kind).
    p = pod("loose", labels={"app": "x"}, owners=[owner("ReplicaSet", "loose-7d9f", "rs-1", "apps/v1")])
    published = faults([record(p, T0 - minutes(5), "ADDED"), record(event(p), T0 - minutes(1), "ADDED")])
    assert len(published) == 1 and published[0].attempt is None
