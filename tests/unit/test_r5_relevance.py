"""SPEC R5: anchors, failure times and the relevance window."""

from __future__ import annotations

import pytest

from tests.unit.builders import (
    T0,
    condition,
    event,
    kubeflow,
    kubeflow_pod_labels,
    minutes,
    pod,
    record,
    running,
    terminated,
    ts,
    updated,
)
from tests.unit.scenario import faults, only_verdict

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver


def pod_task(fault_first, fault_last=None, *, containers=None, finished=T0, deletion=None, init=None):
    """A pod task failing at `finished` with one Xid 79 fault."""
    p = pod("p", containers={"main": running()}, init_containers=init)
    final = containers or {"main": terminated(1, finished)}
    failed = updated(p, phase="Failed", containerStatuses=[{"name": n, "state": s} for n, s in final.items()])
    if deletion is not None:
        failed["metadata"]["deletionTimestamp"] = ts(deletion)
    ev = event(p, first=fault_first, last=fault_last or fault_first)
    return [record(p, T0 - minutes(200), "ADDED"), record(ev, fault_last or fault_first, "ADDED"), record(failed, T0 + minutes(0.5))]


def classified(records) -> bool:
    return only_verdict(records).gpu_fault is not None


def child_pod_job(worker_states, fault_first, *, deletion=None, fault_last=None, failed_at=T0, init=None):
    job = kubeflow("PyTorchJob", "pt")
    worker = pod("pt-worker-0", labels=kubeflow_pod_labels("pt"), containers=worker_states, deletion=deletion, init_containers=init)
    failed = updated(job, conditions=[condition("Failed", "PyTorchJobFailed", "failed", failed_at)])
    return [
        record(job, T0 - minutes(300), "ADDED"),
        record(worker, T0 - minutes(250), "ADDED"),
        record(event(worker, first=fault_first, last=fault_last or fault_first), fault_last or fault_first, "ADDED"),
        record(failed, failed_at + minutes(1)),
    ]


# --- R5.1 anchors ------------------------------------------------------------------------


def test_r5_1_anchor_is_the_latest_container_finish_never_a_start_time():
    # S32: one container running since t0-6h, one terminated t0-2m; fault at t0-20m.
    states = {"main": terminated(1, T0 - minutes(2)), "logger": running(T0 - minutes(360))}
    assert classified(pod_task(T0 - minutes(20), containers=states, finished=T0 - minutes(2)))


def test_r5_1_anchor_falls_back_to_the_deletion_timestamp():
    # S32 second half: only running containers + deletionTimestamp t0-2m.
    records = child_pod_job({"main": running(T0 - minutes(360))}, T0 - minutes(20), deletion=T0 - minutes(2))
    assert classified(records)
    # The same fault 31 minutes before the deletion is out of the window.
    assert not classified(child_pod_job({"main": running(T0 - minutes(360))}, T0 - minutes(34), deletion=T0 - minutes(2)))


def test_r5_1_init_containers_are_never_an_anchor():
    # S33: init container finished t0-3h, workload running; failure at t0; fault at t0-3h-1m.
    setup = {"setup": terminated(0, T0 - minutes(180), "Completed")}
    assert not classified(child_pod_job({"main": running()}, T0 - minutes(181), init=setup))
    assert classified(child_pod_job({"main": running()}, T0 - minutes(29), init=setup))


def test_r5_1_child_anchor_is_clamped_to_the_failure_time():
    # S51: deletionTimestamp t0+20m (grace period), fault at t0+10m: anchor clamps to t0.
    assert not classified(child_pod_job({"main": running()}, T0 + minutes(10), deletion=T0 + minutes(20)))


def test_r5_1_pod_task_anchor_is_not_clamped():
    # A pod task's own finish is its failure time; its deletionTimestamp is not clamped either.
    p = pod("p", containers={"main": running()})
    failed = updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": running()}])
    failed["metadata"]["deletionTimestamp"] = ts(T0 + minutes(20))
    ev = event(p, first=T0 + minutes(10))
    records = [record(p, T0 - minutes(100), "ADDED"), record(ev, T0 + minutes(10), "ADDED"), record(failed, T0)]
    assert classified(records)


def test_r5_1_child_judged_against_its_own_death():
    # S49: the worker died and faulted 2h before the job reported failure.
    assert classified(child_pod_job({"main": terminated(1, T0 - minutes(120))}, T0 - minutes(121)))
    # S50: died t0-1m, fault last seen t0-61m: too old.
    assert not classified(child_pod_job({"main": terminated(1, T0 - minutes(1))}, T0 - minutes(61)))


# --- R5.2 failure time -----------------------------------------------------------------------


def test_r5_2_pod_task_failure_time_is_its_last_container_finish():
    verdict = only_verdict(pod_task(T0 - minutes(1), finished=T0 - minutes(3)))
    assert verdict.failed_at == T0 - minutes(3)


def test_r5_2_pod_task_without_finish_uses_the_record_that_showed_failed():
    p = pod("p", containers={"main": running()})
    failed = updated(p, phase="Failed", reason="NodeShutdown", containerStatuses=[])
    verdict = only_verdict([record(p, T0 - minutes(5)), record(failed, T0 + minutes(1)), record(failed, T0 + minutes(4))])
    assert verdict.failed_at == T0 + minutes(1)


def test_r5_2_crd_failure_time_is_the_failed_condition_transition():
    verdict = only_verdict(child_pod_job({"main": running()}, T0 - minutes(1), failed_at=T0 - minutes(7)))
    assert verdict.failed_at == T0 - minutes(7)


def test_r5_2_crd_without_condition_uses_the_first_record_showing_failure():
    from tests.unit.builders import ray_pod_labels, rayjob

    rj = rayjob(cluster_name="rc")
    failed = updated(rj, jobStatus="FAILED", jobDeploymentStatus="Failed")
    worker = pod("rc-worker-0", labels=ray_pod_labels("rc"))
    records = [record(rj, T0 - minutes(50)), record(worker, T0 - minutes(40)), record(failed, T0), record(failed, T0 + minutes(5))]
    assert only_verdict(records).failed_at == T0


# --- R5.3 the window ---------------------------------------------------------------------------


def test_r5_3_fault_starting_after_anchor_plus_slack_never_explains():
    assert not classified(pod_task(T0 + minutes(3)))  # S27
    assert classified(pod_task(T0 + minutes(1) + minutes(59 / 60), fault_last=T0 + minutes(60)))


def test_r5_3_fault_started_before_the_window_but_still_firing_explains():
    assert classified(pod_task(T0 - minutes(40), fault_last=T0))  # S28
    assert classified(pod_task(T0 - minutes(1), fault_last=T0 + minutes(11)))  # S30


def test_r5_3_window_edge_is_inclusive():
    assert not classified(pod_task(T0 - minutes(90), fault_last=T0 - minutes(30) - minutes(1 / 60)))  # S29
    assert classified(pod_task(T0 - minutes(90), fault_last=T0 - minutes(30)))


def test_r5_3_fault_whose_interval_ends_before_it_starts_is_ignored():
    assert not classified(pod_task(T0, fault_last=T0 - minutes(60)))  # S31


def _seen_at(records, observed):
    """`records` (a `pod_task`) with its fault Event seen by the bridge at `observed`."""
    ev = dict(records[1])
    ev["value"] = dict(ev["value"], observed_at=ts(observed))
    return [records[0], ev, *records[2:]]


def test_r5_3_inverted_interval_explains_nothing_even_when_its_start_is_in_the_window():
    # lastTimestamp before firstTimestamp, both inside the window: taking the later of the
    # two as last_seen would make it a point fault at T0-5m that explains the failure.
    records = _seen_at(pod_task(T0 - minutes(5), fault_last=T0 - minutes(10)), T0 - minutes(4))
    assert not classified(records)
    # It is still a fault (R2.6), published with its times as written.
    (fault,) = faults(records)
    assert (fault.fault.first_seen, fault.fault.last_seen) == (T0 - minutes(5), T0 - minutes(10))
    # The same Event with its times in order explains it.
    assert classified(_seen_at(pod_task(T0 - minutes(10), fault_last=T0 - minutes(5)), T0 - minutes(4)))


def test_r5_3_inverted_interval_keeps_its_order_under_the_bridge_clock_cap():
    # R2.7c caps each time at observed_at. Seen between its two times, the Event's first
    # time is capped and its last is not: still inverted, still explains nothing.
    records = _seen_at(pod_task(T0 + minutes(1), fault_last=T0 - minutes(10)), T0 - minutes(4))
    (fault,) = faults(records)
    assert (fault.fault.first_seen, fault.fault.last_seen) == (T0 - minutes(4), T0 - minutes(10))
    assert not classified(records)
    # Both times ahead of the bridge's clock: neither is believed, the Event is a point at
    # observed_at like any Event dated ahead of the bridge (R2.7c), and explains as one.
    records = _seen_at(pod_task(T0 + minutes(60), fault_last=T0 + minutes(30)), T0 - minutes(4))
    (fault,) = faults(records)
    assert fault.fault.first_seen == fault.fault.last_seen == T0 - minutes(4)
    assert classified(records)


def test_r5_3_window_is_measured_from_the_failure_not_processing_time():
    # S26: the failure record arrives 6 hours later; the fault still explains it.
    records = pod_task(T0 - minutes(5))
    late = dict(records[-1])
    late["value"] = dict(late["value"], observed_at=ts(T0 + minutes(360)))
    assert classified([*records[:-1], late])


def test_r5_3_window_and_slack_are_settings():
    from app.core.base.rules import Rules

    records = pod_task(T0 - minutes(40))
    assert not classified(records)
    assert only_verdict(records, Rules(window_seconds=3600)).gpu_fault is not None
