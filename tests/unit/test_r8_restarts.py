"""SPEC R8: restarts in place."""

from __future__ import annotations

import pytest

from tests.unit.builders import T0, attempt_labels, minutes, pod, record, running, terminated, updated
from tests.unit.scenario import verdicts
from tests.unit.stories import jobset_restart_then_complete, jobset_restart_then_fail, pod_task_restarted_in_place

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver


def test_r8_1_dead_generation_is_classified_over_its_own_pods_anchored_at_the_restart():
    emitted = verdicts(jobset_restart_then_complete())
    assert len(emitted) == 1
    gen0 = emitted[0]
    assert (gen0.generation, gen0.terminal, gen0.code, gen0.kind) == (0, False, "GpuEccUncorrectable", "SYSTEM")
    assert gen0.failed_at == T0  # the record that showed restarts=1
    assert gen0.faulted_pod.name == "vision-ft-8-finetune-workers-0-1"


def test_r8_1_final_verdict_carries_one_line_per_earlier_generation():
    emitted = verdicts(jobset_restart_then_fail())
    final = emitted[-1]
    assert (final.generation, final.terminal, final.code) == (1, True, "ReachedMaxRestarts")
    assert final.gpu_fault is None  # generation 1's pods had no fault; generation 0's are not consulted
    assert final.reasons == ["generation 0 failed: GpuFallenOffBus (SYSTEM); GPU fault recorded on pod rl-agent-5-rollout-workers-0-0"]


def test_r8_2_new_pod_of_the_same_attempt_makes_the_first_verdict_non_terminal():
    emitted = verdicts(pod_task_restarted_in_place())
    assert [(v.terminal, v.tracked.name) for v in emitted] == [(True, "sweep-3-fit-1-a"), (False, "sweep-3-fit-1-a")]


def test_r8_2_reasons_of_the_first_pod_are_carried_into_the_next_verdict():
    labels = attempt_labels(run="r", action="a", attempt="1")
    first = pod("a-1", labels=labels, containers={"main": running()}, created=T0 - minutes(30))
    second = pod("a-2", labels=labels, containers={"main": running()}, created=T0 + minutes(1))
    records = [
        record(first, T0 - minutes(30), "ADDED"),
        record(updated(first, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(137, T0, "OOMKilled")}]), T0),
        record(second, T0 + minutes(1), "ADDED"),
        record(updated(second, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(1, T0 + minutes(9))}]), T0 + minutes(9)),
    ]
    final = verdicts(records)[-1]
    assert (final.tracked.name, final.terminal, final.code) == ("a-2", True, "Error")
    assert final.reasons == ["pod a-1 failed: OOMKilled (USER)"]
