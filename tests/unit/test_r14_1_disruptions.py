"""SPEC R14.1: a candidate pod the cluster disrupted (`DisruptionTarget` True with a reason
in `disruption_reasons`, its time inside the pod's relevance interval) decides a verdict
no critical or user fault decides: `PodDisrupted`, SYSTEM, the pod named as R6.7 names
one, and a reasons line. Under both identities (labels, workload attempts)."""

from __future__ import annotations

from datetime import datetime, timedelta

import orjson
import pytest

from app.core.base.rules import DEFAULT_DISRUPTION_REASONS, DEFAULT_RULES, Rules
from app.model.records import DEAD_LETTER
from tests.unit import builders as b
from tests.unit.builders import T0, attempt_labels, condition, disruption_target, event, jobset, jobset_pod_labels, minutes, pod, record, running, terminated, updated
from tests.unit.drivers import new_pipeline
from tests.unit.scenario import final_verdicts, only_verdict, run
from tests.unit.stories import EVIDENCE_STORIES, jobset_drained_worker, mpijob_xid79_drained, pod_task_preempted

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver

NO_DISRUPTIONS = Rules(name="no-disruptions", disruption_reasons=())


def observed(records: list[dict]) -> list[dict]:
    """In the bridge's order, with its progress (R12), as a recorded trace holds them."""
    return b.with_progress(sorted(records, key=lambda r: r["value"]["observed_at"]))


def pod_task(
    *,
    reason: str = "EvictionByEvictionAPI",
    at: datetime = T0 - minutes(1),
    exit_code: int = 143,
    term_reason: str = "Error",
    status: str = "True",
    seen_at: datetime | None = None,
    faults: tuple[tuple[int, str], ...] = (),
    rules: Rules = DEFAULT_RULES,
):
    """A pod task disrupted at `at` (its record observed at `seen_at`, else `at`), then
    terminated at T0 with `exit_code`; fault Events (code, severity) a minute before. A
    disruption seen after the pod ended is written on the ended pod."""
    p = pod("train-0", labels=attempt_labels(run="r14", action="fit"), containers={"main": running(T0 - minutes(30))})
    condition = disruption_target(reason, at, "the cluster's words", status)
    ended = updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(exit_code, T0, term_reason)}])
    seen_at = seen_at or max(at, T0 - minutes(2))
    if seen_at < T0:
        records = [record(updated(p, conditions=[condition]), seen_at), record(updated(ended, conditions=[condition]), T0 + minutes(0.1))]
    else:
        records = [record(ended, T0 + minutes(0.1)), record(updated(ended, conditions=[condition]), seen_at)]
    records.append(record(p, T0 - minutes(30), "ADDED"))
    records += [record(event(p, code=code, severity=severity, first=T0 - minutes(1)), T0 - minutes(1), "ADDED") for code, severity in faults]
    return only_verdict(observed(records), rules)


# --- the rule --------------------------------------------------------------------------------


def test_r14_1_a_drained_jobset_worker_is_pod_disrupted_system_and_named() -> None:
    """The issue's case: a worker drained off its node (exit 143, EvictionByEvictionAPI)
    made its JobSet FailedJobs/USER; now PodDisrupted/SYSTEM naming the worker."""
    records = observed(jobset_drained_worker())
    verdict = only_verdict(records)
    drained = "resnet-drain-workers-1-0-m2x7q"
    assert (verdict.identity, verdict.tracked.kind) == ("workload", "JobSet")
    assert (verdict.code, verdict.kind, verdict.gpu_fault) == ("PodDisrupted", "SYSTEM", None)
    assert verdict.faulted_pod is not None and (verdict.faulted_pod.namespace, verdict.faulted_pod.name) == ("ml", drained)
    line = f"pod {drained} disrupted by the cluster (EvictionByEvictionAPI): Eviction API: evicting"
    assert verdict.reasons == [line]
    assert verdict.message == f"{line}. jobset failed due to one or more job failures"
    before = only_verdict(records, NO_DISRUPTIONS)  # what it was before R14.1
    assert (before.code, before.kind, before.faulted_pod, before.reasons) == ("FailedJobs", "USER", None, [])


def test_r14_1_a_preempted_pod_task_under_labels_names_no_pod_but_says_why() -> None:
    verdict = only_verdict(observed(pod_task_preempted()))
    assert (verdict.identity, verdict.key) == ("labels", "prod-a/ml/hpo-12/trial/1")
    assert (verdict.code, verdict.kind, verdict.faulted_pod) == ("PodDisrupted", "SYSTEM", None)  # a pod task names no pod (R6.7)
    assert verdict.reasons == ["pod hpo-12-trial-1 disrupted by the cluster (PreemptionByScheduler): default-scheduler: preempting to accommodate a higher priority pod"]


# R14.1's reasons (R16.6 adds two, with lines of their own: tests/unit/test_r16_6_disruptions.py).
R14_1_REASONS = ("PreemptionByScheduler", "DeletionByTaintManager", "EvictionByEvictionAPI", "DeletionByPodGC", "TerminationByKubelet")


def test_r14_1_the_default_reasons_are_r14_1s() -> None:
    assert set(R14_1_REASONS) <= set(DEFAULT_DISRUPTION_REASONS)


@pytest.mark.parametrize("reason", R14_1_REASONS)
def test_r14_1_each_default_reason_disrupts(reason: str) -> None:
    verdict = pod_task(reason=reason)
    assert (verdict.code, verdict.kind) == ("PodDisrupted", "SYSTEM")
    assert verdict.reasons == [f"pod train-0 disrupted by the cluster ({reason}): the cluster's words"]


@pytest.mark.parametrize(
    ("reason", "status", "rules"),
    [
        ("DeletionByAnOperatorOfItsOwn", "True", DEFAULT_RULES),  # not listed by default
        ("EvictionByEvictionAPI", "False", DEFAULT_RULES),  # the condition withdrawn
        ("EvictionByEvictionAPI", "True", NO_DISRUPTIONS),  # a rule file's `disruption_reasons = []`
    ],
)
def test_r14_1_an_unlisted_reason_a_false_condition_or_no_reasons_disrupt_nothing(reason: str, status: str, rules: Rules) -> None:
    verdict = pod_task(reason=reason, status=status, rules=rules)
    assert (verdict.code, verdict.kind, verdict.reasons) == ("Error", "USER", [])


def test_r14_1_a_rule_set_may_list_its_own_reasons_and_they_enter_rules_version() -> None:
    custom = Rules(disruption_reasons=("DeletionByAnOperatorOfItsOwn",))
    assert pod_task(reason="DeletionByAnOperatorOfItsOwn", rules=custom).code == "PodDisrupted"
    assert len({DEFAULT_RULES.version, custom.version, NO_DISRUPTIONS.version}) == 3  # R10.1


def test_r14_1_oom_killed_stays_the_workloads() -> None:
    verdict = pod_task(exit_code=137, term_reason="OOMKilled")
    assert (verdict.code, verdict.kind, verdict.reasons) == ("OOMKilled", "USER", [])


def test_r14_1_a_specific_base_code_stands_unless_the_pod_was_killed() -> None:
    # A pod task whose container says why it failed, and was not killed: its own reason.
    assert pod_task(exit_code=3, term_reason="CheckpointCorrupt").code == "CheckpointCorrupt"
    # Killed (137/143) after the disruption: the disruption, whatever the container said.
    assert pod_task(exit_code=143, term_reason="CheckpointCorrupt").code == "PodDisrupted"
    # Generic code with any exit: the disruption (R6.2).
    assert pod_task(exit_code=1, term_reason="Error").code == "PodDisrupted"


def _jobset_attempt(worker_state: dict, worker_conditions: list[dict], failure: str = "FailedJobs") -> list[dict]:
    labels = attempt_labels(run="js14", action="train")
    js = jobset("js14-train", labels=labels)
    w = pod("js14-train-workers-0-0", labels={**jobset_pod_labels("js14-train", 0), **labels}, containers={"main": running(T0 - minutes(20))})
    last = updated(w, conditions=worker_conditions, containerStatuses=[{"name": "main", "state": worker_state}], phase="Failed" if "terminated" in worker_state else "Running")
    return observed([
        record(js, T0 - minutes(25), "ADDED"),
        record(w, T0 - minutes(20), "ADDED"),
        record(last, T0 - minutes(0.5)),
        record(updated(js, conditions=[condition("Failed", failure, "jobset failed", T0)]), T0 + minutes(0.1)),
    ])  # fmt: skip


def test_r14_1_a_child_pod_with_no_termination_recorded_was_killed() -> None:
    """A CRD's failure code is specific (FailedJobs); a disrupted worker still running
    when the JobSet failed has no termination recorded: it was killed."""
    verdict = only_verdict(_jobset_attempt(running(T0 - minutes(20)), [disruption_target("TerminationByKubelet", T0 - minutes(1), "node shutdown")]))
    assert (verdict.code, verdict.kind, verdict.faulted_pod.name) == ("PodDisrupted", "SYSTEM", "js14-train-workers-0-0")
    exited = only_verdict(_jobset_attempt(terminated(1, T0 - minutes(0.5)), [disruption_target("TerminationByKubelet", T0 - minutes(1), "node shutdown")]))
    assert (exited.code, exited.kind, exited.faulted_pod) == ("FailedJobs", "USER", None)  # exit 1: not killed, code specific


# --- the evidence order ---------------------------------------------------------------------


def test_r14_1_a_critical_fault_still_wins_the_drain_followed_the_hardware() -> None:
    verdict = only_verdict(observed(mpijob_xid79_drained()))
    assert (verdict.code, verdict.kind, verdict.gpu_fault.code) == ("MPIJobFailed", "SYSTEM", 79)
    assert verdict.reasons == ["GPU fault recorded on pod moe-7-pretrain-worker-0"]
    assert (pod_task(faults=((79, "critical"),)).code) == "GpuFallenOffBus"


def test_r14_1_a_user_fault_wins_over_a_disruption() -> None:
    verdict = pod_task(faults=((13, "user"),))
    assert (verdict.code, verdict.kind, verdict.gpu_fault.code, verdict.reasons) == ("GpuXidError", "USER", 13, [])


def test_r14_1_a_warning_rides_along_as_data_of_a_disruption() -> None:
    verdict = pod_task(faults=((92, "warn"),))
    assert (verdict.code, verdict.kind) == ("PodDisrupted", "SYSTEM")
    assert verdict.gpu_fault is not None and (verdict.gpu_fault.code, verdict.gpu_fault.severity) == (92, "WARN")


# --- time ----------------------------------------------------------------------------------------


def test_r14_1_the_condition_time_is_capped_by_the_bridges_clock() -> None:
    """A lastTransitionTime written far ahead of the record (R2.7c) counts as the record's
    observed_at: inside the interval. Uncapped it would lie past anchor + slack."""
    verdict = pod_task(at=T0 + timedelta(days=2), seen_at=T0 - minutes(1))
    assert verdict.code == "PodDisrupted"


@pytest.mark.parametrize("at", [T0 - minutes(31), T0 + minutes(3)], ids=["before-the-window", "after-the-slack"])
def test_r14_1_a_disruption_outside_the_relevance_interval_explains_nothing(at: datetime) -> None:
    # Anchor T0 (the container's finish); window 30 min, slack 2 min (R5.3).
    verdict = pod_task(at=at, seen_at=max(at, T0 - minutes(40)))
    assert (verdict.code, verdict.reasons) == ("Error", [])


def test_r14_1_the_earliest_disrupted_pod_decides() -> None:
    labels = attempt_labels(run="js15", action="train")
    js = jobset("js15-train", labels=labels)
    out = [record(js, T0 - minutes(25), "ADDED")]
    for i, (reason, at) in enumerate([("EvictionByEvictionAPI", T0 - minutes(1)), ("DeletionByTaintManager", T0 - minutes(2))]):
        w = pod(f"js15-train-workers-0-{i}", labels={**jobset_pod_labels("js15-train", 0), **labels}, containers={"main": running(T0 - minutes(20))})
        ended = updated(w, phase="Failed", conditions=[disruption_target(reason, at, "")], containerStatuses=[{"name": "main", "state": terminated(143, T0 - minutes(0.5))}])
        out += [record(w, T0 - minutes(20), "ADDED"), record(ended, T0 - minutes(0.4))]
    out.append(record(updated(js, conditions=[condition("Failed", "FailedJobs", "", T0)]), T0 + minutes(0.1)))
    verdict = only_verdict(observed(out))
    assert verdict.faulted_pod.name == "js15-train-workers-0-1"
    assert verdict.reasons == ["pod js15-train-workers-0-1 disrupted by the cluster (DeletionByTaintManager)"]  # no message: no colon


def test_r14_1_a_generation_restarted_in_place_after_a_disruption_carries_it() -> None:
    labels = attempt_labels(run="js16", action="train")
    js = jobset("js16-train", labels=labels)
    w0 = pod("js16-train-workers-0-0", labels={**jobset_pod_labels("js16-train", 0), **labels}, containers={"main": running(T0 - minutes(20))})
    evicted = updated(w0, conditions=[disruption_target("EvictionByEvictionAPI", T0 - minutes(1), "Eviction API: evicting")])
    w1 = pod("js16-train-workers-0-0", labels={**jobset_pod_labels("js16-train", 1), **labels}, containers={"main": running(T0 + minutes(1))}, created=T0 + minutes(1))
    records = observed([
        record(js, T0 - minutes(25), "ADDED"), record(w0, T0 - minutes(20), "ADDED"), record(evicted, T0 - minutes(1)),
        record(updated(js, restarts=1), T0), record(w1, T0 + minutes(1), "ADDED"),
        record(updated(w1, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(2, T0 + minutes(9))}]), T0 + minutes(9)),
        record(updated(js, restarts=1, conditions=[condition("Failed", "ReachedMaxRestarts", "", T0 + minutes(10))]), T0 + minutes(10)),
    ])  # fmt: skip
    final = only_verdict(records)
    assert (final.code, final.generation) == ("ReachedMaxRestarts", 1)
    assert final.reasons == [
        "generation 0 failed: PodDisrupted (SYSTEM); pod js16-train-workers-0-0 disrupted by the cluster (EvictionByEvictionAPI): Eviction API: evicting"
    ]


def test_r14_1_a_condition_time_out_of_range_is_dead_lettered() -> None:
    p = pod("far", labels=attempt_labels(run="far"), containers={"main": running()})
    bad = updated(p, conditions=[disruption_target(at=T0)])
    bad["status"]["conditions"][0]["lastTransitionTime"] = "9999-12-31T00:00:00Z"
    out = run([record(p, T0 - minutes(5), "ADDED"), record(bad, T0)])
    (letter,) = [e.value for e in out if e.topic == DEAD_LETTER]
    assert "DisruptionTarget lastTransitionTime 9999-12-31" in letter.reason


def test_r14_1_long_reasons_and_messages_are_cut_and_counted() -> None:
    rules = Rules(max_token_chars=16, max_message_chars=32, disruption_reasons=("EvictionByEvictionAPIAndMore",))
    p = pod("cut", labels=attempt_labels(run="cut"), containers={"main": running()})
    long = updated(p, phase="Failed", conditions=[disruption_target("EvictionByEvictionAPIAndMore", T0 - minutes(1), "x" * 100)],
                   containerStatuses=[{"name": "main", "state": terminated(143, T0)}])  # fmt: skip
    pipeline = new_pipeline(rules)
    for r in [record(p, T0 - minutes(5), "ADDED"), record(long, T0)]:
        pipeline.feed(r["topic"], r["key"], orjson.dumps(r["value"]))
    assert pipeline.counts["truncated_texts"] >= 2
    # The reason was cut: it no longer matches the listed one, so it disrupts nothing.
    assert only_verdict([record(p, T0 - minutes(5), "ADDED"), record(long, T0)], rules).code == "Error"


def test_r14_1_every_evidence_story_has_the_verdict_its_docstring_says() -> None:
    codes = {name: {(v.code, v.kind) for v in final_verdicts(observed(story())).values()} for name, story in EVIDENCE_STORIES.items()}
    assert codes == {
        "jobset-drained-worker": {("PodDisrupted", "SYSTEM")},
        "pod-task-preempted": {("PodDisrupted", "SYSTEM")},
        "pod-bare-dra-unhealthy": {("GpuUnhealthy", "SYSTEM")},
        "jobset-gpu-unhealthy": {("FailedJobs", "SYSTEM")},
        "mpijob-xid79-drained": {("MPIJobFailed", "SYSTEM")},
    }
