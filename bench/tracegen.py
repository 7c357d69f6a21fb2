"""Generated, realistic traces for the benchmarks.

`generate`: the pipeline's mix (by record count): ~70% pod updates with real-sized pod
JSON (env, volumes, tolerations, affinity, conditions, container statuses), ~20% events
(most of them ordinary kubelet events, some GPU faults), ~10% tracked CRDs. Attempts are
pod tasks and MPIJobs with workers; a few hundred of them fail, some after a GPU fault.
With `workloads` (SPEC R13), half the attempt slots go to workloads without an
orchestrator instead: TrainJobs (their JobSet, Jobs and pods), bare JobSets, GPU batch
Jobs, Kubeflow JAXJobs (SPEC R16.5), bare GPU pods and LeaderWorkerSets (SPEC R16.3), a
sixth of the workload attempts each, and CPU-only CronJob Jobs that are no attempts.

`failed_fleet`: the fleet at scale (issue 17): only failed attempts, most after a GPU
fault, on many nodes with several GPUs each, over namespaces, Kueue queues and hours.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import orjson

from app.core.base.xid import DEFAULT_XID_TABLE

T0 = datetime(2026, 9, 1, tzinfo=timezone.utc)


def _ts(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def _env(i: int) -> list[dict]:
    names = ["NCCL_DEBUG", "NCCL_IB_HCA", "CUDA_DEVICE_MAX_CONNECTIONS", "OMP_NUM_THREADS", "PYTHONUNBUFFERED", "WANDB_PROJECT", "HF_HOME", "TORCH_DISTRIBUTED_DEBUG", "FLYTE_INTERNAL_EXECUTION_ID", "FLYTE_INTERNAL_TASK_NAME", "FLYTE_ATTEMPT_NUMBER", "MASTER_ADDR", "MASTER_PORT"]
    return [{"name": n, "value": f"value-{i}-{n.lower()}"} for n in names] + [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}}
    ]


def pod_object(
    name: str, uid: str, labels: dict, node: str, phase: str, state: dict, rv: int, created: datetime, i: int, *,
    namespace: str = "ml-team", slim: bool = False, owners: list[dict] | None = None, gpu: bool = True,
) -> dict:
    """A Pod as the API serves it; `slim`: only what the rules read (metadata, node,
    containers, phase and container states), for traces whose point is their count.
    `owners`: its ownerReferences (default: Flyte's TaskAction); `gpu`: it asks for 8 GPUs."""
    if slim:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": str(rv), "creationTimestamp": _ts(created), "labels": labels},
            "spec": {"containers": [{"name": "main"}], "nodeName": node, "restartPolicy": "Never"},
            "status": {"phase": phase, "startTime": _ts(created), "containerStatuses": [{"name": "main", "state": state, "ready": "running" in state, "restartCount": 0}]},
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": str(rv),
            "creationTimestamp": _ts(created),
            "labels": labels,
            "annotations": {"primary_container_name": "main", "cluster-autoscaler.kubernetes.io/safe-to-evict": "false", "flyte.org/execution-url": f"https://flyte.example/runs/{name}"},
            "ownerReferences": owners if owners is not None else [{"apiVersion": "flyte.org/v1", "kind": "TaskAction", "name": name[:40], "uid": f"owner-{uid}", "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "ghcr.io/acme/trainer:2026.08.3",
                    "command": ["python", "-m", "trainer.main"],
                    "args": ["--config", "/etc/trainer/config.yaml", "--resume", "auto"],
                    "env": _env(i),
                    "resources": _resources(gpu),
                    "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "config", "mountPath": "/etc/trainer"}, {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True}],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}}, {"name": "config", "configMap": {"name": "trainer-config", "defaultMode": 420}}, {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
            "nodeName": node,
            "restartPolicy": "Never",
            "schedulerName": "default-scheduler",
            "serviceAccountName": "trainer",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}]}]}}},
        },
        "status": {
            "phase": phase,
            "conditions": [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": _ts(created)} for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "hostIP": "10.4.7.21",
            "podIP": f"10.244.{i % 250}.{i % 200}",
            "startTime": _ts(created),
            "containerStatuses": [{"name": "main", "state": state, "ready": "running" in state, "restartCount": 0, "image": "ghcr.io/acme/trainer:2026.08.3", "imageID": "ghcr.io/acme/trainer@sha256:4f1c", "containerID": f"containerd://{uid}", "started": "running" in state}],
            "qosClass": "Guaranteed",
        },
    }


def _resources(gpu: bool) -> dict:
    if gpu:
        return {"limits": {"cpu": "96", "memory": "1800Gi", "nvidia.com/gpu": "8"}, "requests": {"cpu": "90", "memory": "1700Gi", "nvidia.com/gpu": "8"}}
    return {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "1", "memory": "2Gi"}}


def _record(topic: str, key: str, change: str, at: datetime, obj: dict) -> tuple[str, str, bytes]:
    return topic, key, orjson.dumps({"type": change, "observed_at": _ts(at), "cluster": "prod-a", "object": obj})


def _event(
    pod_name: str, pod_uid: str, node: str, at: datetime, n: int, *, gpu: int | None = None,
    namespace: str = "ml-team", gpu_index: int = 3, gpu_uuid: str = "GPU-8f1c", count: int = 1,
) -> dict:
    """An ordinary kubelet Event, or with `gpu` (an Xid code) a GPU fault on GPU
    `gpu_index`/`gpu_uuid` of `node`, seen `count` times."""
    if gpu is None:
        reason, message, type_ = "Pulled", 'Container image "ghcr.io/acme/trainer:2026.08.3" already present on machine', "Normal"
    else:
        reason, type_ = "GPUXidError", "Warning"
        message = (
            f"[gpu-health] [CRITICAL] Xid {gpu} on GPU {gpu_index} {gpu_uuid}. xid={gpu} severity=critical gpu_uuid={gpu_uuid} "
            f"gpu_index={gpu_index} pci=0000:3b:00.0 node={node} pid=4242 process=python3"
        )
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{pod_name}.{n:x}", "namespace": namespace, "uid": f"ev-{pod_uid}-{n}", "creationTimestamp": _ts(at)},
        "involvedObject": {"kind": "Pod", "namespace": namespace, "name": pod_name, "uid": pod_uid, "apiVersion": "v1"},
        "reason": reason,
        "message": message,
        "type": type_,
        "firstTimestamp": _ts(at),
        "lastTimestamp": _ts(at + timedelta(seconds=30 * (count - 1))),
        "count": count,
        "source": {"component": "kubelet", "host": node},
        "reportingComponent": "kubelet",
        "reportingInstance": node,
    }


def _mpijob(name: str, uid: str, labels: dict, at: datetime, failed: bool | None) -> dict:
    conditions = [{"type": "Created", "status": "True", "reason": "MPIJobCreated", "message": "", "lastTransitionTime": _ts(at)}]
    if failed is not None:
        outcome = ("Failed", "MPIJobFailed", "launcher failed") if failed else ("Succeeded", "MPIJobSucceeded", "MPIJob ml-team completed")
        conditions.append({"type": outcome[0], "status": "True", "reason": outcome[1], "message": outcome[2], "lastTransitionTime": _ts(at)})
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name, "namespace": "ml-team", "uid": uid, "labels": labels, "creationTimestamp": _ts(at)}, "spec": {"slotsPerWorker": 8}, "status": {"conditions": conditions}}


def _workload(job_uid: str, at: datetime, admitted: bool) -> dict:
    status = "True" if admitted else "False"
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": f"mpijob-{job_uid}-3f2a1", "namespace": "ml-team", "uid": f"wl-{job_uid}", "creationTimestamp": _ts(at), "labels": {"kueue.x-k8s.io/job-uid": job_uid}, "ownerReferences": [{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": job_uid, "uid": job_uid, "controller": True}]},
        "spec": {"active": True, "queueName": "team-a", "podSets": [{"name": "worker", "count": 3}]},
        "status": {"conditions": [{"type": "QuotaReserved", "status": status, "reason": "QuotaReserved" if admitted else "Pending", "message": "", "lastTransitionTime": _ts(at)}, {"type": "Admitted", "status": status, "reason": "Admitted" if admitted else "Pending", "message": "", "lastTransitionTime": _ts(at)}]},
    }


# --- workloads without an orchestrator (SPEC R13) ----------------------------------------------

Pod = tuple[str, str, dict, "list[dict] | None", bool]  # name, uid, labels, ownerReferences, asks for a GPU


def _owner(kind: str, name: str, uid: str, api_version: str) -> dict:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True, "blockOwnerDeletion": True}


def _ended(at: datetime, failed: bool | None, done: str, reason: str) -> list[dict]:
    """A terminal condition (`Failed`, or `done` on success), or none while running."""
    if failed is None:
        return []
    type_, why = ("Failed", reason) if failed else (done, "")
    return [{"type": type_, "status": "True", "reason": why, "message": "", "lastTransitionTime": _ts(at)}]


def _trainjob(name: str, uid: str, at: datetime, failed: bool | None) -> dict:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name, "namespace": "ml-team", "uid": uid, "creationTimestamp": _ts(at)},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}}, "status": {"conditions": _ended(at, failed, "Complete", "FailedJobs")}}  # fmt: skip


def _bare_jobset(name: str, uid: str, at: datetime, owners: list[dict], failed: bool | None) -> dict:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name, "namespace": "ml-team", "uid": uid, "creationTimestamp": _ts(at), "ownerReferences": owners},
            "spec": {"replicatedJobs": [{"name": "node", "replicas": 2}]},
            "status": {"conditions": _ended(at, failed, "Completed", "FailedJobs"), "replicatedJobsStatus": [{"name": "node", "ready": 2, "succeeded": 0, "failed": 0, "active": 2}]}}  # fmt: skip


def _batch_job(name: str, uid: str, at: datetime, owners: list[dict], labels: dict, gpu: bool, failed: bool | None) -> dict:
    own = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name, "controller-uid": uid, "job-name": name}
    template = {"metadata": {"labels": {**labels, **own}}, "spec": {"containers": [{"name": "main", "image": "ghcr.io/acme/trainer:2026.08.3", "resources": _resources(gpu)}], "restartPolicy": "Never"}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "ml-team", "uid": uid, "labels": labels, "creationTimestamp": _ts(at), "ownerReferences": owners},
            "spec": {"completions": 2 if gpu else 1, "parallelism": 2 if gpu else 1, "completionMode": "Indexed", "backoffLimit": 0, "template": template},
            "status": {"conditions": _ended(at, failed, "Complete", "BackoffLimitExceeded")}}  # fmt: skip


def _jaxjob(name: str, uid: str, at: datetime, failed: bool | None) -> dict:
    """A Kubeflow JAXJob (kubeflow/trainer v1.9.4, SPEC R16.5) of two GPU workers."""
    created = [{"type": "Created", "status": "True", "reason": "JAXJobCreated", "message": f"JAXJob {name} is created.", "lastTransitionTime": _ts(at)}]
    template = {"spec": {"containers": [{"name": "jax", "image": "ghcr.io/acme/jax:2026.08", "resources": _resources(True)}]}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "JAXJob", "metadata": {"name": name, "namespace": "ml-team", "uid": uid, "creationTimestamp": _ts(at)},
            "spec": {"runPolicy": {"cleanPodPolicy": "None"}, "jaxReplicaSpecs": {"Worker": {"replicas": 2, "restartPolicy": "Never", "template": template}}},
            "status": {"conditions": created + _ended(at, failed, "Succeeded", "JAXJobFailed"), "replicaStatuses": {"Worker": {"active": 2}}}}  # fmt: skip


def _workload_attempt(kind: str, a: int, start: datetime, end: datetime, fails: bool) -> tuple[list[tuple[str, str, bytes]], list[Pod], list[tuple[str, str, bytes]]]:
    """A workload attempt (or a CPU-only CronJob Job, `cron`): its records before its
    pods, its pods, and its records once they ended."""
    head: list[tuple[str, str, bytes]] = []
    tail: list[tuple[str, str, bytes]] = []
    pods: list[Pod] = []
    if kind in ("trainjob", "jobset"):
        name, js_uid = f"{kind}-{a}", f"js-{a}"
        owners = []
        if kind == "trainjob":
            tj = _trainjob(name, f"tj-{a}", start, None)
            head.append(_record("k8s.jobs", f"tj-{a}", "ADDED", start, tj))
            tail.append(_record("k8s.jobs", f"tj-{a}", "MODIFIED", end + timedelta(seconds=6), _trainjob(name, f"tj-{a}", end, fails)))
            owners = [_owner("TrainJob", name, f"tj-{a}", "trainer.kubeflow.org/v1alpha1")]
        head.append(_record("k8s.jobs", js_uid, "ADDED", start, _bare_jobset(name, js_uid, start, owners, None)))
        tail.append(_record("k8s.jobs", js_uid, "MODIFIED", end + timedelta(seconds=5), _bare_jobset(name, js_uid, end, owners, fails)))
        js_owner = [_owner("JobSet", name, js_uid, "jobset.x-k8s.io/v1alpha2")]
        for j in range(2):
            labels = {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/jobset-uid": js_uid, "jobset.sigs.k8s.io/replicatedjob-name": "node",
                      "jobset.sigs.k8s.io/restart-attempt": "0", "jobset.sigs.k8s.io/job-index": str(j)}  # fmt: skip
            job_name, job_uid = f"{name}-node-{j}", f"job-{a}-{j}"
            head.append(_record("k8s.jobs", job_uid, "ADDED", start, _batch_job(job_name, job_uid, start, js_owner, labels, True, None)))
            own = {"batch.kubernetes.io/controller-uid": job_uid, "batch.kubernetes.io/job-name": job_name}
            pods.append((f"{job_name}-0-x7k2p", f"p{a}-{j}", {**labels, **own}, [_owner("Job", job_name, job_uid, "batch/v1")], True))
    elif kind in ("job", "cron"):
        gpu = kind == "job"
        name, uid = (f"job-{a}", f"job-{a}") if gpu else (f"report-{a}", f"cron-job-{a}")
        owners = [] if gpu else [_owner("CronJob", "report", "cron-report", "batch/v1")]
        head.append(_record("k8s.jobs", uid, "ADDED", start, _batch_job(name, uid, start, owners, {}, gpu, None)))
        tail.append(_record("k8s.jobs", uid, "MODIFIED", end + timedelta(seconds=5), _batch_job(name, uid, end, owners, {}, gpu, fails)))
        own = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name, "controller-uid": uid, "job-name": name}
        for j in range(2 if gpu else 1):
            pods.append((f"{name}-{j}-q4m8d", f"p{a}-{j}", {**own, "batch.kubernetes.io/job-completion-index": str(j)}, [_owner("Job", name, uid, "batch/v1")], gpu))
    elif kind == "jaxjob":
        name, uid = f"jax-{a}", f"jax-{a}"
        head.append(_record("k8s.jobs", uid, "ADDED", start, _jaxjob(name, uid, start, None)))
        tail.append(_record("k8s.jobs", uid, "MODIFIED", end + timedelta(seconds=5), _jaxjob(name, uid, end, fails)))
        for j in range(2):
            labels = {"training.kubeflow.org/job-name": name, "training.kubeflow.org/operator-name": "jaxjob-controller",
                      "training.kubeflow.org/replica-type": "worker", "training.kubeflow.org/replica-index": str(j)}  # fmt: skip
            pods.append((f"{name}-worker-{j}", f"p{a}-{j}", labels, [_owner("JAXJob", name, uid, "kubeflow.org/v1")], True))
    elif kind == "lws":  # a LeaderWorkerSet of one group, a leader and a worker (SPEC R16.3)
        name, uid = f"lws-{a}", f"lws-{a}"
        head.append(_record("k8s.jobs", uid, "ADDED", start, _leaderworkerset(name, uid, start)))
        for w in range(2):
            labels = {"leaderworkerset.sigs.k8s.io/name": name, "leaderworkerset.sigs.k8s.io/group-index": "0", "leaderworkerset.sigs.k8s.io/worker-index": str(w),
                      "leaderworkerset.sigs.k8s.io/group-key": f"{a:040x}", "leaderworkerset.sigs.k8s.io/template-revision-hash": "6d9f7c8b5"}  # fmt: skip
            sts = _owner("StatefulSet", name if w == 0 else f"{name}-0", f"sts-{a}-{w}", "apps/v1")
            pods.append((f"{name}-0" if w == 0 else f"{name}-0-1", f"p{a}-{w}", labels, [sts], True))
        if fails:  # the worker's container restarted; the group made again (a new leader), then the LWS deleted
            labels, owners = pods[1][2], pods[1][3]
            worker = pod_object(pods[1][0], pods[1][1], labels, f"gpu-{a % 400}", "Running", {"running": {"startedAt": _ts(end - timedelta(minutes=1))}}, a * 100 + 90, start, a, owners=owners)
            last = {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": _ts(start), "finishedAt": _ts(end - timedelta(minutes=1))}}
            worker["status"]["containerStatuses"][0] |= {"lastState": last, "restartCount": 1}
            tail.append(_record("k8s.pods", pods[1][1], "MODIFIED", end - timedelta(minutes=1), worker))
            leader = pod_object(pods[0][0], f"p{a}-again", pods[0][2], f"gpu-{a % 400}", "Running", {"running": {"startedAt": _ts(end)}}, a * 100 + 91, end, a, owners=pods[0][3])
            tail += [_record("k8s.pods", f"p{a}-again", "ADDED", end, leader), _record("k8s.pods", f"p{a}-again", "DELETED", end + timedelta(minutes=3), leader)]
        tail.append(_record("k8s.jobs", uid, "DELETED", end + timedelta(minutes=3), _leaderworkerset(name, uid, start)))
    else:  # a bare GPU pod
        pods.append((f"notebook-{a}", f"p{a}", {"app": "notebook"}, [], True))
    return head, pods, tail


def _leaderworkerset(name: str, uid: str, at: datetime) -> dict:
    template = {"spec": {"containers": [{"name": "main", "image": "ghcr.io/acme/server:2026.08.3", "resources": _resources(True)}], "restartPolicy": "Always"}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": name, "namespace": "ml-team", "uid": uid, "creationTimestamp": _ts(at)},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "restartPolicy": "RecreateGroupOnPodRestart", "workerTemplate": template}, "startupPolicy": "LeaderCreated"},
            "status": {"replicas": 1, "readyReplicas": 1}}  # fmt: skip


WORKLOAD_KINDS = ("trainjob", "jobset", "job", "jaxjob", "bare", "lws")


def _kind_of(a: int, workloads: bool) -> str:
    """Without workloads: MPIJobs and pod tasks in turn. With them (SPEC R13), a quarter
    each of MPIJobs, pod tasks, workload attempts (TrainJob, bare JobSet, GPU Job, JAXJob,
    bare pod, LeaderWorkerSet in turn) and CPU-only CronJob Jobs."""
    if not workloads:
        return "mpijob" if a % 2 == 0 else "pod"
    return ("mpijob", "pod", WORKLOAD_KINDS[(a // 4) % len(WORKLOAD_KINDS)], "cron")[a % 4]


SOURCE_TOPICS = ("k8s.pods", "k8s.events", "k8s.jobs", "k8s.workloads")
# Attempts between two rounds of progress records: one round per ~1,000 records, the
# bridge's cadence (a round a second) when it publishes 1,000 records/s. Each round fans
# out on the worker (every stage forwards it to every partition of its internal topics),
# so a denser trace measures progress more than records (it was one per ~100 records).
PROGRESS_EVERY = 50


def _bookmark(topic: str, at: datetime) -> tuple[str, str, bytes]:
    obj = {"apiVersion": "v1", "kind": "Progress", "metadata": {"resourceVersion": ""}}
    return topic, "progress", orjson.dumps({"type": "BOOKMARK", "observed_at": _ts(at), "cluster": "prod-a", "object": obj})


def generate(records: int, seed: int = 1, progress: bool = True, workloads: bool = False) -> Iterator[tuple[str, str, bytes]]:
    """`records` source records, in observation order per attempt, attempts staggered
    in time so that finished ones expire (R7.4) as the trace goes on; with the bridge's
    progress (SPEC R12.1) on every topic after every few attempts, dated so that it claims
    only records already written (an attempt's records span 12 minutes; attempts start
    30 s apart), unless `progress` is False. Progress records count in `records`.
    `workloads`: with workload attempts and CPU-only CronJob Jobs (`_kind_of`)."""
    rnd = random.Random(seed)
    produced = 0
    for a in itertools.count():
        start = T0 + timedelta(seconds=30 * a)
        labels = {"flyte.org/managed": "true", "run": f"run{a // 5}", "action": f"n{a % 5}", "attempt": "1", "task-name": "train"}
        fails = rnd.random() < 0.03
        xid = rnd.choice([79, 48, 63, 31, 92]) if fails and rnd.random() < 0.6 else None
        node = f"gpu-{a % 400}"
        out: list[tuple[str, str, bytes]] = []
        kind = _kind_of(a, workloads)
        end = start + timedelta(minutes=10)
        tail: list[tuple[str, str, bytes]] = []
        pods: list[Pod]
        if kind == "mpijob":  # an MPIJob with 3 workers, admitted by Kueue
            job_uid, name = f"mpi-{a}", f"mpi-{a}"
            out.append(_record("k8s.jobs", job_uid, "ADDED", start, _mpijob(name, job_uid, labels, start, None)))
            out.append(_record("k8s.workloads", f"wl-{job_uid}", "ADDED", start, _workload(job_uid, start, False)))
            out.append(_record("k8s.workloads", f"wl-{job_uid}", "MODIFIED", start + timedelta(seconds=2), _workload(job_uid, start, True)))
            out.append(_record("k8s.jobs", job_uid, "MODIFIED", start + timedelta(seconds=3), _mpijob(name, job_uid, labels, start, None)))
            pods = [(f"{name}-worker-{w}", f"p{a}-{w}", {**labels, "training.kubeflow.org/job-name": name, "training.kubeflow.org/replica-type": "worker"}, None, True) for w in range(3)]
            tail = [_record("k8s.jobs", f"mpi-{a}", "MODIFIED", end + timedelta(seconds=5), _mpijob(f"mpi-{a}", f"mpi-{a}", labels, end, fails))]
        elif kind == "pod":
            pods = [(f"task-{a}", f"p{a}", labels, None, True)]
        else:
            head, pods, tail = _workload_attempt(kind, a, start, end, fails)
            out += head
            if kind == "cron":
                xid = None  # a CPU pod has no GPU to fault
        rv = a * 100
        for pname, puid, plabels, owners, gpu in pods:
            running = {"running": {"startedAt": _ts(start)}}
            for step in range(5):  # scheduled, running, readiness flaps
                rv += 1
                pod = pod_object(pname, puid, plabels, node, "Running", running, rv, start, a, owners=owners, gpu=gpu)
                out.append(_record("k8s.pods", puid, "ADDED" if step == 0 else "MODIFIED", start + timedelta(seconds=10 * step), pod))
            out.append(_record("k8s.events", puid, "ADDED", start + timedelta(seconds=5), _event(pname, puid, node, start, 1)))
        if xid is not None:
            pname, puid = pods[-1][:2]
            out.append(_record("k8s.events", puid, "ADDED", end - timedelta(minutes=1), _event(pname, puid, node, end - timedelta(minutes=1), 2, gpu=xid)))
        for pname, puid, plabels, owners, gpu in pods:
            rv += 1
            dead = {"terminated": {"exitCode": 1 if fails else 0, "reason": "Error" if fails else "Completed", "startedAt": _ts(start), "finishedAt": _ts(end)}}
            phase = "Failed" if fails else "Succeeded"
            out.append(_record("k8s.pods", puid, "MODIFIED", end, pod_object(pname, puid, plabels, node, phase, dead, rv, start, a, owners=owners, gpu=gpu)))
            out.append(_record("k8s.pods", puid, "DELETED", end + timedelta(minutes=2), pod_object(pname, puid, plabels, node, phase, dead, rv + 1, start, a, owners=owners, gpu=gpu)))
        out += tail
        for _ in range(rnd.randint(1, 3)):  # ordinary events keep flowing
            pname, puid = rnd.choice(pods)[:2]
            out.append(_record("k8s.events", puid, "ADDED", end, _event(pname, puid, node, end, rnd.randint(3, 99))))
        if progress and a % PROGRESS_EVERY == 0 and a >= 25:
            out += [_bookmark(topic, T0 + timedelta(seconds=30 * (a - 25))) for topic in SOURCE_TOPICS]
        for item in out[: records - produced]:
            yield item
        produced += len(out)
        if produced >= records:
            return


# --- the fleet at scale ------------------------------------------------------------------------

ALL_XIDS = tuple(sorted(DEFAULT_XID_TABLE.names))  # every code the Xid table knows: user, warn and critical


def _condition(type_: str, reason: str, at: datetime, status: str = "True") -> dict:
    return {"type": type_, "status": status, "reason": reason, "message": "", "lastTransitionTime": _ts(at)}


def _jobset(name: str, uid: str, namespace: str, labels: dict, at: datetime, conditions: list[dict], *, suspend: bool = False) -> dict:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": labels, "creationTimestamp": _ts(at),
                     "annotations": {"faultline.io/resume-after-preemption": "true"}},
        "spec": {"suspend": suspend, "replicatedJobs": [{"name": "workers", "replicas": 2}], "failurePolicy": {"maxRestarts": 3}},
        "status": {"conditions": conditions},
    }  # fmt: skip


def _gang_workload(js: dict, queue: str, at: datetime, conditions: list[dict]) -> dict:
    meta = js["metadata"]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": f"jobset-{meta['name']}", "namespace": meta["namespace"], "uid": f"wl-{meta['uid']}", "creationTimestamp": _ts(at),
                     "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
                     "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": meta["name"], "uid": meta["uid"], "controller": True}]},
        "spec": {"active": True, "queueName": queue, "podSets": [{"name": "workers", "count": 2}]},
        "status": {"conditions": conditions},
    }  # fmt: skip


def _preempted_gang(name: str, namespace: str, queue: str, at: datetime, back: datetime) -> list[tuple[datetime, tuple[str, str, bytes]]]:
    """A JobSet under Kueue preempted at `at` (it waits: SPEC R9), readmitted at `back`, then completed."""
    labels = {"flyte.org/managed": "true", "run": name, "action": "pretrain", "attempt": "1", "kueue.x-k8s.io/queue-name": queue}
    uid = f"js-{name}"
    created = at - timedelta(minutes=60)
    admitted = [_condition("QuotaReserved", "QuotaReserved", at - timedelta(minutes=58)), _condition("Admitted", "Admitted", at - timedelta(minutes=58))]
    evicted = [_condition("QuotaReserved", "Pending", at, "False"), _condition("Admitted", "NoReservation", at, "False"),
               _condition("Evicted", "Preempted", at), _condition("Preempted", "InClusterQueue", at)]  # fmt: skip
    readmitted = [_condition("QuotaReserved", "QuotaReserved", back), _condition("Admitted", "Admitted", back), _condition("Evicted", "QuotaReserved", back, "False")]
    js = _jobset(name, uid, namespace, labels, created, [])
    wl = lambda conditions: _gang_workload(js, queue, created, conditions)  # noqa: E731
    after = lambda minutes: at + timedelta(minutes=minutes)  # noqa: E731
    return [
        (created, _record("k8s.workloads", f"wl-{uid}", "ADDED", created, wl([]))),
        (after(-59), _record("k8s.jobs", uid, "ADDED", after(-59), js)),
        (after(-58), _record("k8s.workloads", f"wl-{uid}", "MODIFIED", after(-58), wl(admitted))),
        (at, _record("k8s.workloads", f"wl-{uid}", "MODIFIED", at, wl(evicted))),
        (after(0.1), _record("k8s.jobs", uid, "MODIFIED", after(0.1), _jobset(name, uid, namespace, labels, created, [_condition("Suspended", "SuspendedJobs", after(0.1))], suspend=True))),
        (back, _record("k8s.workloads", f"wl-{uid}", "MODIFIED", back, wl(readmitted))),
        (back + timedelta(minutes=0.1), _record("k8s.jobs", uid, "MODIFIED", back + timedelta(minutes=0.1),
                                                _jobset(name, uid, namespace, labels, created, [_condition("Suspended", "ResumeJobs", back, "False")]))),
        (back + timedelta(minutes=30), _record("k8s.jobs", uid, "MODIFIED", back + timedelta(minutes=30),
                                               _jobset(name, uid, namespace, labels, created, [_condition("Completed", "AllJobsCompleted", back + timedelta(minutes=30))]))),
    ]  # fmt: skip


def _failed_attempt(i: int, rnd: random.Random, t0: datetime, node: str, namespace: str, gpus: int) -> list[tuple[datetime, tuple[str, str, bytes]]]:
    """A pod task that fails at `t0`, most often after a GPU fault (of any code the Xid table knows) on one of its node's GPUs."""
    name, uid = f"task-{i}", f"fp{i}"
    labels = {"flyte.org/managed": "true", "run": f"r{i}", "action": "train", "attempt": "1", "task-name": "train"}
    created = t0 - timedelta(minutes=31)
    running = {"running": {"startedAt": _ts(created)}}
    dead = {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": _ts(created), "finishedAt": _ts(t0)}}
    pod = lambda phase, state, rv: pod_object(name, uid, labels, node, phase, state, rv, created, i, namespace=namespace, slim=True)  # noqa: E731
    out = [(t0 - timedelta(minutes=30), _record("k8s.pods", uid, "ADDED", t0 - timedelta(minutes=30), pod("Running", running, 1)))]
    if rnd.random() < 0.85:
        g, first = rnd.randrange(gpus), t0 - timedelta(minutes=2)
        event = _event(name, uid, node, first, 1, gpu=rnd.choice(ALL_XIDS), namespace=namespace, gpu_index=g, gpu_uuid=f"GPU-{node}-{g}", count=rnd.randint(1, 3))
        out.append((t0 - timedelta(minutes=1), _record("k8s.events", uid, "ADDED", t0 - timedelta(minutes=1), event)))
    out.append((t0, _record("k8s.pods", uid, "MODIFIED", t0, pod("Failed", dead, 2))))
    return out


def failed_fleet(
    attempts: int,
    nodes: int,
    *,
    gpus: int = 8,
    namespaces: int = 20,
    queues: int = 8,
    hours: float = 40,
    gangs_per: int = 25,
    progress_every: timedelta = timedelta(minutes=1),
    seed: int = 1,
) -> Iterator[tuple[str, str, bytes]]:
    """`attempts` failed attempts ending over `hours` (keep it within the fleet history,
    48 h by default) on `nodes` nodes of `gpus` GPUs, in `namespaces` namespaces; one
    Kueue-preempted JobSet per `gangs_per` attempts, in `queues` LocalQueues. Nodes are
    drawn with a long tail (the worst few carry a large share of the faults: their state
    is the one that could grow). Records come in observation order, with the bridge's
    progress (SPEC R12.1) on every source topic at every `progress_every` of observed time."""
    rnd = random.Random(seed)
    span = timedelta(hours=hours).total_seconds()
    pending: list[tuple[datetime, int, tuple[str, str, bytes]]] = []
    seq = itertools.count()
    next_progress: datetime | None = None

    def ready(before: datetime) -> Iterator[tuple[str, str, bytes]]:
        nonlocal next_progress
        while pending and pending[0][0] < before:
            at, _, record = heapq.heappop(pending)
            while next_progress is not None and next_progress <= at:  # every record observed before it is out
                yield from (_bookmark(topic, next_progress) for topic in SOURCE_TOPICS)
                next_progress += progress_every
            if next_progress is None:
                next_progress = at.replace(second=0, microsecond=0) + progress_every
            yield record

    for i in range(attempts):
        t0 = T0 + timedelta(hours=1, seconds=span * i / attempts + rnd.uniform(0, 30))
        yield from ready(t0 - timedelta(minutes=61))  # nothing of a later attempt is observed before that
        node = f"gpu-{int(nodes * rnd.random() ** 3):04d}"
        namespace = f"team-{rnd.randrange(namespaces):02d}"
        for at, record in _failed_attempt(i, rnd, t0, node, namespace, gpus):
            heapq.heappush(pending, (at, next(seq), record))
        if i % gangs_per == 0:
            back = t0 + timedelta(minutes=rnd.randint(5, 40))
            for at, record in _preempted_gang(f"g{i}", namespace, f"q{rnd.randrange(queues)}", t0, back):
                heapq.heappush(pending, (at, next(seq), record))
    yield from ready(datetime.max.replace(tzinfo=timezone.utc))
