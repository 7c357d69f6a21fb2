"""SPEC R9: the Kueue preemption / readmission state machine of a JobSet (scenarios S60–S77)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.identity import kueue
from app.core.kinds.registry import JOBSET
from app.core.stages.gangs import GangInput, fold_gang, gang_expires_at, gang_key
from app.core.base.progress import NO_PROGRESS
from app.core.base.rules import DEFAULT_RULES, Rules
from app.model.envelope import JOBS, SOURCE_TOPICS, WORKLOADS
from app.model.k8s import Job, Workload
from app.model.records import GANG_TRANSITIONS, EvictionCause, GangTransition
from tests.unit.drivers import new_pipeline
from tests.unit.gang_builders import (
    CLUSTER,
    JobWorld,
    JOBSET_NAME,
    JOBSET_UID,
    NAMESPACE,
    V1BETA1,
    WORKLOAD_UID,
    GangWorld,
    Line,
    feed,
    interleave,
    jobset,
    k8s_time,
    to_input,
    workload,
)
from tests.unit.make_gang_example import EXAMPLE, example_world, render

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver

PREEMPTION_TEXT = (
    "Preempted to accommodate a workload (UID: c7d2f3a1-9b8e-4d6c-a5f4-3e2d1c0b9a87, "
    "JobUID: 0d9e8f7a-6b5c-4d3e-2f1a-0b9c8d7e6f5a) due to prioritization in the ClusterQueue; "
    "preemptor path: /gpu-cq; preemptee path: /gpu-cq"
)
SYSTEM = "; this does not count against the task's retries"
USER = "; this uses one of the task's retries"


def transitions(lines: list[Line], rules: Rules = DEFAULT_RULES, *, end: bool = True) -> list[GangTransition]:
    """Every transition the lines give, as a trace (`end`: its end settles what is
    pending) or as a live stream so far (`end=False`: only progress records settle)."""
    _, emitted = feed(lines, rules, end=end)
    return [e.value for e in emitted if e.topic == GANG_TRANSITIONS]


def last(world: GangWorld, rules: Rules = DEFAULT_RULES, *, end: bool = True) -> GangTransition:
    return transitions(world.records, rules, end=end)[-1]


def steps(lines: list[Line], rules: Rules = DEFAULT_RULES, *, end: bool = True) -> list[tuple[str, str]]:
    return [(t.to, t.reason) for t in transitions(lines, rules, end=end)]


# --- R9.1 the JobSet's Workload ------------------------------------------------------


def test_r9_1_workload_is_linked_by_job_uid_label_and_keyed_by_cluster() -> None:
    wl = to_input(GangWorld().create_workload().records[0]).workload
    js = to_input(GangWorld().create_jobset().records[0]).jobset
    assert wl is not None and js is not None
    assert gang_key(CLUSTER, wl, DEFAULT_RULES) == gang_key(CLUSTER, js, DEFAULT_RULES) == f"{CLUSTER}/{JOBSET_UID}"


def test_r9_1_workload_without_label_is_linked_by_controller_owner_reference() -> None:
    world = GangWorld(policy="true", labelled=False).start().preempt().suspend().release_quota()
    assert last(world).to == "WaitingForReadmission"


def test_r9_1_workload_of_another_kind_or_a_non_jobset_job_has_no_gang() -> None:
    """Under the orchestrator's labels only a JobSet has a gang (R9); R15 follows the other
    kinds of workload attempts (tests/unit/test_r15_requeue.py)."""
    r9 = Rules(workload_identity=False)
    batch = workload(owned=False)
    batch["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": JOBSET_UID, "controller": True}]
    raycluster = {**jobset(), "kind": "RayJob", "apiVersion": "ray.io/v1"}  # the orchestrator's labels
    assert gang_key(CLUSTER, msgspec.json.decode(msgspec.json.encode(batch), type=Workload), r9) is None
    assert gang_key(CLUSTER, msgspec.convert(raycluster, Job), r9) is None
    assert gang_key(CLUSTER, msgspec.convert(raycluster, Job), DEFAULT_RULES) is None
    assert gang_key(CLUSTER, msgspec.json.decode(msgspec.json.encode(workload(labelled=False, owned=False)), type=Workload), DEFAULT_RULES) is None


def test_r9_1_workload_seen_before_its_jobset_is_held() -> None:
    world = GangWorld(policy="true").start().preempt().suspend().release_quota()
    pipeline = new_pipeline()
    state, emitted = feed(world.workload_records(), DEFAULT_RULES, pipeline)
    assert emitted == [] and state is not None and state.jobset is None
    state, emitted = feed(world.jobset_records(), DEFAULT_RULES, pipeline)
    assert [e.value.to for e in emitted] == ["Running", "WaitingForReadmission"]


def test_r9_1_the_newest_workload_is_used_s77() -> None:
    # S77: `older` (created first) shows a NodeFailures eviction, `newer` a preemption.
    older = GangWorld(policy="true", workload_uid="older-uid", workload_name="jobset-run-abc-a0-1-older")
    older.create_workload().admit().evict("NodeFailures")
    world = GangWorld(policy="true", workload_uid="newer-uid", workload_name="jobset-run-abc-a0-1-newer")
    world.create_jobset().create_workload(created=world.now + timedelta(seconds=100))
    world.admit().unsuspend().workers_ready().pods_ready().preempt().suspend().release_quota()
    ended = transitions(older.records + world.records)
    assert ended[-1].to == "WaitingForReadmission"
    assert ended[-1].workload is not None and ended[-1].workload.uid == "newer-uid"


# --- R9.2 the policy -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotation", "default", "expected"),
    [
        ("true", False, "WaitingForReadmission"),
        ("false", True, "Ended"),
        (None, False, "Ended"),
        (None, True, "WaitingForReadmission"),
        ("yes", False, "Ended"),
        ("True", True, "WaitingForReadmission"),
    ],
)
def test_r9_2_policy_from_annotation_else_configured_default(annotation: str | None, default: bool, expected: str) -> None:
    rules = Rules(resume_after_preemption=default)
    world = GangWorld(policy=annotation).start().preempt().suspend().release_quota()
    assert last(world, rules).to == expected


# --- R9.3 suspended and started ------------------------------------------------------


def test_r9_3_suspended_by_spec_or_by_newest_true_condition() -> None:
    js = jobset(suspend=False)
    js["status"]["conditions"] = [
        {"type": "StartupPolicyCompleted", "status": "True", "reason": "InOrderStartupPolicyCompleted", "message": "", "lastTransitionTime": "2026-09-15T10:00:00Z"},
        {"type": "Suspended", "status": "True", "reason": "SuspendedJobs", "message": "jobset is suspended", "lastTransitionTime": "2026-09-15T10:05:00Z"},
    ]
    assert JOBSET.suspended(msgspec.convert(js, Job))
    js["status"]["conditions"][1]["status"] = "False"
    assert not JOBSET.suspended(msgspec.convert(js, Job))
    assert JOBSET.suspended(msgspec.convert(jobset(suspend=True), Job))


def test_r9_3_eviction_before_start_keeps_the_gang_pending() -> None:
    # Preempted after admission but before Kueue released the JobSet: nothing has started.
    world = GangWorld(policy="false").create_jobset().create_workload().admit().preempt().release_quota()
    assert transitions(world.records) == []


def test_r9_3_released_by_kueue_counts_as_started_before_any_worker_is_ready() -> None:
    world = GangWorld(policy="false").create_jobset().create_workload().admit().unsuspend()
    world.evict("PodsReadyTimeout").suspend().release_quota()
    got = [(t.to, t.code, t.retry) for t in transitions(world.records)]
    assert (got[0], got[-1]) == (("Running", None, None), ("Ended", "GangEvicted", "system"))


def test_r9_3_restarts_or_ready_workers_count_as_started() -> None:
    world = GangWorld(policy="false").create_jobset().create_workload().admit().unsuspend().restart()
    assert [t.to for t in transitions(world.records)] == ["Running"]


# --- R9.4 preemption -----------------------------------------------------------------


def test_r9_4_preempted_with_policy_on_waits_for_readmission_s67() -> None:
    world = GangWorld(policy="true").start().preempt("InClusterQueue").suspend().release_quota()
    waiting = last(world)
    assert (waiting.from_, waiting.to, waiting.code, waiting.retry) == ("Running", "WaitingForReadmission", None, None)
    assert waiting.reason == f"gang evicted by kueue (Preempted, InClusterQueue): {PREEMPTION_TEXT}; waiting for re-admission"


def test_r9_4_preempted_with_policy_off_ends_and_uses_a_retry_s60() -> None:
    world = GangWorld(policy="false").start().preempt("InClusterQueue").suspend().release_quota()
    ended = last(world)
    assert (ended.to, ended.code, ended.retry) == ("Ended", "GangEvicted", "user")
    assert ended.reason == f"gang evicted by kueue (Preempted, InClusterQueue): {PREEMPTION_TEXT}{USER}"


@pytest.mark.parametrize("detail", ["InCohortReclamation", "InCohortFairSharing", "InCohortReclaimWhileBorrowing"])
def test_r9_4_preempted_condition_reason_is_carried(detail: str) -> None:
    world = GangWorld(policy="true").start().preempt(detail).suspend().release_quota()
    assert last(world).reason.startswith(f"gang evicted by kueue (Preempted, {detail}): Preempted to accommodate")


# --- R9.5 every other eviction -------------------------------------------------------


@pytest.mark.parametrize("policy", ["true", "false"])
@pytest.mark.parametrize(
    "reason",
    ["PodsReadyTimeout", "NodeFailures", "AdmissionCheck", "ClusterQueueStopped", "LocalQueueStopped", "DeactivatedDueToRequeuingLimitExceeded", "WorkloadSliceReplaced", "SomethingNew"],
)
def test_r9_5_other_evictions_end_as_system_whatever_the_policy_s64_s72(policy: str, reason: str) -> None:
    world = GangWorld(policy=policy).start().evict(reason).suspend().release_quota()
    ended = last(world)
    assert (ended.to, ended.code, ended.retry) == ("Ended", "GangEvicted", "system")
    message = world.eviction_message
    assert ended.reason == f"gang evicted by kueue ({reason})" + (f": {message}" if message else "") + SYSTEM


@pytest.mark.parametrize("policy", ["true", "false"])
def test_r9_5_deactivated_is_system_s63(policy: str) -> None:
    world = GangWorld(policy=policy).start().deactivate().suspend().release_quota()
    assert last(world).reason == f"gang evicted by kueue (Deactivated): The workload is deactivated{SYSTEM}"


@pytest.mark.parametrize("policy", ["true", "false"])
def test_r9_5_maximum_execution_time_is_the_tasks_own_doing_s62_s74(policy: str) -> None:
    world = GangWorld(policy=policy).start().exceed_max_execution_time().suspend().release_quota()
    ended = last(world)
    assert (ended.to, ended.code, ended.retry) == ("Ended", "GangEvicted", "user")
    assert ended.reason == (
        "gang evicted by kueue (DeactivatedDueToMaximumExecutionTimeExceeded): "
        f"The workload is deactivated due to exceeding the maximum execution time{USER}"
    )


def test_r9_5_eviction_message_is_trimmed_s64() -> None:
    world = GangWorld(policy="true").start().evict("PodsReadyTimeout", "  Exceeded the PodsReady timeout team-a/wl  ")
    world.suspend().release_quota()
    assert last(world).reason == f"gang evicted by kueue (PodsReadyTimeout): Exceeded the PodsReady timeout team-a/wl{SYSTEM}"


# --- R9.6 suspended before Kueue wrote Evicted ---------------------------------------


def test_r9_6_suspended_before_evicted_waits_then_decides_s71() -> None:
    world = GangWorld(policy="true").start().suspend()
    assert [t.to for t in transitions(world.records, end=False)] == ["Running"]  # undecided: nothing emitted
    world.preempt().release_quota()
    evicted_at = to_input(world.workload_records()[-2]).observed_at
    # Was the JobSet still suspended when Kueue evicted? Neither its records nor progress say yet.
    assert [t.to for t in transitions(world.records, end=False)] == ["Running"]
    world.progress(JOBS)  # the JobSet's watch has delivered everything up to now: it stayed suspended
    waiting = last(world, end=False)
    assert (waiting.to, waiting.at) == ("WaitingForReadmission", evicted_at)


def test_r9_6_an_eviction_recorded_after_the_watch_skew_does_not_explain_the_suspension() -> None:
    world = GangWorld(policy="true").start().suspend().jobs_stopped()
    suspended_at = to_input(world.jobset_records()[-3]).observed_at
    world.pause(DEFAULT_RULES.watch_skew_seconds + 1).preempt().release_quota()
    ended = last(world)
    assert (ended.to, ended.code, ended.retry, ended.at) == ("Ended", "GangEvicted", "system", suspended_at + DEFAULT_RULES.watch_skew)
    assert ended.cause == EvictionCause(reason="", detail="", message="")


def test_r9_6_no_eviction_by_the_workloads_watermark_ends_as_system_whatever_the_policy() -> None:
    for policy in ("true", "false"):
        world = GangWorld(policy=policy).start().suspend().jobs_stopped()
        suspended_at = to_input(world.jobset_records()[-3]).observed_at
        world.pause(DEFAULT_RULES.watch_skew_seconds / 2).progress()
        assert [t.to for t in transitions(world.records, end=False)] == ["Running"]  # not yet past the skew
        world.pause(DEFAULT_RULES.watch_skew_seconds).progress()
        ended = last(world, end=False)
        assert (ended.to, ended.code, ended.retry) == ("Ended", "GangEvicted", "system")
        assert ended.at == suspended_at + DEFAULT_RULES.watch_skew  # the deadline, not when progress came
        assert ended.reason == f"gang evicted by kueue{SYSTEM}"


def test_r9_6_policy_off_also_waits_so_the_jobset_arriving_first_changes_nothing() -> None:
    # The example: JobSet suspended, Workload Evicted=True Preempted not seen yet.
    world = GangWorld(policy="false").start().preempt().suspend().release_quota()
    jobsets, workloads = world.jobset_records(), world.workload_records()
    admitted = 4  # the Workload's records up to PodsReady; its eviction comes after every JobSet record
    jobset_first = workloads[:admitted] + jobsets + workloads[admitted:]
    for lines in (world.records, jobset_first):
        ended = transitions(lines)[-1]
        assert (ended.to, ended.retry, ended.at) == ("Ended", "user", last(world).at)


def test_r9_6_policy_off_without_the_wait_ends_as_system_at_once_s66() -> None:
    world = GangWorld(policy="false").start().suspend()
    ended = last(world, Rules(await_eviction_with_policy_off=False))
    assert (ended.to, ended.code, ended.retry) == ("Ended", "GangEvicted", "system")
    assert ended.reason == f"gang evicted by kueue{SYSTEM}"


def test_r9_6_suspension_nothing_evicted_then_running_again_is_running() -> None:
    # Someone else suspended the JobSet and resumed it within the skew; once progress shows
    # Kueue recorded no eviction meanwhile, the attempt goes on.
    world = GangWorld(policy="true").start().suspend().unsuspend().workers_ready()
    state, emitted = feed(world.records, DEFAULT_RULES, end=False)
    assert [e.value.to for e in emitted if e.topic == GANG_TRANSITIONS] == ["Running"] and state is not None and state.blocked
    world.progress()
    state, emitted = feed(world.records, DEFAULT_RULES, end=False)
    assert [e.value.to for e in emitted if e.topic == GANG_TRANSITIONS] == ["Running"] and state is not None and not state.blocked
    world.complete().finish()
    assert [t.to for t in transitions(world.records)] == ["Running", "Completed"]


def test_r9_6b_ending_texts() -> None:
    preempted = kueue.Classified("Preempted", "InClusterQueue", "M", "user")
    assert kueue.ending_reason(preempted) == "gang evicted by kueue (Preempted, InClusterQueue): M; this uses one of the task's retries"
    assert kueue.ending_reason(kueue.Classified("NodeFailures", "", "", "system")) == f"gang evicted by kueue (NodeFailures){SYSTEM}"
    assert kueue.ending_reason(None) == f"gang evicted by kueue{SYSTEM}"


# --- R9.7 Workload not known ---------------------------------------------------------


def test_r9_7_no_workload_ever_seen_ends_once_the_workloads_watermark_passes_the_skew_s65_s73() -> None:
    world = GangWorld(policy="true").create_jobset().unsuspend().workers_ready()
    world.suspend(status_update=False)
    suspended_at = to_input(world.jobset_records()[-1]).observed_at
    assert transitions(world.jobset_records(), end=False) == []  # is a Workload record in flight? unknown
    world.pause(DEFAULT_RULES.watch_skew_seconds + 1).progress()
    ended = transitions(world.records, end=False)[-1]
    assert (ended.to, ended.code, ended.retry, ended.reason) == ("Ended", "GangEvicted", "system", f"gang evicted by kueue{SYSTEM}")
    assert ended.at == suspended_at + DEFAULT_RULES.watch_skew and ended.workload is None


def test_r9_7_deleted_workload_ends_as_system_s73() -> None:
    world = GangWorld(policy="true").start().delete_workload().suspend()
    ended = last(world)
    assert (ended.to, ended.code, ended.retry, ended.reason) == ("Ended", "GangEvicted", "system", f"gang evicted by kueue{SYSTEM}")


def test_r9_7_workload_deleted_while_waiting_ends_as_system() -> None:
    world = GangWorld(policy="true").start().preempt().suspend().release_quota().delete_workload()
    assert (last(world).from_, last(world).to, last(world).retry) == ("WaitingForReadmission", "Ended", "system")


# --- R9.8 spec.active: false ---------------------------------------------------------


def test_r9_8_deactivated_while_waiting_ends_as_system_without_the_stale_message_s69() -> None:
    world = GangWorld(policy="true").start().preempt().suspend().release_quota().deactivate(evicts=False)
    ended = last(world)
    assert (ended.from_, ended.to, ended.code, ended.retry) == ("WaitingForReadmission", "Ended", "GangEvicted", "system")
    assert ended.reason == f"gang evicted by kueue (Deactivated){SYSTEM}"


@pytest.mark.parametrize("policy", ["true", "false"])
def test_r9_8_inactive_with_stale_preempted_reason_is_a_deactivation_s70(policy: str) -> None:
    world = GangWorld(policy=policy).start().preempt().deactivate(evicts=False).suspend().release_quota()
    ended = last(world)
    assert (ended.to, ended.retry, ended.reason) == ("Ended", "system", f"gang evicted by kueue (Deactivated){SYSTEM}")


def test_r9_8_deactivation_reason_already_deactivated_is_kept_s74() -> None:
    world = GangWorld(policy="true").start().exceed_max_execution_time().suspend().release_quota()
    assert last(world).reason.startswith("gang evicted by kueue (DeactivatedDueToMaximumExecutionTimeExceeded): ")


def test_r9_8_inactive_before_kueue_records_the_eviction_is_checked_first() -> None:
    world = GangWorld(policy="true").start().deactivate(evicts=False)  # Kueue has not evicted yet
    world.suspend().release_quota()
    assert (last(world).to, last(world).reason) == ("Ended", f"gang evicted by kueue (Deactivated){SYSTEM}")


# --- R9.9 readmission ----------------------------------------------------------------


def _time(text: str):  # type: ignore[no-untyped-def]
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _evicted_at(world: GangWorld) -> str:
    """The lastTransitionTime of the Workload's first Evicted=True, as its records showed it."""
    for line in world.workload_records():
        for c in line["value"]["object"]["status"].get("conditions", []):
            if c["type"] == "Evicted" and c["status"] == "True":
                return c["lastTransitionTime"]
    raise AssertionError("no eviction recorded")


def test_r9_9_readmission_returns_to_running_with_the_wait_time_then_completes_s68() -> None:
    world = GangWorld(policy="true").start().preempt().suspend().release_quota().pause(600)
    world.readmit().unsuspend().workers_ready().complete().finish()
    got = transitions(world.records)
    assert [(t.from_, t.to) for t in got] == [
        ("Pending", "Running"),
        ("Running", "WaitingForReadmission"),
        ("WaitingForReadmission", "Running"),
        ("Running", "Completed"),
    ]
    waiting, readmitted = got[1], got[2]
    assert readmitted.reason == "re-admitted by kueue; running"
    # The wait is Kueue's: from the Workload's Evicted condition to its Admitted one (issue 29).
    conditions = {c["type"]: c["lastTransitionTime"] for c in world.wl["status"]["conditions"]}
    assert readmitted.waited_seconds == (_time(conditions["Admitted"]) - _time(_evicted_at(world))).total_seconds() > 600
    assert readmitted.attempt == waiting.attempt == "1"  # same attempt


def test_r9_9_evicted_false_while_still_suspended_keeps_waiting() -> None:
    world = GangWorld(policy="true").start().preempt().suspend().release_quota().readmit()
    assert last(world).to == "WaitingForReadmission"
    world.unsuspend()
    assert last(world).to == "Running"


def test_r9_9_preempted_again_after_readmission_waits_again() -> None:
    world = GangWorld(policy="true").start().preempt().suspend().release_quota().readmit().unsuspend().workers_ready()
    world.preempt("InCohortReclamation").suspend().release_quota()
    assert [t.to for t in transitions(world.records)] == ["Running", "WaitingForReadmission", "Running", "WaitingForReadmission"]
    assert "(Preempted, InCohortReclamation)" in last(world).reason


# --- R9.10 JobSet Completed / Failed -------------------------------------------------


def test_r9_10_completed_condition_completes_the_gang() -> None:
    world = GangWorld(policy="true").start().complete().finish()
    done = last(world)
    assert (done.from_, done.to, done.code, done.retry) == ("Running", "Completed", None, None)
    assert done.reason == "jobset completed (AllJobsCompleted): jobset completed successfully"


def test_r9_10_failed_condition_ends_with_its_reason_as_code() -> None:
    world = GangWorld(policy="true").start().fail()
    done = last(world)
    assert (done.to, done.code, done.retry) == ("Ended", "FailedJobs", None)
    assert done.reason == "jobset failed (FailedJobs): jobset failed due to one or more job failures"


# --- R9.11 the transition record -----------------------------------------------------


def test_r9_11_transition_record_fields() -> None:
    world = GangWorld(policy="true").start().preempt().suspend().release_quota()
    waiting = last(world)
    suspended_at = world.jobset_records()[-2]["value"]["observed_at"]
    encoded = msgspec.json.decode(msgspec.json.encode(waiting))
    assert encoded == {
        "schema": "faultline.GangTransition/v2",
        "key": f"{CLUSTER}/{NAMESPACE}/{JOBSET_NAME}",
        "cluster": CLUSTER,
        "namespace": NAMESPACE,
        "identity": "labels",
        "jobset": {"name": JOBSET_NAME, "uid": JOBSET_UID},
        "workload": {"name": f"jobset-{JOBSET_NAME}-3f9a2", "uid": WORKLOAD_UID},
        "run": "run-abc",
        "action": "a0",
        "attempt": "1",
        "tracked": {"kind": "JobSet", "name": JOBSET_NAME, "uid": JOBSET_UID},
        "queue": "team-a",
        "from": "Running",
        "to": "WaitingForReadmission",
        "code": None,
        "retry": None,
        "cause": {"reason": "Preempted", "detail": "InClusterQueue", "message": PREEMPTION_TEXT, "underlying_cause": ""},
        "reason": f"gang evicted by kueue (Preempted, InClusterQueue): {PREEMPTION_TEXT}; waiting for re-admission",
        "at": suspended_at,  # the JobSet seen suspended, after the Workload seen evicted
        "waited_seconds": None,
        "rules_version": DEFAULT_RULES.version,
        "reconstructed": False,
    }
    _, emitted = feed(world.records, DEFAULT_RULES)
    assert emitted[-1].key == f"{CLUSTER}/{NAMESPACE}/{JOBSET_NAME}"


def test_r9_11_a_transition_names_the_workload_as_it_stood_then_whatever_the_order() -> None:
    # The JobSet runs (its workers ready) before Kueue creates its Workload.
    world = GangWorld(policy="false").create_jobset().unsuspend().workers_ready()
    world.create_workload().admit().preempt().suspend().release_quota()
    jobsets, workloads = world.jobset_records(), world.workload_records()
    for lines in (world.records, jobsets + workloads, workloads + jobsets):
        got = transitions(lines)
        assert [(t.to, t.workload.uid if t.workload else None) for t in got] == [("Running", None), ("Ended", WORKLOAD_UID)]
    # Running is not taken before the Workload as it stood then is known.
    assert transitions(jobsets[:3], end=False) == []


def test_r9_11_attempt_labels_are_null_when_absent() -> None:
    world = GangWorld(policy="true", labels={}).start()
    running = last(world)
    assert (running.run, running.action, running.attempt) == (None, None, None)


def test_r9_11_identical_recomputation_emits_nothing() -> None:
    world = GangWorld(policy="true").start().preempt().suspend().release_quota()
    state, _ = feed(world.records, DEFAULT_RULES)
    for line in world.records[-3:]:
        state, emitted = fold_gang(state, f"{CLUSTER}/{JOBSET_UID}", to_input(line), DEFAULT_RULES, NO_PROGRESS)
        assert emitted == []


def test_r9_11_an_ending_is_final() -> None:
    world = GangWorld(policy="false").start().preempt().suspend().release_quota()
    world.readmit().unsuspend().workers_ready().complete().finish()
    assert [t.to for t in transitions(world.records)] == ["Running", "Ended"]


def test_gang_input_needs_exactly_one_object() -> None:
    js = msgspec.convert(jobset(), Job)
    wl = msgspec.json.decode(msgspec.json.encode(workload()), type=Workload)
    at = to_input(GangWorld().create_jobset().records[0]).observed_at
    with pytest.raises(ValueError, match="exactly one of jobset or workload"):
        GangInput(change="ADDED", observed_at=at, cluster=CLUSTER, jobset=js, workload=wl)
    with pytest.raises(ValueError, match="exactly one of jobset or workload"):
        GangInput(change="ADDED", observed_at=at, cluster=CLUSTER)


# --- Kueue API versions --------------------------------------------------------------


def test_v1beta1_workload_reads_the_same_as_v1beta2() -> None:
    def story(api_version: str) -> list[tuple[str, str | None, str | None, str, float | None]]:
        world = GangWorld(policy="true", api_version=api_version).start().preempt().suspend().release_quota()
        world.readmit().unsuspend().workers_ready().preempt().deactivate(evicts=False)
        return [(t.to, t.code, t.retry, t.reason, t.waited_seconds) for t in transitions(world.records)]

    assert GangWorld(api_version=V1BETA1).wl["apiVersion"] == V1BETA1
    assert story(V1BETA1) == story("kueue.x-k8s.io/v1beta2")


# --- R7 order, determinism, retention ------------------------------------------------

PREEMPTION_DETAILS = ["InClusterQueue", "InCohortReclamation", "InCohortFairSharing", "InCohortReclaimWhileBorrowing"]
EVICTIONS = [
    "Preempted",
    "Preempted",
    "Preempted",
    "PodsReadyTimeout",
    "NodeFailures",
    "ClusterQueueStopped",
    "Deactivated",
    "DeactivatedDueToMaximumExecutionTimeExceeded",
    None,  # suspended by someone else; Kueue releases it again
]


@st.composite
def scenarios(draw: st.DrawFn) -> GangWorld:
    """A job and its Workload, written in the order the controllers write them: a JobSet
    under an orchestrator's labels (R9), or a workload attempt (R15): a bare JobSet, a
    batch Job."""
    policy = draw(st.sampled_from(["true", "true", "false", None, "maybe"]))
    # Steps between writes from 1 s to past the watch skew: evictions recorded in time and too late.
    step = timedelta(seconds=draw(st.sampled_from([1, 1, 4, 11])))
    api_version = draw(st.sampled_from([V1BETA1, "kueue.x-k8s.io/v1beta2"]))
    kind = draw(st.sampled_from(["labels", "labels", "jobset", "job"]))
    if kind == "job":
        world: GangWorld = JobWorld(policy=policy, api_version=api_version, step=step)
    else:
        world = GangWorld(policy=policy, api_version=api_version, step=step, labels=None if kind == "labels" else {})
    world.start()
    for _ in range(draw(st.integers(0, 3))):
        reason = draw(st.sampled_from(EVICTIONS))
        jobset_first = draw(st.booleans())  # the bridge saw the suspension before the eviction
        updates = draw(st.booleans())
        if reason is None:
            world.suspend(status_update=updates).unsuspend().workers_ready()
            continue
        if jobset_first:
            world.suspend(status_update=updates)
        if reason == "Preempted":
            world.preempt(draw(st.sampled_from(PREEMPTION_DETAILS)))
        elif reason == "Deactivated":
            world.deactivate()
        elif reason == "DeactivatedDueToMaximumExecutionTimeExceeded":
            world.exceed_max_execution_time()
        else:
            world.evict(reason)
        if not jobset_first:
            world.suspend(status_update=updates)
        if draw(st.booleans()):
            world.jobs_stopped()
        if draw(st.booleans()):
            world.release_quota()
        after = draw(st.sampled_from(["readmit", "readmit", "deactivate", "delete", "nothing"]))
        if after == "readmit" and world.wl["spec"]["active"]:
            world.readmit().unsuspend().workers_ready()
            continue
        if after == "deactivate":
            world.deactivate(evicts=False)
        elif after == "delete":
            world.delete_workload()
        return world
    ending = draw(st.sampled_from(["complete", "fail", "delete", "none"]))
    if ending == "complete":
        world.complete().finish()
    elif ending == "fail":
        world.fail().finish()
    elif ending == "delete":
        world.delete_jobset().delete_workload()
    return world



def outcome(lines: list[Line]) -> tuple[tuple[str, str | None, str | None] | None, list[tuple[str, str | None, str | None, str, str]]]:
    state, emitted = feed(lines, DEFAULT_RULES)
    final = (state.status.state, state.status.code, state.status.retry) if state and state.status else None
    endings = [
        (t.to, t.code, t.retry, t.reason, t.at.isoformat())
        for t in (e.value for e in emitted if e.topic == GANG_TRANSITIONS)
        if t.to in ("Ended", "Completed")
    ]
    return final, endings


def with_progress(lines: list[Line], marks: list[bool]) -> list[Line]:
    """One topic's records with the bridge's progress after some of them (`marks[i]`):
    a BOOKMARK dated when the topic's next record was observed (every change before it
    has been published, SPEC R12.1), or a second later after the last one."""
    out: list[Line] = []
    for i, line in enumerate(lines):
        out.append(line)
        if not marks[i]:
            continue
        following = lines[i + 1]["value"]["observed_at"] if i + 1 < len(lines) else None
        at = following or (to_input(line).observed_at + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        value = {"type": "BOOKMARK", "observed_at": at, "cluster": CLUSTER, "object": {"kind": "Progress", "metadata": {}}}
        out.append({"topic": line["topic"], "key": "progress", "value": value})
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=scenarios(), data=st.data())
def test_r7_1_final_state_does_not_depend_on_how_jobset_and_workload_records_interleave(world: GangWorld, data: st.DataObject) -> None:
    """R7.1 with progress (R12): any interleaving of the two watches' records, each with
    the bridge's progress somewhere in it, gives the same final state and the same ending,
    and an ending taken before the end of the input is that ending."""
    jobsets, workloads = world.jobset_records(), world.workload_records()
    jobsets = with_progress(jobsets, data.draw(st.lists(st.booleans(), min_size=len(jobsets), max_size=len(jobsets)), label="JobSet progress"))
    workloads = with_progress(workloads, data.draw(st.lists(st.booleans(), min_size=len(workloads), max_size=len(workloads)), label="Workload progress"))
    picks = data.draw(st.permutations([True] * len(jobsets) + [False] * len(workloads)), label="True: next JobSet record")
    shuffled = interleave(jobsets, workloads, picks)
    final, endings = outcome(shuffled)
    assert (final, endings) == outcome(world.records)  # the order the bridge observed them
    assert len(endings) <= 1
    # Every transition, not only the ending, in the same order (R9.11); before the end of
    # the input, progress has settled a prefix of them.
    every = transitions(world.records)
    assert transitions(shuffled) == every
    live = transitions(shuffled, end=False)
    assert live == every[: len(live)]


def test_r12_4_an_eviction_is_not_read_until_the_jobset_is_known_to_have_stayed_suspended() -> None:
    world = GangWorld(policy="false").start().suspend()
    held = len(world.jobset_records())
    world.unsuspend().workers_ready()  # running again...
    world.preempt().progress(WORKLOADS)  # ...when Kueue records an eviction; the JobSet's watch lags
    jobsets, workloads = world.jobset_records(), world.workload_records()
    early = jobsets[:held] + workloads  # the JobSet's resumption still in flight
    assert [t.to for t in transitions(early, end=False)] == ["Running"]
    assert [t.to for t in transitions(early + jobsets[held:], end=False)] == ["Running"]


def test_r12_4_workload_records_arriving_after_every_jobset_record_change_nothing() -> None:
    # Without progress a missing Workload and one whose records are all still in flight
    # look the same; the watermark tells them apart.
    world = GangWorld(policy="true").start().preempt().suspend().release_quota()
    late = world.jobset_records() + world.workload_records()
    assert transitions(late) == transitions(world.records)
    assert transitions(world.jobset_records(), end=False) == []  # nothing taken while the Workload is unknown


def test_r7_3_same_records_same_bytes() -> None:
    world = GangWorld(policy="true").start().preempt().suspend().release_quota().readmit().unsuspend().complete()
    first = [msgspec.json.encode(t) for t in transitions(world.records)]
    assert first == [msgspec.json.encode(t) for t in transitions(world.records)]


def test_r7_4_ended_gang_expires_after_retention_in_stream_time() -> None:
    world = GangWorld(policy="false").start().preempt().suspend().release_quota()
    state, _ = feed(world.records, DEFAULT_RULES)
    assert state is not None and state.status is not None
    ended_at = state.status.at
    assert gang_expires_at(state, DEFAULT_RULES) == ended_at + DEFAULT_RULES.retention


def test_r7_4_waiting_gang_expires_only_once_its_jobset_is_deleted() -> None:
    world = GangWorld(policy="true").start().preempt().suspend().release_quota()
    pipeline = new_pipeline()
    state, _ = feed(world.records, DEFAULT_RULES, pipeline)
    assert state is not None
    assert gang_expires_at(state, DEFAULT_RULES) is None  # not by time, however far
    state, emitted = feed(world.delete_jobset().records[-1:], DEFAULT_RULES, pipeline)
    assert emitted == [] and state is not None and state.deleted_at is not None
    expires = gang_expires_at(state, DEFAULT_RULES)
    assert expires is not None and expires <= state.deleted_at + DEFAULT_RULES.retention


def test_r7_4_identical_jobset_observations_keep_the_state_small() -> None:
    world = GangWorld(policy="true").start()
    for _ in range(50):
        world.workers_ready()  # status resyncs that change nothing R9 reads
    world.preempt().suspend().release_quota()
    state, _ = feed(world.records, DEFAULT_RULES)
    assert state is not None and state.jobset is not None
    assert len(state.jobset.views) < 12
    assert last(world).to == "WaitingForReadmission"


def test_r7_4_workload_whose_jobset_never_came_expires() -> None:
    state, _ = feed(GangWorld().create_workload().records, DEFAULT_RULES)
    assert state is not None
    assert gang_expires_at(state, DEFAULT_RULES) == state.last_seen + DEFAULT_RULES.retention


# --- the example trace ---------------------------------------------------------------


def test_example_trace_is_what_the_generator_writes() -> None:
    assert Path(EXAMPLE).read_text() == render(example_world())


def test_example_trace_preempt_wait_readmit_complete() -> None:
    lines = [msgspec.json.decode(raw) for raw in Path(EXAMPLE).read_bytes().splitlines()]
    changes = [line for line in lines if line["value"]["type"] != "BOOKMARK"]
    assert {line["topic"] for line in changes} == {JOBS, WORKLOADS}  # the gang's own records
    assert {line["topic"] for line in lines} == set(SOURCE_TOPICS)  # the bridge's progress on every topic
    got = transitions(lines)
    assert [(t.from_, t.to) for t in got] == [
        ("Pending", "Running"),
        ("Running", "WaitingForReadmission"),
        ("WaitingForReadmission", "Running"),
        ("Running", "Completed"),
    ]
    assert got[2].waited_seconds is not None and got[2].waited_seconds > 900
    assert {(t.run, t.action, t.attempt) for t in got} == {("run-abc", "a0", "1")}
