"""SPEC R13: workloads without an orchestrator (TrainJob, JobSet, RayJob, Kubeflow jobs,
batch Jobs, bare GPU pods), and R4-R8 applied to each kind."""

from __future__ import annotations

from datetime import datetime

import msgspec
import orjson
import pytest

from app.core.base.rules import DEFAULT_RULES, Rules
from app.model.facts import ATTEMPT_FACTS
from app.model.records import CLASSIFIED_FAILURES, FAULTS, GANG_TRANSITIONS, ClassifiedFailure
from app.model.records_v1 import ClassifiedFailure as ClassifiedFailureV1
from app.model.records_v1 import upgraded
from app.embedded.pipeline import Pipeline
from tests.unit import builders as b
from tests.unit.builders import T0, condition, event, minutes, owned_by, owner, pod, record, running, terminated, updated
from tests.unit.drivers import new_pipeline
from tests.unit.scenario import final_verdicts, run, verdicts
from tests.unit.stories import (
    bare_jobset_fell_off_the_bus,
    bare_pod_gsp_timeout,
    cpu_cronjob_jobs,
    indexed_job_ecc,
    trainjob_fell_off_the_bus,
)

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver

LABELS_ONLY = Rules(workload_identity=False)


def observed(records: list[dict]) -> list[dict]:
    """In the bridge's order, with its progress (R12), as a recorded trace holds them."""
    return b.with_progress(sorted(records, key=lambda r: r["value"]["observed_at"]))


def fed(records: list[dict], rules: Rules = DEFAULT_RULES) -> tuple[Pipeline, list]:
    pipeline = new_pipeline(rules)
    out = []
    for r in records:
        out += pipeline.feed(r["topic"], r["key"], orjson.dumps(r["value"]))
    return pipeline, out


def uid_of(obj: dict) -> str:
    return obj["metadata"]["uid"]


def first_of(records: list[dict], kind: str) -> dict:
    """The first object of `kind` the records hold (progress records aside)."""
    return next(r["value"]["object"] for r in records if r["value"]["type"] != "BOOKMARK" and r["value"]["object"]["kind"] == kind)


def failed_pod(p: dict, exit_code: int = 1, at: datetime = T0) -> dict:
    names = [c["name"] for c in p["spec"]["containers"]]
    return updated(p, phase="Failed", containerStatuses=[{"name": n, "state": terminated(exit_code, at)} for n in names])


def gpu_job_story(job: dict, pods: list[dict], faults: list[tuple[dict, int]], reason: str = "BackoffLimitExceeded") -> list[dict]:
    """A batch Job, its pods, their faults (pod, Xid), the pods failing, then the Job."""
    out = [record(job, T0 - minutes(30), "ADDED")]
    out += [record(p, T0 - minutes(29), "ADDED") for p in pods]
    out += [record(event(p, code=code, first=T0 - minutes(1)), T0 - minutes(1), "ADDED") for p, code in faults]
    out += [record(failed_pod(p, at=T0 - minutes(0.5)), T0 - minutes(0.4)) for p in pods]
    out.append(record(updated(job, conditions=[condition("Failed", reason, "Job has reached the specified backoff limit", T0)]), T0 + minutes(0.1)))
    return out


def job_pod(job: dict, name: str, **kwargs) -> dict:
    return pod(name, labels=b.job_pod_labels(job), owners=owned_by(job), containers={"main": running()}, **kwargs)


# --- R13.1 identity ---------------------------------------------------------------------------


def test_r13_1_orchestrator_labels_win_over_the_workload() -> None:
    # A labelled GPU pod with no controller is a pod task (R1), not a bare pod.
    p = pod("p", containers={"main": running()})
    assert [(v.key, v.identity) for v in final_verdicts([record(p, T0 - minutes(5)), record(failed_pod(p), T0)]).values()] == [
        ("prod-a/ml/run-abc/a0/1", "labels")
    ]
    # A labelled JobSet whose pods also carry the JobSet's uid: one attempt, the labels'.
    js = b.jobset("js")
    worker = pod("js-workers-0-0", labels={**b.jobset_pod_labels("js"), "jobset.sigs.k8s.io/jobset-uid": uid_of(js)})
    failed = updated(js, conditions=[condition("Failed", "FailedJobs", "jobset failed", T0)])
    records = [record(js, T0 - minutes(60), "ADDED"), record(worker, T0 - minutes(50), "ADDED"), record(event(worker), T0 - minutes(1), "ADDED"), record(failed, T0)]
    pipeline, out = fed(records)
    assert [(e.key, e.value.identity, e.value.code) for e in out if e.topic == CLASSIFIED_FAILURES] == [("prod-a/ml/run-abc/a0/1", "labels", "FailedJobs")]
    assert list(pipeline.states["attempts"]) == ["prod-a/ml/run-abc/a0/1"]


def test_r13_1_an_unlabelled_workload_is_its_own_attempt() -> None:
    records = observed(bare_jobset_fell_off_the_bus())
    js = first_of(records, "JobSet")
    (verdict,) = final_verdicts(records).values()
    assert verdict.key == f"prod-a/ml/JobSet/sweep-lr/{uid_of(js)}"
    assert (verdict.identity, verdict.run, verdict.action, verdict.attempt) == ("workload", None, None, None)
    assert (verdict.code, verdict.kind, verdict.faulted_pod.name) == ("FailedJobs", "SYSTEM", "sweep-lr-workers-0-0-k3h9s")


def test_r13_1_workload_identity_off_names_attempts_by_labels_only() -> None:
    stories = [trainjob_fell_off_the_bus(), bare_jobset_fell_off_the_bus(), indexed_job_ecc(), bare_pod_gsp_timeout()]
    for story in stories:
        pipeline, out = fed(observed(story), LABELS_ONLY)
        assert [e for e in out if e.topic == CLASSIFIED_FAILURES] == [] and pipeline.states["attempts"] == {}
        # Gang transitions stay v1's: keyed by the JobSet's name, under labels.
        for t in (e for e in out if e.topic == GANG_TRANSITIONS):
            assert t.value.identity == "labels" and t.key.count("/") == 2


def test_r13_1_a_pod_of_any_other_controller_is_not_classified() -> None:
    p = pod("web-7d9f-x2", labels={"app": "web"}, owners=[owner("ReplicaSet", "web-7d9f", "rs-1", "apps/v1")], containers={"main": running()})
    pipeline, out = fed([record(p, T0 - minutes(5), "ADDED"), record(event(p), T0 - minutes(1), "ADDED"), record(failed_pod(p), T0)])
    assert pipeline.states["attempts"] == {}
    assert [(e.topic, e.value.attempt) for e in out if e.topic in (CLASSIFIED_FAILURES, FAULTS)] == [(FAULTS, None)]


# --- R13.2 tracked workloads ------------------------------------------------------------------


def test_r13_2_a_trainjobs_jobset_jobs_and_pods_are_the_trainjobs() -> None:
    records = observed(trainjob_fell_off_the_bus())
    tj, js = first_of(records, "TrainJob"), first_of(records, "JobSet")
    pipeline, out = fed(records)
    keys = {e.key for e in out if e.topic == CLASSIFIED_FAILURES}
    assert keys == {f"prod-a/ml/TrainJob/llama-ft/{uid_of(tj)}"}  # nothing for the JobSet or its Jobs
    verdict = [e.value for e in out if e.topic == CLASSIFIED_FAILURES][-1]
    assert verdict.tracked.kind == "TrainJob" and (verdict.tracked.name, verdict.tracked.uid) == ("llama-ft", uid_of(tj))
    # Joined under the JobSet its pods name by uid (R13.4): one state for the whole TrainJob.
    assert list(pipeline.states["attempts"]) == [f"prod-a/ml/JobSet/llama-ft/{uid_of(js)}"]


def test_r13_2_cpu_only_jobs_and_their_pods_create_no_attempt_state() -> None:
    records = observed(cpu_cronjob_jobs(jobs=40))
    pipeline, out = fed(records)
    assert pipeline.states["attempts"] == {}
    assert [e for e in out if e.topic in (CLASSIFIED_FAILURES, ATTEMPT_FACTS)] == []
    assert len(pipeline.states["pods"]) == 40  # the pod stage still knows them (a fault may name one)


def test_r13_2_a_cronjob_does_not_hide_its_gpu_job() -> None:
    job = b.batch_job("nightly-eval-29000001", owners=[owner("CronJob", "nightly-eval", "cron-1", "batch/v1")])
    worker = job_pod(job, "nightly-eval-29000001-k2x4m")
    (verdict,) = final_verdicts(gpu_job_story(job, [worker], [(worker, 94)])).values()
    assert verdict.key == f"prod-a/ml/Job/nightly-eval-29000001/{uid_of(job)}"
    assert (verdict.code, verdict.kind, verdict.tracked.kind) == ("BackoffLimitExceeded", "SYSTEM", "Job")


def test_r13_2_jobs_of_a_tracked_owner_are_never_attempts() -> None:
    js = b.workload_jobset("js")
    rj = b.rayjob("rj", labels={}, cluster_name="rj-raycluster-k2x4m")
    mpi = b.kubeflow("MPIJob", "mpi", labels={})
    for parent in (js, rj, mpi):
        job = b.batch_job(f"{parent['metadata']['name']}-child", owners=owned_by(parent))
        worker = job_pod(job, f"{parent['metadata']['name']}-child-0")
        records = gpu_job_story(job, [worker], [(worker, 79)])
        pipeline, out = fed(records)
        assert [e.key for e in out if e.topic == CLASSIFIED_FAILURES] == []
        assert all(s.job is None for s in pipeline.states["attempts"].values())  # the Job's record went nowhere


def test_r13_2_a_bare_pod_counts_only_when_it_asks_for_a_gpu() -> None:
    def story(p: dict) -> list[dict]:
        return [record(p, T0 - minutes(5), "ADDED"), record(event(p), T0 - minutes(1), "ADDED"), record(failed_pod(p), T0)]

    cpu = pod("cpu", labels={}, gpus=0, containers={"main": running()})
    pipeline, _ = fed(story(cpu))
    assert pipeline.states["attempts"] == {}
    claimed = pod("dra", labels={}, gpus=0, claims=True, containers={"main": running()})
    assert [v.key for v in final_verdicts(story(claimed)).values()] == [f"prod-a/ml/Pod/dra/{uid_of(claimed)}"]
    requests_only = pod("req", labels={}, gpus=0, containers={"main": running()})
    requests_only["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "1"}}
    assert len(final_verdicts(story(requests_only))) == 1
    amd = pod("amd", labels={}, gpus=0, containers={"main": running()})
    amd["spec"]["containers"][0]["resources"] = {"limits": {"amd.com/gpu": "1"}}
    assert final_verdicts(story(amd)) == {}
    assert len(final_verdicts(story(amd), Rules(gpu_resources=("nvidia.com/gpu", "amd.com/gpu")))) == 1


def test_r13_2_a_huge_resources_map_is_kept_as_one_boolean() -> None:
    p = pod("big", labels={}, containers={"main": running()})
    p["spec"]["containers"][0]["resources"]["limits"] |= {f"example.com/device-{i}": "1" for i in range(5000)}
    pipeline, out = fed([record(p, T0 - minutes(5), "ADDED"), record(failed_pod(p), T0)])
    assert len([e for e in out if e.topic == CLASSIFIED_FAILURES]) == 1
    for stage in ("pods", "attempts"):
        (state,) = pipeline.states[stage].values()
        encoded = msgspec.json.encode(state)
        assert b"example.com" not in encoded and len(encoded) < 2048


def test_r13_2_an_owner_name_that_would_split_a_key_is_refused() -> None:
    p = pod("p", labels={}, owners=[owner("PyTorchJob", "a/b", "u-1", "kubeflow.org/v1")], containers={"main": running()})
    out = run([record(p, T0 - minutes(5), "ADDED")])
    assert [e.topic for e in out] == ["faultline.dead-letter"] and "contains '/'" in out[0].value.reason
    # A long one is cut to max_token_chars (counted), never kept whole.
    long = pod("q", labels={}, owners=[owner("PyTorchJob", "x" * 5000, "u-2", "kubeflow.org/v1")], containers={"main": running()})
    pipeline, _ = fed([record(long, T0 - minutes(5), "ADDED")])
    (state,) = pipeline.states["pods"].values()
    assert len(state.pod.owner.name) == DEFAULT_RULES.max_token_chars and pipeline.counts["truncated_texts"] == 1


# --- R13.3 the workload attempt key and records v2 ----------------------------------------------


def test_r13_3_workload_key_names_kind_name_and_uid_and_the_record_says_workload() -> None:
    records = observed(bare_pod_gsp_timeout())
    (verdict,) = final_verdicts(records).values()
    p = first_of(records, "Pod")
    assert verdict.key == f"prod-a/ml/Pod/notebook-gpu-7/{uid_of(p)}"
    body = msgspec.json.decode(msgspec.json.encode(verdict))
    assert body["schema"] == "faultline.ClassifiedFailure/v2"
    assert list(body)[:9] == ["schema", "key", "cluster", "namespace", "identity", "run", "action", "attempt", "tracked"]
    assert (body["identity"], body["run"], body["action"], body["attempt"]) == ("workload", None, None, None)
    assert body["tracked"] == {"kind": "Pod", "name": "notebook-gpu-7", "uid": uid_of(p)}
    assert msgspec.json.decode(msgspec.json.encode(verdict), type=ClassifiedFailure) == verdict


def test_r13_3_an_object_created_again_under_the_same_name_is_a_new_attempt() -> None:
    first = pod("nb", labels={}, containers={"main": running()})
    second = pod("nb", labels={}, containers={"main": running(T0 + minutes(5))}, created=T0 + minutes(5))
    records = [
        record(first, T0 - minutes(10), "ADDED"),
        record(failed_pod(first), T0),
        record(failed_pod(first), T0 + minutes(1), "DELETED"),
        record(second, T0 + minutes(5), "ADDED"),
        record(failed_pod(second, at=T0 + minutes(20)), T0 + minutes(20)),
    ]
    final = final_verdicts(records)
    assert sorted(final) == sorted(f"prod-a/ml/Pod/nb/{uid_of(p)}" for p in (first, second))
    assert all(v.terminal and not v.reasons for v in final.values())  # R8.2 cannot happen: one pod, one attempt


def test_r13_3_gang_transitions_are_keyed_by_the_workload_attempt() -> None:
    for story, kind, name in ((bare_jobset_fell_off_the_bus, "JobSet", "sweep-lr"), (trainjob_fell_off_the_bus, "TrainJob", "llama-ft")):
        records = observed(story())
        obj = first_of(records, kind)
        transitions = [e for e in run(records) if e.topic == GANG_TRANSITIONS]
        assert [t.value.to for t in transitions] == ["Running", "Ended"]
        for t in transitions:
            assert t.key == f"prod-a/ml/{kind}/{name}/{uid_of(obj)}" and t.value.key == t.key
            assert (t.value.identity, t.value.run, t.value.tracked.kind, t.value.tracked.uid) == ("workload", None, kind, uid_of(obj))
            assert t.value.jobset.name == name  # the JobSet, named after its TrainJob
    body = msgspec.json.decode(msgspec.json.encode(transitions[-1].value))
    assert body["schema"] == "faultline.GangTransition/v2" and list(body)[:5] == ["schema", "key", "cluster", "namespace", "identity"]


def test_r13_3_a_v1_record_reads_as_a_labels_verdict() -> None:
    (v2,) = final_verdicts([record(p := pod("p", containers={"main": running()}), T0 - minutes(5)), record(failed_pod(p), T0)]).values()
    fields = {f: getattr(v2, f) for f in v2.__struct_fields__ if f not in ("identity", "gpu_seconds", "goodput")}
    v1 = msgspec.json.decode(msgspec.json.encode(ClassifiedFailureV1(**fields)), type=ClassifiedFailureV1)
    assert msgspec.json.encode(v1).startswith(b'{"schema":"faultline.ClassifiedFailure/v1"')
    assert upgraded(v1) == msgspec.structs.replace(v2, gpu_seconds=None, goodput=None)  # v1 knew no cost (issue 30, R17)


# --- R13.4 child pods ------------------------------------------------------------------------------


def test_r13_4_trainjob_restarts_generation_n_then_terminal_with_carried_reasons() -> None:
    tj = b.trainjob("llama-ft")
    js = b.workload_jobset("llama-ft", owner_of=tj)
    gen0 = pod("llama-ft-node-0-0-a", labels=b.jobset_child_labels(js, trainjob=True), containers={"node": running()})
    gen1 = pod("llama-ft-node-0-0-b", labels=b.jobset_child_labels(js, restarts=1, trainjob=True), containers={"node": running(T0 + minutes(2))}, created=T0 + minutes(1))
    records = [
        record(tj, T0 - minutes(60), "ADDED"),
        record(js, T0 - minutes(60), "ADDED"),
        record(gen0, T0 - minutes(50), "ADDED"),
        record(event(gen0, code=79, first=T0 - minutes(2)), T0 - minutes(2), "ADDED"),
        record(updated(js, restarts=1), T0),
        record(gen1, T0 + minutes(2), "ADDED"),
        record(failed_pod(gen1, 2, T0 + minutes(9)), T0 + minutes(9)),
        record(updated(js, restarts=1, conditions=[condition("Failed", "ReachedMaxRestarts", "jobset failed due to reaching max number of restarts", T0 + minutes(10))]), T0 + minutes(10)),
    ]
    emitted = verdicts(records)
    key = f"prod-a/ml/TrainJob/llama-ft/{uid_of(tj)}"
    assert [(v.key, v.generation, v.terminal, v.code) for v in emitted] == [
        (key, 0, False, "GpuFallenOffBus"),
        (key, 1, True, "ReachedMaxRestarts"),
    ]
    assert emitted[-1].reasons == ["generation 0 failed: GpuFallenOffBus (SYSTEM); GPU fault recorded on pod llama-ft-node-0-0-a"]
    assert emitted[-1].gpu_fault is None and emitted[-1].tracked.kind == "TrainJob"  # generation 1's pods only


def test_r13_4_batch_job_pods_by_controller_uid_label_or_owner() -> None:
    for variant in ("labels", "legacy labels", "ownerReference"):
        job = b.batch_job("embed")
        labels = {"labels": b.job_pod_labels(job), "legacy labels": b.job_pod_labels(job, legacy_only=True), "ownerReference": {}}[variant]
        owners = owned_by(job) if variant == "ownerReference" else None
        worker = pod("embed-0-x", labels=labels, owners=owners, containers={"main": running()})
        # A pod of an earlier Job of the same name (another uid) is never consulted (R4.6).
        earlier = b.batch_job("embed")
        stranger = job_pod(earlier, "embed-0-old")
        records = gpu_job_story(job, [worker], [(worker, 94)])
        records[1:1] = [record(stranger, T0 - minutes(29), "ADDED"), record(event(stranger, code=48, first=T0 - minutes(3)), T0 - minutes(3), "ADDED")]
        verdict = final_verdicts(records)[f"prod-a/ml/Job/embed/{uid_of(job)}"]
        assert (verdict.code, verdict.gpu_fault.code, verdict.faulted_pod.name) == ("BackoffLimitExceeded", 94, "embed-0-x"), variant


def test_r13_4_rayjob_pods_by_its_cluster() -> None:
    rj = b.rayjob("tune", labels={})
    cluster = "tune-raycluster-x7k2p"
    worker = pod(f"{cluster}-gpu-group-worker-0", labels={"ray.io/cluster": cluster, "ray.io/node-type": "worker", "ray.io/group": "gpu-group"},
                 owners=[owner("RayCluster", cluster, "rc-1", "ray.io/v1")], containers={"ray-worker": running()})  # fmt: skip
    failed = updated(rj, rayClusterName=cluster, jobStatus="FAILED", jobDeploymentStatus="Failed", reason="AppFailed", message="entrypoint failed")
    records = [
        record(rj, T0 - minutes(25), "ADDED"),
        record(updated(rj, rayClusterName=cluster), T0 - minutes(24)),
        record(worker, T0 - minutes(20), "ADDED"),
        record(event(worker, code=79, first=T0 - minutes(1)), T0 - minutes(1), "ADDED"),
        record(failed, T0),
    ]
    (verdict,) = final_verdicts(records).values()
    assert verdict.key == f"prod-a/ml/RayJob/tune/{uid_of(rj)}" and verdict.tracked.kind == "RayJob"
    assert (verdict.code, verdict.kind, verdict.faulted_pod.name) == ("AppFailed", "SYSTEM", worker["metadata"]["name"])
    # Failing before it names its cluster: no pod exists yet, and no verdict (docs/rules.md).
    assert final_verdicts([record(rj, T0 - minutes(5), "ADDED"), record(updated(rj, jobStatus="FAILED", jobDeploymentStatus="Failed"), T0)]) == {}
    # Running on an existing cluster (clusterSelector): that cluster's pods are not the job's.
    shared = b.rayjob("on-shared", labels={})
    shared["spec"]["clusterSelector"] = {"ray.io/cluster": cluster}
    assert final_verdicts([record(updated(shared, rayClusterName=cluster, jobStatus="FAILED", jobDeploymentStatus="Failed"), T0)]) == {}


def test_r13_4_kubeflow_job_pods_by_their_controller() -> None:
    job = b.kubeflow("PyTorchJob", "bert", labels={})
    worker = pod("bert-worker-1", labels=b.kubeflow_pod_labels("bert") | {}, owners=owned_by(job), containers={"pytorch": running()})
    worker["metadata"]["labels"] = {k: v for k, v in worker["metadata"]["labels"].items() if k.startswith("training.kubeflow.org/")}
    failed = updated(job, conditions=[condition("Failed", "PyTorchJobFailed", "worker 1 failed", T0)])
    records = [record(job, T0 - minutes(30), "ADDED"), record(worker, T0 - minutes(29), "ADDED"), record(event(worker, code=74, first=T0 - minutes(1)), T0 - minutes(1), "ADDED"), record(failed, T0)]
    (verdict,) = final_verdicts(records).values()
    assert verdict.key == f"prod-a/ml/PyTorchJob/bert/{uid_of(job)}"
    assert (verdict.code, verdict.kind, verdict.faulted_pod.name) == ("PyTorchJobFailed", "SYSTEM", "bert-worker-1")


def test_r13_4_a_bare_pod_is_a_pod_task() -> None:
    (verdict,) = final_verdicts(observed(bare_pod_gsp_timeout())).values()
    assert (verdict.code, verdict.kind, verdict.tracked.kind) == ("GpuGspError", "SYSTEM", "Pod")
    assert verdict.faulted_pod is None and verdict.reasons == [] and verdict.generation == 0  # R6.7: a pod task names nothing


def test_r13_4_fault_records_name_the_attempt_when_the_pod_alone_tells_it() -> None:
    for story, named in ((bare_jobset_fell_off_the_bus, False), (trainjob_fell_off_the_bus, False), (indexed_job_ecc, True), (bare_pod_gsp_timeout, True)):
        out = run(observed(story()))
        (fault,) = [e.value for e in out if e.topic == FAULTS]
        verdict = [e.value for e in out if e.topic == CLASSIFIED_FAILURES][-1]
        assert fault.attempt == (verdict.key if named else None), story.__name__


# --- R13.5 failure and base verdict ------------------------------------------------------------


def test_r13_5_a_trainjob_fails_when_its_jobset_does() -> None:
    (verdict,) = final_verdicts(observed(trainjob_fell_off_the_bus())).values()
    assert verdict.failed_at == T0  # the JobSet's Failed lastTransitionTime (Trainer copies it to the TrainJob)
    assert (verdict.code, verdict.kind) == ("FailedJobs", "SYSTEM")  # R6.4: a critical fault, a specific base code
    assert verdict.message.endswith("jobset failed due to one or more job failures")
    assert verdict.gpu_fault.code == 79 and verdict.faulted_pod.name == "llama-ft-node-1-0-x7k2p"


def test_r13_5_a_batch_job_fails_by_its_failed_condition() -> None:
    job = b.batch_job("train")
    worker = job_pod(job, "train-0-x")
    # No fault: the condition's reason, USER, at its lastTransitionTime.
    (plain,) = final_verdicts(gpu_job_story(job, [worker], [])).values()
    assert (plain.code, plain.kind, plain.failed_at, plain.gpu_fault) == ("BackoffLimitExceeded", "USER", T0, None)
    # FailureTarget is not the failure yet; Complete is no failure.
    target = updated(job, conditions=[condition("FailureTarget", "BackoffLimitExceeded", "", T0)])
    complete = updated(job, conditions=[condition("Complete", "", "", T0)])
    assert final_verdicts([record(job, T0 - minutes(30), "ADDED"), record(worker, T0 - minutes(29), "ADDED"), record(target, T0)]) == {}
    assert final_verdicts([record(job, T0 - minutes(30), "ADDED"), record(complete, T0)]) == {}
    # An indexed Job's uncorrectable ECC error: SYSTEM, the pod named (R6.4, R6.7).
    (ecc,) = final_verdicts(observed(indexed_job_ecc())).values()
    assert (ecc.code, ecc.kind, ecc.gpu_fault.code, ecc.faulted_pod.name) == ("FailedIndexes", "SYSTEM", 48, "embed-shards-2-c9x2f")


def test_r13_5_relevance_and_succeeded_pods_apply_to_workload_pods() -> None:
    job = b.batch_job("train", completions=2)
    old_fault = job_pod(job, "train-0-x")
    finished = job_pod(job, "train-1-y")
    records = [record(job, T0 - minutes(90), "ADDED"), *(record(p, T0 - minutes(80), "ADDED") for p in (old_fault, finished))]
    records += [record(event(old_fault, code=79, first=T0 - minutes(45)), T0 - minutes(45), "ADDED")]  # R5.3: outside the window
    records += [record(event(finished, code=79, first=T0 - minutes(2)), T0 - minutes(2), "ADDED")]  # R4.3: but it succeeded
    records += [record(failed_pod(old_fault, at=T0 - minutes(1)), T0 - minutes(1))]
    records += [record(updated(finished, phase="Succeeded", containerStatuses=[{"name": "main", "state": terminated(0, T0 - minutes(1), "Completed")}]), T0 - minutes(1))]
    records += [record(updated(job, conditions=[condition("Failed", "BackoffLimitExceeded", "", T0)]), T0 + minutes(0.1))]
    (verdict,) = final_verdicts(records).values()
    assert (verdict.code, verdict.kind, verdict.gpu_fault) == ("BackoffLimitExceeded", "USER", None)
