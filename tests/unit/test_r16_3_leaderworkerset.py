"""SPEC R16.3: a LeaderWorkerSet's groups are attempts, keyed
`<cluster>/<namespace>/LeaderWorkerSet/<name>/<uid>/group/<index>`; a group recreated after
one of its pods failed is a failure of that generation (`terminal: false`), over that
generation's pods alone. Facts as kubernetes-sigs/lws v0.10.0 writes them (FACTS: every pod
has `group-index`, the LWS has no Failed condition). Every rule through every driver."""

from __future__ import annotations

import msgspec
import pytest

from app.core.base.rules import Rules
from app.core.kinds.lws import MAX_GROUP_PODS, MAX_GROUPS
from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER, GANG_TRANSITIONS
from tests.unit import builders as b
from tests.unit.drivers import new_pipeline
from tests.unit.restart_stories import _restarted, _running, _torn_down, lws_group_recreated
from tests.unit.scenario import final_verdicts, run, verdicts

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver


def _observed(records: list[dict]) -> list[dict]:
    return b.with_progress(sorted(records, key=lambda r: r["value"]["observed_at"]))


def _lws_uid(records: list[dict]) -> str:
    return next(r["value"]["object"]["metadata"]["uid"] for r in records if r["value"]["object"]["kind"] == "LeaderWorkerSet")


def test_r16_3_a_group_recreated_after_an_xid_on_its_worker_gets_an_interim_system_verdict_naming_the_worker_and_the_group() -> None:
    records = lws_group_recreated()
    [verdict] = final_verdicts(_observed(records)).values()
    assert verdict.key == f"prod-a/ml/LeaderWorkerSet/serve/{_lws_uid(records)}/group/0"
    assert (verdict.identity, verdict.tracked.kind, verdict.tracked.name, verdict.tracked.uid) == ("workload", "LeaderWorkerSet", "serve", _lws_uid(records))
    assert (verdict.code, verdict.kind, verdict.terminal, verdict.generation) == ("GpuFallenOffBus", "SYSTEM", False, 0)
    assert verdict.faulted_pod is not None and verdict.faulted_pod.name == "serve-0-1"
    assert verdict.gpu_fault is not None and verdict.gpu_fault.code == 79 and verdict.gpu_fault.pod.name == "serve-0-1"
    assert "recreated its group 0 after pod serve-0-1's container worker restarted" in verdict.message
    assert verdict.message.endswith("container worker terminated with exit code 1 (Error)")  # its previous run's end (R6.1)
    assert verdict.reasons == ["GPU fault recorded on pod serve-0-1"]
    # R12.7: dated by the container's own lastState.terminated.finishedAt, not when it was seen.
    assert verdict.failed_at == b.T0 - b.minutes(20)
    # Both pods of the generation, 8 GPUs each, from their start to the failure (38.9 minutes).
    assert verdict.gpu_seconds == 2 * 8 * int(38.9 * 60)


def test_r16_3_a_fault_of_an_earlier_generation_never_explains_a_later_one() -> None:
    """The second generation's worker is OOM-killed 18 minutes after the Xid 79 of the
    first's: inside R5's window, but on a pod of another generation (another uid)."""
    got = verdicts(_observed(lws_group_recreated(again=True)))
    first, later = got[0], got[-1]
    assert (first.generation, first.code, first.kind) == (0, "GpuFallenOffBus", "SYSTEM")
    assert (later.generation, later.code, later.kind, later.terminal) == (1, "OOMKilled", "USER", False)
    assert later.gpu_fault is None and later.faulted_pod is None
    assert later.failed_at == b.T0 - b.minutes(2) and later.key == first.key
    assert later.reasons == ["group 0 generation 0 failed: GpuFallenOffBus (SYSTEM); GPU fault recorded on pod serve-0-1"]
    assert later.gpu_seconds == 2 * 8 * 16 * 60  # its own pods only, from their start 16 minutes before
    assert later.revision > first.revision


def test_r16_3_the_order_pods_arrive_in_does_not_change_the_verdicts() -> None:
    """A worker seen before its leader (or a later generation's pods before an earlier
    one's) is placed by the pods' own creation times once all are seen."""
    records = lws_group_recreated(again=True)
    expected = final_verdicts(_observed(records))
    pods = [r for r in records if r["topic"] == "k8s.pods"]
    by_object: dict[str, list[dict]] = {}
    for r in pods:
        by_object.setdefault(r["key"], []).append(r)
    reordered = [r for r in records if r["topic"] != "k8s.pods"] + [r for key in reversed(by_object) for r in by_object[key]]
    got = final_verdicts(b.with_progress(reordered, times=[b.T0 for _ in reordered]))
    assert {k: v.code for k, v in got.items()} == {k: v.code for k, v in expected.items()}
    strip = lambda v: msgspec.structs.replace(v, revision=0)  # noqa: E731  (the revision counts records emitted)
    assert {k: strip(v) for k, v in got.items()} == {k: strip(v) for k, v in expected.items()}


def _recreated_without_a_failure(restart_policy: str = "RecreateGroupOnPodRestart", restart: bool = False) -> list[dict]:
    """A group recreated by a rolling update (the leader deleted, nothing of it failed), or
    under `restartPolicy: None` after its worker's container restarted in place."""
    lws = b.leaderworkerset("infer", restart_policy=restart_policy, created=b.T0 - b.minutes(60))
    out = [b.record(lws, b.T0 - b.minutes(60), "ADDED")]
    for number, made in enumerate((b.T0 - b.minutes(59), b.T0 - b.minutes(10))):
        leader = b.lws_pod(lws, 0, 0, node="gpu-40", created=made, owner_uid="sts-leader", revision=f"rev{number}")
        worker = b.lws_pod(lws, 0, 1, node="gpu-41", created=made, owner_uid=b.kube_uid(), revision=f"rev{number}")
        leader, worker = _running(leader, made + b.minutes(1)), _running(worker, made + b.minutes(1))
        out += [b.record(leader, made + b.minutes(1)), b.record(worker, made + b.minutes(1))]
        if number == 0:
            if restart:
                worker = _restarted(worker, b.T0 - b.minutes(30), 1, "Error", made + b.minutes(1))
                out.append(b.record(worker, b.T0 - b.minutes(29.9)))
            teardown = _torn_down(leader, b.T0 - b.minutes(11), b.T0 - b.minutes(10.8)) + _torn_down(worker, b.T0 - b.minutes(11), b.T0 - b.minutes(10.9))
            out += [b.record(obj, at, change) for obj, at, change in teardown]
    return out


def test_r16_3_a_group_recreated_with_nothing_of_it_failed_is_no_failure() -> None:
    assert verdicts(_observed(_recreated_without_a_failure())) == []


def test_r16_3_a_container_restart_where_it_does_not_recreate_the_group_is_no_failure() -> None:
    """`restartPolicy: None`: a container restarts in place and the group lives on; a later
    recreation (a rolling update) did not follow from it."""
    assert verdicts(_observed(_recreated_without_a_failure("None", restart=True))) == []
    [verdict] = final_verdicts(_observed(_recreated_without_a_failure(restart=True))).values()  # the default policy: it did
    assert (verdict.code, verdict.kind, verdict.failed_at) == ("Error", "USER", b.T0 - b.minutes(30))


def test_r16_3_a_group_recreated_after_its_worker_was_drained_is_a_disruption() -> None:
    records = [r for r in lws_group_recreated() if r["topic"] != "k8s.events"]  # no Xid, no restart: a drain
    for r in records:
        obj = r["value"]["object"]
        if obj["metadata"]["name"] == "serve-0-1" and any(c.get("restartCount") for c in obj["status"].get("containerStatuses", [])):
            status = obj["status"]
            status["containerStatuses"][0]["restartCount"], status["containerStatuses"][0]["lastState"] = 0, {}
            status["conditions"] = [b.disruption_target("EvictionByEvictionAPI", b.T0 - b.minutes(20))]
    [verdict] = final_verdicts(_observed(records)).values()
    assert (verdict.code, verdict.kind, verdict.terminal) == ("PodDisrupted", "SYSTEM", False)
    assert verdict.faulted_pod is not None and verdict.faulted_pod.name == "serve-0-1"
    assert verdict.failed_at == b.T0 - b.minutes(20) and "after pod serve-0-1 was disrupted" in verdict.message


@pytest.mark.parametrize("evidence", ["condition", "event"])
def test_r16_3_a_group_recreated_after_kueue_force_deleted_its_worker_is_a_disruption(evidence: str) -> None:
    """R16.6's evidence is a disruption as R14.1's is: the worker's node stopped answering
    and Kueue's failure recovery force-deleted it — its `KueueFailureRecovery` condition
    (no time of its own: the record that showed it dates it), or its Warning Event alone —
    and the controller recreated the group."""
    records = []
    for r in lws_group_recreated():
        if r["topic"] == "k8s.events":
            continue  # no Xid
        obj = r["value"]["object"]
        if obj["metadata"]["name"] == "serve-0-1" and any(c.get("restartCount") for c in obj["status"].get("containerStatuses", [])):
            obj["status"]["containerStatuses"][0]["restartCount"], obj["status"]["containerStatuses"][0]["lastState"] = 0, {}
            forced, event = b.kueue_force_deleted(obj, b.T0 - b.minutes(20), "gpu-41")
            if evidence == "condition":
                r = b.record(forced, b.T0 - b.minutes(19.9))
            else:
                records.append(b.record(event, b.T0 - b.minutes(19.95), "ADDED"))
        records.append(r)
    [verdict] = final_verdicts(_observed(records)).values()
    assert (verdict.code, verdict.kind, verdict.terminal, verdict.generation) == ("PodDisrupted", "SYSTEM", False, 0)
    assert verdict.faulted_pod is not None and verdict.faulted_pod.name == "serve-0-1"
    assert verdict.failed_at == (b.T0 - b.minutes(19.9) if evidence == "condition" else b.T0 - b.minutes(20))
    assert "after pod serve-0-1 was disrupted" in verdict.message
    assert verdict.reasons == [
        "pod serve-0-1 disrupted by the cluster (KueueForcefullyDeleted): force-deleted by Kueue's failure recovery, node gpu-41 unreachable"
    ]


def test_r16_3_only_a_leaderworkerset_whose_templates_ask_for_a_gpu_is_an_attempt() -> None:
    records = lws_group_recreated()
    cpu = msgspec.json.decode(msgspec.json.encode(records))
    for r in cpu:
        if r["value"]["object"]["kind"] == "LeaderWorkerSet":
            r["value"]["object"]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "4"}}
    assert verdicts(_observed(cpu)) == []
    leader_only = msgspec.json.decode(msgspec.json.encode(cpu))
    for r in leader_only:
        if r["value"]["object"]["kind"] == "LeaderWorkerSet":
            r["value"]["object"]["spec"]["leaderWorkerTemplate"]["leaderTemplate"] = b.leaderworkerset("x", leader_gpus=8)["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    assert [v.code for v in final_verdicts(_observed(leader_only)).values()] == ["GpuFallenOffBus"]


def test_r16_3_a_leaderworkerset_deleted_and_created_again_under_its_name_is_another_attempt() -> None:
    """Its pods name it by name only: the second one meets the first one's pods under the
    same keys, but they were made before it and are not its (R13.3)."""
    first = lws_group_recreated()
    lws = next(r["value"]["object"] for r in first if r["value"]["object"]["kind"] == "LeaderWorkerSet")
    gone = b.T0 - b.minutes(15)
    pods_left = {r["key"]: r["value"]["object"] for r in first if r["topic"] == "k8s.pods"}
    records = first + [b.record(lws, gone, "DELETED")]
    records += [b.record(p, gone + b.minutes(0.2), "DELETED") for p in pods_left.values() if p["metadata"].get("deletionTimestamp") is None]
    second = [r for r in lws_group_recreated(t0=b.T0 + b.minutes(50)) if r["value"]["observed_at"] > b.ts(gone + b.minutes(1))]
    got = final_verdicts(_observed(records + second))
    second_uid = _lws_uid(second)
    assert sorted(v.tracked.uid for v in got.values()) == sorted([lws["metadata"]["uid"], second_uid])
    later = next(v for v in got.values() if v.tracked.uid == second_uid)
    assert (later.generation, later.code, later.revision, later.reasons) == (0, "GpuFallenOffBus", 0, ["GPU fault recorded on pod serve-0-1"])
    assert later.failed_at == b.T0 + b.minutes(30)


def test_r16_3_a_leaderworkerset_speaks_for_at_most_max_groups_and_counts_the_rest() -> None:
    lws = b.leaderworkerset("wide", replicas=MAX_GROUPS + 5)
    pipeline = new_pipeline()
    pipeline.feed("k8s.jobs", lws["metadata"]["uid"], msgspec.json.encode(b.record(lws, b.T0, "ADDED")["value"]))
    assert len(pipeline.states["attempts"]) == MAX_GROUPS
    assert pipeline.counts["dropped_groups"] == 5


def _storm(recreations: int) -> list[dict]:
    """A group whose worker's container restarts every generation, `recreations` times."""
    lws = b.leaderworkerset("storm", created=b.T0 - b.minutes(10 * recreations + 10))
    out = [b.record(lws, b.T0 - b.minutes(10 * recreations + 10), "ADDED")]
    for number in range(recreations + 1):
        made = b.T0 - b.minutes(10 * (recreations - number) + 9)
        leader = _running(b.lws_pod(lws, 0, 0, node="gpu-40", created=made, owner_uid="sts"), made + b.minutes(1))
        worker = _running(b.lws_pod(lws, 0, 1, node="gpu-41", created=made, owner_uid=b.kube_uid()), made + b.minutes(1))
        out += [b.record(leader, made + b.minutes(1), "ADDED"), b.record(worker, made + b.minutes(1), "ADDED")]
        if number < recreations:
            worker = _restarted(worker, made + b.minutes(5), 1, "Error", made + b.minutes(1))
            out.append(b.record(worker, made + b.minutes(5.1)))
            teardown = _torn_down(leader, made + b.minutes(5.2), made + b.minutes(5.5)) + _torn_down(worker, made + b.minutes(5.2), made + b.minutes(5.4))
            out += [b.record(obj, at, change) for obj, at, change in teardown]
    return out


def test_r16_3_a_group_keeps_the_pods_of_its_latest_generations_and_numbers_on() -> None:
    rules = Rules(max_generations=4)
    pipeline = new_pipeline(rules)
    out = []
    for r in _observed(_storm(10)):
        out += pipeline.feed(r["topic"], r["key"], msgspec.json.encode(r["value"]))
    [state] = pipeline.states["attempts"].values()
    assert len(state.pods) == 2 * 4 and pipeline.counts["dropped_generations"] == 11 - 4
    latest = [e.value for e in out if e.topic == CLASSIFIED_FAILURES][-1]
    assert latest.generation == 9 and latest.code == "Error"  # the tenth generation, the last that failed
    assert [line.split(" failed")[0] for line in latest.reasons] == ["group 0 generation 7", "group 0 generation 8"]
    assert not [e for e in out if e.topic == DEAD_LETTER]


def test_r16_3_a_group_state_holds_at_most_max_group_pods() -> None:
    lws = b.leaderworkerset("huge", size=MAX_GROUP_PODS + 40)
    pipeline = new_pipeline()
    pipeline.feed("k8s.jobs", lws["metadata"]["uid"], msgspec.json.encode(b.record(lws, b.T0 - b.minutes(30), "ADDED")["value"]))
    for number, made in enumerate((b.T0 - b.minutes(20), b.T0 - b.minutes(10))):
        for w in range(MAX_GROUP_PODS + 40):
            p = b.lws_pod(lws, 0, w, node="gpu-40", created=made, owner_uid=f"sts-{number}")
            pipeline.feed("k8s.pods", p["metadata"]["uid"], msgspec.json.encode(b.record(p, made, "ADDED")["value"]))
    [state] = pipeline.states["attempts"].values()
    assert len(state.pods) == MAX_GROUP_PODS + 40  # the latest generation, whole
    assert pipeline.counts["dropped_generations"] == 1


def test_r16_3_kueues_workloads_for_the_groups_follow_no_gang_and_break_nothing() -> None:
    """Kueue makes one Workload per group, owned (not controlled) by the LeaderWorkerSet and
    labelled with its uid (kueue v0.19.2 pkg/controller/jobs/leaderworkerset): faultline
    follows no gang for it (docs/rules.md)."""
    records = lws_group_recreated()
    lws = next(r["value"]["object"] for r in records if r["value"]["object"]["kind"] == "LeaderWorkerSet")
    meta = lws["metadata"]
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "leaderworkerset-serve-0-3f1c2",
            "namespace": b.NS,
            "uid": b.kube_uid(),
            "creationTimestamp": b.ts(b.T0 - b.minutes(60)),
            "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
            "annotations": {"kueue.x-k8s.io/component-workload-index": "0"},
            "ownerReferences": [{"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": "serve", "uid": meta["uid"]}],
        },
        "spec": {"active": True, "queueName": "serving", "podSets": [{"name": "main", "count": 2, "template": lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]}]},
        "status": {"conditions": [b.condition("Admitted", "Admitted", "The workload is admitted", b.T0 - b.minutes(60))]},
    }
    evicted = b.updated(workload, conditions=[b.condition("Evicted", "Preempted", "Preempted to accommodate a workload", b.T0 - b.minutes(20))])
    out = run(_observed(records + [b.record(workload, b.T0 - b.minutes(60), "ADDED"), b.record(evicted, b.T0 - b.minutes(20))]))
    assert not [e for e in out if e.topic in (GANG_TRANSITIONS, DEAD_LETTER)]
    assert [e.value.code for e in out if e.topic == CLASSIFIED_FAILURES][-1] == "GpuFallenOffBus"


def test_r16_3_a_group_is_kept_while_it_lives_and_expires_once_its_object_or_all_its_pods_are_gone() -> None:
    """R7.4 for a group: the LeaderWorkerSet never fails; its deletion ends its groups, and a
    group scaled away (every pod of it deleted, the object alive) ends too."""
    from app.core.base.rules import DEFAULT_RULES
    from app.core.stages.attempts import attempt_expires_at

    records = lws_group_recreated()
    lws = next(r["value"]["object"] for r in records if r["value"]["object"]["kind"] == "LeaderWorkerSet")
    last_pods = {r["key"]: r["value"]["object"] for r in records if r["topic"] == "k8s.pods" and r["value"]["type"] != "DELETED"}
    gone = b.T0 + b.minutes(5)
    for tail, ends in (([], False), ([b.record(p, gone, "DELETED") for p in last_pods.values()], True), ([b.record(lws, gone, "DELETED")], True)):
        pipeline = new_pipeline()
        for r in sorted(records, key=lambda r: r["value"]["observed_at"]) + tail:
            pipeline.feed(r["topic"], r["key"], msgspec.json.encode(r["value"]))
        [state] = pipeline.states["attempts"].values()
        expires = attempt_expires_at(state, DEFAULT_RULES)
        assert (expires is not None) == ends, tail
        assert expires is None or expires == gone + DEFAULT_RULES.retention


def test_r16_3_classify_and_run_say_a_group_was_restarted_as_a_new_group_not_in_place() -> None:
    from app.cli import live_output, render

    [verdict] = final_verdicts(_observed(lws_group_recreated())).values()
    assert render.restart_cell(verdict) == "as a new group (generation 0)"
    assert render.verdict_table([verdict])[1].rstrip().endswith("as a new group (generation 0)")
    assert "restarted in place" not in "\n".join(render.verdict_table([verdict]))
    assert live_output.verdict_cells(verdict, None)[-1] == "restarted as a new group (generation 0)"
