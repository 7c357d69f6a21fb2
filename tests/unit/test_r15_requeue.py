"""SPEC R15: Kueue for workload attempts (no orchestrator deletes anything: Kueue requeues
the workload and the same object resumes when readmitted). Every rule through every
driver; the same stories under an orchestrator's labels keep R9's answers."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import msgspec
import orjson
import pytest

from app.core.stages.gangs import gang_key
from app.core.base.rules import DEFAULT_RULES, Rules
from app.model.envelope import JOBS, WORKLOADS
from app.model.k8s import Job, Workload
from app.model.records import STUCK_READMISSIONS, GangTransition, StuckReadmission
from tests.unit.drivers import new_pipeline
from tests.unit.gang_builders import (
    CLUSTER,
    JOB_NAME,
    JOB_UID,
    JOBSET_NAME,
    JOBSET_UID,
    NAMESPACE,
    TRAINJOB_NAME,
    TRAINJOB_UID,
    V1BETA1,
    GangWorld,
    JobWorld,
    feed,
    trainjob_world,
    with_eviction_counts,
)
from tests.unit.gang_stories import one_side_folded, through_a_gap

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver


def transitions(world: GangWorld, rules: Rules = DEFAULT_RULES, *, end: bool = True) -> list[GangTransition]:
    return [e.value for e in feed(world.records, rules, end=end)[1]]


def path(world: GangWorld, rules: Rules = DEFAULT_RULES, *, end: bool = True) -> list[tuple[str, str]]:
    return [(t.from_, t.to) for t in transitions(world, rules, end=end)]


def bare(**kw) -> GangWorld:  # type: ignore[no-untyped-def]
    """A JobSet without an orchestrator's labels: a workload attempt (R13.1b)."""
    return GangWorld(labels={}, **kw)


WAITED_AND_BACK = [("Pending", "Running"), ("Running", "WaitingForReadmission"), ("WaitingForReadmission", "Running")]


# --- R15.1 the Workload ----------------------------------------------------------------------


def test_r15_1_a_workload_attempts_workload_is_found_by_its_jobs_uid_whatever_the_kind() -> None:
    for world, uid in ((bare(), JOBSET_UID), (trainjob_world(), TRAINJOB_UID), (JobWorld(), JOB_UID)):
        world.create_jobset().create_workload()
        job = msgspec.json.decode(orjson.dumps(world.jobset_records()[0]["value"]["object"]), type=Job)
        wl = msgspec.json.decode(orjson.dumps(world.workload_records()[0]["value"]["object"]), type=Workload)
        assert gang_key(CLUSTER, job, DEFAULT_RULES) == gang_key(CLUSTER, wl, DEFAULT_RULES) == f"{CLUSTER}/{uid}"


def test_r15_1_a_cpu_only_jobs_workload_keeps_no_gang_state() -> None:
    world = JobWorld(gpus=0).start().preempt().suspend()
    state, emitted = feed(world.records, DEFAULT_RULES)
    assert state is None and emitted == []


def test_r15_1_a_slice_replaced_by_a_newer_workload_is_neither_an_eviction_nor_an_end() -> None:
    """An elastic job scaled up: Kueue finishes the old slice (Finished, reason
    WorkloadSliceReplaced, after evicting it) and admits a newer Workload naming it; the
    job never stops running."""
    world = bare().start()
    old = world.wl
    world.wl = {**orjson.loads(orjson.dumps(old))}
    world.wl["metadata"].update(name=f"jobset-{JOBSET_NAME}-9d8e7", uid="0f0e0d0c-0b0a-4909-8807-060504030201")
    world.wl["metadata"]["annotations"]["kueue.x-k8s.io/workload-slice-replacement-for"] = f"{NAMESPACE}/jobset-{JOBSET_NAME}-3f9a2"
    world.create_workload(created=world.now + timedelta(seconds=30)).admit()
    world.wl, new = old, world.wl
    world.evict("WorkloadSliceReplaced", "Replaced to accommodate a new workload slice")
    world._wl_condition("Finished", "True", "WorkloadSliceReplaced", "Replaced to accommodate a new workload slice")
    world._workload()
    world.wl = new
    world.workers_ready().complete()
    assert path(world) == [("Pending", "Running"), ("Running", "Completed")]


def test_r15_1_workloads_at_v1beta1_are_read_as_at_v1beta2() -> None:
    for api_version in (V1BETA1, "kueue.x-k8s.io/v1beta2"):
        world = bare(api_version=api_version).start().preempt().suspend().release_quota().pause(60)
        world.readmit().unsuspend().workers_ready()
        assert path(world) == WAITED_AND_BACK, api_version


# --- R15.2 started, evicted: it waits ------------------------------------------------------


def test_r15_2_preempted_then_requeued_waits_and_the_same_object_resumes_and_completes() -> None:
    world = bare(policy="false").start().preempt().suspend().release_quota().pause(300)
    world.readmit().unsuspend().workers_ready().complete().finish()
    got = transitions(world)
    assert [(t.from_, t.to) for t in got] == [*WAITED_AND_BACK, ("Running", "Completed")]
    waiting, back = got[1], got[2]
    assert waiting.identity == "workload" and waiting.code is None and waiting.retry is None
    assert waiting.reason.startswith("gang evicted by kueue (Preempted, InClusterQueue): Preempted to accommodate")
    assert waiting.reason.endswith("; waiting for re-admission")
    assert back.waited_seconds is not None and back.waited_seconds > 300


@pytest.mark.parametrize("reason", ["NodeFailures", "PodsReadyTimeout", "ClusterQueueStopped", "AdmissionCheck", "SomethingNewInKueue0.30"])
def test_r15_2_any_eviction_of_a_workload_attempt_is_waited_out(reason: str) -> None:
    world = bare().start().evict(reason).suspend().release_quota().pause(30)
    world.readmit().unsuspend().workers_ready()
    got = transitions(world)
    assert [(t.from_, t.to) for t in got] == WAITED_AND_BACK
    assert got[1].cause is not None and got[1].cause.reason == reason  # an unknown reason is carried as text


def test_r15_2_the_reason_carries_kueues_underlying_cause() -> None:
    world = with_eviction_counts(bare().start(), ("NodeFailures", "TaintedNode", 1)).evict("NodeFailures").suspend()
    world.release_quota().pause(20)
    with_eviction_counts(world, ("NodeFailures", "TaintedNode", 1)).readmit().unsuspend().workers_ready()
    waiting = transitions(world)[1]
    assert waiting.cause is not None and waiting.cause.underlying_cause == "TaintedNode"
    assert "gang evicted by kueue (NodeFailures; underlying cause TaintedNode)" in waiting.reason


def test_r15_2_of_several_causes_the_one_whose_count_grew_is_named() -> None:
    # Evicted three times before this attempt's records begin (counted from its first record on).
    world = with_eviction_counts(bare(), ("NodeFailures", "TaintedNode", 1), ("NodeFailures", "NodeUnreachable", 2)).start()
    with_eviction_counts(world, ("NodeFailures", "TaintedNode", 2), ("NodeFailures", "NodeUnreachable", 2)).evict("NodeFailures")
    world.suspend().release_quota()
    assert transitions(world)[1].cause.underlying_cause == "TaintedNode"  # type: ignore[union-attr]


def test_r15_2_the_wait_is_kueues_from_eviction_to_admission() -> None:
    """Issue 29: the wait a restart of faultline cannot lengthen: the Workload's own times."""
    world = bare().start().preempt().pause(40).suspend().release_quota().pause(600)
    world.readmit().pause(90).unsuspend().workers_ready()
    back = transitions(world)[2]
    evicted = next(c for c in _conditions(world, "Evicted") if c["status"] == "True")
    admitted = next(c for c in _conditions(world, "Admitted", last=True) if c["status"] == "True")
    assert back.waited_seconds == (_t(admitted["lastTransitionTime"]) - _t(evicted["lastTransitionTime"])).total_seconds()
    assert back.waited_seconds < (back.at - transitions(world)[1].at).total_seconds() + 40  # not the 90 s it stayed suspended after


def test_r15_2_a_batch_job_a_trainjob_and_a_kubeflow_kind_wait_the_same_way() -> None:
    for world in (JobWorld(), trainjob_world()):
        world.start().preempt().suspend().release_quota().pause(60)
        world.readmit().unsuspend().workers_ready().complete()
        got = transitions(world)
        assert [(t.from_, t.to) for t in got] == [*WAITED_AND_BACK, ("Running", "Completed")], type(world).__name__
    assert got[0].tracked.kind == "TrainJob" and got[0].key == f"{CLUSTER}/{NAMESPACE}/TrainJob/{TRAINJOB_NAME}/{TRAINJOB_UID}"
    assert got[0].jobset is not None and got[0].jobset.name == TRAINJOB_NAME  # its JobSet


# --- R15.3 the wait ends only when the workload does ------------------------------------------


def test_r15_3_deactivated_while_waiting_ends_as_gang_evicted_system() -> None:
    world = bare().start().preempt().suspend().release_quota().pause(30).deactivate(evicts=False)
    got = transitions(world)
    assert [(t.from_, t.to) for t in got][-1] == ("WaitingForReadmission", "Ended")
    assert (got[-1].code, got[-1].retry) == ("GangEvicted", "system")


def test_r15_3_maximum_execution_time_is_the_workloads_own_doing() -> None:
    world = bare().start().exceed_max_execution_time().suspend()
    assert (transitions(world)[-1].code, transitions(world)[-1].retry) == ("GangEvicted", "user")


def test_r15_3_its_own_failure_ends_it_with_its_reason_and_completion_completes_it() -> None:
    failed = JobWorld().start().fail()
    assert [(t.to, t.code) for t in transitions(failed)] == [("Running", None), ("Ended", "BackoffLimitExceeded")]
    done = bare().start().complete()
    assert path(done)[-1] == ("Running", "Completed")


def test_r15_3_deleted_while_waiting_ends_as_workload_deleted() -> None:
    world = bare().start().preempt().suspend().release_quota().pause(30).delete_jobset().delete_workload()
    got = transitions(world)
    assert [(t.from_, t.to) for t in got][-1] == ("WaitingForReadmission", "Ended")
    assert got[-1].code == "WorkloadDeleted"


def test_r15_3_a_workload_kueue_deletes_while_the_job_waits_does_not_end_the_wait() -> None:
    world = bare().start().preempt().suspend().release_quota().delete_workload()
    assert path(world)[-1] == ("Running", "WaitingForReadmission")


# --- R15.4 stuck waits --------------------------------------------------------------------


def _stuck(lines, rules: Rules = DEFAULT_RULES) -> list[StuckReadmission]:  # type: ignore[no-untyped-def]
    pipeline = new_pipeline(rules)
    out = []
    for line in lines:
        out += pipeline.feed(line["topic"], line["key"], orjson.dumps(line["value"]))
    out += pipeline.finish()
    return [e.value for e in out if e.topic == STUCK_READMISSIONS]


def test_r15_4_a_wait_past_max_readmission_wait_is_reported_once_and_then_its_end() -> None:
    rules = Rules(max_readmission_wait_seconds=3600)
    world = bare().start().evict("PodsReadyTimeout").suspend().release_quota()
    for _ in range(5):  # the bridge's progress every 20 minutes of a wait of 100
        world.pause(1200).progress()
    stuck = _stuck(world.records, rules)
    assert [r.stuck for r in stuck] == [True]
    [record] = stuck
    assert record.key == f"{CLUSTER}/{NAMESPACE}/JobSet/{JOBSET_NAME}/{JOBSET_UID}" and record.queue == "team-a"
    assert record.cause is not None and record.cause.reason == "PodsReadyTimeout" and record.waited_seconds >= 3600
    world.readmit().unsuspend().workers_ready().progress()
    assert [r.stuck for r in _stuck(world.records, rules)] == [True, False]
    assert path(world, rules) == WAITED_AND_BACK  # it did not end the wait


def test_r15_4_without_progress_nothing_is_stuck() -> None:
    world = bare().start().evict("PodsReadyTimeout").suspend().release_quota().pause(86_400)
    assert _stuck(world.records) == []  # stream time is the watermark: a trace without progress has none


# --- R15.5 a suspension Kueue did not make --------------------------------------------------


def test_r15_5_a_users_own_suspension_is_suspended_then_running_never_ended() -> None:
    world = bare().start().suspend().jobs_stopped().pause(30).progress().unsuspend().workers_ready().progress()
    got = transitions(world)
    assert [(t.from_, t.to) for t in got] == [("Pending", "Running"), ("Running", "Suspended"), ("Suspended", "Running")]
    assert got[1].code is None and got[1].retry is None and "kueue recorded no eviction" in got[1].reason


def test_r15_5_suspended_at_the_end_of_a_trace_stays_suspended() -> None:
    world = bare().start().suspend().jobs_stopped()
    assert path(world)[-1] == ("Running", "Suspended")


# --- R15.6 the records -----------------------------------------------------------------------


def test_r15_6_transitions_are_keyed_by_the_workload_attempt_and_name_the_object() -> None:
    got = transitions(JobWorld().start())
    assert got[0].key == f"{CLUSTER}/{NAMESPACE}/Job/{JOB_NAME}/{JOB_UID}" and got[0].identity == "workload"
    assert got[0].tracked.kind == "Job" and got[0].jobset is None and got[0].run is None


# --- R9 stays R9 under the orchestrator's labels -------------------------------------------


def test_r15_the_same_stories_under_an_orchestrators_labels_keep_r9s_answers() -> None:
    node = GangWorld().start().evict("NodeFailures").suspend()
    assert [(t.to, t.code, t.retry) for t in transitions(node)][-1] == ("Ended", "GangEvicted", "system")
    preempted = GangWorld(policy="false").start().preempt().suspend()
    assert [(t.to, t.code, t.retry) for t in transitions(preempted)][-1] == ("Ended", "GangEvicted", "user")
    own = GangWorld().start().suspend().jobs_stopped().pause(30).progress()
    assert [(t.to, t.code) for t in transitions(own)][-1] == ("Ended", "GangEvicted")  # R9.6, not Suspended
    assert transitions(own)[-1].key == f"{CLUSTER}/{NAMESPACE}/{JOBSET_NAME}"


# --- helpers --------------------------------------------------------------------------------


def _conditions(world: GangWorld, type_: str, *, last: bool = False) -> list[dict]:
    """Every version of a Workload condition its records showed, in order (`last`: newest first)."""
    seen = [c for line in world.workload_records() for c in line["value"]["object"]["status"].get("conditions", []) if c["type"] == type_]
    return list(reversed(seen)) if last else seen


def _t(text: str):  # type: ignore[no-untyped-def]
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00"))




def test_r15_4_the_fleet_view_lists_stuck_waits_and_metrics_count_them_by_queue() -> None:
    from app.core.fleet.summary import fleet_summary
    from app.core.fleet.view import LiveFleet
    from app.web.metrics import render_metrics

    rules = Rules(max_readmission_wait_seconds=3600)
    world = bare().start().evict("PodsReadyTimeout").suspend().release_quota()
    for _ in range(4):
        world.pause(1200).progress()
    pipeline, live = new_pipeline(rules), LiveFleet()
    for line in world.records:
        for emit in pipeline.feed(line["topic"], line["key"], orjson.dumps(line["value"])):
            live.observe(emit)
    [row] = fleet_summary(live.state).stuck
    assert row.attempt == f"{CLUSTER}/{NAMESPACE}/JobSet/{JOBSET_NAME}" and row.queue == f"{NAMESPACE}/team-a"
    assert row.waited_seconds >= 3600 and "PodsReadyTimeout" in row.reason
    assert f'faultline_stuck_readmissions{{cluster="{CLUSTER}",queue="{NAMESPACE}/team-a"}} 1' in render_metrics(live)
    world.readmit().unsuspend().workers_ready().progress()
    for line in world.records[len(world.records) - 6 :]:
        for emit in pipeline.feed(line["topic"], line["key"], orjson.dumps(line["value"])):
            live.observe(emit)
    assert fleet_summary(live.state).stuck == []


# --- R15.7: an eviction faultline did not see, reconstructed from Kueue's counts ------------


def _through_a_gap(world: GangWorld) -> GangWorld:
    """Kueue evicts and readmits while the bridge sees neither (an API server restart):
    its next record of the Workload shows it admitted again, with the eviction counted."""
    seen = len(world.records)
    with_eviction_counts(world, ("Preempted", "", 1)).preempt().suspend().release_quota().readmit().unsuspend().workers_ready()
    gap = world.records[seen:]
    world.records = world.records[:seen] + [gap[-1], *[line for line in gap if line["topic"] == WORKLOADS][-1:]]
    return world


def test_r15_7_an_eviction_counted_across_a_gap_is_reported_as_reconstructed() -> None:
    for labels in ({}, None):  # a workload attempt (R15) and under an orchestrator's labels (R9)
        world = with_eviction_counts(GangWorld(labels=labels, policy="true"), ("Preempted", "", 0)).start()
        _through_a_gap(world.pause(30)).pause(30).complete()
        got = transitions(world)
        assert [(t.from_, t.to, t.reconstructed) for t in got] == [
            ("Pending", "Running", False),
            ("Running", "WaitingForReadmission", True),
            ("WaitingForReadmission", "Running", True),
            ("Running", "Completed", False),
        ], labels
        assert got[1].cause is not None and got[1].cause.reason == "Preempted" and got[2].waited_seconds is None
        assert "reconstructed from kueue's eviction counts" in got[1].reason


def test_r15_7_a_first_eviction_hidden_in_a_gap_is_reconstructed_from_no_count_to_one() -> None:
    """Kueue writes `schedulingStats.evictions` only after a first eviction: an API server
    down for the whole of a first preemption leaves a Workload with no count, then one.
    Absent is 0, so it is reconstructed (it used to yield nothing), for a workload attempt
    and under an orchestrator's labels alike."""
    for labels in ({}, None):
        world = through_a_gap(GangWorld(labels=labels, policy="true").start().pause(30)).pause(30).complete()
        assert "schedulingStats" not in world.workload_records()[0]["value"]["object"]["status"]
        got = transitions(world)
        assert [(t.from_, t.to, t.reconstructed) for t in got] == [
            ("Pending", "Running", False),
            ("Running", "WaitingForReadmission", True),
            ("WaitingForReadmission", "Running", True),
            ("Running", "Completed", False),
        ], labels
        assert got[1].cause is not None and got[1].cause.reason == "Preempted" and got[2].waited_seconds is None


def test_r15_7_counts_that_grew_with_an_eviction_seen_reconstruct_nothing() -> None:
    world = with_eviction_counts(bare(), ("Preempted", "", 0)).start()
    with_eviction_counts(world, ("Preempted", "", 1)).preempt().suspend().release_quota().readmit().unsuspend().workers_ready()
    assert not any(t.reconstructed for t in transitions(world))


def _one_side_folded_stories(folded: str) -> Iterator[tuple[tuple[object, float, bool], GangWorld]]:
    """A running gang preempted and readmitted with `folded`'s records folded, then
    completed: a workload attempt and one under an orchestrator's labels, a wait shorter
    than `watch_skew` and one longer, the folding record the readmission or Kueue's
    PodsReady after the job ran again."""
    for labels in ({}, None):
        for waited in (0.0, 30.0):
            for ready in (False, True):
                world = with_eviction_counts(GangWorld(labels=labels, policy="true"), ("Preempted", "", 0)).start().pause(30)
                yield (labels, waited, ready), one_side_folded(world, waited, folded, ready).pause(30).complete().finish()


def test_r15_7_a_counted_eviction_folded_away_while_the_suspension_was_seen_is_reconstructed() -> None:
    """SPEC R15.7, R12.7 ("never dropped"): two observations of the Workload, neither
    showing `Evicted=True`, the count grown from 0 to 1 between them; meanwhile the job was
    seen suspended and resumed. The eviction is reported reconstructed, whether the wait
    was shorter than `watch_skew` or longer, for a workload attempt and under an
    orchestrator's labels."""
    for case, world in _one_side_folded_stories(WORKLOADS):
        assert [(t.from_, t.to, t.reconstructed) for t in transitions(world)] == [
            ("Pending", "Running", False),
            ("Running", "WaitingForReadmission", True),
            ("WaitingForReadmission", "Running", True),
            ("Running", "Completed", False),
        ], case


def test_r15_7_a_counted_eviction_folded_away_ends_the_attempt_under_r9_with_the_policy_off() -> None:
    """R9.4 with the policy off: the suspension seen, its eviction only counted, ends the
    attempt (a system retry, the counted reason), as a seen preemption would."""
    world = with_eviction_counts(GangWorld(policy="false"), ("Preempted", "", 0)).start().pause(30)
    got = transitions(one_side_folded(world, 30.0, WORKLOADS).pause(30).complete().finish())
    assert [(t.from_, t.to, t.code, t.retry, t.reconstructed) for t in got] == [
        ("Pending", "Running", None, None, False),
        ("Running", "Ended", "GangEvicted", "system", False),
    ]
    assert got[-1].cause is not None and got[-1].cause.reason == "Preempted"


def test_r12_7_an_eviction_seen_while_the_jobs_suspension_was_folded_away_is_reported() -> None:
    """R12.7 ("never dropped"): the Workload's records show Kueue's eviction and its
    readmission; the job's watch relisted and shows it running again, its `Suspended`
    condition False with a time after the eviction (so it was suspended in between). The
    preemption and the readmission are reported, for a workload attempt and under an
    orchestrator's labels."""
    for case, world in _one_side_folded_stories(JOBS):
        assert path(world) == [*WAITED_AND_BACK, ("Running", "Completed")], case


def test_r15_4_the_reports_are_the_same_whether_the_readmission_or_the_progress_past_the_limit_comes_first() -> None:
    """R7.1: read from the wait's own times. Progress past the limit before the readmission
    is read, or only after it (a watermark lagging behind the gang's records): the same
    two reports, stuck as of the limit and over at the readmission."""
    rules = Rules(max_readmission_wait_seconds=3600)
    early = bare().start().evict("PodsReadyTimeout").suspend().release_quota().pause(5400).progress()
    early.pause(60).readmit().unsuspend().workers_ready().progress()
    late = bare().start().evict("PodsReadyTimeout").suspend().release_quota().pause(5460)
    late.readmit().unsuspend().workers_ready().progress()
    first, second = _stuck(early.records, rules), _stuck(late.records, rules)
    assert [(r.stuck, r.at, r.waited_seconds) for r in first] == [(r.stuck, r.at, r.waited_seconds) for r in second]
    assert [r.stuck for r in first] == [True, False] and first[0].waited_seconds == 3600
    assert msgspec.json.encode(first) == msgspec.json.encode(second)
