"""The operators' own CRDs on a real API server of the test's own (`bare_apiserver`, no CRD
installed): Kueue's Workload at the version the server prefers (SPEC R15.1), Kubeflow
Trainer's TrainJob found when its CRD is installed later, batch/v1 Jobs (SPEC R13.2), and
a LeaderWorkerSet whose group is recreated twice (SPEC R16.3). The CRDs are the releases'
(tests/bridge/crds, trimmed where they embed a pod template), so what the tests write is
what those schemas keep."""

from __future__ import annotations

import copy
import logging
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
import pytest

from app.bridge.bridge import Bridge
from app.bridge.client import KubeApi, api_client
from tests.bridge.helpers import MemorySink, Running, settings, story_operations, wait_for
from tests.bridge.realkube import (
    CREATE_METADATA,
    RecordAndRun,
    StoryPlayer,
    as_run_prints,
    attempt,
    changes_in,
    install_crd,
    namespace,
    operator_crd,
    run_printed,
    verdicts_in,
)
from tests.unit import builders
from tests.unit import gang_builders as gb
from tests.unit.restart_stories import lws_group_recreated
from tests.unit.scenario import final_verdicts

pytestmark = pytest.mark.apiserver

KUEUE_CRD = "kueue-v0.19.2-workloads.yaml"
TRAINER_CRD = "trainer-v2.3.0-trainjobs.yaml"
LWS_CRD = "lws-v0.10.0-leaderworkersets.yaml"


def only_version(crd: dict[str, Any], name: str) -> dict[str, Any]:
    """The CRD serving and storing `name` alone (a Kueue before v0.15 served v1beta1 only)."""
    crd = copy.deepcopy(crd)
    crd["spec"]["versions"] = [{**v, "storage": True} for v in crd["spec"]["versions"] if v["name"] == name]
    return crd


def create_with_status(kube: Any, path: str, obj: dict[str, Any]) -> dict[str, Any]:
    """POST without the status (it would be dropped), then PUT it through /status, as a
    controller writes it; the object as served."""
    body = {k: v for k, v in obj.items() if k != "status"}
    body["metadata"] = {k: v for k, v in obj["metadata"].items() if k in CREATE_METADATA}
    served = kube.call("POST", path, body)
    if obj.get("status"):
        served = kube.call("PUT", f"{path}/{served['metadata']['name']}/status", {**served, "status": obj["status"]})
    return served


def preempted_workload(api_version: str) -> dict[str, Any]:
    """A bare JobSet's Workload as Kueue leaves it after a preemption (tests/unit/gang_builders.py),
    with Kueue's counters of it (status.schedulingStats.evictions, status.requeueState)."""
    world = gb.GangWorld(labels={}, api_version=api_version).start().preempt("InClusterQueue").suspend().jobs_stopped().release_quota()
    workload = copy.deepcopy(world.wl)
    workload["status"]["schedulingStats"] = {"evictions": [{"reason": "Preempted", "underlyingCause": "InClusterQueue", "count": 1}]}
    workload["status"]["requeueState"] = {"count": 1, "requeueAt": "2026-09-15T10:40:00Z"}
    return workload


@pytest.fixture
def bare_api(bare_apiserver: Any) -> Any:
    api = KubeApi(api_client(kubeconfig=str(bare_apiserver.kubeconfig)))
    yield api
    api.close()


@pytest.mark.parametrize(
    ("served", "recorded"),
    [(("v1beta1", "v1beta2"), "v1beta2"), (("v1beta1",), "v1beta1")],
    ids=["kueue-0.19-serves-v1beta2", "serves-only-v1beta1"],
)
def test_r15_1_workloads_are_recorded_at_the_version_the_server_prefers(bare_apiserver, bare_api, served, recorded):
    crd = operator_crd(KUEUE_CRD)
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1beta1", "v1beta2"]
    install_crd(bare_apiserver, crd if len(served) == 2 else only_version(crd, served[0]))
    ns = namespace(bare_apiserver, "kueue")
    api_version = f"kueue.x-k8s.io/{recorded}"
    path = f"/apis/{api_version}/namespaces/{ns}/workloads"
    written = create_with_status(bare_apiserver, path, preempted_workload(api_version))
    # Kueue's schema kept every status field written (none pruned).
    assert {"conditions", "schedulingStats", "requeueState"} <= set(written["status"])

    sink = MemorySink()
    running = Running(Bridge(bare_api, sink, settings(kinds="Workload", namespaces=ns, progress_interval=0.1)))
    wait_for(lambda: len(sink.records) == 1, timeout=30, what="the listed Workload")
    wait_for(lambda: running.bridge.watches[0].progress.live, what="the Workload watch live")
    readmitted = {**written, "status": {**written["status"], "admission": gb.GangWorld(api_version=api_version).start().wl["status"]["admission"]}}
    bare_apiserver.call("PUT", f"{path}/{written['metadata']['name']}/status", readmitted)  # a change seen by the watch
    wait_for(lambda: len(sink.records) == 2, timeout=30, what="the watched change")
    running.stop()

    listed, watched = sink.envelopes("k8s.workloads")
    assert (listed["type"], watched["type"]) == ("ADDED", "MODIFIED")
    for envelope in (listed, watched):
        assert envelope["object"]["apiVersion"] == api_version and envelope["object"]["kind"] == "Workload"
        assert envelope["object"]["status"]["schedulingStats"] == {"evictions": [{"count": 1, "reason": "Preempted", "underlyingCause": "InClusterQueue"}]}
        assert envelope["object"]["status"]["requeueState"]["count"] == 1
    assert watched["object"]["status"]["admission"]["clusterQueue"] == "gpu-cq"
    progress = [orjson.loads(v)["object"]["apiVersion"] for t, _, v in sink.progress if t == "k8s.workloads"]
    assert progress and set(progress) == {api_version}


def batch_job(name: str, *, gpus: int = 8, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    """An indexed batch/v1 Job as a user (or a CronJob, `owner`) submits it."""
    container: dict[str, Any] = {"name": "main", "image": "ghcr.io/acme/train:2026.09"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    meta: dict[str, Any] = {"name": name, "labels": {"app": name}}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
        "spec": {"backoffLimit": 0, "completionMode": "Indexed", "completions": 2, "parallelism": 2,
                 "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
    }


def failed_job_status() -> dict[str, Any]:
    """What the Job controller writes when the backoff limit is exceeded (FailureTarget, then Failed)."""
    condition = {"status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit",
                 "lastProbeTime": "2026-09-15T10:35:00Z", "lastTransitionTime": "2026-09-15T10:35:00Z"}
    return {"startTime": "2026-09-15T10:30:00Z", "failed": 1, "active": 0, "ready": 0, "terminating": 0, "uncountedTerminatedPods": {},
            "conditions": [{"type": "FailureTarget", **condition}, {"type": "Failed", **condition}]}


def train_job(name: str) -> dict[str, Any]:
    """A TrainJob on the torch-distributed runtime, 2 nodes of 8 GPUs (Kubeflow Trainer v2)."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name},
        "spec": {"runtimeRef": {"name": "torch-distributed", "apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime"},
                 "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}}},
        "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "jobset failed",
                                   "lastTransitionTime": "2026-09-15T10:35:00Z", "observedGeneration": 1}],
                   "jobsStatus": [{"name": "node", "ready": 0, "succeeded": 0, "failed": 1, "active": 0, "suspended": 0}]},
    }


def test_r13_2_batch_jobs_are_recorded_and_a_trainjob_crd_installed_later_is_picked_up(bare_apiserver, bare_api, caplog):
    """No CRD installed: every CRD kind is skipped with one line and holds k8s.jobs back
    not at all (batch Jobs are always served); a batch Job and its failure are recorded;
    Kubeflow Trainer's TrainJob CRD installed while the bridge runs is found at the next
    check and its TrainJobs recorded."""
    caplog.set_level(logging.INFO, logger="faultline.bridge")
    ns = namespace(bare_apiserver, "jobs")
    sink = MemorySink()
    running = Running(Bridge(bare_api, sink, settings(namespaces=ns, crd_recheck=0.5, progress_interval=0.1)))
    wait_for(lambda: any(t == "k8s.jobs" for t, _, _ in sink.progress), timeout=30, what="k8s.jobs progress with no CRD installed")
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": "5b7c0d1e-0000-4000-8000-000000000001", "controller": True}
    jobs = f"/apis/batch/v1/namespaces/{ns}/jobs"
    failed = create_with_status(bare_apiserver, jobs, {**batch_job("train-ecc"), "status": failed_job_status()})
    cpu_only = create_with_status(bare_apiserver, jobs, batch_job("nightly-29301140", gpus=0, owner=cron))
    wait_for(lambda: len(sink.envelopes("k8s.jobs")) == 3, timeout=30, what="the Jobs: created, failed; the CronJob's")

    install_crd(bare_apiserver, operator_crd(TRAINER_CRD))
    trainjob = create_with_status(bare_apiserver, f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs", train_job("llama-ft"))
    envelope = wait_for(lambda: next((e for e in sink.envelopes("k8s.jobs") if e["object"]["kind"] == "TrainJob"
                                      and e["object"].get("status")), None), timeout=30, what="the TrainJob and its failure")
    after = envelope["observed_at"]
    wait_for(lambda: any(t == "k8s.jobs" and orjson.loads(v)["observed_at"] > after for t, _, v in list(sink.progress)),
             timeout=30, what="k8s.jobs progress past the TrainJob")
    running.stop()

    by_uid: dict[str, list[dict[str, Any]]] = {}
    for e in sink.envelopes("k8s.jobs"):
        by_uid.setdefault(e["object"]["metadata"]["uid"], []).append(e)
    job_records = by_uid[failed["metadata"]["uid"]]
    assert [e["type"] for e in job_records] == ["ADDED", "MODIFIED"]
    last = job_records[-1]["object"]
    assert (last["apiVersion"], last["kind"]) == ("batch/v1", "Job")
    assert [c["type"] for c in last["status"]["conditions"]] == ["FailureTarget", "Failed"]
    # The pods' link to their Job (SPEC R13.4), as the server labels the template.
    assert last["spec"]["template"]["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] == failed["metadata"]["uid"]
    assert by_uid[cpu_only["metadata"]["uid"]][0]["object"]["metadata"]["ownerReferences"][0]["kind"] == "CronJob"
    tj = by_uid[trainjob["metadata"]["uid"]][-1]["object"]
    assert tj["apiVersion"] == "trainer.kubeflow.org/v1alpha1" and tj["status"]["conditions"][0]["type"] == "Failed"
    messages = [r.getMessage() for r in caplog.records]
    absent = [m for m in messages if m.startswith("TrainJob (") and "not served (tried trainer.kubeflow.org/v1alpha1 trainjobs" in m]
    assert len(absent) == 1, messages
    assert any(m.startswith("TrainJob (") and "now served as trainer.kubeflow.org/v1alpha1" in m for m in messages)
    for kind in ("RayJob", "PyTorchJob", "TFJob", "MPIJob", "JobSet", "Workload"):
        assert len([m for m in messages if m.startswith(f"{kind} (") and "not served" in m]) == 1, (kind, messages)


# --- SPEC R16.3: a LeaderWorkerSet's group recreated ------------------------------------------


def test_r16_3_a_leaderworkerset_group_recreated_is_recorded_and_run_prints_what_classify_gives(bare_apiserver, tmp_path):
    """The release's CRD installed; the LeaderWorkerSet, its pods and the Xid Event written as
    its controller, the kubelet and a node agent write them, the group's pods deleted and made
    again under their names (new uids). `faultline run` prints the verdicts `faultline
    classify` gives for the trace `faultline record` took meanwhile, and the story's own."""
    install_crd(bare_apiserver, operator_crd(LWS_CRD))
    builders.reset_ids()
    records = lws_group_recreated(t0=datetime.now(timezone.utc) - timedelta(minutes=2), again=True)
    expected = sorted((v.generation, v.code, v.kind, v.gpu_fault.code if v.gpu_fault else None, v.faulted_pod.name if v.faulted_pod else None)
                      for v in final_verdicts(records).values())  # fmt: skip
    assert expected == [(1, "OOMKilled", "USER", None, None)]
    ns = namespace(bare_apiserver, "lws")
    with RecordAndRun(bare_apiserver, ns, "real-l", tmp_path) as watching:
        trace, outputs = watching.trace, watching.outputs
        player, changes = StoryPlayer(bare_apiserver, ns), 0
        ops = story_operations(records)
        # A generation is told by its pods' creationTimestamps (whole seconds): each is made a second after the last.
        cuts = [i for i, o in enumerate(ops) if o.op == "create" and o.plural == "pods" and o.name == "serve-0"][1:]
        for start, stop in zip([0, *cuts], [*cuts, len(ops)]):
            if start:
                time.sleep(1.1)
            changes = player.play_operations(ops[start:stop])
        wait_for(lambda: changes_in(trace) == changes, timeout=60, what=f"{changes} changes in the trace")
        wait_for(lambda: any(v["generation"] == 1 for v in verdicts_in(outputs).values()), timeout=60, what="the second generation's verdict from run")
    watching.run_prints_what_classify_gives()
    [verdict] = verdicts_in(outputs).values()
    lws = bare_apiserver.call("GET", f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets/serve")
    named = f"real-l/{ns}/LeaderWorkerSet/serve ({lws['metadata']['uid'][:8]}) group 0"  # one group's attempt
    assert attempt(named) == ("LeaderWorkerSet", "serve", lws["metadata"]["uid"][:8], "0")
    assert list(run_printed(watching.run_out)[0]) == [as_run_prints("verdict", (named, "-", "-", "-", "-", "-"))[0]]
    assert verdict["key"] == f"real-l/{ns}/LeaderWorkerSet/serve/{lws['metadata']['uid']}/group/0"
    got = (verdict["generation"], verdict["code"], verdict["kind"], (verdict["gpu_fault"] or {}).get("code"), (verdict["faulted_pod"] or {}).get("name"))
    assert [got] == expected
    assert verdict["reasons"] == ["group 0 generation 0 failed: GpuFallenOffBus (SYSTEM); GPU fault recorded on pod serve-0-1"]
    # The server kept what the kubelet wrote: the restarted container's previous run.
    lines = [orjson.loads(line) for line in trace.read_bytes().splitlines()]
    pods = [line["value"]["object"] for line in lines if line["topic"] == "k8s.pods" and line["value"]["type"] != "BOOKMARK"]
    assert any(c.get("lastState", {}).get("terminated", {}).get("reason") == "OOMKilled" for p in pods for c in p["status"].get("containerStatuses", []))
    assert len({p["metadata"]["uid"] for p in pods if p["metadata"]["name"] == "serve-0"}) == 3  # one leader per generation
