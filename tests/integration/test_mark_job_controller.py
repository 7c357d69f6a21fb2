"""SPEC R18 end to end, with the real Job controller (kube-controller-manager 1.37.2,
`--controllers=job`) on a real API server and a real broker: `faultline bridge` watches,
`faultline worker` classifies, `faultline mark` (with its own ServiceAccount and the
admission policy of ops/k8s/mark bound) marks. No kubelet or scheduler runs: the test
binds the Job's pods and writes their status as a kubelet would.

- A Job with `backoffLimit: 0` whose podFailurePolicy ignores pods with the condition
  faultline.io/GPUFault: a critical Xid on its running pod marks it, the pod then fails,
  and the Job creates a replacement and is not Failed.
- The same Job with no mark running fails with BackoffLimitExceeded; when the mark starts,
  that pod has ended and is never marked.
- A user Xid marks nothing; a forged fault (an Event created in another namespace, or
  reported from another node, R2.7) marks nothing.
- `faultline run --mark` does the same without a broker.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.core.actions.marking import GPU_FAULT_CONDITION
from app.model.records import FAULTS
from app.kafka.topics import create_topics
from app.settings import Settings
from ops.kube.local_apiserver import free_port
from tests.bridge import markkube as mk
from tests.bridge.helpers import wait_for
from tests.bridge.realkube import namespace
from tests.integration.test_bridge_apiserver import faultline, stop
from tests.conftest import local_apiserver, running_apiserver
from tests.fleet import promtext

pytestmark = pytest.mark.apiserver

CLUSTER = "real-jobs"
PARTITIONS = 3


@pytest.fixture(scope="module")
def job_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """An API server of its own with the Job controller running (a controller on the
    session's shared server would act on the other tests' Jobs), the mark's component
    applied (its admission policy bound by `mark_policy`)."""
    module = local_apiserver()
    binary = module.find_controller_manager()
    if binary is None:
        pytest.skip(
            f"kube-controller-manager {module.kube_version()} is neither in $KUBEBUILDER_ASSETS nor in "
            f"{module.controller_manager_dir()}, and Go is not on PATH to build it (ops/kube/README.md)"
        )
    with running_apiserver(tmp_path_factory.mktemp("job-cluster")) as server:
        server.start_controller_manager(("job",), binary)
        mk.apply_mark_component(server, bind=False)
        yield server


@pytest.fixture
def mark_policy(job_cluster: Any) -> Iterator[None]:
    """The mark's admission policy bound, as ops/k8s/mark ships it: only the mark's
    ServiceAccount may add the condition (so `run --mark` as another user is refused)."""
    binding, probes = mk.policy_binding(), namespace(job_cluster, "probe")
    mk.manifests.apply(job_cluster, binding)
    mk.wait_policy(job_cluster, probes, bound=True)  # compiled and enforced a moment after it is bound
    try:
        yield
    finally:
        job_cluster.call("DELETE", f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{binding['metadata']['name']}")
        mk.wait_policy(job_cluster, probes, bound=False)


def start(name: str, *args: str, logs: Path) -> tuple[subprocess.Popen[bytes], Path]:
    log = logs / f"{name}.log"
    return faultline(*args, log=log), log


def gpu_job(name: str, ignore_gpu_faults: bool = True) -> dict[str, Any]:
    """A batch Job of one GPU pod that may not fail (`backoffLimit: 0`), unless (with
    `ignore_gpu_faults`) the pod carries the mark (kubernetes/api batch/v1/types.go
    PodFailurePolicy, PodFailurePolicyActionIgnore; docs/mark.md)."""
    spec: dict[str, Any] = {
        "backoffLimit": 0,
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "trainer:1", "resources": mk.GPU_LIMITS}]}},
    }
    if ignore_gpu_faults:
        spec["podFailurePolicy"] = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": GPU_FAULT_CONDITION}]}]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def job_pods(kube: Any, ns: str, job: str) -> list[dict[str, Any]]:
    items = kube.call("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector=batch.kubernetes.io/job-name%3D{job}")["items"]
    return sorted(items, key=lambda p: p["metadata"]["creationTimestamp"] + p["metadata"]["name"])


def job_conditions(kube: Any, ns: str, job: str) -> dict[str, dict[str, Any]]:
    status = kube.call("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/{job}").get("status") or {}
    return {c["type"]: c for c in status.get("conditions") or [] if c.get("status") == "True"}


def running_job_pod(kube: Any, ns: str, job: str) -> dict[str, Any]:
    """The Job's first pod, once the Job controller created it, bound and Running."""
    kube.call("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", gpu_job(job) if job != "no-policy" else gpu_job(job, False))
    [pod] = wait_for(lambda: job_pods(kube, ns, job), timeout=30, what=f"the Job controller to create {job}'s pod")
    return mk.run_pod(kube, ns, pod["metadata"]["name"])


def post_event(kube: Any, ns: str, event: dict[str, Any]) -> None:
    body = {**event, "metadata": {"name": event["metadata"]["name"], "namespace": event["metadata"]["namespace"]}}
    kube.call("POST", f"/api/v1/namespaces/{event['metadata']['namespace']}/events", body)


def fail_pod(kube: Any, ns: str, name: str) -> dict[str, Any]:
    """What the kubelet writes when the worker process dies (exit 1: NCCL timed out on the dead GPU)."""
    return mk.write_status(kube, ns, name, mk.failed_status(kube.call("GET", mk.pod_path(ns, name))))


def metrics(port: int) -> Any:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return promtext.parse(response.read().decode())[1]


def topic_keys(bootstrap: str, topic: str) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends, keys = consumer.end_offsets(tps), []
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for batch in consumer.poll(timeout_ms=500).values():
                keys += [record.value for record in batch]
        return keys
    finally:
        consumer.close()


def test_r18_1_a_gpu_fault_marks_the_pod_and_the_job_replaces_it_instead_of_failing(job_cluster, mark_policy, kafka_bootstrap, topic_prefix, tmp_path):
    kube = job_cluster
    jobs, forger = namespace(kube, "jobs"), namespace(kube, "forger")
    create_topics(Settings(bootstrap=kafka_bootstrap, topic_prefix=topic_prefix, partitions=PARTITIONS))
    kafka = ["--bootstrap", kafka_bootstrap, "--topic-prefix", topic_prefix]
    mark_port = free_port()
    procs = {
        "bridge": start("bridge", "bridge", "--kubeconfig", str(kube.kubeconfig), "--cluster", CLUSTER, "--namespaces", f"{jobs},{forger}",
                        "--progress-interval", "0.2", *kafka, logs=tmp_path),
        "worker": start("worker", "worker", *kafka, "--partitions", str(PARTITIONS), "--store", "memory", "--data-dir", str(tmp_path / "worker"),
                        "--web-port", "0", logs=tmp_path),
    }  # fmt: skip
    faults_topic = topic_prefix + FAULTS
    try:
        # 1. No mark running: the Job fails on its first pod's failure, GPU fault or not.
        pod = running_job_pod(kube, jobs, "no-mark")
        post_event(kube, jobs, mk.fault_event(pod, code=79))
        wait_for(lambda: len(topic_keys(kafka_bootstrap, faults_topic)) == 1, timeout=120, what="the fault on faultline.faults")
        fail_pod(kube, jobs, pod["metadata"]["name"])
        failed = wait_for(lambda: job_conditions(kube, jobs, "no-mark").get("Failed"), timeout=30, what="the unmarked Job failed")
        assert failed["reason"] == "BackoffLimitExceeded"
        assert len(job_pods(kube, jobs, "no-mark")) == 1

        # 2. The mark starts (from the faults topic's beginning): that pod ended, it is never marked.
        sa = mk.mark_kubeconfig(kube, tmp_path / "mark-kubeconfig")
        procs["mark"] = start("mark", "mark", "--kubeconfig", str(sa), "--cluster", CLUSTER, *kafka, "--fetch-wait-ms", "50",
                              "--mark-metrics-port", str(mark_port), logs=tmp_path)  # fmt: skip
        wait_for(lambda: skips(mark_port).get("ended") == 1, timeout=60, what="the mark to skip the ended pod")
        assert mk.marks(pod := kube.call("GET", mk.pod_path(jobs, pod["metadata"]["name"]))) == []

        # 3. With the mark: the critical Xid marks the running pod before it fails...
        pod = running_job_pod(kube, jobs, "train")
        name = pod["metadata"]["name"]
        post_event(kube, jobs, mk.fault_event(pod, code=79))
        mark = mk.wait_marked(kube, jobs, name, timeout=60)
        assert (mark["status"], mark["reason"]) == ("True", "GpuFallenOffBus")
        # ...so its failure does not count: the Job creates a replacement and goes on.
        fail_pod(kube, jobs, name)
        pods = wait_for(lambda: len(job_pods(kube, jobs, "train")) == 2 and job_pods(kube, jobs, "train"), timeout=30, what="a replacement pod")
        replacement = next(p for p in pods if p["metadata"]["name"] != name)
        assert replacement["status"]["phase"] == "Pending" and mk.marks(replacement) == []
        time.sleep(2)  # the Job controller has seen the failure (it made the replacement); it stays unfailed
        conditions = job_conditions(kube, jobs, "train")
        assert "Failed" not in conditions and "FailureTarget" not in conditions, conditions

        # 4. A user Xid marks nothing (counted as not_critical once the mark has read it).
        user = running_job_pod(kube, jobs, "user-xid")
        post_event(kube, jobs, mk.fault_event(user, code=31, severity="user"))
        wait_for(lambda: skips(mark_port).get("not_critical") == 1, timeout=60, what="the mark to skip the user Xid")
        # 5. Forged faults (R2.7): an Event created in the forger's namespace naming this pod
        # by its uid (the API server takes an Event only about its own namespace), and one in
        # the pod's namespace reported from another node. Neither is trusted, so the rules
        # publish neither; a later honest fault on another pod marks that pod only.
        victim = running_job_pod(kube, jobs, "victim")
        elsewhere = mk.fault_event(victim, code=79)
        elsewhere["metadata"]["namespace"] = elsewhere["involvedObject"]["namespace"] = forger
        post_event(kube, forger, elsewhere)
        post_event(kube, jobs, mk.fault_event(victim, code=79, reporting="gpu-99"))
        honest = running_job_pod(kube, jobs, "honest")
        post_event(kube, jobs, mk.fault_event(honest, code=48))
        mk.wait_marked(kube, jobs, honest["metadata"]["name"], timeout=60)
        time.sleep(3)  # the forged events went in before the honest one: given the time to go through
        assert mk.marks_of(kube, jobs, user["metadata"]["name"]) == []
        assert mk.marks_of(kube, jobs, victim["metadata"]["name"]) == []
        samples = metrics(mark_port)
        assert promtext.value(samples, "faultline_mark_marks_total") == 2
        assert promtext.value(samples, "faultline_mark_refused_total") == 0
        assert len(topic_keys(kafka_bootstrap, faults_topic)) == 4  # no-mark, train, user-xid, honest: the forged ones never published
    finally:
        texts = {name: stop(proc, log) for name, (proc, log) in procs.items()}
    assert texts["mark"].count("marked pod ") == 2


def skips(port: int) -> dict[str, float]:
    """The mark's skips by reason, from its /metrics ({} while it is not up yet)."""
    try:
        samples = metrics(port)
    except OSError:
        return {}
    return {dict(labels)["reason"]: v for (name, labels), v in samples.items() if name == "faultline_mark_skips_total"}


def test_r18_1_run_mark_marks_in_the_embedded_mode_and_the_job_replaces_the_pod(job_cluster, tmp_path):
    kube = job_cluster
    ns = namespace(kube, "embedded")
    out = tmp_path / "outputs.jsonl"
    proc, log = start("run", "run", "--mark", "--kubeconfig", str(kube.kubeconfig), "--cluster", CLUSTER, "--namespaces", ns,
                      "--state", str(tmp_path / "state"), "--out", str(out), logs=tmp_path)  # fmt: skip

    def faults_out() -> list[dict[str, Any]]:
        lines = [orjson.loads(line) for line in out.read_bytes().splitlines()] if out.exists() else []
        return [line["value"] for line in lines if line["topic"] == FAULTS]

    try:
        wait_for(lambda: "every watch has listed and is live" in log.read_text(), timeout=60, what="run's watches live")
        pod = running_job_pod(kube, ns, "train")
        name = pod["metadata"]["name"]
        post_event(kube, ns, mk.fault_event(pod, code=74))
        mark = mk.wait_marked(kube, ns, name, timeout=30)
        assert mark["reason"] == "GpuNvlinkError"
        fail_pod(kube, ns, name)
        wait_for(lambda: len(job_pods(kube, ns, "train")) == 2, timeout=30, what="a replacement pod")
        time.sleep(2)
        assert "Failed" not in job_conditions(kube, ns, "train")
        user = running_job_pod(kube, ns, "user-xid")
        post_event(kube, ns, mk.fault_event(user, code=13, severity="user"))
        wait_for(lambda: len(faults_out()) == 2, timeout=30, what="the user Xid emitted")
    finally:
        text = stop(proc, log)
    assert mk.marks_of(kube, ns, user["metadata"]["name"]) == []
    assert text.count("marked pod ") == 1
    assert "1 pod(s) marked; faults skipped: 1 not_critical; 0 mark(s) refused" in text
