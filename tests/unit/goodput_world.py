"""A JobSet under Kueue with its worker pods (SPEC R17): `GangWorld` (the JobSet and its
Workload as the controllers write them) plus the pods the JobSet's Jobs make and the
kubelet runs, one source record per change, on the same advancing bridge clock. The pods
carry the labels the JobSet controller puts on them (kubernetes-sigs/jobset
pkg/controllers/jobset_controller.go, labelAndAnnotateObject) and, under an
orchestrator, its attempt labels; each asks for 8 GPUs, as the Workload's pod set says."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson

from app.core.base.emit import Emit
from app.core.base.rules import DEFAULT_RULES, Rules
from app.embedded.pipeline import Pipeline
from app.model.envelope import EVENTS, JOBS, PODS, WORKLOADS
from tests.unit import builders
from tests.unit.drivers import new_pipeline
from tests.unit.gang_builders import JOBSET_NAME, JOBSET_UID, NAMESPACE, GangWorld, k8s_time, record

GPUS_PER_POD = 8


class PodsWorld(GangWorld):
    """`GangWorld` whose JobSet's workers are pods that run (or never do)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.pods: list[dict[str, Any]] = []
        self.restarts = 0
        self.started: dict[str, str] = {}  # pod uid -> its containers' start

    def _pod(self, obj: dict[str, Any], change: str = "MODIFIED") -> PodsWorld:
        self.resource_version += 1
        obj["metadata"]["resourceVersion"] = str(self.resource_version)
        self.records.append(record(PODS, obj, change, self.now, self.cluster))
        self.now += self.step
        return self

    def _labels(self) -> dict[str, str]:
        labels = {
            "jobset.sigs.k8s.io/jobset-name": JOBSET_NAME,
            "jobset.sigs.k8s.io/jobset-uid": JOBSET_UID,
            "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "jobset.sigs.k8s.io/restart-attempt": str(self.restarts),
            "jobset.sigs.k8s.io/job-index": "0",
            "batch.kubernetes.io/job-name": f"{JOBSET_NAME}-workers-0",
        }
        attempt = {k: v for k, v in self.js["metadata"]["labels"].items() if k in ("flyte.org/managed", "run", "action", "attempt")}
        return {**labels, **attempt}

    def pods_created(self) -> PodsWorld:
        """The JobSet's Job makes its pods: scheduled, their images not yet pulled."""
        self.pods = []
        for i in range(self.workers):
            name = f"{JOBSET_NAME}-workers-0-{i}-g{self.restarts}"
            obj = builders.pod(
                name, labels=self._labels(), phase="Pending", node=f"gpu-{40 + i}", containers={"main": None},
                created=self.now, namespace=NAMESPACE, gpus=GPUS_PER_POD,
            )  # fmt: skip
            obj["metadata"]["ownerReferences"] = [
                {"apiVersion": "batch/v1", "kind": "Job", "name": f"{JOBSET_NAME}-workers-0", "uid": f"job-{self.restarts}", "controller": True}
            ]
            self.pods.append(obj)
            self._pod(obj, "ADDED")
        return self

    def pods_running(self) -> PodsWorld:
        """The kubelet starts each pod's container (now, by its clock)."""
        for obj in self.pods:
            started = k8s_time(self.now)
            self.started[obj["metadata"]["uid"]] = started
            obj["status"].update(phase="Running", containerStatuses=[_status({"running": {"startedAt": started}})])
            self._pod(obj)
        return self

    def _ended(self, obj: dict[str, Any], exit_code: int, phase: str) -> None:
        reason = "Completed" if exit_code == 0 else "Error"
        state = {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": self.started[obj["metadata"]["uid"]], "finishedAt": k8s_time(self.now)}}
        obj["status"].update(phase=phase, containerStatuses=[_status(state)])
        self._pod(obj)

    def pods_succeeded(self) -> PodsWorld:
        for obj in self.pods:
            self._ended(obj, 0, "Succeeded")
        return self

    def pod_failed(self, index: int = 0, exit_code: int = 1) -> PodsWorld:
        self._ended(self.pods[index], exit_code, "Failed")
        return self

    def gpu_fault(self, index: int = 0, code: int = 79) -> PodsWorld:
        obj = self.pods[index]
        node = obj["spec"]["nodeName"]
        event = builders.event(obj, code=code, first=self.now, reporting=node)
        self.records.append(builders.record(event, self.now, "ADDED", self.cluster))
        self.now += self.step
        return self

    def pods_deleted(self) -> PodsWorld:
        """Kueue stopped the JobSet (or it ended): its Jobs delete their pods, whose
        containers stop within the grace period."""
        for obj in self.pods:
            if obj["status"].get("phase") == "Running":
                self._ended(obj, 143, "Failed")
            obj["metadata"]["deletionTimestamp"] = k8s_time(self.now)
            self._pod(obj, "DELETED")
        return self

    def restart(self) -> PodsWorld:  # R8.1: the JobSet restarts its Jobs in place
        self.restarts += 1
        super().restart()
        return self

    def evict_keeping_quota(self, reason: str = "PodsReadyTimeout", requeue_after: float = 60) -> PodsWorld:
        """kubernetes-sigs/kueue#14811: Kueue evicts (and sets when to requeue), but its
        `QuotaReserved` and `Admitted` conditions stay True and the admission stays."""
        self.wl["status"]["requeueState"] = {"count": 1, "requeueAt": k8s_time(self.now + timedelta(seconds=requeue_after))}
        self.evict(reason)
        return self

    def progress(self, *topics: str) -> PodsWorld:
        """The bridge's progress on every source topic (pods and events too)."""
        super().progress(*(topics or (JOBS, WORKLOADS, PODS, EVENTS)))
        return self

    def idle_for(self, seconds: float, every: float = 60) -> PodsWorld:
        """Time passes with nothing changing; the bridge says so every `every` seconds."""
        while seconds > 0:
            step = min(every, seconds)
            self.pause(step)
            self.progress()
            seconds -= step
        return self


def _status(state: dict[str, Any]) -> dict[str, Any]:
    return {"name": "main", "state": state, "ready": "running" in state, "restartCount": 0, "image": "ghcr.io/acme/train:2026.09", "imageID": "sha256:abc"}


def run(world: GangWorld, rules: Rules = DEFAULT_RULES, *, pipeline: Pipeline | None = None, end: bool = True) -> list[Emit]:
    """Every record through the driver the test runs with; every output."""
    pipeline = pipeline if pipeline is not None else new_pipeline(rules)
    out: list[Emit] = []
    for line in world.records:
        out += pipeline.feed(line["topic"], line["key"], orjson.dumps(line["value"]))
    return out + (pipeline.finish() if end else [])


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


# --- the stories (SPEC R17), also run in bursts of any interleaving (R12.7) ---------------------


def preempted_and_readmitted(**kw: Any) -> PodsWorld:
    """A gang whose pods run, Kueue preempts it (its pods deleted), requeues it for ten
    minutes and readmits it; its new pods pull their image for five minutes, run, succeed."""
    world = PodsWorld(policy="true", **kw)
    world.create_jobset().create_workload().admit().unsuspend().pods_created().pause(120).pods_running().workers_ready().pods_ready()
    world.idle_for(1800).preempt().suspend().pods_deleted().release_quota().idle_for(600)
    world.readmit().unsuspend().pods_created().idle_for(300).pods_running().workers_ready().pods_ready()
    return world.idle_for(1200).pods_succeeded().complete().finish().pods_deleted().progress()


def pods_never_start(**kw: Any) -> PodsWorld:
    """A Workload admitted whose pods never start (their image cannot be pulled): its quota
    idles until Kueue releases it 25 minutes later."""
    world = PodsWorld(**kw)
    world.create_jobset().create_workload().admit().unsuspend().pods_created().idle_for(1500)
    return world.release_quota().pods_deleted().progress()


def evicted_but_held(**kw: Any) -> PodsWorld:
    """kubernetes-sigs/kueue#14811: running, then evicted for PodsReadyTimeout; the pods are
    gone, the JobSet suspended, but QuotaReserved and Admitted stay True past requeueAt,
    for 40 minutes, until an operator's fix makes Kueue release the quota."""
    world = PodsWorld(policy="true", **kw)
    world.create_jobset().create_workload().admit().unsuspend().pods_created().pause(30).pods_running().workers_ready()
    world.idle_for(600).evict_keeping_quota(requeue_after=60).suspend().pods_deleted().idle_for(2400)
    return world.release_quota().progress()


def failed_then_completed_generation(**kw: Any) -> PodsWorld:
    """A JobSet whose first generation fails after an Xid 79 (it restarts in place, R8.1)
    and whose second completes: the first's GPU-seconds are lost, the second's useful."""
    world = PodsWorld(**kw)
    world.create_jobset().create_workload().admit().unsuspend().pods_created().pause(60).pods_running().workers_ready()
    world.idle_for(1200).gpu_fault(1).pause(30).pod_failed(1).restart().pods_deleted()
    world.pods_created().pause(60).pods_running().workers_ready().idle_for(1800)
    return world.pods_succeeded().complete().finish().pods_deleted().progress()


def failed_under_kueue(**kw: Any) -> PodsWorld:
    """A JobSet under Kueue whose worker's GPU falls off the bus: the JobSet fails."""
    world = PodsWorld(**kw)
    world.create_jobset().create_workload().admit().unsuspend().pods_created().pause(90).pods_running().workers_ready()
    world.idle_for(900).gpu_fault(2).pause(20).pod_failed(2).fail().finish().pods_deleted()
    return world.progress()


R17_STORIES = {
    "r17_2_preempted_and_readmitted": preempted_and_readmitted,
    "r17_3_pods_never_start": pods_never_start,
    "r17_3_evicted_but_held": evicted_but_held,
    "r17_2_failed_then_completed_generation": failed_then_completed_generation,
    "r17_4_failed_under_kueue": failed_under_kueue,
}
