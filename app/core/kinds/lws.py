"""LeaderWorkerSet (`leaderworkerset.x-k8s.io/v1`, kubernetes-sigs/lws v0.10.0
api/leaderworkerset/v1): a workload attempt (SPEC R13) when its leader or worker template
asks for a GPU (R13.2, R16.3). Kueue is not followed for it (docs/rules.md).

Groups. It runs `spec.replicas` groups, each a leader pod and `size - 1` workers. Each
group is an attempt of its own, keyed `<cluster>/<namespace>/LeaderWorkerSet/<name>/<uid>/group/<index>`
(R16.3). Its pods name it only by name and group index (labels below; their controllers
are StatefulSets, which faultline does not track), so the attempt stage meets them under
`<cluster>/<namespace>/LeaderWorkerSet/<name>/group/<index>`, a key without the uid, and
its own record goes to each of its groups' keys (at most MAX_GROUPS) with its identity.
An object created again under its name meets its pods under the same keys: pods made
before it are not its (`keys_outlive_objects`, R13.3).

Generations. With `restartPolicy: RecreateGroupOnPodRestart` (the default) or
`RecreateGroupAfterStart`, once a container of a group's pod restarts (or a pod of it is
deleted) the controller deletes the group's leader pod; the group comes back with the same
pod names and new uids (lws pkg/controllers/pod_controller.go handleRestartPolicy). No
counter counts it, nothing says it failed: a generation of a group is one leader pod (by
uid) and the workers made after it and before the next leader. A generation followed by
another that shows a container restarted (`lastState.terminated`) or a pod disrupted by
the cluster (R14.1's `DisruptionTarget`) failed: the earliest of those is its failure, at
that object time (R12.7). A recreation with neither (a rolling update, a scale down and
up, a pod deleted by hand) is no failure.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Final

import msgspec

from app.core.base.bounds import Trim
from app.core.base.rules import Rules
from app.core.kinds.base import Api, PodGeneration, Route, WorkloadKind, _part, requests_gpu
from app.model.envelope import JOBS
from app.model.facts import AttemptId, CrdFailure, GenerationEnd, JobFacts, PodFacts
from app.model.k8s import Job

LWS: Final = "LeaderWorkerSet"
GROUP: Final = "leaderworkerset.x-k8s.io"  # api/leaderworkerset/v1/groupversion_info.go
# api/leaderworkerset/v1/leaderworkerset_types.go (SetNameLabelKey, GroupIndexLabelKey,
# WorkerIndexLabelKey): on every pod of it, leader and workers (the pod webhook sets them,
# pkg/webhooks/pod_webhook.go); a leader's worker index is "0" (pkg/utils/pod/pod_utils.go LeaderPod).
SET_NAME: Final = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX: Final = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX: Final = "leaderworkerset.sigs.k8s.io/worker-index"
LEADER: Final = "0"
# leaderworkerset_types.go RestartPolicyType: with these a restarted container does not
# recreate the group (`Default` is the deprecated name of `None`).
KEEPS_GROUP: Final = frozenset({"None", "Default"})
# R11.5: groups one record speaks for (a tenant writes `spec.replicas`; each is a record
# to the attempt stage), and pods one group's state keeps (its latest generations').
MAX_GROUPS: Final = 128
MAX_GROUP_PODS: Final = 256
DROPPED_GROUPS: Final = "dropped_groups"
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)


def group_key(cluster: str, namespace: str, name: str, index: str) -> str:
    """R16.3: where one group's pods meet the LeaderWorkerSet (its pods name no uid)."""
    return f"{cluster}/{_part('namespace', namespace)}/{LWS}/{_part('name', name, LWS)}/group/{index}"


def _is_index(value: str | None) -> bool:
    return value is not None and 0 < len(value) <= 9 and value.isascii() and value.isdigit()


def _made(pod: PodFacts) -> datetime:
    return pod.created_at or _EPOCH


def _order(pod: PodFacts) -> tuple[datetime, str, str]:
    return _made(pod), pod.name, pod.uid


def _is_leader(pod: PodFacts) -> bool:
    return pod.labels.get(WORKER_INDEX) == LEADER


class LeaderWorkerSet(WorkloadKind):
    api = Api(LWS, GROUP, ("v1",), "leaderworkersets", JOBS)
    joins_any_pod = True  # a leader may ask for no GPU; it still starts its group's generation
    keys_outlive_objects = True
    generations_by_pods = True
    restarted = "as a new group (generation {generation})"  # new pods, not restarted ones
    pod_labels = (SET_NAME, GROUP_INDEX, WORKER_INDEX)
    # No child_pod_labels: its pods' controllers are StatefulSets, never a pod task's (R13.2),
    # and the rule set's default (R10.1) stays as it was.

    def requests_gpu(self, job: Job, rules: Rules) -> bool:
        """R13.2: its leader's template (where it has one) or its workers' asks for a GPU."""
        template = job.spec.leader_worker_template
        if template is None:
            return False
        leader = template.leader_template
        return requests_gpu(template.worker_template.spec, rules) or (leader is not None and requests_gpu(leader.spec, rules))

    def join_keys(self, cluster: str, job: Job, attempt: AttemptId, trim: Trim) -> tuple[list[tuple[str, AttemptId]], int]:
        """Each of its `spec.replicas` groups (default 1), at most MAX_GROUPS of them."""
        replicas = job.spec.replicas
        groups = 1 if replicas is None else max(replicas, 0)
        kept = min(groups, MAX_GROUPS)
        namespace, name = job.metadata.namespace, attempt.name
        routed = [(group_key(cluster, namespace, name, str(g)), msgspec.structs.replace(attempt, group=str(g))) for g in range(kept)]
        return routed, groups - kept

    def route_pod(self, pod: PodFacts, rules: Rules) -> Route | None:
        labels = pod.labels
        name, index = labels.get(SET_NAME), labels.get(GROUP_INDEX)
        if not name or not _is_index(index):
            return None
        return Route(group_key(pod.cluster, pod.namespace, name, str(index)), None)

    def restart_policy(self, job: Job) -> str:
        template = job.spec.leader_worker_template
        return template.restart_policy[:64] if template is not None else ""  # an enum; a tenant writes it

    def failure(self, job: Job) -> CrdFailure | None:
        return None  # it has no Failed condition: only its deletion ends it (lws v0.10.0)

    def selects(self, job: JobFacts, pod: PodFacts, ended: GenerationEnd | None = None) -> bool:
        """Its pods (of this group: the key says which); a generation's are `pod_generations`'."""
        return pod.namespace == job.namespace and pod.labels.get(SET_NAME) == job.name and (ended is None or pod.uid in ended.scope)

    # --- R16.3: a group's generations, from its pods ------------------------------------------

    def _generations(self, job: JobFacts, pods: Iterable[PodFacts]) -> list[list[PodFacts]]:
        """Its pods by generation, oldest first: each leader (by creation) with the workers
        made at or after it and before the next leader. A pod made before the object (of
        another object of its name) or before any leader seen (a worker whose leader is not
        seen yet) is in none."""
        floor = job.created_at
        mine = [p for p in pods if p.labels.get(SET_NAME) == job.name and (floor is None or p.created_at is None or p.created_at >= floor)]
        leaders = sorted((p for p in mine if _is_leader(p)), key=_order)
        generations: list[list[PodFacts]] = [[leader] for leader in leaders]
        starts = [_made(leader) for leader in leaders]
        for pod in sorted((p for p in mine if not _is_leader(p)), key=_order):
            at = bisect_right(starts, _made(pod)) - 1
            if at >= 0:
                generations[at].append(pod)
        return generations

    def pod_generations(self, job: JobFacts, pods: Iterable[PodFacts], first: int) -> list[PodGeneration]:
        """Every generation but the latest that shows a failure (R16.3): its earliest
        restarted container (the end of its previous run, `lastState.terminated.finishedAt`;
        not where a restart keeps the group) or disrupted pod (R14.1, R16.6)."""
        generations = self._generations(job, pods)
        restarts_count = job.restart_policy not in KEEPS_GROUP
        group = job.attempt.group if job.attempt is not None else ""
        found = []
        for number, members in enumerate(generations[:-1], start=first):
            failures: list[tuple[datetime, str, str, PodFacts]] = []
            for pod in members:
                if restarts_count:
                    failures += [(c.restarted_at, pod.name, c.name, pod) for c in pod.containers if c.restarted_at is not None]
                # A disruption (R14.1) or Kueue's force deletion (R16.6: disruption evidence as R14.1's).
                failures += [(sign.at, pod.name, "", pod) for sign in (pod.disruption, pod.force_deleted) if sign is not None]
            if not failures:
                continue  # recreated, but nothing of it failed
            at, _, container, pod = min(failures, key=lambda f: f[:3])
            how = f"'s container {container} restarted" if container else " was disrupted"
            reason = f"{LWS} {job.name} recreated its group {group} after pod {pod.name}{how}"
            leader = members[0]
            end = GenerationEnd(
                leader.uid, number, f"group {group} generation {number}", reason, at, (leader.uid,), failed_pod=pod.uid, failed_container=container
            )
            found.append(PodGeneration(end, tuple(members)))
        return found

    def kept_pods(self, job: JobFacts | None, pods: dict[str, PodFacts], rules: Rules) -> tuple[dict[str, PodFacts], int]:
        """The pods of its latest generations: at most `max_generations`, with at most
        MAX_GROUP_PODS pods (the latest generation whole); pods made before the object or
        before the oldest kept leader are left out."""
        floor = job.created_at if job is not None else None
        stale, leaders = False, 0
        for pod in pods.values():  # a loop, not sorts: this runs for every pod record of it that changed
            if floor is not None and _made(pod) < floor:
                stale = True
            elif _is_leader(pod):
                leaders += 1
        if not stale and leaders <= rules.max_generations and len(pods) <= MAX_GROUP_PODS:
            return pods, 0
        mine = sorted((p for p in pods.values() if floor is None or _made(p) >= floor), key=_order)
        if not leaders:  # workers whose leaders are not seen: the latest of them
            return {p.uid: p for p in mine[-MAX_GROUP_PODS:]}, 0
        starts = [_made(p) for p in mine if _is_leader(p)]
        sizes = [0] * len(starts)
        for pod in mine:
            at = bisect_right(starts, _made(pod)) - 1
            if at >= 0:
                sizes[at] += 1
        keep, total = 0, 0
        for size in reversed(sizes):
            if keep and (keep == rules.max_generations or total + size > MAX_GROUP_PODS):
                break
            keep, total = keep + 1, total + size
        since = starts[-keep]
        return {p.uid: p for p in mine if _made(p) >= since}, len(starts) - keep
