"""Restarts that are generations of their own, as the controllers write them: JobSet
v0.12's restart modes (SPEC R16.1, R16.2; kubernetes-sigs/jobset v0.12.0
pkg/controllers/failure_policy.go and in_place_restart.go, cmd/in-place-restart-agent) and
KubeRay v1.7's retried tries (R16.4; ray-project/kuberay v1.7.0 rayjob_controller.go);
LeaderWorkerSet groups recreated (R16.3; kubernetes-sigs/lws v0.10.0 pkg/controllers).
Workload attempts (R13)."""

from __future__ import annotations

from datetime import datetime

from tests.unit.builders import (
    T0,
    batch_job,
    condition,
    event,
    jobset_child_labels,
    kube_uid,
    leaderworkerset,
    lws_pod,
    pod,
    rayjob,
    minutes,
    owned_by,
    record,
    running,
    terminated,
    ts,
    updated,
    workload_jobset,
)
from tests.unit.stories import _failed, _job_pod

JOB_RESTART_ATTEMPT = "jobset.sigs.k8s.io/job-restart-attempt"
IN_PLACE_ATTEMPT = "jobset.sigs.k8s.io/in-place-restart-attempt"


def _job_restarts(js: dict, restarts: list[int], failed: int = 0) -> dict:
    """The JobSet's status after `RestartJob`: its Jobs' restarts, by job index."""
    status = [{"name": "workers", "ready": 2 - failed, "succeeded": 0, "failed": failed, "active": 2 - failed, "suspended": 0, "jobRestarts": restarts, "jobRestartsCountTowardsMax": restarts}]
    return updated(js, replicatedJobsStatus=status)


def job_restarts_then_fail(run: str = "ckpt-shard", t0: datetime = T0) -> list[dict]:
    """R16.1: a bare JobSet whose failure policy answers a Job's failure with `RestartJob`
    (alpha gate on, `maxRestarts: 2`). Job `workers-1`'s pod falls off the bus (Xid 79): the
    Job alone is recreated (same name, new uid, `job-restart-attempt: 1`); its next pod's
    kernel faults its GPU (Xid 13, the user's): recreated again; the third pod fails with no
    fault and the JobSet fails (`ReachedMaxRestarts`). Worker 0 runs throughout."""
    js = workload_jobset(run, replicated="workers", created=t0 - minutes(60))
    out = [record(js, t0 - minutes(60), "ADDED")]
    labels0 = {**jobset_child_labels(js, replicated="workers", index=0), JOB_RESTART_ATTEMPT: "0"}
    job0 = batch_job(f"{run}-workers-0", owners=owned_by(js), labels=labels0, template_labels=labels0, created=t0 - minutes(59))
    w0 = _job_pod(job0, f"{run}-workers-0-0-r8k2m", 0, "gpu-90", t0 - minutes(18), labels0)  # started 58 minutes before t0
    out += [record(job0, t0 - minutes(59), "ADDED"), record(w0, t0 - minutes(58), "ADDED")]
    ended = [(79, "critical", t0 - minutes(40)), (13, "user", t0 - minutes(20)), (None, None, t0)]
    for attempt, (code, severity, died) in enumerate(ended):
        labels = {**jobset_child_labels(js, replicated="workers", index=1), JOB_RESTART_ATTEMPT: str(attempt)}
        job = batch_job(f"{run}-workers-1", owners=owned_by(js), labels=labels, template_labels=labels, created=died - minutes(14))
        job["metadata"]["uid"] = kube_uid()  # recreated under the same name (R16.1)
        worker = _job_pod(job, f"{run}-workers-1-0-{'abc'[attempt]}7q4x", 0, f"gpu-{91 + attempt}", died + minutes(28), labels)
        worker["metadata"]["creationTimestamp"] = ts(died - minutes(13))
        out += [record(job, died - minutes(14), "ADDED"), record(worker, died - minutes(12), "ADDED")]
        if code is not None:
            out.append(record(event(worker, code=code, severity=severity, first=died - minutes(1), reporting=f"gpu-{91 + attempt}"), died - minutes(1), "ADDED"))
        out.append(record(_failed(worker, 1, died), died + minutes(0.1)))
        if code is not None:
            out.append(record(_job_restarts(js, [0, attempt + 1], failed=1), died + minutes(0.3)))
            out.append(record(_failed(worker, 1, died), died + minutes(0.5), "DELETED"))
    failed = condition("Failed", "ReachedMaxRestarts", f"jobset failed due to reaching max number of restarts (first failed job: {run}-workers-1)", t0 + minutes(0.2))
    out.append(record(updated(_job_restarts(js, [0, 2], failed=1), conditions=[failed], terminalState="Failed"), t0 + minutes(0.3)))
    return out


def in_place_restart_then_fail(run: str = "moe-ip", t0: datetime = T0) -> list[dict]:
    """R16.2: a bare JobSet restarted in place (`restartStrategy: InPlaceRestart`, alpha).
    Worker 0's GPU falls off the bus (Xid 79) and its worker exits; every pod's containers
    restart in place (same pods, annotation `in-place-restart-attempt: 1`, the JobSet's
    `previousInPlaceRestartAttempt: 0` then `currentInPlaceRestartAttempt: 1`). Twenty
    minutes later worker 1 exits on its own and the JobSet fails (`ReachedMaxRestarts`)."""
    js = workload_jobset(run, replicated="workers", created=t0 - minutes(60))
    js["spec"]["failurePolicy"] = {"maxRestarts": 1, "restartStrategy": "InPlaceRestart"}
    js = updated(js, currentInPlaceRestartAttempt=0)
    out = [record(js, t0 - minutes(60), "ADDED")]
    pods = []
    for i in range(2):
        labels = jobset_child_labels(js, replicated="workers", index=i)
        job = batch_job(f"{run}-workers-{i}", owners=owned_by(js), labels=labels, template_labels=labels, created=t0 - minutes(59))
        p = _job_pod(job, f"{run}-workers-{i}-0-{'xy'[i]}5n2p", 0, f"gpu-{95 + i}", t0 - minutes(18), labels)  # started 58 minutes before t0
        p["metadata"]["annotations"] = {IN_PLACE_ATTEMPT: "0"}
        pods.append(p)
        out += [record(job, t0 - minutes(59), "ADDED"), record(p, t0 - minutes(58), "ADDED")]
    x = pods[0]
    out.append(record(event(x, code=79, first=t0 - minutes(21), reporting="gpu-95"), t0 - minutes(21), "ADDED"))
    # Every pod's containers restart in place: x's worker died of it, y's was reset (137).
    restarted = []
    for p, ended, reason in ((x, t0 - minutes(20), "Error"), (pods[1], t0 - minutes(19), "RestartingAllContainers")):
        last = terminated(1 if reason == "Error" else 137, ended, reason)
        last["terminated"]["startedAt"] = ts(t0 - minutes(58))
        status = [{"name": "node", "state": running(t0 - minutes(18)), "lastState": last, "restartCount": 1, "ready": True}]
        again = updated(p, containerStatuses=status)
        again["metadata"]["annotations"] = {IN_PLACE_ATTEMPT: "1"}
        restarted.append(again)
        out.append(record(again, t0 - minutes(18)))
    out.append(record(updated(js, previousInPlaceRestartAttempt=0, currentInPlaceRestartAttempt=0), t0 - minutes(17.5)))
    out.append(record(updated(js, previousInPlaceRestartAttempt=0, currentInPlaceRestartAttempt=1), t0 - minutes(17)))
    y = restarted[1]
    ended_y = terminated(1, t0 - minutes(0.5))
    ended_y["terminated"]["startedAt"] = ts(t0 - minutes(18))
    status = [{**y["status"]["containerStatuses"][0], "state": ended_y, "ready": False}]
    out.append(record(updated(y, phase="Failed", containerStatuses=status), t0 - minutes(0.4)))
    failed = condition("Failed", "ReachedMaxRestarts", "jobset failed due to reaching max number of restarts", t0)
    out.append(record(updated(js, previousInPlaceRestartAttempt=0, currentInPlaceRestartAttempt=1, conditions=[failed], terminalState="Failed"), t0 + minutes(0.1)))
    return out


def _ray_pods(cluster: str, t0: datetime, nodes: tuple[str, str]) -> list[dict]:
    """A RayCluster's head and one GPU worker, labelled as KubeRay's common/pod.go does."""
    labels = {"ray.io/cluster": cluster, "ray.io/group": "gpu", "ray.io/is-ray-node": "yes"}  # no orchestrator's labels
    head = pod(f"{cluster}-head-h8x2k", pod_uid=kube_uid(), labels={**labels, "ray.io/node-type": "head"}, gpus=0, node=nodes[0], containers={"ray-head": running(t0)}, created=t0 - minutes(1))
    worker = pod(f"{cluster}-worker-gpu-w4m7z", pod_uid=kube_uid(), labels={**labels, "ray.io/node-type": "worker"}, node=nodes[1], containers={"ray-worker": running(t0)}, created=t0 - minutes(1))
    return [head, worker]


def rayjob_retried_then_fails(run: str = "rl-sweep", t0: datetime = T0) -> list[dict]:
    """R16.4: a RayJob with `backoffLimit: 1`. Its first try's GPU worker falls off the bus
    (Xid 79); KubeRay writes the try's failure as `Retrying` (`failed: 1`, the cluster still
    named), deletes the cluster and starts a second try on a new one, which fails on its
    own (`Failed`, `failed: 2`, `endTime`)."""
    rj = rayjob(run, labels={}, job_status="", deployment="Initializing")
    rj["spec"] = {"backoffLimit": 1, "shutdownAfterJobFinishes": True, "entrypoint": "python train.py"}
    first, second = f"{run}-k2w9q", f"{run}-p7d3x"
    out = [record(rj, t0 - minutes(60), "ADDED"), record(updated(rj, rayClusterName=first, failed=0, startTime=ts(t0 - minutes(60))), t0 - minutes(59))]
    pods = _ray_pods(first, t0 - minutes(55), ("cpu-3", "gpu-98"))
    out += [record(p, t0 - minutes(55), "ADDED") for p in pods]
    out.append(record(updated(rj, rayClusterName=first, jobDeploymentStatus="Running", jobStatus="RUNNING", failed=0), t0 - minutes(54)))
    out.append(record(event(pods[1], code=79, first=t0 - minutes(31), reporting="gpu-98"), t0 - minutes(31), "ADDED"))
    out.append(record(_failed(pods[1], 1, t0 - minutes(30)), t0 - minutes(30)))
    retrying = {"rayClusterName": first, "jobDeploymentStatus": "Retrying", "jobStatus": "FAILED", "reason": "AppFailed", "message": "Job entrypoint command failed with exit code 1", "failed": 1}
    out.append(record(updated(rj, **retrying), t0 - minutes(29)))
    out += [record(_failed(pods[1], 1, t0 - minutes(30)), t0 - minutes(28), "DELETED"), record(pods[0], t0 - minutes(28), "DELETED")]
    emptied = updated(rj, jobDeploymentStatus="", jobStatus="", failed=1)
    emptied["status"].pop("rayClusterName", None)
    emptied["status"].pop("jobId", None)
    out.append(record(emptied, t0 - minutes(27)))
    out.append(record(updated(rj, rayClusterName=second, jobDeploymentStatus="Initializing", jobStatus="", failed=1, startTime=ts(t0 - minutes(26))), t0 - minutes(26)))
    pods2 = _ray_pods(second, t0 - minutes(25), ("cpu-3", "gpu-99"))
    out += [record(p, t0 - minutes(25), "ADDED") for p in pods2]
    out.append(record(updated(rj, rayClusterName=second, jobDeploymentStatus="Running", jobStatus="RUNNING", failed=1), t0 - minutes(24)))
    out.append(record(_failed(pods2[1], 1, t0 - minutes(1)), t0 - minutes(1)))
    failed = {"rayClusterName": second, "jobDeploymentStatus": "Failed", "jobStatus": "FAILED", "reason": "AppFailed", "message": "Job entrypoint command failed with exit code 1", "failed": 2, "endTime": ts(t0)}
    out.append(record(updated(rj, **failed), t0 + minutes(0.1)))
    return out


def _lws_event(lws: dict, message: str, at: datetime) -> dict:
    """The Normal `RecreateGroup` Event the LeaderWorkerSet controller records about itself
    (lws pkg/controllers/pod_controller.go handleRestartPolicy), as core/v1 serves it."""
    e = event(lws, message=message, reason="RecreateGroup", type_="Normal", first=at, reporting=None)
    e["involvedObject"] |= {"kind": "LeaderWorkerSet", "apiVersion": "leaderworkerset.x-k8s.io/v1"}
    e["source"] = {"component": "leaderworkerset"}
    e["reportingComponent"], e["reportingInstance"], e["action"] = "leaderworkerset", "", "Delete"
    return e


def _running(p: dict, since: datetime) -> dict:
    name = p["spec"]["containers"][0]["name"]
    return updated(p, containerStatuses=[{"name": name, "state": running(since), "lastState": {}, "restartCount": 0, "ready": True}])


def _restarted(p: dict, ended: datetime, exit_code: int, reason: str, started: datetime) -> dict:
    """Its container ended and the kubelet started it again (restartPolicy Always): the
    pod stays Running, its previous run in `lastState` (pkg/kubelet/kubelet_pods.go)."""
    name = p["spec"]["containers"][0]["name"]
    last = terminated(exit_code, ended, reason)
    last["terminated"]["startedAt"] = ts(started)
    status = [{"name": name, "state": running(ended + minutes(0.1)), "lastState": last, "restartCount": 1, "ready": False}]
    return updated(p, containerStatuses=status)


def _torn_down(p: dict, requested: datetime, ended: datetime) -> list[tuple[dict, datetime, str]]:
    """Deleted (foreground, by the controller or the garbage collector): its deletion
    marked, its containers killed (the pod reaches Failed), then gone."""
    marked = updated(p)
    marked["metadata"] |= {"deletionTimestamp": ts(requested + minutes(0.5)), "deletionGracePeriodSeconds": 30, "finalizers": ["foregroundDeletion"]}
    statuses = []
    for status in marked["status"]["containerStatuses"]:
        state = terminated(137, ended, "Error")
        state["terminated"]["startedAt"] = status["state"]["running"]["startedAt"]
        statuses.append({**status, "state": state, "ready": False})
    killed = updated(marked, phase="Failed", containerStatuses=statuses)
    return [(marked, requested, "MODIFIED"), (killed, ended + minutes(0.05), "MODIFIED"), (killed, ended + minutes(0.1), "DELETED")]


def _lws_status(lws: dict, ready: int, at: datetime) -> dict:
    """Its status as the controller writes it (leaderworkerset_controller.go makeCondition)."""
    available = condition("Available", "AllGroupsReady", "All replicas are ready", at, "True" if ready else "False")
    progressing = condition("Progressing", "GroupsProgressing", "Replicas are progressing", at, "False" if ready else "True")
    del available["lastUpdateTime"], progressing["lastUpdateTime"]
    return updated(lws, replicas=1, readyReplicas=ready, updatedReplicas=1, conditions=[available, progressing])


def lws_group_recreated(run: str = "serve", t0: datetime = T0, *, again: bool = False) -> list[dict]:
    """R16.3: a LeaderWorkerSet of one group, a leader and one worker, 8 GPUs each
    (`restartPolicy: RecreateGroupOnPodRestart`). The worker's GPU falls off the bus (Xid
    79); its container exits and the kubelet restarts it; the controller deletes the leader
    to recreate the group, and the group comes back: same pod names, new uids. `again`: the
    next generation's worker is OOM-killed twenty minutes later and the group is recreated
    once more."""
    lws = leaderworkerset(run, created=t0 - minutes(60))
    leaders_sts = kube_uid()  # the leader StatefulSet `<lws>`: the same for every generation
    out = [record(lws, t0 - minutes(60), "ADDED")]
    generations = [(t0 - minutes(59.9), "gpu-41"), (t0 - minutes(19), "gpu-43")] + ([(t0 - minutes(1), "gpu-44")] if again else [])
    ends = [(t0 - minutes(20), 1, "Error"), (t0 - minutes(2), 137, "OOMKilled")]
    for number, (made, node) in enumerate(generations):
        leader = lws_pod(lws, 0, 0, node="gpu-40", created=made, owner_uid=leaders_sts)
        worker = lws_pod(lws, 0, 1, node=node, created=made + minutes(0.1), owner_uid=kube_uid())  # its worker StatefulSet is new too
        out += [record(leader, made, "ADDED"), record(worker, made + minutes(0.1), "ADDED")]
        started = made + minutes(1)
        leader, worker = _running(leader, started), _running(worker, started)
        out += [record(leader, started + minutes(0.1)), record(worker, started + minutes(0.2))]
        out.append(record(_lws_status(lws, 1, started + minutes(0.5)), started + minutes(0.5)))
        if number == len(generations) - 1:
            break
        ended, exit_code, reason = ends[number]
        if number == 0:
            xid = event(worker, code=79, first=ended - minutes(0.5), reporting=node)
            out.append(record(xid, ended - minutes(0.5), "ADDED"))
        worker = _restarted(worker, ended, exit_code, reason, started)
        out.append(record(worker, ended + minutes(0.1)))
        note = f"Worker pod {worker['metadata']['name']} failed, deleted leader pod {leader['metadata']['name']} to recreate group 0"
        out.append(record(_lws_event(lws, note, ended + minutes(0.2)), ended + minutes(0.2), "ADDED"))
        teardown = _torn_down(leader, ended + minutes(0.2), ended + minutes(0.6)) + _torn_down(worker, ended + minutes(0.3), ended + minutes(0.4))
        out += [record(obj, at, change) for obj, at, change in teardown]
        out.append(record(_lws_status(lws, 0, ended + minutes(0.8)), ended + minutes(0.8)))
    return out


RESTART_STORIES = {
    "jobset-job-restarts": job_restarts_then_fail,
    "jobset-in-place-restart": in_place_restart_then_fail,
    "rayjob-retried": rayjob_retried_then_fails,
    "lws-group-recreated": lws_group_recreated,
}
