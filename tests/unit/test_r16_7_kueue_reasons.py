"""SPEC R16.7: every eviction reason Kueue writes is an eviction under R15.2 (a workload
attempt waits for readmission) and text under R9.5 (a gang under an orchestrator's labels
ends, `system`; the maximum execution time, the workload's own doing, `user`).

The reasons are Kueue v0.19.2's, its newest release (no v0.20 exists; main is
`v0.20.0-devel` with the same reasons): `apis/kueue/v1beta2/workload_types.go`
(`WorkloadEvictedByFlavorMigration`, the `DeactivationTarget` reasons),
`pkg/controller/concurrentadmission/controller.go` (`VariantEvicted`, `ConcurrentAdmission`,
literals), and `Deactivated` with the `DeactivationTarget` condition's reason as its cause,
`DeactivatedDueTo<cause>` (`pkg/workload/patching/patching.go` ReasonWithCause). SPEC's
`WorkloadWaitForScheduling` is not a Kueue reason. Every rule through every driver."""

from __future__ import annotations

import msgspec
import pytest

from app.core.base.rules import DEFAULT_RULES
from app.core.identity import kueue
from app.core.kinds.registry import WORKLOAD
from app.model.k8s import Workload
from app.model.records import GangTransition
from tests.unit.gang_builders import GangWorld, feed

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver

# Kueue v0.19.2: the Evicted reasons R16.7 adds to those R9/R15 named, with Kueue's messages.
ADDED = {
    "FlavorMigration": "Evicted to accommodate a workload (UID: 5f0e1d2c-3b4a-4958-8776-6a5b4c3d2e1f) due to migration to more favorable resource flavor",
    "VariantEvicted": "Admitted variant was evicted",
    "ConcurrentAdmission": "No variant is running",
}
# The DeactivationTarget reasons (the cause of `DeactivatedDueTo<cause>`), and who pays.
CAUSES = {
    "RequeuingLimitExceeded": "system",
    "MaximumExecutionTimeExceeded": "user",
    "AdmissionCheck": "system",
    "EvictedOnManagerCluster": "system",
}
WAITED_AND_BACK = [("Pending", "Running"), ("Running", "WaitingForReadmission"), ("WaitingForReadmission", "Running")]
SYSTEM = "; this does not count against the task's retries"
USER = "; this uses one of the task's retries"


def transitions(world: GangWorld) -> list[GangTransition]:
    return [e.value for e in feed(world.records, DEFAULT_RULES)[1]]


def deactivated_due_to(world: GangWorld, cause: str) -> GangWorld:
    """Kueue deactivates for a cause (pkg/controller/core/workload_controller.go): the
    `DeactivationTarget` condition, then `spec.active: false`, then the eviction
    `DeactivatedDueTo<cause>` with the cause's words."""
    world._wl_condition("DeactivationTarget", "True", cause, f"exceeding the {cause}")
    world._workload()
    world._set_spec(world.wl, "active", False)
    world._workload()
    return world.evict(f"DeactivatedDueTo{cause}", f"The workload is deactivated due to exceeding the {cause}")


@pytest.mark.parametrize("reason", sorted(ADDED))
def test_r16_7_each_reason_kueue_adds_is_waited_out_by_a_workload_attempt(reason: str) -> None:
    world = GangWorld(labels={}).start().evict(reason, ADDED[reason]).suspend().release_quota().pause(30)
    world.readmit().unsuspend().workers_ready()
    got = transitions(world)
    assert [(t.from_, t.to) for t in got] == WAITED_AND_BACK
    waiting = got[1]
    assert waiting.cause is not None and waiting.cause.reason == reason
    assert waiting.reason == f"gang evicted by kueue ({reason}): {ADDED[reason]}; waiting for re-admission"


@pytest.mark.parametrize("policy", ["true", "false"])
@pytest.mark.parametrize("reason", sorted(ADDED))
def test_r16_7_each_reason_kueue_adds_ends_a_gang_under_labels_as_system(policy: str, reason: str) -> None:
    world = GangWorld(policy=policy).start().evict(reason, ADDED[reason]).suspend().release_quota()
    ended = transitions(world)[-1]
    assert (ended.to, ended.code, ended.retry) == ("Ended", "GangEvicted", "system")
    assert ended.reason == f"gang evicted by kueue ({reason}): {ADDED[reason]}{SYSTEM}"


@pytest.mark.parametrize("cause", sorted(CAUSES))
def test_r16_7_each_deactivation_cause_ends_a_workload_attempt_gang_evicted(cause: str) -> None:
    """R15.3: `spec.active: false` ends the wait; the maximum execution time is the user's."""
    world = deactivated_due_to(GangWorld(labels={}).start(), cause).suspend().release_quota()
    ended = transitions(world)[-1]
    assert (ended.from_, ended.to, ended.code, ended.retry) == ("Running", "Ended", "GangEvicted", CAUSES[cause])
    assert ended.reason.startswith(f"gang evicted by kueue (DeactivatedDueTo{cause}): The workload is deactivated due to")


@pytest.mark.parametrize("policy", ["true", "false"])
@pytest.mark.parametrize("cause", sorted(CAUSES))
def test_r16_7_each_deactivation_cause_ends_a_gang_under_labels_by_who_caused_it(policy: str, cause: str) -> None:
    world = deactivated_due_to(GangWorld(policy=policy).start(), cause).suspend().release_quota()
    ended = transitions(world)[-1]
    assert (ended.to, ended.code, ended.retry) == ("Ended", "GangEvicted", CAUSES[cause])
    assert ended.reason.endswith(USER if CAUSES[cause] == "user" else SYSTEM)
    assert f"(DeactivatedDueTo{cause})" in ended.reason


def test_r16_7_an_eviction_reason_is_text_never_a_decision_of_its_own() -> None:
    """Only a preemption and the maximum execution time are the task's; every other reason
    Kueue writes, and any it adds later, is `system` and carried as it is (R9.5)."""
    for reason in [*ADDED, *(f"DeactivatedDueTo{c}" for c in CAUSES), "WorkloadWaitForScheduling"]:
        evicted = kueue.classify_eviction(kueue.Eviction(reason, "m", "", None), active=not reason.startswith("Deactivated"))
        assert evicted is not None and evicted.reason == reason and evicted.message == "m"
        assert evicted.retry == ("user" if reason == "DeactivatedDueToMaximumExecutionTimeExceeded" else "system")


def test_r16_7_workloads_are_watched_at_v1beta2_first_and_v1beta1_is_still_read() -> None:
    """SPEC says Kueue 0.20 serves v1beta2 only; v0.19.2 (the newest release) and main serve
    v1beta1 (deprecated) and v1beta2 (stored): the bridge prefers v1beta2 and reads v1beta1."""
    assert WORKLOAD.versions == ("v1beta2", "v1beta1")


def test_r16_7_a_concurrent_admission_variant_belongs_to_no_gang_its_parent_does() -> None:
    """Kueue's concurrent admission makes variant Workloads controlled by the job's own
    (parent) Workload: the variants (evicted `FlavorMigration`) are no job's; the parent
    (evicted `VariantEvicted`, `ConcurrentAdmission`) is the job's."""
    parent = GangWorld(labels={}).wl
    variant = {**parent, "metadata": {**parent["metadata"], "name": f"{parent['metadata']['name']}-spot",
                                      "ownerReferences": [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "name": parent["metadata"]["name"],
                                                           "uid": parent["metadata"]["uid"], "controller": True}]}}
    assert kueue.job_uid_of(msgspec.json.decode(msgspec.json.encode(parent), type=Workload), DEFAULT_RULES) is not None
    assert kueue.job_uid_of(msgspec.json.decode(msgspec.json.encode(variant), type=Workload), DEFAULT_RULES) is None
