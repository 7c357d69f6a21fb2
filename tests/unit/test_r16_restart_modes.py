"""SPEC R16.1, R16.2: JobSet v0.12's restart modes. A child Job recreated alone, and pods
restarted in place, are generations of their own: each gets an interim verdict over its
own pods and faults (terminal: false, R8's shape), carried into the final verdict; no
fault of an earlier generation explains a later failure. Every rule through every driver."""

from __future__ import annotations

import pytest

from tests.unit import builders as b
from tests.unit.restart_stories import in_place_restart_then_fail, job_restarts_then_fail
from tests.unit.scenario import only_verdict, verdicts

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver


def _observed(records: list[dict]) -> list[dict]:
    return b.with_progress(sorted(records, key=lambda r: r["value"]["observed_at"]))


def test_r16_1_each_child_job_restart_gets_an_interim_verdict_over_the_pods_of_its_generation() -> None:
    got = verdicts(_observed(job_restarts_then_fail()))
    interim = [v for v in got if not v.terminal]
    first = next(v for v in interim if v.failed_at < b.T0 - b.minutes(30))
    second = next(v for v in reversed(interim) if v.failed_at > b.T0 - b.minutes(30))
    assert (first.code, first.kind, first.generation) == ("GpuFallenOffBus", "SYSTEM", 0)
    assert first.faulted_pod is not None and first.faulted_pod.name == "ckpt-shard-workers-1-0-a7q4x"
    assert first.message.startswith("[gpu-health] [CRITICAL] Xid 79") and "recreated its Job ckpt-shard-workers-1 after its generation 0" in first.message
    assert (second.code, second.kind) == ("GpuXidError", "USER")
    assert second.faulted_pod is not None and second.faulted_pod.name == "ckpt-shard-workers-1-0-b7q4x"


def test_r16_1_the_final_verdict_lists_the_job_generations_and_counts_none_of_their_faults() -> None:
    final = only_verdict(_observed(job_restarts_then_fail()))
    assert (final.terminal, final.code, final.kind, final.gpu_fault, final.faulted_pod) == (True, "ReachedMaxRestarts", "USER", None, None)
    assert final.reasons[:2] == [
        "Job ckpt-shard-workers-1 generation 0 failed: GpuFallenOffBus (SYSTEM); GPU fault recorded on pod ckpt-shard-workers-1-0-a7q4x",
        "Job ckpt-shard-workers-1 generation 1 failed: GpuXidError (USER); GPU fault recorded on pod ckpt-shard-workers-1-0-b7q4x",
    ]
    assert final.tracked.kind == "JobSet" and final.identity == "workload"


def test_r16_1_without_generations_the_earlier_jobs_fault_would_have_explained_the_failure() -> None:
    """What R16.1 fixes: the pods of every Job generation carry the JobSet's restart-attempt
    0; only `job-restart-attempt` tells them apart."""
    records = _observed(job_restarts_then_fail())
    pods = [r for r in records if r["topic"] == "k8s.pods" and r["value"]["type"] != "BOOKMARK"]
    assert {r["value"]["object"]["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] for r in pods} == {"0"}
    for r in pods:
        r["value"]["object"]["metadata"]["labels"].pop("jobset.sigs.k8s.io/job-restart-attempt")
    wrong = only_verdict(records)  # the Xid 79 of generation 0 of Job workers-1 decides (R6.4: SYSTEM)
    assert wrong.kind == "SYSTEM" and wrong.gpu_fault is not None and wrong.gpu_fault.code == 79


def test_r16_2_an_in_place_restart_is_a_generation_whose_fault_explains_it_and_not_the_next() -> None:
    got = verdicts(_observed(in_place_restart_then_fail()))
    interim = [v for v in got if not v.terminal]
    assert interim and {(v.code, v.kind) for v in interim} == {("GpuFallenOffBus", "SYSTEM")}
    assert "restarted its pods' containers in place after attempt 0" in interim[-1].message
    final = got[-1]
    assert (final.terminal, final.code, final.kind, final.gpu_fault) == (True, "ReachedMaxRestarts", "USER", None)
    assert final.reasons[0] == "in-place restart attempt 0 failed: GpuFallenOffBus (SYSTEM); GPU fault recorded on pod moe-ip-workers-0-0-x5n2p"


def test_r16_2_the_same_pods_without_the_in_place_generation_would_blame_the_old_fault() -> None:
    records = _observed(in_place_restart_then_fail())
    for r in records:
        status = r["value"]["object"].get("status", {})
        status.pop("previousInPlaceRestartAttempt", None)
    wrong = only_verdict(records)
    assert wrong.kind == "SYSTEM" and wrong.gpu_fault is not None and wrong.gpu_fault.code == 79


def test_r16_2_the_generations_of_pods_restarted_in_place_share_out_their_gpu_seconds() -> None:
    """The same pods run through both generations: each counts its own stretch (R16.2 with
    issue 30's GPU-seconds), never the earlier one's again."""
    got = verdicts(_observed(in_place_restart_then_fail()))
    interim, final = [v for v in got if not v.terminal][-1], got[-1]
    # From each pod's own restart (its previous run's end: x's at t0 - 20 min, y's at t0 - 19 min)
    # to its end (x runs until the JobSet fails at t0, y's worker exits at t0 - 30 s).
    seconds = 20 * 60 + (19 * 60 - 30)
    assert final.gpu_seconds == 8 * seconds  # two pods of 8 GPUs, never their first run again
    assert interim.gpu_seconds is not None and interim.gpu_seconds > 0


# --- R16.4: a RayJob's tries --------------------------------------------------------------------


def test_r16_4_a_rayjob_that_retries_once_and_fails_has_a_verdict_for_each_try() -> None:
    from tests.unit.restart_stories import rayjob_retried_then_fails

    got = verdicts(_observed(rayjob_retried_then_fails()))
    interim, final = [v for v in got if not v.terminal], got[-1]
    assert {(v.generation, v.code, v.kind) for v in interim} == {(0, "GpuFallenOffBus", "SYSTEM")}
    assert interim[-1].faulted_pod is not None and interim[-1].faulted_pod.name == "rl-sweep-k2w9q-worker-gpu-w4m7z"
    assert "failed its try 0 on RayCluster rl-sweep-k2w9q and is retried on a new one" in interim[-1].message
    assert (final.terminal, final.generation, final.code, final.kind, final.gpu_fault) == (True, 1, "AppFailed", "USER", None)
    # Each try's verdicts are written by its own cluster's state: the retried try's under a
    # key of its own, so its late evidence never lands over the attempt's final verdict.
    assert interim[-1].key == f"{final.key}/try/0" and final.tracked.kind == "RayJob"
    assert final.reasons[0] == "1 earlier try failed, each with a verdict of its own (generation 0)"
    # Each try is joined under its own cluster's key: the second's revisions start above the first's.
    assert max(v.revision for v in interim) < final.revision
