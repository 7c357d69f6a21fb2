"""Issue 30: what failures cost. Every verdict carries `gpu_seconds` (the GPUs its candidate
pods requested times how long each ran, from the records' own times); the fleet counts
them by kind, code, node and namespace. Every rule through every driver."""

from __future__ import annotations

from datetime import datetime, timedelta

import msgspec
import orjson
import pytest

from app.core.fleet.read_model import FleetState, read
from app.core.fleet.costs import cost_by_code, cost_by_namespace, cost_by_node
from app.core.fleet.summary import fleet_summary
from app.core.verdicts.gpu_time import MAX_GPUS_PER_POD
from app.model.fleet_records import FAILURE_RATES, NODE_GPU_TIME
from app.model.records import CLASSIFIED_FAILURES, GANG_TRANSITIONS, ClassifiedFailure
from tests.unit import gang_builders as gb
from tests.unit.builders import (
    T0,
    attempt_labels,
    condition,
    event,
    jobset,
    jobset_pod_labels,
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
from tests.unit.drivers import new_pipeline
from tests.unit.scenario import final_verdicts, only_verdict, run, verdicts
from tests.unit.stories import jobset_restart_then_fail

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver

HOUR = 3600


def failed(p: dict, exit_code: int = 1, at: datetime = T0, started: datetime | None = None) -> dict:
    state = terminated(exit_code, at)
    if started is not None:
        state["terminated"]["startedAt"] = ts(started)
    return updated(p, phase="Failed", containerStatuses=[{"name": c["name"], "state": state} for c in p["spec"]["containers"]])


def pytorchjob(name: str, workers: list[dict], failed_at: datetime = T0) -> tuple[dict, dict]:
    """A PyTorchJob under labels, and its record failing at `failed_at`."""
    job = kubeflow("PyTorchJob", name, labels=attempt_labels(run=name))
    gone = updated(job, conditions=[condition("Failed", "PyTorchJobFailed", "a worker failed", failed_at)])
    return job, gone


def worker(job: str, i: int, **kw) -> dict:
    return pod(f"{job}-worker-{i}", labels={**kubeflow_pod_labels(job), **attempt_labels(run=job)}, node=f"gpu-{i}", **kw)


# --- one pod: its GPUs x how long it ran -------------------------------------------------------


def test_gpu_seconds_of_a_pod_task_are_its_gpus_times_the_seconds_it_ran():
    p = pod("p", containers={"main": running(T0 - minutes(90))}, created=T0 - minutes(95), gpus=4)
    v = only_verdict([record(p, T0 - minutes(90), "ADDED"), record(failed(p, started=T0 - minutes(90)), T0)])
    assert v.gpu_seconds == 4 * 90 * 60
    body = msgspec.json.decode(msgspec.json.encode(v))
    assert body["gpu_seconds"] == 4 * 90 * 60 and body["schema"] == "faultline.ClassifiedFailure/v2"


def test_gpu_seconds_of_a_pod_that_never_started_are_zero():
    # Pending (its image still pulling), then rejected: no container ever ran.
    p = pod("p", phase="Pending", containers={"main": {"waiting": {"reason": "ContainerCreating"}}}, created=T0 - minutes(10))
    gone = updated(p, phase="Failed", reason="UnexpectedAdmissionError", containerStatuses=[{"name": "main", "state": {"waiting": {"reason": "ContainerCreating"}}}])
    assert only_verdict([record(p, T0 - minutes(10), "ADDED"), record(gone, T0)]).gpu_seconds == 0
    # A child pod still Pending when its job failed adds nothing; its running sibling does.
    pending = worker("pt", 1, phase="Pending", containers={"main": {"waiting": {"reason": "ContainerCreating"}}})
    ran = worker("pt", 0, containers={"main": running(T0 - minutes(30))})
    job, gone = pytorchjob("pt", [ran, pending])
    records = [record(job, T0 - minutes(40), "ADDED"), record(ran, T0 - minutes(30), "ADDED"), record(pending, T0 - minutes(30), "ADDED"), record(gone, T0)]
    assert only_verdict(records).gpu_seconds == 8 * 30 * 60


def test_gpu_seconds_of_a_container_the_runtime_never_started_are_zero():
    # A StartError: the runtime reports the Unix epoch as its start (kubernetes/kubernetes#120331).
    p = pod("p", containers={"main": None}, created=T0 - minutes(5))
    state = terminated(128, T0, "StartError")
    state["terminated"]["startedAt"] = "1970-01-01T00:00:00Z"
    gone = updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": state}])
    assert only_verdict([record(p, T0 - minutes(5), "ADDED"), record(gone, T0)]).gpu_seconds == 0


def test_gpu_seconds_are_unknown_when_a_pod_ran_and_no_start_was_shown():
    p = pod("p", containers={"main": None})  # Running, but no container status recorded
    state = terminated(1, T0)
    del state["terminated"]["startedAt"]
    gone = updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": state}])
    out = run([record(p, T0 - minutes(30), "ADDED"), record(gone, T0)], derived=True)
    (v,) = [e.value for e in out if e.topic == CLASSIFIED_FAILURES]
    assert v.gpu_seconds is None and msgspec.json.decode(msgspec.json.encode(v))["gpu_seconds"] is None
    rate = [e.value for e in out if e.topic == FAILURE_RATES][-1]
    assert (rate.failures, rate.gpu_seconds, rate.gpu_seconds_unknown) == (1, 0, 1)
    assert not [e for e in out if e.topic == NODE_GPU_TIME]  # nothing attributed to any node


def test_gpu_seconds_of_a_pod_deleted_before_it_finished_end_at_its_deletion():
    # Worker 1 is deleted (its deletionTimestamp, the end of its grace period) 20 min before
    # the job fails; it never reported a finish.
    w0 = worker("pt", 0, containers={"main": running(T0 - minutes(60))})
    w1 = worker("pt", 1, containers={"main": running(T0 - minutes(60))})
    deleting = worker("pt", 1, pod_uid=w1["metadata"]["uid"], containers={"main": running(T0 - minutes(60))}, deletion=T0 - minutes(20))
    job, gone = pytorchjob("pt", [w0, w1])
    records = [
        record(job, T0 - minutes(61), "ADDED"),
        record(w0, T0 - minutes(60), "ADDED"),
        record(w1, T0 - minutes(60), "ADDED"),
        record(deleting, T0 - minutes(20.5)),
        record(deleting, T0 - minutes(19.5), "DELETED"),
        record(gone, T0),
    ]
    assert only_verdict(records).gpu_seconds == 8 * 60 * 60 + 8 * 40 * 60


def test_gpu_seconds_stop_at_the_failure_and_a_later_finish_changes_nothing():
    # The pods outlive the job's failure by 10 minutes: the failure's cost ends with it.
    w0 = worker("pt", 0, containers={"main": running(T0 - minutes(60))})
    job, gone = pytorchjob("pt", [w0])
    before = [record(job, T0 - minutes(61), "ADDED"), record(w0, T0 - minutes(60), "ADDED"), record(gone, T0)]
    after = [*before, record(failed(w0, 143, T0 + minutes(10), started=T0 - minutes(60)), T0 + minutes(10))]
    emitted = verdicts(after)
    assert [v.gpu_seconds for v in emitted] == [8 * HOUR]  # no revision for a finish after the failure


def test_gpu_seconds_start_is_capped_by_the_bridge_clock_and_never_before_the_pod_was_created():
    # The kubelet's clock says 10:55, but the bridge saw the pod running at 10:50; the
    # pod was created (the API server's clock) at 10:40: a start said to be 9:00 is 10:40.
    ahead = pod("a", containers={"main": running(T0 - minutes(5))}, created=T0 - minutes(20))
    v = only_verdict([record(ahead, T0 - minutes(10), "ADDED"), record(failed(ahead, started=T0 - minutes(5)), T0)])
    assert v.gpu_seconds == 8 * 10 * 60
    early = pod("b", containers={"main": running(T0 - minutes(180))}, created=T0 - minutes(20))
    v = only_verdict([record(early, T0 - minutes(15), "ADDED"), record(failed(early, started=T0 - minutes(180)), T0)])
    assert v.gpu_seconds == 8 * 20 * 60


def test_gpu_seconds_of_a_restarted_container_count_from_its_first_start():
    # restartPolicy OnFailure: the container restarts in the same pod, which keeps its GPUs.
    p = pod("p", containers={"main": running(T0 - minutes(60))}, created=T0 - minutes(61), gpus=2)
    again = updated(p, containerStatuses=[{"name": "main", "state": running(T0 - minutes(10)), "restartCount": 1}])
    records = [record(p, T0 - minutes(60), "ADDED"), record(again, T0 - minutes(10)), record(failed(p, started=T0 - minutes(10)), T0)]
    assert only_verdict(records).gpu_seconds == 2 * HOUR


def test_gpu_seconds_of_each_jobset_generation_are_that_generations_pods():
    emitted = verdicts(jobset_restart_then_fail())
    gen0, final = emitted[0], emitted[-1]
    # Generation 0: its worker ran 30 min up to the restart; generation 1: its worker from its
    # start at t0 + 1 min to its finish at t0 + 9 min, never counting generation 0's again.
    assert (gen0.generation, gen0.terminal, gen0.gpu_seconds) == (0, False, 8 * 30 * 60)
    assert (final.generation, final.terminal, final.gpu_seconds) == (1, True, 8 * 8 * 60)


# --- what a pod asks for -------------------------------------------------------------------------


def _gpus_of(spec: dict) -> int:
    """The GPU-seconds of a pod task with this spec that ran one second."""
    p = pod("p", containers={"main": running(T0 - timedelta(seconds=1))}, created=T0 - minutes(1))
    p["spec"].update(spec)
    return only_verdict([record(p, T0 - timedelta(seconds=1), "ADDED"), record(failed(p, started=T0 - timedelta(seconds=1)), T0)]).gpu_seconds


def _containers(*resources: dict, claims: list[dict] | None = None) -> list[dict]:
    out = [{"name": f"c{i}", "image": "x", "resources": r} for i, r in enumerate(resources)]
    if claims:
        out[0]["resources"]["claims"] = claims
    return out


def test_gpu_seconds_count_gpus_from_limits_else_requests_summed_over_containers():
    assert _gpus_of({"containers": _containers({"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "9"}}, {"requests": {"nvidia.com/gpu": "3"}})}) == 5
    assert _gpus_of({"containers": _containers({"limits": {"cpu": "8"}})}) == 0
    # A JSON number is read as the API server would write it; what is no whole number counts one.
    assert _gpus_of({"containers": _containers({"limits": {"nvidia.com/gpu": 4}}, {"limits": {"nvidia.com/gpu": "500m"}}, {"limits": {"nvidia.com/gpu": "1e3"}})}) == 6
    # Bounded: a hostile quantity never makes one pod more than MAX_GPUS_PER_POD GPUs.
    assert _gpus_of({"containers": _containers({"limits": {"nvidia.com/gpu": "99999999999999999999"}})}) == MAX_GPUS_PER_POD
    assert _gpus_of({"containers": _containers(*({"limits": {"nvidia.com/gpu": "40"}} for _ in range(100)))}) == MAX_GPUS_PER_POD


def test_gpu_seconds_count_a_dra_claim_by_the_requests_its_containers_use_else_one():
    claims = [{"name": "gpus", "resourceClaimTemplateName": "two-gpus"}, {"name": "nic", "resourceClaimName": "rdma"}]
    uses = [{"name": "gpus", "request": "a"}, {"name": "gpus", "request": "b"}, {"name": "gpus", "request": "a"}]
    assert _gpus_of({"containers": _containers({}, claims=uses), "resourceClaims": claims}) == 2 + 1
    assert _gpus_of({"containers": _containers({}), "resourceClaims": claims[:1]}) == 1


def test_gpu_seconds_keep_no_resources_in_state_only_the_number():
    many = {f"example.com/r{i}": "1" for i in range(5000)} | {"nvidia.com/gpu": "8"}
    p = pod("p", containers={"main": running(T0 - minutes(5))}, created=T0 - minutes(6))
    p["spec"]["containers"][0]["resources"] = {"limits": many}
    pipeline = new_pipeline()
    pipeline.feed("k8s.pods", p["metadata"]["uid"], orjson.dumps(record(p, T0 - minutes(5), "ADDED")["value"]))
    (state,) = pipeline.states["pods"].values()
    assert state.pod.gpus == 8 and len(msgspec.msgpack.encode(state)) < 2048


# --- a wait for readmission is not burned GPU time (R9, R15) ---------------------------------------


def test_gpu_seconds_exclude_a_wait_for_readmission():
    """A GPU batch Job under Kueue (R15): its two pods run 30 min, Kueue preempts it (the
    Job controller deletes its pods), it waits two hours, is readmitted, its new pods run
    20 min and one fails. The wait is the gang's, not GPU time: 2 pods x 8 GPUs x 50 min."""
    world = gb.JobWorld(workers=2)
    world.start()
    job = world.js
    labels = {"batch.kubernetes.io/controller-uid": gb.JOB_UID, "batch.kubernetes.io/job-name": gb.JOB_NAME}
    owners = [{"apiVersion": "batch/v1", "kind": "Job", "name": gb.JOB_NAME, "uid": gb.JOB_UID, "controller": True}]

    def pods(tag: str) -> list[dict]:
        now = world.now
        return [
            pod(f"{gb.JOB_NAME}-{tag}{i}", namespace=gb.NAMESPACE, labels=labels, owners=owners, node=f"gpu-{tag}{i}", created=now, containers={"main": running(now)})
            for i in range(2)
        ]

    def publish(obj: dict, change: str = "MODIFIED") -> None:
        world.records.append(record(obj, world.now, change))
        world.now += world.step

    first = pods("a")
    started_first = world.now
    for p in first:
        publish(p, "ADDED")
    world.pause(30 * 60)
    world.preempt().suspend()
    stopped = world.now
    for p in first:  # the Job controller deletes its active pods when the Job is suspended
        publish(failed(p, 143, stopped, started=started_first))
        publish(failed(p, 143, stopped, started=started_first), "DELETED")
    world.jobs_stopped().release_quota().pause(2 * HOUR)
    world.readmit().unsuspend()
    second = pods("b")
    started_second = world.now
    for p in second:
        publish(p, "ADDED")
    world.workers_ready().pause(20 * 60)
    publish(failed(second[0], 1, world.now, started=started_second))
    world.fail()
    failed_at = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")["lastTransitionTime"]

    pipeline = new_pipeline()
    out = [e for line in world.records for e in pipeline.feed(line["topic"], line["key"], orjson.dumps(line["value"]))]
    out += pipeline.finish()  # the end of the trace settles the gang's decisions (R12.3)
    waits = [e.value for e in out if e.topic == GANG_TRANSITIONS and e.value.from_ == "WaitingForReadmission"]
    assert waits and waits[0].waited_seconds >= 2 * HOUR  # the gang did wait
    verdict = [e.value for e in out if e.topic == CLASSIFIED_FAILURES][-1]
    ran_first = int((stopped - started_first).total_seconds())
    ran_second = int((datetime.fromisoformat(failed_at) - started_second).total_seconds())
    assert ran_first >= 30 * 60 and ran_second >= 20 * 60
    assert verdict.gpu_seconds == 2 * 8 * (ran_first + ran_second)
    assert verdict.gpu_seconds < 2 * 8 * 2 * HOUR  # far less than the wait alone would have cost


# --- the fleet: by kind, code, node and namespace ---------------------------------------------------


def _fleet(out) -> FleetState:
    state = FleetState()
    for e in out:
        read(state, e)
    return state


def test_gpu_seconds_count_in_the_fleet_by_kind_code_node_and_namespace():
    w0 = worker("pt", 0, containers={"main": running(T0 - minutes(60))})
    w1 = worker("pt", 1, containers={"main": running(T0 - minutes(30))}, gpus=4)
    job, gone = pytorchjob("pt", [w0, w1])
    p = pod("solo", labels=attempt_labels(run="solo"), containers={"main": running(T0 - minutes(120))}, node="gpu-0", gpus=2)
    records = [
        record(job, T0 - minutes(61), "ADDED"),
        record(w0, T0 - minutes(60), "ADDED"),
        record(w1, T0 - minutes(30), "ADDED"),
        record(gone, T0),
        record(p, T0 - minutes(120), "ADDED"),
        record(failed(p, started=T0 - minutes(120)), T0 + minutes(5)),
    ]
    state = _fleet(run(records, derived=True))
    job_cost, solo_cost = 8 * HOUR + 4 * 30 * 60, 2 * 2 * HOUR  # the solo pod finished at T0, seen at T0 + 5 min
    assert [(r.key, r.gpu_seconds, r.user_gpu_seconds) for r in cost_by_code(state)] == [
        ("PyTorchJobFailed", job_cost, job_cost), ("Error", solo_cost, solo_cost)
    ]
    assert [(r.key, r.gpu_seconds, r.failures) for r in cost_by_node(state)] == [
        ("prod-a/gpu-0", 8 * HOUR + solo_cost, 2), ("prod-a/gpu-1", 4 * 30 * 60, 1)
    ]
    assert [(r.key, r.gpu_seconds) for r in cost_by_namespace(state)] == [("prod-a/ml", job_cost + solo_cost)]
    totals = fleet_summary(state).totals
    assert (totals.gpu_seconds, totals.user_gpu_seconds, totals.system_gpu_seconds) == (job_cost + solo_cost, job_cost + solo_cost, 0)
    assert sum(r.gpu_seconds for r in cost_by_node(state)) == totals.gpu_seconds


def test_gpu_seconds_move_with_a_revision_from_user_to_system_on_every_node():
    # A late critical fault turns the job's failure SYSTEM (its code stays, R6.4): its
    # GPU-seconds move with it, in its namespace's hour and on its node.
    w0 = worker("pt", 0, containers={"main": running(T0 - minutes(60))})
    job, gone = pytorchjob("pt", [w0])
    records = [record(job, T0 - minutes(61), "ADDED"), record(w0, T0 - minutes(60), "ADDED"), record(gone, T0)]
    late = record(event(w0, code=79, first=T0 - minutes(2), reporting="gpu-0"), T0 + minutes(1), "ADDED")
    out = run([*records, late], derived=True)
    assert [e.value.kind for e in out if e.topic == CLASSIFIED_FAILURES] == ["USER", "SYSTEM"]
    node = [e.value for e in out if e.topic == NODE_GPU_TIME][-1]
    assert (node.failures, node.system_failures, node.user_gpu_seconds, node.system_gpu_seconds) == (1, 1, 0, 8 * HOUR)
    rates = {e.key: e.value for e in out if e.topic == FAILURE_RATES}
    assert sorted((r.code, r.kind, r.failures, r.gpu_seconds) for r in rates.values()) == [
        ("PyTorchJobFailed", "SYSTEM", 1, 8 * HOUR), ("PyTorchJobFailed", "USER", 0, 0)
    ]


def test_gpu_seconds_of_each_generation_count_apart_in_the_fleet():
    state = _fleet(run(jobset_restart_then_fail(), derived=True))
    final = list(final_verdicts(jobset_restart_then_fail()).values())[0]
    by_code = {r.key: r for r in cost_by_code(state)}
    assert by_code["GpuFallenOffBus"].system_gpu_seconds == 8 * 30 * 60  # generation 0, SYSTEM
    assert by_code["ReachedMaxRestarts"].user_gpu_seconds == final.gpu_seconds  # generation 1, USER


def test_gpu_seconds_are_the_same_whatever_the_driver_and_a_verdict_reads_back():
    p = pod("p", containers={"main": running(T0 - minutes(7))}, created=T0 - minutes(8))
    v = only_verdict([record(p, T0 - minutes(7), "ADDED"), record(failed(p, started=T0 - minutes(7)), T0)])
    assert msgspec.json.decode(msgspec.json.encode(v), type=ClassifiedFailure) == v and v.gpu_seconds == 8 * 7 * 60
