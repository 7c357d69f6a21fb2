"""The Kueue stories of the R9, R15 and R17 suites, by name, for the tests that replay every one
of them in other orders (SPEC R7.1, R12.7). Each builds the records the controllers would
write, in the order the bridge observed them (tests/unit/gang_builders.py)."""

from __future__ import annotations

from collections.abc import Callable

from app.model.envelope import JOBS, WORKLOADS
from tests.unit.gang_builders import GangWorld, JobWorld, trainjob_world, with_eviction_counts
from tests.unit.goodput_world import R17_STORIES


def _bare(**kw) -> GangWorld:  # type: ignore[no-untyped-def]
    return GangWorld(labels={}, **kw)


def through_a_gap(world: GangWorld) -> GangWorld:
    """Kueue evicts and readmits while the bridge sees neither (the API server down for the
    whole preemption): the next records show the Workload admitted again with the eviction
    counted, the job running again (SPEC R15.7). Kueue writes its counts only after a first
    eviction: a world given no counts before has none in its earlier records."""
    seen = len(world.records)
    stats = world.wl["status"].get("schedulingStats", {"evictions": []})["evictions"]
    before = sum(e["count"] for e in stats if e["reason"] == "Preempted")
    with_eviction_counts(world, ("Preempted", "", before + 1)).preempt().suspend().release_quota().readmit().unsuspend().workers_ready()
    gap = world.records[seen:]
    last_workload = [line for line in gap if line["topic"] == "k8s.workloads"][-1:]
    world.records = world.records[:seen] + [gap[-1], *last_workload]
    return world


def one_side_folded(world: GangWorld, waited: float, folded: str, ready: bool = False) -> GangWorld:
    """Kueue evicts and readmits; one watch resumes and shows every state of its object,
    while the other gets a 410 and relists: its next record shows only the end state (the
    Workload admitted again with the eviction counted, or the job running again).
    `folded`: the topic whose records were folded; `ready`: Kueue's PodsReady after the
    job ran again, so that the folding record is dated after the resumption. Both met on
    the real API server (tests/bridge/test_apiserver_outage.py)."""
    seen = len(world.records)
    with_eviction_counts(world, ("Preempted", "", 1)).preempt().suspend().jobs_stopped().release_quota().pause(waited)
    world.readmit().unsuspend().workers_ready()
    if ready:
        world.pods_ready()
    gap = world.records[seen:]
    world.records = world.records[:seen] + [line for line in gap if line["topic"] != folded] + [line for line in gap if line["topic"] == folded][-1:]
    return world


def _folded_story(labels: dict[str, str] | None, folded: str, ready: bool = False) -> Callable[[], GangWorld]:
    def story() -> GangWorld:
        world = with_eviction_counts(GangWorld(labels=labels, policy="true"), ("Preempted", "", 0)).start().pause(30)
        return one_side_folded(world, 30.0, folded, ready).pause(30).complete().finish()

    return story


STORIES: dict[str, Callable[[], GangWorld]] = {
    # R9 (the orchestrator's labels)
    "r9_3_eviction_before_start": lambda: GangWorld(policy="false").create_jobset().create_workload().admit().preempt().release_quota(),
    "r9_3_released_then_evicted": lambda: GangWorld(policy="false")
    .create_jobset()
    .create_workload()
    .admit()
    .unsuspend()
    .evict("PodsReadyTimeout")
    .suspend()
    .release_quota(),
    "r9_4_preempted_policy_on": lambda: GangWorld(policy="true").start().preempt().suspend().release_quota(),
    "r9_4_preempted_policy_off": lambda: GangWorld(policy="false").start().preempt().suspend().release_quota(),
    "r9_5_node_failures": lambda: GangWorld(policy="true").start().evict("NodeFailures").suspend().release_quota(),
    "r9_5_deactivated": lambda: GangWorld(policy="true").start().deactivate().suspend().release_quota(),
    "r9_5_max_execution_time": lambda: GangWorld(policy="false").start().exceed_max_execution_time().suspend().release_quota(),
    "r9_6_suspended_before_evicted": lambda: GangWorld(policy="true").start().suspend().preempt().release_quota(),
    "r9_6_evicted_after_the_skew": lambda: GangWorld(policy="true").start().suspend().jobs_stopped().pause(11).preempt().release_quota(),
    "r9_6_nothing_evicted_running_again": lambda: GangWorld(policy="true").start().suspend().unsuspend().workers_ready().complete().finish(),
    "r9_7_deleted_workload": lambda: GangWorld(policy="true").start().delete_workload().suspend(),
    "r9_7_deleted_while_waiting": lambda: GangWorld(policy="true").start().preempt().suspend().release_quota().delete_workload(),
    "r9_8_deactivated_while_waiting": lambda: GangWorld(policy="true").start().preempt().suspend().release_quota().deactivate(evicts=False),
    "r9_8_inactive_stale_preempted": lambda: GangWorld(policy="false").start().preempt().deactivate(evicts=False).suspend().release_quota(),
    "r9_8_inactive_before_the_eviction": lambda: GangWorld(policy="true").start().deactivate(evicts=False).suspend().release_quota(),
    "r9_9_readmitted_then_completes": lambda: GangWorld(policy="true")
    .start()
    .preempt()
    .suspend()
    .release_quota()
    .pause(600)
    .readmit()
    .unsuspend()
    .workers_ready()
    .complete()
    .finish(),
    "r9_9_preempted_twice": lambda: GangWorld(policy="true")
    .start()
    .preempt()
    .suspend()
    .release_quota()
    .readmit()
    .unsuspend()
    .workers_ready()
    .preempt("InCohortReclamation")
    .suspend()
    .release_quota(),
    "r9_10_failed": lambda: GangWorld(policy="true").start().fail(),
    # R15 (workload attempts: Kueue requeues, nobody deletes)
    "r15_2_preempted_requeued_completes": lambda: _bare(policy="false")
    .start()
    .preempt()
    .suspend()
    .release_quota()
    .pause(300)
    .readmit()
    .unsuspend()
    .workers_ready()
    .complete()
    .finish(),
    "r15_2_pods_ready_timeout": lambda: _bare().start().evict("PodsReadyTimeout").suspend().release_quota().pause(30).readmit().unsuspend().workers_ready(),
    "r15_2_batch_job": lambda: JobWorld().start().preempt().suspend().release_quota().pause(60).readmit().unsuspend().workers_ready().complete(),
    "r15_2_trainjob": lambda: trainjob_world().start().preempt().suspend().release_quota().pause(60).readmit().unsuspend().workers_ready().complete(),
    "r15_2_v1beta1": lambda: _bare(api_version="kueue.x-k8s.io/v1beta1").start().preempt().suspend().release_quota().pause(60).readmit().unsuspend().workers_ready(),
    "r15_3_deactivated_while_waiting": lambda: _bare().start().preempt().suspend().release_quota().pause(30).deactivate(evicts=False),
    "r15_3_deleted_while_waiting": lambda: _bare().start().preempt().suspend().release_quota().pause(30).delete_jobset().delete_workload(),
    "r15_3_workload_recreated_while_waiting": lambda: _bare().start().preempt().suspend().release_quota().delete_workload(),
    "r15_3_failed": lambda: JobWorld().start().fail(),
    "r15_5_users_own_suspension": lambda: _bare().start().suspend().jobs_stopped().pause(30).unsuspend().workers_ready(),
    "r15_7_first_eviction_in_a_gap": lambda: through_a_gap(_bare().start().pause(30)).pause(30).complete(),
    "r15_7_second_eviction_in_a_gap": lambda: through_a_gap(with_eviction_counts(_bare(), ("Preempted", "", 1)).start().pause(30))
    .pause(30)
    .complete(),
    "r9_first_eviction_in_a_gap": lambda: through_a_gap(GangWorld(policy="true").start().pause(30)).pause(30).complete(),
    # R12.7: one watch relisted during the preemption, the other saw it all
    "r15_7_workload_folded_suspension_seen": _folded_story({}, WORKLOADS),
    "r15_7_workload_folded_after_the_resumption": _folded_story({}, WORKLOADS, ready=True),
    "r9_workload_folded_suspension_seen": _folded_story(None, WORKLOADS),
    "r12_7_job_folded_eviction_seen": _folded_story({}, JOBS),
    "r9_job_folded_eviction_seen": _folded_story(None, JOBS),
}


# SPEC R17: the same worlds with the JobSet's pods, where the GPU-hours went.
STORIES.update(R17_STORIES)
