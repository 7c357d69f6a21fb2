"""Whole attempt histories, as the bridge would record them: the examples, the property
tests and the benchmarks all draw on these."""

from __future__ import annotations

from datetime import datetime

from tests.unit.builders import (
    T0,
    attempt_labels,
    batch_job,
    condition,
    controller_event,
    disruption_target,
    event,
    jax_pod_labels,
    jaxjob,
    job_pod_labels,
    jobset,
    jobset_child_labels,
    jobset_pod_labels,
    kube_uid,
    kubeflow,
    kueue_workload,
    kubeflow_pod_labels,
    kueue_force_deleted,
    minutes,
    owned_by,
    owner,
    pod,
    ray_pod_labels,
    rayjob,
    record,
    resource_status,
    running,
    terminated,
    trainjob,
    ts,
    updated,
    with_devices,
    workload_jobset,
)


def _statuses_ended(p: dict, exit_code: int, at: datetime, reason: str) -> list[dict]:
    """Each container terminated at `at`, keeping the start it was running since (as the kubelet does)."""
    running_since = {s["name"]: s["state"]["running"]["startedAt"] for s in p["status"]["containerStatuses"] if "running" in s["state"]}
    statuses = []
    for name in (c["name"] for c in p["spec"]["containers"]):
        state = terminated(exit_code, at, reason)
        if name in running_since:
            state["terminated"]["startedAt"] = running_since[name]
        statuses.append({"name": name, "state": state})
    return statuses


def _failed(p: dict, exit_code: int, at: datetime, reason: str = "Error") -> dict:
    return updated(p, phase="Failed", containerStatuses=_statuses_ended(p, exit_code, at, reason))


def _succeeded(p: dict, at: datetime) -> dict:
    return updated(p, phase="Succeeded", containerStatuses=_statuses_ended(p, 0, at, "Completed"))


def pod_task_nvlink(run: str = "nightly-7f3a", t0: datetime = T0) -> list[dict]:
    """A pod task killed after an NVLink Xid 74 on its GPU."""
    labels = attempt_labels(run=run, action="train", attempt="1")
    p = pod(f"{run}-train-1", labels=labels, containers={"main": running(t0 - minutes(60))}, created=t0 - minutes(61))
    xid74 = event(p, code=74, first=t0 - minutes(2), last=t0 - minutes(1), count=3)
    return [
        record(pod(f"{run}-train-1", pod_uid=p["metadata"]["uid"], labels=labels, containers={"main": None}, created=t0 - minutes(61)), t0 - minutes(61), "ADDED"),
        record(p, t0 - minutes(60)),
        record(event(p, code=74, first=t0 - minutes(2), event_uid=xid74["metadata"]["uid"]), t0 - minutes(2), "ADDED"),
        record(xid74, t0 - minutes(1)),
        record(_failed(p, 137, t0, "Error"), t0 + minutes(0.1)),
        record(_failed(p, 137, t0, "Error"), t0 + minutes(5), "DELETED"),
    ]


def pod_task_plain_failure(run: str = "etl-19", t0: datetime = T0) -> list[dict]:
    """A pod task that fails on its own, no GPU fault anywhere."""
    labels = attempt_labels(run=run, action="prep", attempt="2")
    p = pod(f"{run}-prep-2", labels=labels, containers={"main": running(t0 - minutes(30))}, created=t0 - minutes(31))
    return [record(p, t0 - minutes(30), "ADDED"), record(_failed(p, 1, t0), t0 + minutes(0.05))]


def pod_task_restarted_in_place(run: str = "sweep-3", t0: datetime = T0) -> list[dict]:
    """R8.2: the first pod dies of a user Xid 31, a new pod of the same attempt succeeds."""
    labels = attempt_labels(run=run, action="fit", attempt="1")
    first = pod(f"{run}-fit-1-a", labels=labels, containers={"main": running(t0 - minutes(40))}, created=t0 - minutes(41))
    second = pod(f"{run}-fit-1-b", labels=labels, containers={"main": running(t0 + minutes(1))}, created=t0 + minutes(1))
    return [
        record(first, t0 - minutes(40), "ADDED"),
        record(event(first, code=31, severity="user", first=t0 - minutes(1)), t0 - minutes(1), "ADDED"),
        record(_failed(first, 1, t0), t0 + minutes(0.1)),
        record(second, t0 + minutes(1), "ADDED"),
        record(_succeeded(second, t0 + minutes(30)), t0 + minutes(30)),
    ]


def mpijob_row_remap(run: str = "llm-pretrain-42", t0: datetime = T0) -> list[dict]:
    """An MPIJob whose launcher fails after worker 2 recorded an Xid 63."""
    labels = attempt_labels(run=run, action="pretrain", attempt="1")
    name = f"{run}-pretrain"
    job = kubeflow("MPIJob", name, labels=labels)
    out = [record(job, t0 - minutes(50), "ADDED")]
    workers = []
    for i in range(4):
        w = pod(f"{name}-worker-{i}", labels={**kubeflow_pod_labels(name), **labels}, node=f"gpu-{20 + i}", containers={"main": running(t0 - minutes(45))}, created=t0 - minutes(46))
        workers.append(w)
        out.append(record(w, t0 - minutes(45), "ADDED"))
    launcher = pod(f"{name}-launcher", labels={**kubeflow_pod_labels(name, replica="launcher"), **labels}, node="cpu-1", containers={"launcher": running(t0 - minutes(44))}, gpus=0)
    out.append(record(launcher, t0 - minutes(44), "ADDED"))
    out.append(record(event(workers[2], code=63, first=t0 - minutes(4), reporting="gpu-22"), t0 - minutes(4), "ADDED"))
    out.append(record(event(workers[0], code=92, severity="warn", first=t0 - minutes(20), reporting="gpu-20"), t0 - minutes(20), "ADDED"))
    out.append(record(_failed(launcher, 1, t0 - minutes(0.5)), t0 - minutes(0.4)))
    failed = updated(job, conditions=[condition("Created", "MPIJobCreated", "", t0 - minutes(50)), condition("Failed", "MPIJobFailed", f"MPIJob ml/{name} has failed because 1 Launcher replica(s) failed.", t0)])
    out.append(record(failed, t0 + minutes(0.1)))
    for w in workers:
        out.append(record(w, t0 + minutes(1), "DELETED"))
    return out


def jobset_restart_then_complete(run: str = "vision-ft-8", t0: datetime = T0) -> list[dict]:
    """A JobSet that restarts once after an Xid 94 on one worker, then completes."""
    labels = attempt_labels(run=run, action="finetune", attempt="1")
    name = f"{run}-finetune"
    js = jobset(name, labels=labels)
    out = [record(js, t0 - minutes(60), "ADDED")]
    gen0 = [pod(f"{name}-workers-0-{i}", labels={**jobset_pod_labels(name, 0), **labels}, node=f"gpu-{30 + i}", containers={"main": running(t0 - minutes(55))}) for i in range(2)]
    out += [record(w, t0 - minutes(55), "ADDED") for w in gen0]
    out.append(record(event(gen0[1], code=94, first=t0 - minutes(1), reporting="gpu-31"), t0 - minutes(1), "ADDED"))
    failed = _failed(gen0[1], 1, t0 - minutes(0.5))
    out.append(record(failed, t0 - minutes(0.4)))
    out.append(record(updated(js, restarts=1), t0))
    out += [record(w, t0 + minutes(0.2), "DELETED") for w in (gen0[0], failed)]  # each as it last stood
    gen1 = [pod(f"{name}-workers-0-{i}", labels={**jobset_pod_labels(name, 1), **labels}, node=f"gpu-{40 + i}", containers={"main": running(t0 + minutes(2))}, created=t0 + minutes(1)) for i in range(2)]
    out += [record(w, t0 + minutes(2), "ADDED") for w in gen1]
    out += [record(_succeeded(w, t0 + minutes(50)), t0 + minutes(50)) for w in gen1]
    out.append(record(updated(js, restarts=1, conditions=[condition("Completed", "AllJobsCompleted", "jobset completed successfully", t0 + minutes(51))]), t0 + minutes(51)))
    return out


def jobset_restart_then_fail(run: str = "rl-agent-5", t0: datetime = T0) -> list[dict]:
    """A JobSet whose first generation dies of Xid 79 and whose second fails on its own."""
    labels = attempt_labels(run=run, action="rollout", attempt="3")
    name = f"{run}-rollout"
    js = jobset(name, labels=labels)
    w0 = pod(f"{name}-workers-0-0", labels={**jobset_pod_labels(name, 0), **labels}, containers={"main": running(t0 - minutes(30))})
    w1 = pod(f"{name}-workers-0-0", labels={**jobset_pod_labels(name, 1), **labels}, containers={"main": running(t0 + minutes(1))}, created=t0 + minutes(1))
    return [
        record(js, t0 - minutes(35), "ADDED"),
        record(w0, t0 - minutes(30), "ADDED"),
        record(event(w0, code=79, first=t0 - minutes(2)), t0 - minutes(2), "ADDED"),
        record(updated(js, restarts=1), t0),
        record(w1, t0 + minutes(1), "ADDED"),
        record(_failed(w1, 2, t0 + minutes(9)), t0 + minutes(9)),
        record(updated(js, restarts=1, conditions=[condition("Failed", "ReachedMaxRestarts", "jobset failed due to reaching max number of restarts", t0 + minutes(10))]), t0 + minutes(10)),
    ]


def rayjob_user_fault(run: str = "rl-9", t0: datetime = T0) -> list[dict]:
    """A RayJob whose worker's kernel faulted its GPU (Xid 13, the user's)."""
    labels = attempt_labels(run=run, action="tune", attempt="1")
    rj = rayjob(f"{run}-tune", labels=labels)
    cluster = f"{run}-tune-raycluster-x7k2p"
    worker = pod(f"{cluster}-worker-0", labels={**ray_pod_labels(cluster), **labels}, containers={"ray-worker": running(t0 - minutes(20))})
    return [
        record(rj, t0 - minutes(25), "ADDED"),
        record(updated(rj, rayClusterName=cluster), t0 - minutes(24)),
        record(worker, t0 - minutes(20), "ADDED"),
        record(event(worker, code=13, severity="user", first=t0 - minutes(1)), t0 - minutes(1), "ADDED"),
        record(
            updated(
                rj,
                rayClusterName=cluster,
                jobStatus="FAILED",
                jobDeploymentStatus="Failed",
                reason="AppFailed",
                message="Job entrypoint command failed with exit code 1",
                endTime=ts(t0),
            ),
            t0,
        ),
    ]


def late_fault(run: str = "late-1", t0: datetime = T0) -> list[dict]:
    """R7.2: the fault Event reaches the log after the verdict was emitted."""
    labels = attempt_labels(run=run, action="eval", attempt="1")
    p = pod(f"{run}-eval-1", labels=labels, containers={"main": running(t0 - minutes(10))})
    return [
        record(p, t0 - minutes(10), "ADDED"),
        record(_failed(p, 1, t0), t0 + minutes(0.1)),
        record(event(p, code=48, first=t0 - minutes(0.5), last=t0 + minutes(1)), t0 + minutes(1.5), "ADDED"),
    ]


def pod_task_xid143(run: str = "bench-11", t0: datetime = T0) -> list[dict]:
    """A pod task that dies after an Xid 143 (not in the default table: a warning)."""
    labels = attempt_labels(run=run, action="score", attempt="1")
    p = pod(f"{run}-score-1", labels=labels, containers={"main": running(t0 - minutes(15))})
    return [
        record(p, t0 - minutes(15), "ADDED"),
        record(event(p, code=143, severity="critical", first=t0 - minutes(1)), t0 - minutes(1), "ADDED"),
        record(_failed(p, 1, t0), t0 + minutes(0.1)),
    ]


def slow_burn(run: str = "ckpt-4", t0: datetime = T0) -> list[dict]:
    """A PyTorchJob whose worker logged an Xid 79 45 minutes before it died: outside the
    default 30-minute window."""
    labels = attempt_labels(run=run, action="train", attempt="2")
    name = f"{run}-train"
    job = kubeflow("PyTorchJob", name, labels=labels)
    worker = pod(f"{name}-worker-0", labels={**kubeflow_pod_labels(name), **labels}, containers={"main": running(t0 - minutes(90))})
    return [
        record(job, t0 - minutes(95), "ADDED"),
        record(worker, t0 - minutes(90), "ADDED"),
        record(event(worker, code=79, first=t0 - minutes(45)), t0 - minutes(45), "ADDED"),
        record(_failed(worker, 1, t0), t0 + minutes(0.1)),
        record(updated(job, conditions=[condition("Failed", "PyTorchJobFailed", "worker 0 exited with code 1", t0)]), t0 + minutes(0.2)),
    ]


def jobset_kueue_preempted(run: str = "mmlu-eval", t0: datetime = T0) -> list[dict]:
    """A JobSet under Kueue whose orchestrator lets it wait out a preemption
    (`faultline.io/resume-after-preemption`): its two workers run, Kueue preempts the gang
    for 20 minutes, readmits it; the new workers pull their image for six and a half
    minutes, then run and complete (SPEC R17: reserved, idle before the pods ran, a wait)."""
    labels = {**attempt_labels(run=run, action="eval", attempt="1"), "kueue.x-k8s.io/queue-name": "team-a"}
    name = f"{run}-eval"
    js = jobset(name, labels=labels, suspend=True)  # Kueue's webhook suspends it at creation
    js["metadata"]["annotations"] = {"faultline.io/resume-after-preemption": "true"}
    js["status"]["replicatedJobsStatus"] = [{"name": "workers", "ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 1}]
    workers_ready = [{"name": "workers", "ready": 2, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0}]
    wl = kueue_workload(js, created=t0 - minutes(110))
    admitted = [
        condition("QuotaReserved", "QuotaReserved", "Quota reserved in ClusterQueue gpu-cq", t0 - minutes(109)),
        condition("Admitted", "Admitted", "The workload is admitted", t0 - minutes(109)),
    ]
    preempted = "Preempted to accommodate a workload due to prioritization in the ClusterQueue"
    evicted = [*admitted, condition("Evicted", "Preempted", preempted, t0 - minutes(80)), condition("Preempted", "InClusterQueue", preempted, t0 - minutes(80))]
    released = [
        condition("QuotaReserved", "Pending", preempted, t0 - minutes(79), status="False"),
        condition("Admitted", "NoReservation", "The workload has no reservation", t0 - minutes(79), status="False"),
        *evicted[2:],
    ]
    readmitted = [
        condition("QuotaReserved", "QuotaReserved", "Quota reserved in ClusterQueue gpu-cq", t0 - minutes(59)),
        condition("Admitted", "Admitted", "The workload is admitted", t0 - minutes(59)),
        condition("Evicted", "QuotaReserved", f"Previously: {preempted}", t0 - minutes(59), status="False"),
        condition("Preempted", "QuotaReserved", f"Previously: {preempted}", t0 - minutes(59), status="False"),
    ]
    running_js = updated(js, conditions=[condition("Suspended", "ResumeJobs", "jobset is resumed", t0 - minutes(108), status="False")], replicatedJobsStatus=workers_ready)
    running_js["spec"]["suspend"] = False
    suspended_js = updated(js, conditions=[condition("Suspended", "SuspendedJobs", "jobset is suspended", t0 - minutes(80))])
    back_js = updated(js, conditions=[condition("Suspended", "ResumeJobs", "jobset is resumed", t0 - minutes(58.5), status="False")], replicatedJobsStatus=workers_ready)
    back_js["spec"]["suspend"] = False
    done_js = updated(back_js, conditions=[*back_js["status"]["conditions"], condition("Completed", "AllJobsCompleted", "jobset completed successfully", t0 - minutes(13.5))])
    out = [
        record(js, t0 - minutes(110), "ADDED"),
        record(wl, t0 - minutes(110), "ADDED"),
        record(updated(wl, conditions=admitted), t0 - minutes(109)),
        record(running_js, t0 - minutes(108)),
    ]
    first = [pod(f"{name}-workers-0-{i}", labels={**jobset_pod_labels(name, 0), **labels}, node=f"gpu-{50 + i}", containers={"main": running(t0 - minutes(105))}, created=t0 - minutes(107)) for i in range(2)]
    out += [record(w, t0 - minutes(105), "ADDED") for w in first]
    out += [record(updated(wl, conditions=evicted), t0 - minutes(80)), record(suspended_js, t0 - minutes(80))]
    for w in first:  # the Job deletes its pods: their containers stop
        gone = _statuses_ended(w, 143, t0 - minutes(79.5), "Error")
        ended = updated(w, phase="Failed", containerStatuses=gone)
        ended["metadata"]["deletionTimestamp"] = ts(t0 - minutes(79.5))
        out.append(record(ended, t0 - minutes(79.5), "DELETED"))
    out += [record(updated(wl, conditions=released), t0 - minutes(79)), record(updated(wl, conditions=readmitted), t0 - minutes(59)), record(back_js, t0 - minutes(58.5))]
    again = [pod(f"{name}-workers-0-{i}-b", labels={**jobset_pod_labels(name, 0), **labels}, node=f"gpu-{52 + i}", containers={"main": None}, phase="Pending", created=t0 - minutes(58.5)) for i in range(2)]
    out += [record(w, t0 - minutes(58.5), "ADDED") for w in again]
    started = [updated(w, phase="Running", containerStatuses=[{"name": "main", "state": running(t0 - minutes(52)), "ready": True, "restartCount": 0}]) for w in again]
    out += [record(w, t0 - minutes(52)) for w in started]
    out += [record(_succeeded(w, t0 - minutes(14)), t0 - minutes(14)) for w in started]
    out += [record(done_js, t0 - minutes(13.5)), record(updated(wl, conditions=[*readmitted, condition("Finished", "Succeeded", "jobset completed successfully", t0 - minutes(13))]), t0 - minutes(13))]
    return out


STORIES = {
    "pod-task-nvlink": pod_task_nvlink,
    "pod-task-plain": pod_task_plain_failure,
    "pod-task-restarted": pod_task_restarted_in_place,
    "mpijob-row-remap": mpijob_row_remap,
    "jobset-restart-complete": jobset_restart_then_complete,
    "jobset-restart-fail": jobset_restart_then_fail,
    "rayjob-user-fault": rayjob_user_fault,
    "late-fault": late_fault,
    "pod-task-xid143": pod_task_xid143,
    "slow-burn": slow_burn,
    "jobset-kueue-preempted": jobset_kueue_preempted,
}


# --- workloads without an orchestrator (SPEC R13) ------------------------------------------


def _job_pod(job: dict, name: str, index: int, node: str, t0: datetime, extra: dict[str, str] | None = None, container: str = "node") -> dict:
    """A pod of a batch Job, as the Job controller makes it: its labels and ownerReference."""
    labels = {**(extra or {}), **job_pod_labels(job, index)}
    return pod(name, pod_uid=kube_uid(), labels=labels, owners=owned_by(job), node=node, containers={container: running(t0 - minutes(40))}, created=t0 - minutes(41))


def trainjob_fell_off_the_bus(run: str = "llama-ft", t0: datetime = T0) -> list[dict]:
    """A Kubeflow Trainer v2 TrainJob on two nodes: Trainer makes a JobSet of the same name,
    the JobSet a Job per node, each Job one pod. Node 1's GPU falls off the bus (Xid 79);
    its pod fails, its Job fails, the JobSet fails (FailedJobs) and Trainer copies that
    condition into the TrainJob."""
    tj = trainjob(run, created=t0 - minutes(50))
    js = workload_jobset(run, owner_of=tj, created=t0 - minutes(50))
    out = [record(tj, t0 - minutes(50), "ADDED"), record(js, t0 - minutes(50), "ADDED")]
    jobs, pods = [], []
    for i in range(2):
        labels = jobset_child_labels(js, index=i, trainjob=True)
        job = batch_job(f"{run}-node-{i}", owners=owned_by(js), labels=labels, template_labels=labels, created=t0 - minutes(49))
        jobs.append(job)
        pods.append(_job_pod(job, f"{run}-node-{i}-0-{'x7k2p' if i else 'q4m8d'}", 0, f"gpu-{50 + i}", t0, labels))
        out.append(record(job, t0 - minutes(49), "ADDED"))
    out += [record(p, t0 - minutes(40), "ADDED") for p in pods]
    out.append(record(event(pods[1], code=79, first=t0 - minutes(1.5), reporting="gpu-51"), t0 - minutes(1.5), "ADDED"))
    out.append(record(_failed(pods[1], 137, t0 - minutes(0.5), "Error"), t0 - minutes(0.4)))
    failed_job = updated(jobs[1], conditions=[condition("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit", t0 - minutes(0.3)), condition("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit", t0 - minutes(0.3))])
    out.append(record(failed_job, t0 - minutes(0.3)))
    failed = condition("Failed", "FailedJobs", "jobset failed due to one or more job failures", t0)
    out.append(record(updated(js, conditions=[failed], terminalState="Failed"), t0 + minutes(0.05)))
    out.append(record(updated(tj, conditions=[{**failed, "type": "Failed"}]), t0 + minutes(0.1)))
    out += [record(_failed(pods[0], 143, t0 + minutes(0.2), "Error"), t0 + minutes(0.2))]
    return out


def _bare_jobset(run: str, t0: datetime, since: float, suffixes: tuple[str, str], first_node: int) -> tuple[dict, list[dict], list[dict]]:
    """A bare JobSet created `since` minutes before t0, a Job and a pod per worker (two), as
    the JobSet and Job controllers make them: (the JobSet, its records so far, its pods)."""
    js = workload_jobset(run, replicated="workers", created=t0 - minutes(since))
    out = [record(js, t0 - minutes(since), "ADDED")]
    pods = []
    for i in range(2):
        labels = jobset_child_labels(js, replicated="workers", index=i)
        job = batch_job(f"{run}-workers-{i}", owners=owned_by(js), labels=labels, template_labels=labels, created=t0 - minutes(since - 1))
        out.append(record(job, t0 - minutes(since - 1), "ADDED"))
        pods.append(_job_pod(job, f"{run}-workers-{i}-0-{suffixes[i]}", 0, f"gpu-{first_node + i}", t0, labels))
    out += [record(p, t0 - minutes(since - 2), "ADDED") for p in pods]
    return js, out, pods


def bare_jobset_fell_off_the_bus(run: str = "sweep-lr", t0: datetime = T0) -> list[dict]:
    """A bare JobSet (no orchestrator, no TrainJob): one worker's GPU falls off the bus."""
    js, out, pods = _bare_jobset(run, t0, 30, ("k3h9s", "b8v2n"), 60)
    out.append(record(event(pods[0], code=79, first=t0 - minutes(2), reporting="gpu-60"), t0 - minutes(2), "ADDED"))
    out.append(record(_failed(pods[0], 1, t0 - minutes(0.5), "Error"), t0 - minutes(0.4)))
    failed = condition("Failed", "FailedJobs", "jobset failed due to one or more job failures", t0)
    out.append(record(updated(js, conditions=[failed], terminalState="Failed"), t0 + minutes(0.05)))
    return out


def indexed_job_ecc(run: str = "embed-shards", t0: datetime = T0) -> list[dict]:
    """An indexed batch/v1 Job of four GPU pods (backoffLimitPerIndex 0): index 2 hits a
    double-bit ECC error (Xid 48), its index fails, the Job fails (FailedIndexes)."""
    job = batch_job(run, completions=4, indexed=True, created=t0 - minutes(20))
    out = [record(job, t0 - minutes(20), "ADDED")]
    pods = [_job_pod(job, f"{run}-{i}-{'abcd'[i]}9x2f", i, f"gpu-{70 + i}", t0, container="main") for i in range(4)]
    out += [record(p, t0 - minutes(19), "ADDED") for p in pods]
    out.append(record(event(pods[2], code=48, first=t0 - minutes(1), reporting="gpu-72"), t0 - minutes(1), "ADDED"))
    out.append(record(_failed(pods[2], 1, t0 - minutes(0.5), "Error"), t0 - minutes(0.4)))
    for p in (pods[0], pods[1], pods[3]):
        out.append(record(_succeeded(p, t0 - minutes(0.2)), t0 - minutes(0.2)))
    failed = condition("Failed", "FailedIndexes", "Job has failed indexes", t0)
    out.append(record(updated(job, conditions=[{**failed, "type": "FailureTarget"}, failed], failedIndexes="2", active=0, ready=0), t0 + minutes(0.05)))
    return out


def bare_pod_gsp_timeout(run: str = "notebook-gpu", t0: datetime = T0) -> list[dict]:
    """A bare GPU pod (no controller at all) whose GSP stops answering (Xid 119)."""
    p = pod(f"{run}-7", pod_uid=kube_uid(), labels={"app": "notebook"}, gpus=1, containers={"main": running(t0 - minutes(90))}, created=t0 - minutes(91), node="gpu-80")
    return [
        record(p, t0 - minutes(90), "ADDED"),
        record(event(p, code=119, first=t0 - minutes(3), last=t0 - minutes(1), count=4, reporting="gpu-80"), t0 - minutes(1), "ADDED"),
        record(_failed(p, 134, t0, "Error"), t0 + minutes(0.1)),
    ]


def cpu_cronjob_jobs(run: str = "report", t0: datetime = T0, jobs: int = 3) -> list[dict]:
    """CronJob Jobs that ask for no GPU, failing and succeeding: never attempts (R13.2)."""
    out = []
    for i in range(jobs):
        name = f"{run}-{29000000 + i}"
        job = batch_job(name, gpus=0, owners=[owner("CronJob", run, f"cron-{run}", "batch/v1")], created=t0 - minutes(10))
        p = _job_pod(job, f"{name}-{'xyz'[i % 3]}4k2m", 0, "cpu-1", t0, container="main")
        p["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}
        end = _failed(p, 1, t0) if i % 2 == 0 else _succeeded(p, t0)
        kind = ("Failed", "BackoffLimitExceeded") if i % 2 == 0 else ("Complete", "")
        out += [record(job, t0 - minutes(10), "ADDED"), record(p, t0 - minutes(9), "ADDED"), record(end, t0), record(updated(job, conditions=[condition(kind[0], kind[1], "", t0)]), t0 + minutes(0.1))]
    return out


WORKLOAD_STORIES = {
    "trainjob-xid79": trainjob_fell_off_the_bus,
    "jobset-bare-xid79": bare_jobset_fell_off_the_bus,
    "job-indexed-xid48": indexed_job_ecc,
    "pod-bare-xid119": bare_pod_gsp_timeout,
    "cronjob-cpu": cpu_cronjob_jobs,
}


# --- more evidence: disruptions and device health (SPEC R14) -------------------------------


def _disrupted(p: dict, reason: str, at: datetime, message: str) -> dict:
    """The pod as the control plane marks it before it deletes it (R14.1)."""
    return updated(p, conditions=[*p["status"].get("conditions", []), disruption_target(reason, at, message)])


def _ended(p: dict, exit_code: int, at: datetime, reason: str = "Error") -> dict:
    """`_failed`, keeping the pod's conditions and device statuses (the kubelet's last write)."""
    out = _failed(p, exit_code, at, reason)
    for before, after in zip(p["status"]["containerStatuses"], out["status"]["containerStatuses"]):
        if "allocatedResourcesStatus" in before:
            after["allocatedResourcesStatus"] = before["allocatedResourcesStatus"]
    return out


def jobset_drained_worker(run: str = "resnet-drain", t0: datetime = T0) -> list[dict]:
    """A bare JobSet on two nodes: node gpu-91 is drained for maintenance (`kubectl drain`
    evicts through the Eviction API), its worker gets SIGTERM and exits 143, its Job fails
    and so does the JobSet (FailedJobs). Without R14.1 that reads as the workload's fault."""
    js, out, pods = _bare_jobset(run, t0, 40, ("p9c4d", "m2x7q"), 90)
    drained = _disrupted(pods[1], "EvictionByEvictionAPI", t0 - minutes(1), "Eviction API: evicting")
    out.append(record(drained, t0 - minutes(1) + minutes(0.02)))
    out.append(record(_ended(drained, 143, t0 - minutes(0.5)), t0 - minutes(0.45)))
    failed = condition("Failed", "FailedJobs", "jobset failed due to one or more job failures", t0)
    out.append(record(updated(js, conditions=[failed], terminalState="Failed"), t0 + minutes(0.05)))
    out.append(record(_ended(pods[0], 143, t0 + minutes(0.2)), t0 + minutes(0.2)))
    return out


def pod_task_preempted(run: str = "hpo-12", t0: datetime = T0) -> list[dict]:
    """A pod task the scheduler preempts for a higher-priority pod: SIGKILL after the
    grace period (exit 137)."""
    labels = attempt_labels(run=run, action="trial", attempt="1")
    p = pod(f"{run}-trial-1", labels=labels, containers={"main": running(t0 - minutes(25))}, created=t0 - minutes(26), node="gpu-94")
    preempted = _disrupted(p, "PreemptionByScheduler", t0 - minutes(0.6), "default-scheduler: preempting to accommodate a higher priority pod")
    return [
        record(p, t0 - minutes(25), "ADDED"),
        record(preempted, t0 - minutes(0.6)),
        record(_ended(preempted, 137, t0), t0 + minutes(0.05)),
        record(_ended(preempted, 137, t0), t0 + minutes(0.5), "DELETED"),
    ]


def bare_pod_dra_unhealthy(run: str = "vllm-bench", t0: datetime = T0) -> list[dict]:
    """A bare pod holding one GPU through a DRA claim: the driver reports the device
    Unhealthy (with a message), the kubelet writes it to the container status, the
    application dies of it (exit 1)."""
    p = pod(f"{run}-0", pod_uid=kube_uid(), labels={"app": "bench"}, gpus=0, claims=True, node="gpu-93",
            containers={"main": running(t0 - minutes(30))}, created=t0 - minutes(31))
    # The container names the claim's request: the status entry is `claim:<claim>/<request>`,
    # and the API server requires it to match (kubernetes pkg/apis/core/validation).
    p["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu", "request": "gpu"}]
    device = "gpu.nvidia.com/gpu-93/gpu-3"
    sick = with_devices(p, resource_status("claim:gpu/gpu", message="uncorrectable ECC errors exceed threshold", **{device: "Unhealthy"}))
    return [
        record(p, t0 - minutes(30), "ADDED"),
        record(sick, t0 - minutes(2)),
        record(sick, t0 - minutes(1)),  # the kubelet's next status write still shows it
        record(_ended(sick, 1, t0), t0 + minutes(0.1)),
    ]


def jobset_gpu_unhealthy(run: str = "diffusion-3", t0: datetime = T0) -> list[dict]:
    """A JobSet under the orchestrator's labels: the device plugin marks worker 1's GPU
    Unhealthy (it saw a critical Xid the node agent did not report as an Event); worker
    0's plugin restarts meanwhile (Unknown: data only). Worker 1 fails, the JobSet fails."""
    labels = attempt_labels(run=run, action="train", attempt="1")
    name = f"{run}-train"
    js = jobset(name, labels=labels)
    out = [record(js, t0 - minutes(45), "ADDED")]
    workers = [pod(f"{name}-workers-0-{i}", labels={**jobset_pod_labels(name, 0), **labels}, node=f"gpu-{95 + i}", containers={"main": running(t0 - minutes(40))}) for i in range(2)]
    out += [record(w, t0 - minutes(40), "ADDED") for w in workers]
    unknown = with_devices(workers[0], resource_status(**{"GPU-95aa0000-0000-4000-8000-000000000001": "Unknown"}))
    out.append(record(unknown, t0 - minutes(5)))
    sick = with_devices(workers[1], resource_status(**{"GPU-96bb0000-0000-4000-8000-000000000002": "Unhealthy", "GPU-96bb0000-0000-4000-8000-000000000003": "Healthy"}))
    out.append(record(sick, t0 - minutes(1.5)))
    out.append(record(_ended(sick, 1, t0 - minutes(0.5)), t0 - minutes(0.4)))
    out.append(record(updated(js, conditions=[condition("Failed", "FailedJobs", "jobset failed due to one or more job failures", t0)]), t0 + minutes(0.1)))
    return out


def mpijob_xid79_drained(run: str = "moe-7", t0: datetime = T0) -> list[dict]:
    """An MPIJob whose worker's GPU fell off the bus (Xid 79); the node is tainted and the
    taint manager deletes the pod (DeletionByTaintManager). The drain followed the
    hardware: the critical fault decides, not the disruption."""
    labels = attempt_labels(run=run, action="pretrain", attempt="2")
    name = f"{run}-pretrain"
    job = kubeflow("MPIJob", name, labels=labels)
    worker = pod(f"{name}-worker-0", labels={**kubeflow_pod_labels(name), **labels}, node="gpu-97", containers={"main": running(t0 - minutes(30))})
    tainted = _disrupted(worker, "DeletionByTaintManager", t0 - minutes(1), "Taint manager: deleting due to NoExecute taint")
    return [
        record(job, t0 - minutes(35), "ADDED"),
        record(worker, t0 - minutes(30), "ADDED"),
        record(event(worker, code=79, first=t0 - minutes(2), reporting="gpu-97"), t0 - minutes(2), "ADDED"),
        record(tainted, t0 - minutes(1)),
        record(_ended(tainted, 137, t0 - minutes(0.5)), t0 - minutes(0.4)),
        record(updated(job, conditions=[condition("Failed", "MPIJobFailed", f"MPIJob ml/{name} has failed because 1 Worker replica(s) failed.", t0)]), t0 + minutes(0.1)),
    ]


EVIDENCE_STORIES = {
    "jobset-drained-worker": jobset_drained_worker,
    "pod-task-preempted": pod_task_preempted,
    "pod-bare-dra-unhealthy": bare_pod_dra_unhealthy,
    "jobset-gpu-unhealthy": jobset_gpu_unhealthy,
    "mpijob-xid79-drained": mpijob_xid79_drained,
}


# --- kinds and evidence shipped in 2026 (SPEC R16) --------------------------------------------


def jaxjob_fell_off_the_bus(run: str = "gemma-sft", t0: datetime = T0) -> list[dict]:
    """A Kubeflow JAXJob (R16.5) of two workers, no orchestrator, as kubeflow/trainer v1.9.4
    writes it: worker 1's GPU falls off the bus (Xid 79), its `jax` container dies, the
    operator records the exit on the job (a Normal Event) and fails it (JAXJobFailed: 1
    Worker replica(s) failed). Worker 0 keeps running (cleanPodPolicy None)."""
    created = t0 - minutes(40)
    job = jaxjob(run, created=created, conditions=[condition("Created", "JAXJobCreated", f"JAXJob {run} is created.", created)])
    out = [record(job, created, "ADDED")]
    workers = [
        pod(f"{run}-worker-{i}", pod_uid=kube_uid(), labels=jax_pod_labels(job, i), owners=owned_by(job), node=f"gpu-{110 + i}",
            containers={"jax": running(t0 - minutes(37))}, created=t0 - minutes(39))
        for i in range(2)
    ]
    out += [record(w, t0 - minutes(37), "ADDED") for w in workers]
    started = condition("Running", "JAXJobRunning", f"JAXJob ml/{run} is running.", t0 - minutes(36))
    out.append(record(updated(job, conditions=[*job["status"]["conditions"], started], replicaStatuses={"Worker": {"active": 2}}), t0 - minutes(36)))
    out.append(record(event(workers[1], code=79, first=t0 - minutes(1.5), reporting="gpu-111"), t0 - minutes(1.5), "ADDED"))
    out.append(record(_failed(workers[1], 1, t0 - minutes(0.5), "Error"), t0 - minutes(0.4)))
    # kubeflow/trainer pkg/controller.v1/common/pod.go: the exit, on the job (not a fault: R2.1).
    exited = event(workers[1], reason="ExitedWithCode", type_="Normal", message=f"Pod: ml.{run}-worker-1 exited with code 1", reporting=None, first=t0 - minutes(0.3))
    exited["involvedObject"] = {"kind": "JAXJob", "namespace": "ml", "name": run, "uid": job["metadata"]["uid"], "apiVersion": "kubeflow.org/v1"}
    exited["source"], exited["reportingComponent"] = {"component": "jaxjob-controller"}, "jaxjob-controller"
    out.append(record(exited, t0 - minutes(0.3), "ADDED"))
    failed = [
        job["status"]["conditions"][0],
        {**started, "status": "False"},
        condition("Failed", "JAXJobFailed", f"JAXJob {run} is failed because 1 Worker replica(s) failed.", t0),
    ]
    out.append(record(updated(job, conditions=failed, replicaStatuses={"Worker": {"active": 1, "failed": 1}}, completionTime=ts(t0)), t0 + minutes(0.05)))
    return out


def _deleting(p: dict, at: datetime, grace_seconds: int = 30) -> dict:
    """The pod once its deletion was requested: deletionTimestamp = now + its grace period."""
    out = updated(p)
    out["metadata"]["deletionTimestamp"] = ts(at + minutes(grace_seconds / 60))
    out["metadata"]["deletionGracePeriodSeconds"] = grace_seconds
    return out


def job_device_tainted(run: str = "vllm-shards", t0: datetime = T0) -> list[dict]:
    """An indexed batch/v1 Job of two pods, each holding a GPU through a DRA claim
    (Kubernetes 1.37, R16.6). The GPU driver taints index 1's device NoExecute (a
    ResourceSlice taint: faultline does not watch those); the device taint eviction
    controller records a Normal Event, marks the pod DisruptionTarget
    (DeletionByDeviceTaintManager) and deletes it (kubernetes v1.37.2
    pkg/controller/devicetainteviction/device_taint_eviction.go). Its container gets SIGTERM
    (143); index 0 finishes; the Job fails (FailedIndexes). Without R16.6 that reads as the
    workload's failure."""
    job = batch_job(run, completions=2, indexed=True, gpus=0, claims=True, created=t0 - minutes(30))
    out = [record(job, t0 - minutes(30), "ADDED")]
    pods = []
    for i in range(2):
        p = pod(f"{run}-{i}-{'kq'[i]}7m2x", pod_uid=kube_uid(), labels=job_pod_labels(job, i), owners=owned_by(job), node=f"gpu-{120 + i}",
                gpus=0, claims=True, containers={"main": running(t0 - minutes(28))}, created=t0 - minutes(29))
        p["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
        pods.append(p)
    out += [record(p, t0 - minutes(28), "ADDED") for p in pods]
    marked = controller_event(pods[1], "DeviceTaintManagerEviction", "Marking for deletion", t0 - minutes(1), type_="Normal",
                              reporter="device-taint-eviction-controller")
    out.append(record(marked, t0 - minutes(1), "ADDED"))
    tainted = _disrupted(pods[1], "DeletionByDeviceTaintManager", t0 - minutes(1), "Device Taint manager: deleting due to NoExecute taint")
    out.append(record(tainted, t0 - minutes(1) + minutes(0.01)))
    deleting = _deleting(tainted, t0 - minutes(1))
    out.append(record(deleting, t0 - minutes(1) + minutes(0.02)))
    ended = _ended(deleting, 143, t0 - minutes(0.6))
    out += [record(ended, t0 - minutes(0.58)), record(ended, t0 - minutes(0.55), "DELETED")]
    out.append(record(_succeeded(pods[0], t0 - minutes(0.2)), t0 - minutes(0.2)))
    failed = condition("Failed", "FailedIndexes", "Job has failed indexes", t0)
    out.append(record(updated(job, conditions=[{**failed, "type": "FailureTarget"}, failed], failedIndexes="1", active=0, ready=0), t0 + minutes(0.05)))
    return out


def job_kueue_force_deleted(run: str = "ckpt-shards", t0: datetime = T0) -> list[dict]:
    """A batch/v1 Job of two GPU pods annotated `kueue.x-k8s.io/safe-to-forcefully-delete`
    (Kueue's failure recovery, alpha gate FailureRecoveryPolicy; R16.6). Node gpu-131 stops
    answering: five minutes later the taint manager marks its pod DisruptionTarget
    (DeletionByTaintManager) and deletes it, but no kubelet finishes the deletion; a minute
    after the deletionTimestamp Kueue fails the pod (KueueFailureRecovery, no time), records
    KueueForcefullyDeleted and deletes it at once (kueue v0.19.2
    pkg/controller/failurerecovery/pod_termination_controller.go). The Job fails
    (BackoffLimitExceeded) and deletes its other pod."""
    job = batch_job(run, completions=2, created=t0 - minutes(40))
    job["spec"]["backoffLimit"] = 0
    out = [record(job, t0 - minutes(40), "ADDED")]
    safe = {"kueue.x-k8s.io/safe-to-forcefully-delete": "true"}
    pods = [
        pod(f"{run}-{'xq'[i]}4t9v", pod_uid=kube_uid(), labels=job_pod_labels(job), owners=owned_by(job), annotations=safe, node=f"gpu-{130 + i}",
            containers={"main": running(t0 - minutes(38))}, created=t0 - minutes(39))
        for i in range(2)
    ]
    out += [record(p, t0 - minutes(38), "ADDED") for p in pods]
    lost = pods[1]
    name = lost["metadata"]["name"]
    evicting = controller_event(lost, "TaintManagerEviction", f"Marking for deletion Pod ml/{name}", t0 - minutes(6), type_="Normal",
                                reporter="taint-eviction-controller")
    out.append(record(evicting, t0 - minutes(6), "ADDED"))
    tainted = _disrupted(lost, "DeletionByTaintManager", t0 - minutes(6), "Taint manager: deleting due to NoExecute taint")
    out.append(record(tainted, t0 - minutes(6) + minutes(0.01)))
    deleting = _deleting(tainted, t0 - minutes(6))
    out.append(record(deleting, t0 - minutes(6) + minutes(0.02)))
    forced, forced_event = kueue_force_deleted(deleting, t0 - minutes(4.5), "gpu-131")
    out.append(record(forced, t0 - minutes(4.5)))
    out.append(record(forced_event, t0 - minutes(4.5) + minutes(0.01), "ADDED"))
    out.append(record(forced, t0 - minutes(4.5) + minutes(0.02), "DELETED"))
    failed = condition("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit", t0 - minutes(4.3))
    out.append(record(updated(job, conditions=[{**failed, "type": "FailureTarget"}, failed], failed=1, active=0, ready=0), t0 - minutes(4.3) + minutes(0.01)))
    stopped = _ended(_deleting(pods[0], t0 - minutes(4.3)), 143, t0 - minutes(4.2))
    out += [record(stopped, t0 - minutes(4.2)), record(stopped, t0 - minutes(4.19), "DELETED")]
    return out


R16_STORIES = {
    "jaxjob-xid79": jaxjob_fell_off_the_bus,
    "job-device-taint": job_device_tainted,
    "job-kueue-force-deleted": job_kueue_force_deleted,
}
