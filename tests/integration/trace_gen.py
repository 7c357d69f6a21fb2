"""Big mixed traces for the streaming tests: many attempts of every scenario kind,
interleaved in observation order as the bridge would publish them.

    python tests/integration/trace_gen.py --attempts 600 --seed 7 --out /tmp/big.jsonl

Built from the unit tests' Kubernetes builders and attempt stories (tests/unit), the
workload attempts of SPEC R13 (a TrainJob, a bare JobSet, an indexed GPU Job, a bare GPU
pod), plus the kinds those do not cover: a fault seen before its pod, events.k8s.io/v1
events, faults from another node, SXids on PyTorchJob workers, warn-only and user faults,
succeeded pods with faults, pods no attempt owns, CPU-only CronJob Jobs, repeating faults,
Kueue preemptions of JobSets, and malformed records. Deterministic for a given seed.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the builders live in tests/unit
    sys.path.insert(0, str(ROOT))

from tests.unit import builders, stories  # noqa: E402

b = builders

Records = list[dict[str, Any]]
Scenario = Callable[[random.Random, str, datetime], Records]

# The whole trace stays within this span of observation time, under the 6 h retention
# (R7.4): the offline runner and the workers then never expire state mid-trace, whatever
# the speed at which a worker reads each partition.
START_SPREAD = timedelta(hours=3)


def _failed(p: dict, exit_code: int, at: datetime, reason: str = "Error") -> dict:
    names = [c["name"] for c in p["spec"]["containers"]]
    return b.updated(p, phase="Failed", containerStatuses=[{"name": n, "state": b.terminated(exit_code, at, reason)} for n in names])


def _succeeded(p: dict, at: datetime) -> dict:
    names = [c["name"] for c in p["spec"]["containers"]]
    return b.updated(p, phase="Succeeded", containerStatuses=[{"name": n, "state": b.terminated(0, at, "Completed")} for n in names])


def _labels(run: str, action: str = "train", attempt: str = "1") -> dict[str, str]:
    return b.attempt_labels(run=run, action=action, attempt=attempt)


def _pod_task(run: str, t0: datetime, node: str = b.NODE, **kw: Any) -> dict:
    return b.pod(f"{run}-0", labels=_labels(run), node=node, containers={"main": b.running(t0 - b.minutes(30))}, created=t0 - b.minutes(31), **kw)


def _story(name: str) -> Scenario:
    def scenario(rng: random.Random, run: str, t0: datetime) -> Records:
        return {**stories.STORIES, **stories.WORKLOAD_STORIES}[name](run=run, t0=t0)

    scenario.__name__ = name
    return scenario


# --- kinds the stories do not cover ------------------------------------------------------


def event_before_pod(rng: random.Random, run: str, t0: datetime) -> Records:
    """R7.1: the fault Event reaches the log before any record of its pod (held)."""
    p = _pod_task(run, t0)
    xid = b.event(p, code=rng.choice([79, 48, 95, 119]), first=t0 - b.minutes(3))
    return [b.record(xid, t0 - b.minutes(40), "ADDED"), b.record(p, t0 - b.minutes(30), "ADDED"), b.record(_failed(p, 137, t0), t0 + b.minutes(0.2))]


def events_v1(rng: random.Random, run: str, t0: datetime) -> Records:
    """An events.k8s.io/v1 fault Event (regarding/note/series) on a pod task."""
    p = _pod_task(run, t0)
    meta = p["metadata"]
    first = t0 - b.minutes(rng.randint(1, 20))
    ev = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.v1", "namespace": meta["namespace"], "uid": b.uid("ev"), "creationTimestamp": b.ts(first)},
        "eventTime": first.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "series": {"count": 4, "lastObservedTime": (first + b.minutes(1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")},
        "reportingController": "gpu-health-agent",
        "reportingInstance": b.NODE,
        "action": "GPUHealthCheck",
        "reason": "GPUXidError",
        "regarding": {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"], "apiVersion": "v1"},
        "note": "(combined from similar events): " + b.xid_message(rng.choice([62, 64, 109, 13])),
        "type": "Warning",
    }
    envelope = {"type": "ADDED", "observed_at": b.ts(first + b.minutes(1)), "cluster": b.CLUSTER, "object": ev}
    return [
        b.record(p, t0 - b.minutes(30), "ADDED"),
        {"topic": "k8s.events", "key": meta["uid"], "value": envelope},
        b.record(_failed(p, 1, t0), t0 + b.minutes(0.1)),
    ]


def untrusted_node(rng: random.Random, run: str, t0: datetime) -> Records:
    """R2.5b: a fault reported from another node never explains the failure."""
    p = _pod_task(run, t0)
    return [
        b.record(p, t0 - b.minutes(30), "ADDED"),
        b.record(b.event(p, code=79, first=t0 - b.minutes(2), reporting="gpu-99"), t0 - b.minutes(2), "ADDED"),
        b.record(_failed(p, 1, t0), t0 + b.minutes(0.1)),
    ]


def pytorch_sxid(rng: random.Random, run: str, t0: datetime) -> Records:
    """A PyTorchJob whose worker 1 recorded an NVSwitch SXid before the job failed."""
    labels = _labels(run, "ddp")
    name = f"{run}-ddp"
    job = b.kubeflow("PyTorchJob", name, labels=labels)
    out = [b.record(job, t0 - b.minutes(40), "ADDED")]
    workers = [
        b.pod(f"{name}-worker-{i}", labels={**b.kubeflow_pod_labels(name), **labels}, node=f"gpu-{50 + i}", containers={"pytorch": b.running(t0 - b.minutes(35))})
        for i in range(3)
    ]
    out += [b.record(w, t0 - b.minutes(35), "ADDED") for w in workers]
    sxid = b.event(workers[1], message=b.sxid_message(20034, node="gpu-51"), reason="GPUSXidError", first=t0 - b.minutes(3), reporting="gpu-51")
    out.append(b.record(sxid, t0 - b.minutes(3), "ADDED"))
    out.append(b.record(_failed(workers[1], 1, t0 - b.minutes(1)), t0 - b.minutes(0.9)))
    failed = b.updated(job, conditions=[b.condition("Failed", "PyTorchJobFailed", f"PyTorchJob ml/{name} is failed because 1 Worker replica(s) failed.", t0)])
    out.append(b.record(failed, t0 + b.minutes(0.1)))
    return out


def warn_only(rng: random.Random, run: str, t0: datetime) -> Records:
    """R6.6: a warn-only fault is data only."""
    p = _pod_task(run, t0)
    return [
        b.record(p, t0 - b.minutes(30), "ADDED"),
        b.record(b.event(p, code=92, severity="warn", first=t0 - b.minutes(5)), t0 - b.minutes(5), "ADDED"),
        b.record(_failed(p, rng.choice([1, 2, 137]), t0), t0 + b.minutes(0.1)),
    ]


def oom_with_user_fault(rng: random.Random, run: str, t0: datetime) -> Records:
    """R6.5: a user fault keeps a specific base code (OOMKilled)."""
    p = _pod_task(run, t0)
    return [
        b.record(p, t0 - b.minutes(30), "ADDED"),
        b.record(b.event(p, code=31, severity="user", first=t0 - b.minutes(1)), t0 - b.minutes(1), "ADDED"),
        b.record(_failed(p, 137, t0, "OOMKilled"), t0 + b.minutes(0.1)),
    ]


def succeeded_with_fault(rng: random.Random, run: str, t0: datetime) -> Records:
    """R2.6: the fault is published; the attempt succeeded, so no verdict."""
    p = _pod_task(run, t0)
    return [
        b.record(p, t0 - b.minutes(30), "ADDED"),
        b.record(b.event(p, code=43, first=t0 - b.minutes(10)), t0 - b.minutes(10), "ADDED"),
        b.record(_succeeded(p, t0), t0 + b.minutes(0.1)),
    ]


def unlabelled_pod(rng: random.Random, run: str, t0: datetime) -> Records:
    """R1, R13.2: no attempt labels and a controller faultline does not track (a
    Deployment's ReplicaSet): never classified; its fault still goes to faultline.faults."""
    owners = [b.owner("ReplicaSet", f"{run}-notebook-7d9f", f"rs-{run}", "apps/v1")]
    p = b.pod(f"{run}-notebook", labels={"app": "jupyter"}, owners=owners, containers={"nb": b.running(t0 - b.minutes(60))})
    return [
        b.record(p, t0 - b.minutes(60), "ADDED"),
        b.record(b.event(p, code=79, first=t0 - b.minutes(1)), t0 - b.minutes(1), "ADDED"),
        b.record(_failed(p, 1, t0), t0 + b.minutes(0.1)),
    ]


def repeating_fault(rng: random.Random, run: str, t0: datetime) -> Records:
    """R2.4 and R7.2: one Event whose count grows after the verdict; later revisions."""
    p = _pod_task(run, t0)
    ev_uid = b.uid("ev")
    out = [b.record(p, t0 - b.minutes(30), "ADDED"), b.record(_failed(p, 1, t0), t0 + b.minutes(0.05))]
    for n in range(1, rng.randint(2, 4) + 1):
        ev = b.event(p, code=94, first=t0 - b.minutes(0.5), last=t0 + b.minutes(0.2 * n), count=n, event_uid=ev_uid)
        out.append(b.record(ev, t0 + b.minutes(0.3 * n), "ADDED" if n == 1 else "MODIFIED"))
    return out


# --- Kueue gangs (SPEC R9) -------------------------------------------------------------------


def _workload(
    name: str, jobset_uid: str, conditions: list[dict], created: datetime, wl_uid: str, active: bool = True, stats: list[tuple[str, str, int]] | None = None
) -> dict:
    status: dict[str, Any] = {"conditions": conditions}
    if stats:
        status["schedulingStats"] = {"evictions": [{"reason": r, "underlyingCause": c, "count": n} for r, c, n in stats]}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {
            "name": name,
            "namespace": b.NS,
            "uid": wl_uid,
            "creationTimestamp": b.ts(created),
            "labels": {"kueue.x-k8s.io/job-uid": jobset_uid},
            "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": name, "uid": jobset_uid, "controller": True}],
        },
        "spec": {"active": active, "queueName": "gpu-queue", "podSets": [{"name": "workers", "count": 2}]},
        "status": status,
    }


def _admitted(at: datetime) -> list[dict]:
    return [b.condition("QuotaReserved", "QuotaReserved", "Quota reserved in ClusterQueue gpu", at), b.condition("Admitted", "Admitted", "The workload is admitted", at)]


def _evicted(at: datetime, reason: str, message: str) -> list[dict]:
    conditions = [
        b.condition("QuotaReserved", "Pending", "", at, status="False"),
        b.condition("Admitted", "NoReservation", "The workload has no reservation", at, status="False"),
        b.condition("Evicted", reason, message, at),
    ]
    if reason == "Preempted":
        conditions.append(b.condition("Preempted", "InClusterQueue", message, at))
    return conditions


def _gang(rng: random.Random, run: str, t0: datetime, *, resume: bool, reason: str, readmit: bool, labelled: bool = True) -> Records:
    """A JobSet under Kueue: under an orchestrator's labels (R9), or a workload attempt of
    its own (`labelled` false, R15); evicted at t0 for `reason` ("" : suspended by its
    user, no eviction), readmitted (and completed) or not."""
    labels = _labels(run, "pretrain") if labelled else {"kueue.x-k8s.io/queue-name": "gpu-queue"}
    name = f"{run}-pretrain"
    js = b.jobset(name, labels=labels)
    js["metadata"]["annotations"] = {"faultline.io/resume-after-preemption": "true" if resume else "false"}
    js_uid = js["metadata"]["uid"]
    wl_uid = b.uid("wl")
    wl = lambda conditions, active=True, stats=None: _workload(name, js_uid, conditions, t0 - b.minutes(60), wl_uid, active, stats)  # noqa: E731
    suspended = b.updated(js, conditions=[b.condition("Suspended", "SuspendedJobs", "jobset suspended", t0 + b.minutes(0.1))])
    suspended["spec"]["suspend"] = True
    running = b.updated(js, replicatedJobsStatus=[{"name": "workers", "ready": 1, "succeeded": 0, "failed": 0, "active": 1}])
    out = [
        b.record(wl([]), t0 - b.minutes(60), "ADDED"),
        b.record(js, t0 - b.minutes(59), "ADDED"),
        b.record(wl(_admitted(t0 - b.minutes(58))), t0 - b.minutes(58)),
    ]
    if not labelled:  # its workers reported ready (R15.2: started)
        out.append(b.record(running, t0 - b.minutes(50)))
    if reason:
        message = f"Preempted to accommodate a workload (UID: {b.uid('x')}) in the ClusterQueue" if reason == "Preempted" else "Pods were not ready in time"
        evicted = _evicted(t0, reason, message)
        if reason == "NodeFailures":  # Kueue v1beta2's count of it, with its underlying cause
            out.append(b.record(wl(evicted, stats=[("NodeFailures", "NodeUnreachable", 1)]), t0))
        else:
            out.append(b.record(wl(evicted), t0))
    out.append(b.record(suspended, t0 + b.minutes(0.1)))
    if reason:
        # Kueue updates the Workload again once the JobSet stopped (quota released).
        out.append(b.record(wl(_evicted(t0, reason, "released") + [b.condition("Requeued", "Requeued", "", t0 + b.minutes(0.5))]), t0 + b.minutes(0.5)))
    if readmit and not reason:  # its user resumes it
        back = t0 + b.minutes(rng.randint(5, 40))
        resumed = b.updated(running, conditions=[b.condition("Suspended", "ResumeJobs", "jobset resumed", back, status="False")])
        out.append(b.record(resumed, back))
        done = b.updated(js, conditions=[b.condition("Completed", "AllJobsCompleted", "jobset completed successfully", back + b.minutes(30))])
        out.append(b.record(done, back + b.minutes(30)))
    elif readmit:
        back = t0 + b.minutes(rng.randint(5, 40))
        readmitted = _admitted(back) + [b.condition("Evicted", "QuotaReserved", "Previously: Preempted", back, status="False")]
        out.append(b.record(wl(readmitted), back))
        resumed = b.updated(js, conditions=[b.condition("Suspended", "ResumeJobs", "jobset resumed", back + b.minutes(0.1), status="False")])
        out.append(b.record(resumed, back + b.minutes(0.1)))
        done = b.updated(js, conditions=[b.condition("Completed", "AllJobsCompleted", "jobset completed successfully", back + b.minutes(30))])
        out.append(b.record(done, back + b.minutes(30)))
    return out


def gang_preempted_waits(rng: random.Random, run: str, t0: datetime) -> Records:
    return _gang(rng, run, t0, resume=True, reason="Preempted", readmit=True)


def gang_preempted_ends(rng: random.Random, run: str, t0: datetime) -> Records:
    return _gang(rng, run, t0, resume=False, reason="Preempted", readmit=False)


def gang_pods_ready_timeout(rng: random.Random, run: str, t0: datetime) -> Records:
    return _gang(rng, run, t0, resume=True, reason="PodsReadyTimeout", readmit=False)


# SPEC R15: a JobSet without an orchestrator's labels, requeued by Kueue and resumed.
def requeue_preempted(rng: random.Random, run: str, t0: datetime) -> Records:
    return _gang(rng, run, t0, resume=False, reason="Preempted", readmit=True, labelled=False)


def requeue_node_failures(rng: random.Random, run: str, t0: datetime) -> Records:
    return _gang(rng, run, t0, resume=False, reason="NodeFailures", readmit=True, labelled=False)


def requeue_waits_on(rng: random.Random, run: str, t0: datetime) -> Records:
    """Never readmitted: still waiting at the end (stuck past a short max_readmission_wait)."""
    return _gang(rng, run, t0, resume=False, reason="PodsReadyTimeout", readmit=False, labelled=False)


def user_suspended(rng: random.Random, run: str, t0: datetime) -> Records:
    return _gang(rng, run, t0, resume=False, reason="", readmit=True, labelled=False)


# --- malformed records (SPEC R11) ------------------------------------------------------------


def malformed(rng: random.Random, run: str, t0: datetime) -> Records:
    """One record that must land in the dead-letter topic; never an attempt."""
    p = _pod_task(run, t0)
    good = b.record(p, t0, "ADDED")["value"]
    key = b.uid("bad")
    obj = good["object"]
    variants: list[tuple[str, Any]] = [
        ("k8s.pods", {"type": "ADDED", "cluster": b.CLUSTER, "object": obj}),  # no observed_at
        ("k8s.pods", {**good, "type": "UPSERTED"}),
        ("k8s.pods", {**good, "observed_at": "2026-08-25T12:00:00"}),  # naive time
        ("k8s.pods", {**good, "object": {**obj, "status": {"phase": 7}}}),
        ("k8s.pods", {**good, "object": {"metadata": {"name": "no-uid"}}}),
        ("k8s.pods", {**good, "cluster": "prod/a"}),
        ("k8s.events", {**good, "object": {"reason": ["GPUXidError"]}}),
        ("k8s.events", "not an envelope"),
        ("k8s.jobs", [1, 2, 3]),
        ("k8s.jobs", {**good, "object": {**b.jobset(run), "status": {"restarts": "one"}}}),
        ("k8s.workloads", {**good, "object": {**_workload(run, key, [], t0, key), "spec": {"active": "yes"}}}),
    ]
    topic, value = variants[rng.randrange(len(variants))]
    return [{"topic": topic, "key": key, "value": value}]


STORY_KINDS: dict[str, Scenario] = {name: _story(name) for name in stories.STORIES}
# SPEC R13: workload attempts (the CPU-only CronJob Jobs are no attempts: OTHER_KINDS).
WORKLOAD_KINDS: dict[str, Scenario] = {name: _story(name) for name in stories.WORKLOAD_STORIES if name != "cronjob-cpu"}
EXTRA_KINDS: dict[str, Scenario] = {
    "event-before-pod": event_before_pod,
    "events-v1": events_v1,
    "untrusted-node": untrusted_node,
    "pytorch-sxid": pytorch_sxid,
    "warn-only": warn_only,
    "oom-user-fault": oom_with_user_fault,
    "succeeded-with-fault": succeeded_with_fault,
    "repeating-fault": repeating_fault,
    "gang-preempted-waits": gang_preempted_waits,
    "gang-preempted-ends": gang_preempted_ends,
    "gang-pods-ready-timeout": gang_pods_ready_timeout,
    "requeue-preempted": requeue_preempted,
    "requeue-node-failures": requeue_node_failures,
    "requeue-waits-on": requeue_waits_on,
    "user-suspended": user_suspended,
}
ATTEMPT_KINDS: dict[str, Scenario] = {**STORY_KINDS, **WORKLOAD_KINDS, **EXTRA_KINDS}
OTHER_KINDS: dict[str, Scenario] = {"unlabelled-pod": unlabelled_pod, "cpu-jobs": _story("cronjob-cpu"), "malformed": malformed}


def send(producer: Any, topic: str, line: dict, partitions: int) -> list[Any]:
    """Publish one trace line as the bridge would: a progress record (R12.1) to every
    partition of its topic, so each worker's watermark hears it; any other by its key."""
    value = orjson.dumps(line["value"]) if line["value"] is not None else None
    if isinstance(line["value"], dict) and line["value"].get("type") == "BOOKMARK":
        return [producer.send(topic, key=line["key"].encode(), value=value, partition=p) for p in range(partitions)]
    return [producer.send(topic, key=line["key"].encode(), value=value)]


def generate(attempts: int = 520, seed: int = 7, others: int | None = None, malformed: bool = True, progress: bool = True) -> Records:
    """`attempts` scenarios with an attempt (every kind at least once, then at random),
    plus `others` (default: 5 %, at least one of each) unlabelled pods and, unless
    `malformed` is False, malformed records; sorted into observation order (stable, so
    each object's records keep their order); with the bridge's progress (SPEC R12.1)
    every minute and after the end, unless `progress` is False."""
    rng = random.Random(seed)
    b.reset_ids()
    kinds = list(ATTEMPT_KINDS) + [rng.choice(list(ATTEMPT_KINDS)) for _ in range(max(0, attempts - len(ATTEMPT_KINDS)))]
    other_kinds = [k for k in OTHER_KINDS if malformed or k != "malformed"]
    others = max(2, attempts // 20) if others is None else others
    kinds += [rng.choice(other_kinds) for _ in range(others)] + other_kinds
    timed: list[tuple[datetime, int, dict[str, Any]]] = []
    for i, kind in enumerate(kinds):
        t0 = b.T0 + timedelta(seconds=round(rng.uniform(0, START_SPREAD.total_seconds()), 3))
        scenario = ATTEMPT_KINDS.get(kind) or OTHER_KINDS[kind]
        for r in scenario(rng, f"g{i:04d}-{kind}", t0):
            timed.append((_observed_at(r) or t0, len(timed), r))
    timed.sort(key=lambda item: item[:2])
    records = [r for _, _, r in timed]
    return b.with_progress(records, times=[t for t, _, _ in timed]) if progress else records


def _observed_at(record: dict[str, Any]) -> datetime | None:
    value = record["value"]
    try:
        at = datetime.fromisoformat(value["observed_at"])
    except (TypeError, KeyError, ValueError):
        return None
    return at if at.tzinfo is not None else None


def write_trace(path: Path, records: Records) -> Path:
    path.write_bytes(b.trace_bytes(records))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attempts", type=int, default=520)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    records = generate(args.attempts, args.seed)
    write_trace(args.out, records)
    print(f"{len(records)} records, {args.attempts} attempts -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
