"""SPEC R16.3: the LeaderWorkerSet kind's pure parts — where its pods and its record meet,
which pods make a generation — on hostile input as well (R11)."""

from __future__ import annotations

from datetime import timedelta

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from app.core.base.bounds import Trim
from app.core.base.rules import DEFAULT_RULES
from app.core.identity.attempt import attempt_name, job_attempts, pod_route
from app.core.kinds import registry
from app.core.kinds.lws import MAX_GROUPS
from app.model.facts import AttemptId, ContainerFacts, JobFacts, PodFacts
from app.model.k8s import Job
from app.model.records import ClassifiedFailure, ObjectRef
from tests.unit import builders as b

LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


def _pod(name: str, labels: dict[str, str], created_minutes: float = 0, restarted: bool = False) -> PodFacts:
    containers = (ContainerFacts("worker", reported=True, restarted_at=b.T0 + timedelta(minutes=created_minutes + 1), last_exit_code=1),) if restarted else ()
    return PodFacts(
        cluster="prod-a", namespace="ml", name=name, uid=f"{name}-{created_minutes}", observed_at=b.T0, labels=labels, controlled=True,
        created_at=b.T0 + timedelta(minutes=created_minutes), containers=containers,
    )


def _labels(group: str = "0", worker: str = "0", name: str = "serve") -> dict[str, str]:
    return {LWS_NAME: name, GROUP_INDEX: group, WORKER_INDEX: worker}


def test_r16_3_a_pod_of_a_group_joins_the_group_by_name_and_index_whatever_it_asks_for() -> None:
    leader = _pod("serve-1", _labels("1"))  # asks for no GPU: a leader still starts its group's generation
    route = pod_route(leader, DEFAULT_RULES)
    assert route is not None and route.key == "prod-a/ml/LeaderWorkerSet/serve/group/1" and route.attempt is None


@given(st.text(max_size=12))
def test_r16_3_a_group_index_that_is_no_index_joins_nothing(index: str) -> None:
    route = pod_route(_pod("p", _labels(index)), DEFAULT_RULES)
    if index.isascii() and index.isdigit() and len(index) <= 9:
        assert route is not None and route.key.endswith(f"/group/{index}")
    else:
        assert route is None


def _decoded(obj: dict) -> Job:
    return msgspec.json.decode(msgspec.json.encode(obj), type=Job)


def test_r16_3_its_record_speaks_for_each_group_with_the_uid_in_the_attempt_key() -> None:
    lws = b.leaderworkerset("serve", lws_uid="u-1", replicas=3)
    routed, left_out = job_attempts("prod-a", _decoded(lws), DEFAULT_RULES, Trim(DEFAULT_RULES))
    assert left_out == 0
    assert [key for key, _ in routed] == [f"prod-a/ml/LeaderWorkerSet/serve/group/{g}" for g in range(3)]
    assert [a.key for _, a in routed] == [f"prod-a/ml/LeaderWorkerSet/serve/u-1/group/{g}" for g in range(3)]
    assert {a.tracked for _, a in routed} == {ObjectRef(kind="LeaderWorkerSet", name="serve", uid="u-1")}


def test_r16_3_replicas_a_tenant_writes_are_bounded() -> None:
    for replicas, groups, left in ((0, 0, 0), (-7, 0, 0), (None, 1, 0), (10**9, MAX_GROUPS, 10**9 - MAX_GROUPS)):
        lws = b.leaderworkerset("serve", replicas=1)
        if replicas is None:
            del lws["spec"]["replicas"]
        else:
            lws["spec"]["replicas"] = replicas
        routed, left_out = job_attempts("prod-a", _decoded(lws), DEFAULT_RULES, Trim(DEFAULT_RULES))
        assert (len(routed), left_out) == (groups, left)


def test_r16_3_a_leaderworkerset_asking_no_gpu_is_no_attempt() -> None:
    lws = b.leaderworkerset("web", gpus=0)
    assert job_attempts("prod-a", _decoded(lws), DEFAULT_RULES, Trim(DEFAULT_RULES)) == ([], 0)
    lws = b.leaderworkerset("web", gpus=0, leader_gpus=1)
    assert len(job_attempts("prod-a", _decoded(lws), DEFAULT_RULES, Trim(DEFAULT_RULES))[0]) == 1


def _job(created_minutes: float = -60, policy: str = "") -> JobFacts:
    attempt = AttemptId(cluster="prod-a", namespace="ml", kind="LeaderWorkerSet", name="serve", uid="u-1", group="0")
    return JobFacts(
        cluster="prod-a", namespace="ml", name="serve", uid="u-1", kind="LeaderWorkerSet", observed_at=b.T0, attempt=attempt,
        created_at=b.T0 + timedelta(minutes=created_minutes), restart_policy=policy,
    )


def test_r16_3_a_generation_is_a_leader_and_the_workers_made_after_it_and_before_the_next() -> None:
    kind = registry.kind_named("LeaderWorkerSet")
    assert kind is not None
    pods = [
        _pod("serve-0", _labels(), 0),
        _pod("serve-0-1", _labels(worker="1"), 0, restarted=True),  # made in the same second as its leader
        _pod("serve-0", _labels(), 10),
        _pod("serve-0-1", _labels(worker="1"), 10.5),
        _pod("serve-0-1", _labels(worker="1"), -100, restarted=True),  # of an earlier object of its name
        _pod("serve-0-2", _labels(worker="2"), -1),  # before any leader seen: in no generation
    ]
    [generation] = kind.pod_generations(_job(), pods, first=3)
    assert [p.uid for p in generation.pods] == ["serve-0-0", "serve-0-1-0"]
    end = generation.end
    assert (end.number, end.id, end.label, end.at, end.failed_pod, end.failed_container) == (3, "serve-0-0", "group 0 generation 3", b.T0 + timedelta(minutes=1), "serve-0-1-0", "worker")
    assert kind.pod_generations(_job(policy="None"), pods, first=0) == []  # restarts there keep the group


def test_r16_3_a_group_is_shown_with_its_workload() -> None:
    record = ClassifiedFailure(
        key="prod-a/ml/LeaderWorkerSet/serve/cdc524c6-3db3/group/4", cluster="prod-a", namespace="ml", identity="workload", run=None, action=None, attempt=None,
        tracked=ObjectRef(kind="LeaderWorkerSet", name="serve", uid="cdc524c6-3db3"), generation=0, terminal=False, failed_at=b.T0,
        code="Error", kind="USER", message="", gpu_fault=None, faulted_pod=None, reasons=[], revision=0, rules_version="default@x",
    )
    assert attempt_name(record) == "prod-a/ml/LeaderWorkerSet/serve (cdc524c6) group 4"
