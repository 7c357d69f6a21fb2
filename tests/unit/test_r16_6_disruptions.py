"""SPEC R16.6: more disruption evidence (R14.1). A pod a DRA device taint evicted
(`DisruptionTarget` reason `DeletionByDeviceTaintManager`, Kubernetes 1.37), and a pod
Kueue's failure recovery force-deleted from an unreachable node (its `KueueFailureRecovery`
condition, which has no time, or its Warning Event `KueueForcefullyDeleted`) are
`PodDisrupted`, SYSTEM, with a line that says what happened. Every rule through every
driver, under both identities."""

from __future__ import annotations

from datetime import datetime
from itertools import permutations

import orjson
import pytest

from app.core.base.rules import DEFAULT_DISRUPTION_REASONS, DEFAULT_RULES, Rules
from app.core.evidence.force_deletion import EVENTS_KEPT, REPORTER
from app.model.records import DEAD_LETTER
from tests.unit import builders as b
from tests.unit.builders import (
    T0,
    as_events_v1,
    attempt_labels,
    controller_event,
    disruption_target,
    event,
    kueue_force_deleted,
    minutes,
    pod,
    record,
    running,
    terminated,
    ts,
    updated,
)
from tests.unit.drivers import new_pipeline
from tests.unit.scenario import final_verdicts, only_verdict
from tests.unit.stories import job_device_tainted, job_kueue_force_deleted

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver

NO_DISRUPTIONS = Rules(name="no-disruptions", disruption_reasons=())
LOST = "ckpt-shards-q4t9v"  # the force-deleted pod of job_kueue_force_deleted
KUEUE_LINE = f"pod {LOST} disrupted by the cluster (KueueForcefullyDeleted): force-deleted by Kueue's failure recovery, node gpu-131 unreachable"


def observed(records: list[dict]) -> list[dict]:
    """In the bridge's order, with its progress (R12), as a recorded trace holds them."""
    return b.with_progress(sorted(records, key=lambda r: r["value"]["observed_at"]))


def _kind(r: dict) -> str:
    return r["value"]["object"]["kind"]


def _reason(r: dict) -> str:
    return r["value"]["object"].get("reason", "")


def _without_condition(r: dict, type_: str) -> dict:
    obj = orjson.loads(orjson.dumps(r["value"]["object"]))
    obj["status"]["conditions"] = [c for c in obj["status"].get("conditions", []) if c["type"] != type_]
    return {**r, "value": {**r["value"], "object": obj}}


# --- a DRA device taint ---------------------------------------------------------------------------


def test_r16_6_a_pod_evicted_by_a_device_taint_is_pod_disrupted_and_says_its_device_was_tainted() -> None:
    records = observed(job_device_tainted())
    verdict = only_verdict(records)
    assert (verdict.tracked.kind, verdict.code, verdict.kind, verdict.gpu_fault) == ("Job", "PodDisrupted", "SYSTEM", None)
    assert verdict.faulted_pod is not None and verdict.faulted_pod.name == "vllm-shards-1-q7m2x"
    line = ("pod vllm-shards-1-q7m2x disrupted by the cluster (DeletionByDeviceTaintManager): a DRA device allocated to it was tainted "
            "NoExecute: Device Taint manager: deleting due to NoExecute taint")
    assert verdict.reasons == [line]
    assert verdict.message == f"{line}. Job has failed indexes"
    before = only_verdict(records, NO_DISRUPTIONS)
    assert (before.code, before.kind, before.reasons) == ("FailedIndexes", "USER", [])


def test_r16_6_device_taint_and_kueue_force_deletion_are_default_disruption_reasons() -> None:
    assert {"DeletionByDeviceTaintManager", "KueueForcefullyDeleted"} <= set(DEFAULT_DISRUPTION_REASONS)
    without = Rules(disruption_reasons=tuple(r for r in DEFAULT_DISRUPTION_REASONS if r != "DeletionByDeviceTaintManager"))
    assert only_verdict(observed(job_device_tainted()), without).code == "FailedIndexes"


# --- Kueue's failure recovery ---------------------------------------------------------------------


def test_r16_6_a_pod_kueue_force_deleted_is_pod_disrupted_naming_kueue_and_the_node() -> None:
    """The story (FACTS of Kueue v0.19.2): the taint manager's DisruptionTarget came first,
    Kueue's force deletion ended it: Kueue's line decides, naming the pod's node."""
    verdict = only_verdict(observed(job_kueue_force_deleted()))
    assert (verdict.code, verdict.kind, verdict.gpu_fault) == ("PodDisrupted", "SYSTEM", None)
    assert verdict.faulted_pod is not None and verdict.faulted_pod.name == LOST
    assert verdict.reasons == [KUEUE_LINE]
    assert verdict.message == f"{KUEUE_LINE}. Job has reached the specified backoff limit"


@pytest.mark.parametrize("keep", ["condition", "event"])
def test_r16_6_the_condition_or_the_event_alone_is_evidence(keep: str) -> None:
    """No DisruptionTarget (the pod was deleted by its Job, say): either record of Kueue's
    says it force-deleted the pod."""
    records = [_without_condition(r, "DisruptionTarget") if _kind(r) == "Pod" else r for r in job_kueue_force_deleted()]
    if keep == "condition":
        records = [r for r in records if _reason(r) != "KueueForcefullyDeleted"]
    else:
        records = [_without_condition(r, "KueueFailureRecovery") if _kind(r) == "Pod" else r for r in records]
    verdict = only_verdict(observed(records))
    assert (verdict.code, verdict.kind, verdict.reasons) == ("PodDisrupted", "SYSTEM", [KUEUE_LINE])


def test_r16_6_without_kueues_reason_listed_the_taint_managers_condition_decides() -> None:
    rules = Rules(disruption_reasons=tuple(r for r in DEFAULT_DISRUPTION_REASONS if r != "KueueForcefullyDeleted"))
    verdict = only_verdict(observed(job_kueue_force_deleted()), rules)
    assert verdict.reasons == [f"pod {LOST} disrupted by the cluster (DeletionByTaintManager): Taint manager: deleting due to NoExecute taint"]
    assert only_verdict(observed(job_kueue_force_deleted()), NO_DISRUPTIONS).code == "BackoffLimitExceeded"


def _pod_task(*, forced_seen: datetime, event_at: datetime | None = None, rules: Rules = DEFAULT_RULES, faults: tuple[int, ...] = (),
              disruption: bool = False, **event_kw) -> object:
    """A pod task on gpu-17, marked for deletion at T0 - 1 min (deletionTimestamp T0 - 0.5),
    never terminated (its node is gone); Kueue's patch seen at `forced_seen`, its Event
    (if `event_at`) recorded then."""
    p = pod("train-0", labels=attempt_labels(run="r16", action="fit"), annotations={"kueue.x-k8s.io/safe-to-forcefully-delete": "true"},
            containers={"main": running(T0 - minutes(30))}, created=T0 - minutes(31))
    deleting = updated(p, conditions=[disruption_target("DeletionByTaintManager", T0 - minutes(1), "Taint manager: deleting due to NoExecute taint")] if disruption else [])
    deleting["metadata"]["deletionTimestamp"] = ts(T0 - minutes(0.5))
    forced, forced_event = kueue_force_deleted(deleting, event_at or forced_seen, "gpu-17")
    records = [record(p, T0 - minutes(30), "ADDED"), record(deleting, T0 - minutes(1)), record(forced, forced_seen), record(forced, forced_seen + minutes(0.01), "DELETED")]
    if event_at is not None:
        for key, value in event_kw.items():
            forced_event[key] = value
        records.append(record(forced_event, event_at + minutes(0.005), "ADDED"))
    records += [record(event(p, code=code, first=T0 - minutes(2)), T0 - minutes(2), "ADDED") for code in faults]
    return only_verdict(observed(records), rules)


def test_r16_6_a_pod_task_force_deleted_names_no_pod_but_says_why() -> None:
    verdict = _pod_task(forced_seen=T0 + minutes(0.5))
    assert (verdict.code, verdict.kind, verdict.faulted_pod) == ("PodDisrupted", "SYSTEM", None)  # type: ignore[attr-defined]
    assert verdict.reasons == ["pod train-0 disrupted by the cluster (KueueForcefullyDeleted): force-deleted by Kueue's failure recovery, node gpu-17 unreachable"]  # type: ignore[attr-defined]


def test_r16_6_the_condition_has_no_time_so_the_record_that_first_showed_it_dates_it() -> None:
    """Relevance (R5.3) reads the observed_at of the first record showing the condition: seen
    within the slack after the pod's anchor (its deletionTimestamp), it decides; seen an hour
    later (a bridge that was down), it cannot, unless Kueue's Event, dated by its eventTime,
    says when it happened."""
    assert _pod_task(forced_seen=T0 + minutes(1)).code == "PodDisrupted"  # type: ignore[attr-defined]
    late = _pod_task(forced_seen=T0 + minutes(60))
    assert (late.code, late.reasons) == ("Interrupted", [])  # type: ignore[attr-defined]
    assert _pod_task(forced_seen=T0 + minutes(60), event_at=T0 + minutes(0.5)).code == "PodDisrupted"  # type: ignore[attr-defined]
    # Outside the interval Kueue's evidence gives way to a DisruptionTarget inside it.
    taint = _pod_task(forced_seen=T0 + minutes(60), disruption=True)
    assert taint.reasons == ["pod train-0 disrupted by the cluster (DeletionByTaintManager): Taint manager: deleting due to NoExecute taint"]  # type: ignore[attr-defined]


def test_r16_6_a_critical_gpu_fault_still_wins() -> None:
    verdict = _pod_task(forced_seen=T0 + minutes(0.5), faults=(79,))
    assert (verdict.code, verdict.kind, verdict.reasons) == ("GpuFallenOffBus", "SYSTEM", [])  # type: ignore[attr-defined]


# --- the Event: trust (R2.7), shapes, bounds ---------------------------------------------------------


def _event_only(*, rules: Rules = DEFAULT_RULES, events_v1: bool = False, **changes) -> object:
    """The story with no DisruptionTarget and no KueueFailureRecovery condition: Kueue's
    Event alone, changed by `changes` (top-level fields, `metadata.namespace` as `namespace`,
    `involvedObject.namespace` as `regarding_namespace`)."""
    records = []
    for r in job_kueue_force_deleted():
        if _kind(r) == "Pod":
            r = _without_condition(_without_condition(r, "DisruptionTarget"), "KueueFailureRecovery")
        elif _reason(r) == "KueueForcefullyDeleted":
            obj = orjson.loads(orjson.dumps(r["value"]["object"]))
            if "namespace" in changes:
                obj["metadata"]["namespace"] = changes.pop("namespace")
            if "regarding_namespace" in changes:
                obj["involvedObject"]["namespace"] = changes.pop("regarding_namespace")
            obj.update(changes)
            if events_v1:
                obj = as_events_v1(obj)
            r = {**r, "value": {**r["value"], "object": obj}}
        records.append(r)
    return only_verdict(observed(records), rules)


def test_r16_6_an_events_k8s_io_event_is_read_as_a_core_one() -> None:
    assert _event_only(events_v1=True).reasons == [KUEUE_LINE]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "changes",
    [
        {"namespace": "other"},  # R2.7a: created in another namespace than the pod's
        {"namespace": "other", "regarding_namespace": "other"},  # naming the pod (by uid) in another namespace
        {"type": "Normal"},  # R2.1's shape: a Warning
        {"reason": "KueueForcefulTermination"},  # another reason
    ],
    ids=["created-elsewhere", "names-another-namespace", "normal", "other-reason"],
)
def test_r16_6_an_event_that_cannot_be_trusted_says_nothing(changes: dict) -> None:
    verdict = _event_only(**changes)
    assert (verdict.code, verdict.reasons) == ("BackoffLimitExceeded", [])  # type: ignore[attr-defined]


def test_r16_6_trusted_reporters_when_set_must_list_kueues_controller() -> None:
    """R2.7d applies to this Event as to a fault's: a rule set listing only the node agent
    trusts no Kueue Event; listing `kueue-pod-termination-controller` too, it does. The
    condition (pod status) is not an Event: it counts either way."""
    agent_only = Rules(trusted_reporters=("gpu-health-agent",))
    assert _event_only(rules=agent_only).code == "BackoffLimitExceeded"  # type: ignore[attr-defined]
    both = Rules(trusted_reporters=("gpu-health-agent", REPORTER))
    assert REPORTER == "kueue-pod-termination-controller"  # kueue v0.19.2 pkg/constants/constants.go PodTerminationControllerName
    assert _event_only(rules=both).code == "PodDisrupted"  # type: ignore[attr-defined]
    assert only_verdict(observed(job_kueue_force_deleted()), agent_only).reasons == [KUEUE_LINE]


@pytest.mark.parametrize("whole", [False, True], ids=["from-the-deletion", "the-whole-story"])
def test_r16_6_an_event_before_or_after_its_pod_in_a_burst_gives_the_same_verdict(whole: bool) -> None:
    """R12.7: the lost pod's records, Kueue's Event and the Job's failure delivered in one
    burst (one observed_at), in every order that keeps each object's own: one verdict. The
    whole story in one burst: the Event may come before its pod is known at all."""
    records = job_kueue_force_deleted()
    deletion = next(i for i, r in enumerate(records) if _kind(r) == "Pod" and r["value"]["object"]["metadata"]["name"] == LOST and "deletionTimestamp" in r["value"]["object"]["metadata"])
    start = 0 if whole else deletion
    window = [orjson.loads(orjson.dumps(r)) for r in records[start:]]
    at = max(r["value"]["observed_at"] for r in window)
    for r in window:
        r["value"]["observed_at"] = at
    queues: dict[tuple[str, str], list[dict]] = {}
    for r in window:
        queues.setdefault((r["topic"], r["key"]), []).append(r)  # a pod's Events share its key, not its topic
    assert len(queues) == 4  # the pod, its Event, the Job, the other pod
    answers = set()
    for order in permutations(queues):
        burst = [r for key in order for r in queues[key]]
        verdict = final_verdicts(b.with_progress(records[:start]) + burst + [b.progress(t, datetime.fromisoformat(at) + minutes(1)) for t in b.SOURCE_KINDS])
        [v] = verdict.values()
        answers.add((v.code, v.kind, tuple(v.reasons), v.faulted_pod.name if v.faulted_pod else None))
    assert answers == {("PodDisrupted", "SYSTEM", (KUEUE_LINE,), LOST)}


def test_r16_6_force_deletion_events_held_for_an_unknown_pod_are_bounded_and_counted() -> None:
    """R11.5: Kueue writes one such Event per pod; more (forged, or repeats under new names)
    are kept up to a few, the earliest, the rest counted."""
    target = pod("ghost", pod_uid="ghost-uid", labels={}, containers={"main": running()})
    pipeline = new_pipeline()
    for i in range(EVENTS_KEPT + 6):
        ev = controller_event(target, "KueueForcefullyDeleted", f"forged {i}", T0 - minutes(i), events_api=True, reporter="kueue-pod-termination-controller")
        line = record(ev, T0, "ADDED")
        pipeline.feed(line["topic"], line["key"], orjson.dumps(line["value"]))
    [state] = pipeline.states["pods"].values()
    assert len(state.force_deletions) == EVENTS_KEPT and pipeline.counts["dropped_disruption_events"] == 6
    assert min(e.at for e in state.force_deletions.values()) == T0 - minutes(EVENTS_KEPT + 5)  # the earliest kept


def test_r16_6_a_condition_time_out_of_range_is_dead_lettered() -> None:
    """R11.3: should a Kueue write its condition's lastTransitionTime, it is an object time."""
    p = pod("train-0", labels=attempt_labels(run="r16", action="fit"), containers={"main": running()})
    bad = updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(137, T0)}],
                  conditions=[{"type": "KueueFailureRecovery", "status": "True", "reason": "KueueForcefullyDeleted", "message": "", "lastTransitionTime": "0001-01-01T00:00:00Z"}])
    pipeline = new_pipeline()
    out = []
    for line in (record(p, T0 - minutes(5), "ADDED"), record(bad, T0)):
        out += pipeline.feed(line["topic"], line["key"], orjson.dumps(line["value"]))
    [dead] = [e for e in out if e.topic == DEAD_LETTER]
    assert "KueueFailureRecovery lastTransitionTime" in dead.value.reason
