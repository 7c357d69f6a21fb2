"""SPEC R18.1, R18.2: which fault marks which pod (app/core/actions/marking.py), from the
`faultline.faults` records the pipeline itself emits and the pod as the API server would
serve it. The drivers (app/mark) and the real API server are tested in
tests/bridge/test_apiserver_mark.py and tests/integration/test_mark_*.py."""

from __future__ import annotations

import unicodedata

import msgspec
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.actions.marking import GPU_FAULT_CONDITION, MESSAGE_CHARS, Mark, Skip, decide, printable, screen
from app.core.base.rules import DEFAULT_RULES
from app.model.k8s import Pod
from app.model.records import Fault
from tests.unit import builders as b
from tests.unit.builders import NODE, T0, attempt_labels, event, minutes, pod, record, resource_status, running, terminated, updated, with_devices
from tests.unit.scenario import faults

_pod = msgspec.json.Decoder(Pod)


def served(obj: dict) -> Pod:
    """The pod as the API server serves it, decoded as the driver decodes it."""
    return _pod.decode(orjson.dumps(obj))


def fault_on(p: dict, **event_options) -> Fault:  # type: ignore[no-untyped-def]
    """The one faults-topic record the pipeline emits for a fault Event on running pod `p`."""
    [fault] = faults([record(p, T0 - minutes(30), "ADDED"), record(event(p, **event_options), T0 - minutes(1))])
    return fault


def gpu_pod(**options) -> dict:  # type: ignore[no-untyped-def]
    options.setdefault("containers", {"main": running(T0 - minutes(30))})
    return pod("trainer-0", **options)


def decided(fault: Fault, p: dict | None) -> Mark | Skip:
    return decide(fault, None if p is None else served(p), GPU_FAULT_CONDITION, DEFAULT_RULES)


# --- R18.1: what marks -------------------------------------------------------------------------


def test_r18_1_a_critical_xid_on_a_running_pod_task_marks_it_with_its_code_and_sentence() -> None:
    p = gpu_pod()
    outcome = decided(fault_on(p, code=79), p)
    assert isinstance(outcome, Mark)
    condition = outcome.condition
    assert (condition.type, condition.status, condition.reason) == ("faultline.io/GPUFault", "True", "GpuFallenOffBus")
    assert condition.message == "[gpu-health] [CRITICAL] Xid 79 (GPU has fallen off the bus) on GPU 0 GPU-1234."


def test_r18_1_every_critical_code_gives_its_failure_code() -> None:
    p = gpu_pod()
    reasons = {}
    for code in (48, 63, 74, 119, 62):
        outcome = decided(fault_on(p, code=code), p)
        assert isinstance(outcome, Mark), code
        reasons[code] = outcome.condition.reason
    assert reasons == {48: "GpuEccUncorrectable", 63: "GpuRowRemapPending", 74: "GpuNvlinkError", 119: "GpuGspError", 62: "GpuXidError"}
    sxid = decided(fault_on(p, message=b.sxid_message(20034)), p)
    assert isinstance(sxid, Mark) and sxid.condition.reason == "GpuNvlinkError"


def test_r18_1_a_gpu_the_kubelet_reports_unhealthy_marks_its_pod() -> None:
    """R14.2: device health is a trusted critical fault."""
    p = gpu_pod()
    sick = with_devices(p, resource_status(**{"GPU-77": "Unhealthy"}))
    [fault] = faults([record(p, T0 - minutes(30), "ADDED"), record(sick, T0 - minutes(1))])
    outcome = decided(fault, sick)
    assert isinstance(outcome, Mark)
    assert outcome.condition.reason == "GpuUnhealthy"
    assert outcome.condition.message.startswith("[device-health] [CRITICAL] GPU unhealthy (nvidia.com/gpu GPU-77)")


def test_r18_1_the_condition_type_is_a_setting() -> None:
    p = gpu_pod()
    outcome = decide(fault_on(p), served(p), "example.com/BadGPU", DEFAULT_RULES)
    assert isinstance(outcome, Mark) and outcome.condition.type == "example.com/BadGPU"


def test_r18_1_the_message_is_cut_to_1024_characters() -> None:
    p = gpu_pod()
    fault = fault_on(p)
    long = msgspec.structs.replace(fault, fault=msgspec.structs.replace(fault.fault, gpu_uuid="G" * 5000))
    outcome = decided(long, p)
    assert isinstance(outcome, Mark)
    assert len(outcome.condition.message) == MESSAGE_CHARS and outcome.condition.message.endswith("…")


def test_r18_1_the_message_carries_no_control_or_format_character_of_a_tenants_event() -> None:
    # A forged Event's tail lands in the sentence: terminal escapes, a newline that would
    # start a fake log line, NUL, DEL, a right-to-left override. Read in `kubectl describe`
    # and in the mark's log: each is U+FFFD there.
    p = gpu_pod()
    fault = fault_on(p)
    hostile = "GPU-\x1b[2J\x1b]0;pwned\x07\x00\x7f\u202e\nINFO faultline.mark: marked pod kube-system/x\r"
    outcome = decided(msgspec.structs.replace(fault, fault=msgspec.structs.replace(fault.fault, gpu_uuid=hostile)), p)
    assert isinstance(outcome, Mark)
    message = outcome.condition.message
    assert not any(unicodedata.category(c) in ("Cc", "Cf") for c in message)
    assert message.count("\ufffd") == 8 and "[2J" in message and "INFO faultline.mark" in message
    assert printable("GPU 0 GPU-1234 (é, 東)") == "GPU 0 GPU-1234 (é, 東)"  # printable text stays as it is


# --- R18.1: never a user or warn fault, never one R2.7 does not trust ---------------------------


def test_r18_1_user_and_warn_faults_never_mark() -> None:
    p = gpu_pod()
    for code, severity in ((31, "user"), (13, "user"), (92, "warn"), (61, "warn"), (79, "warn")):  # 79 lowered by its tail (R2.3)
        outcome = decided(fault_on(p, code=code, severity=severity), p)
        assert outcome == Skip("not_critical", f"a {severity.upper()} fault"), code
        assert screen(fault_on(p, code=code, severity=severity), DEFAULT_RULES) == outcome  # decided before any pod is fetched


def test_r18_1_a_record_that_claims_more_than_the_xid_table_gives_is_untrusted() -> None:
    """A record whose severity the rule set could not have given (R2.3: a message tail
    lowers the table's severity, never raises it) was not made by these rules."""
    p = gpu_pod()
    honest = fault_on(p, code=31, severity="user")
    forged = msgspec.structs.replace(honest, fault=msgspec.structs.replace(honest.fault, severity="CRITICAL"))
    outcome = decided(forged, p)
    assert isinstance(outcome, Skip) and outcome.reason == "untrusted" and "R2.3" in outcome.detail


def test_r18_1_a_record_naming_another_node_than_the_pods_is_untrusted() -> None:
    """R2.5b, R2.7b: a trusted fault's node is the pod's own."""
    p = gpu_pod()
    fault = fault_on(p)
    moved = msgspec.structs.replace(fault, fault=msgspec.structs.replace(fault.fault, node="gpu-99"))
    outcome = decided(moved, p)
    assert isinstance(outcome, Skip) and outcome.reason == "untrusted" and "gpu-99" in outcome.detail
    nodeless = msgspec.structs.replace(fault, fault=msgspec.structs.replace(fault.fault, node=""))
    assert decided(nodeless, p) == Skip("untrusted", "the record names no node (R2.5b)")


def test_r18_1_a_record_naming_another_namespace_than_the_pods_is_untrusted() -> None:
    p = gpu_pod()
    fault = msgspec.structs.replace(fault_on(p), namespace="other-team")
    outcome = decided(fault, p)
    assert isinstance(outcome, Skip) and outcome.reason == "untrusted" and "R2.7a" in outcome.detail


def test_r18_1_a_fault_r2_7_does_not_trust_is_never_published_so_never_marks() -> None:
    """The pipeline publishes trusted faults only (R2.6, R2.7): an Event created in another
    namespace, or reported from another node, gives no faults-topic record to act on."""
    p = gpu_pod(namespace="team-a")
    created = record(p, T0 - minutes(30), "ADDED")
    elsewhere = event(p)
    elsewhere["metadata"]["namespace"] = "team-b"
    assert faults([created, record(elsewhere, T0 - minutes(1))]) == []
    assert faults([created, record(event(p, reporting="gpu-99"), T0 - minutes(1))]) == []


# --- R18.1: only candidates of a tracked attempt, never a pod that ended --------------------------


def test_r18_1_pods_of_every_tracked_kind_are_candidates() -> None:
    job = b.batch_job("train", gpus=8)
    candidates = {
        "pod task": gpu_pod(labels=attempt_labels()),
        "JobSet child": gpu_pod(labels={"jobset.sigs.k8s.io/jobset-name": "js", "jobset.sigs.k8s.io/jobset-uid": "js-uid", "jobset.sigs.k8s.io/restart-attempt": "0"}),
        "orchestrated JobSet child": gpu_pod(labels=b.jobset_pod_labels("js", 0)),
        "batch Job pod": gpu_pod(labels=b.job_pod_labels(job), owners=b.owned_by(job)),
        "bare GPU pod": gpu_pod(labels={}),
        # R16.3: owned by a StatefulSet (no tracked kind), its group named by its labels.
        "LeaderWorkerSet worker": gpu_pod(labels={"leaderworkerset.sigs.k8s.io/name": "serve", "leaderworkerset.sigs.k8s.io/group-index": "0",
                                                  "leaderworkerset.sigs.k8s.io/worker-index": "1"},
                                          owners=[b.owner("StatefulSet", "serve-0", "sts-uid", "apps/v1")]),  # fmt: skip
    }
    for what, p in candidates.items():
        assert isinstance(decided(fault_on(p), p), Mark), what


def test_r18_1_a_pod_of_no_tracked_attempt_is_not_a_candidate() -> None:
    replica_set = b.owner("ReplicaSet", "serve-7d9f", "rs-uid", "apps/v1")
    for what, p in {
        "a Deployment's pod": gpu_pod(labels={}, owners=[replica_set]),
        "a bare CPU pod": gpu_pod(labels={}, gpus=0),
        "a partial attempt label set": gpu_pod(labels={"flyte.org/managed": "true", "run": "r"}, gpus=0),
    }.items():
        outcome = decided(fault_on(p), p)
        assert outcome == Skip("not_a_candidate", "the pod belongs to no tracked attempt"), what


def test_r18_1_a_pod_that_ended_is_never_marked() -> None:
    p = gpu_pod()
    fault = fault_on(p)
    failed = updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(1, T0)}])
    succeeded = updated(p, phase="Succeeded", containerStatuses=[{"name": "main", "state": terminated(0, T0)}])
    exited = updated(p, containerStatuses=[{"name": "main", "state": terminated(1, T0)}])  # phase not written yet
    # Final (remembered by the driver): no later state of that pod runs it again. Every
    # container terminated while the phase is Running may be restarted (restartPolicy
    # Always, OnFailure): ended now, asked again for the next fault.
    for what, now, final in (("failed", failed, True), ("succeeded", succeeded, True), ("every container terminated", exited, False)):
        outcome = decided(fault, now)
        assert isinstance(outcome, Skip) and (outcome.reason, outcome.final) == ("ended", final), what
    assert decided(fault, None) == Skip("ended", "the pod is gone", final=True)
    again = gpu_pod(pod_uid="another-uid")  # the same name, another pod (R2.5)
    outcome = decided(fault, again)
    assert isinstance(outcome, Skip) and outcome.reason == "ended" and outcome.final and "another-uid" in outcome.detail


def test_r18_1_a_pod_being_deleted_or_with_a_sidecar_left_running_has_not_ended() -> None:
    p = gpu_pod(containers={"main": running(T0 - minutes(30)), "sidecar": running(T0 - minutes(30))})
    fault = fault_on(p)
    primary_died = updated(p, containerStatuses=[{"name": "main", "state": terminated(1, T0)}, {"name": "sidecar", "state": running(T0 - minutes(30))}])
    assert isinstance(decided(fault, primary_died), Mark)
    draining = gpu_pod(pod_uid=p["metadata"]["uid"], deletion=T0 + minutes(1))
    assert isinstance(decided(fault, draining), Mark)


# --- R18.2: once per pod ------------------------------------------------------------------------


def test_r18_2_a_pod_already_carrying_the_condition_is_not_marked_again() -> None:
    p = gpu_pod()
    fault = fault_on(p)
    mark = decided(fault, p)
    assert isinstance(mark, Mark)
    marked = updated(p, conditions=[{"type": GPU_FAULT_CONDITION, "status": "True", "reason": "GpuFallenOffBus", "message": "…"}])
    assert decided(fault, marked) == Skip("already_marked", "the pod has a faultline.io/GPUFault condition", final=True)
    # Another critical fault on the same pod does not mark it again either.
    other = fault_on(p, code=48)
    assert decided(other, marked).reason == "already_marked"  # type: ignore[union-attr]


# --- robustness and determinism -------------------------------------------------------------------

_text = st.text(max_size=40)
_labels = st.dictionaries(st.sampled_from(["flyte.org/managed", "run", "action", "attempt", "jobset.sigs.k8s.io/jobset-name", "batch.kubernetes.io/job-name", "x"]), _text, max_size=5)


@settings(max_examples=200, deadline=None)
@given(
    labels=_labels,
    phase=st.sampled_from(["", "Pending", "Running", "Succeeded", "Failed", "Unknown"]),
    node=st.sampled_from(["", NODE, "gpu-99"]),
    namespace=st.sampled_from([b.NS, "other"]),
    conditions=st.lists(st.fixed_dictionaries({"type": st.sampled_from(["Ready", GPU_FAULT_CONDITION, ""]), "status": _text}), max_size=3),
    states=st.lists(st.sampled_from([running(T0), terminated(0, T0), terminated(137, T0), {}]), max_size=3),
    gpus=st.integers(0, 2),
    severity=st.sampled_from(["critical", "warn", "user"]),
)
def test_r18_1_any_pod_gets_an_answer_and_the_same_one_every_time(labels, phase, node, namespace, conditions, states, gpus, severity) -> None:  # type: ignore[no-untyped-def]
    fault = fault_on(gpu_pod(), severity=severity)
    p = gpu_pod(pod_uid=fault.fault.pod.uid, labels=labels, phase=phase, node=node or None, namespace=namespace, gpus=gpus,
                containers={f"c{i}": s or None for i, s in enumerate(states)})  # fmt: skip
    p["status"]["conditions"] = conditions
    first = decided(fault, p)
    assert first == decided(fault, orjson.loads(orjson.dumps(p)))
    if isinstance(first, Mark):
        assert severity == "critical" and node == NODE and namespace == b.NS and phase not in ("Succeeded", "Failed")
        assert all(c["type"] != GPU_FAULT_CONDITION for c in conditions)
