"""SPEC R14.3 wired through the stages: every fault carries NVIDIA's recommended action
(`gpu_fault.action`, from the rule set's Xid table; a device the kubelet reports
Unhealthy, the rule set's `device_health_action`), and a quarantine candidate the
strongest action among its counted faults. Advice only: verdicts do not change with it.
(The table itself: test_r14_3_xid_actions.py.)"""

from __future__ import annotations

import msgspec
import pytest

from app.core.base.rules import DEFAULT_RULES, FleetSettings, Rules
from app.core.base.xid import DEFAULT_XID_TABLE
from app.model.fleet_records import QUARANTINE_CANDIDATES
from app.model.records import FAULTS
from app.replay.diff import diff
from tests.unit import builders as b
from tests.unit.builders import T0, attempt_labels, event, minutes, pod, record, resource_status, running, sxid_message, terminated, updated, with_devices
from tests.unit.scenario import final_verdicts, only_verdict, run

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver


def observed(records: list[dict]) -> list[dict]:
    return b.with_progress(sorted(records, key=lambda r: r["value"]["observed_at"]))


def failed_with(run_name: str, *faults: dict, node: str = "gpu-17") -> list[dict]:
    """A pod task failing at T0 (exit 1) after the given fault Events (builders.event kwargs)."""
    p = pod(f"{run_name}-0", labels=attempt_labels(run=run_name), containers={"main": running(T0 - minutes(30))}, node=node)
    ended = updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(1, T0)}])
    records = [record(p, T0 - minutes(30), "ADDED"), record(ended, T0 + minutes(0.1))]
    for i, kwargs in enumerate(faults):
        first = T0 - minutes(3 - i * 0.5)
        records.append(record(event(p, first=first, reporting=node, **kwargs), first, "ADDED"))
    return records


@pytest.mark.parametrize(
    ("fault", "action"),
    [
        ({"code": 79}, "RESTART_BM"),
        ({"code": 48}, "WORKFLOW_XID_48"),
        ({"code": 13, "severity": "user"}, "RESTART_APP"),
        ({"code": 92, "severity": "warn"}, "IGNORE"),
        ({"code": 170}, "UNKNOWN"),  # listed without an action (R14.3)
        ({"code": 20034, "reason": "GPUSXidError", "message": sxid_message(20034)}, "UNKNOWN"),  # the catalogue covers Xids only
    ],
)
def test_r14_3_every_fault_and_verdict_carries_the_catalogue_action(fault: dict, action: str) -> None:
    records = observed(failed_with("act", fault))
    verdict = only_verdict(records)
    assert verdict.gpu_fault is not None and verdict.gpu_fault.action == action
    (published,) = [e.value for e in run(records) if e.topic == FAULTS]
    assert published.fault.action == action and published.event_uid is not None


def test_r14_3_a_device_health_fault_advises_the_rule_sets_action() -> None:
    p = pod("dh", labels=attempt_labels(run="dh"), containers={"main": running(T0 - minutes(30))})
    sick = with_devices(p, resource_status(**{"GPU-1": "Unhealthy", "GPU-2": "Unknown"}))
    records = observed([record(p, T0 - minutes(30), "ADDED"), record(sick, T0 - minutes(1))])
    actions = {f.fault.gpu_uuid: f.fault.action for f in (e.value for e in run(records) if e.topic == FAULTS)}
    assert actions == {"GPU-1": "RESET_GPU", "GPU-2": "UNKNOWN"}
    reboot = Rules(device_health_action="RESTART_BM")
    assert {f.fault.gpu_uuid: f.fault.action for f in (e.value for e in run(records, reboot) if e.topic == FAULTS)}["GPU-1"] == "RESTART_BM"
    assert reboot.version != DEFAULT_RULES.version  # R10.1: advice is part of the rule set


def test_r14_3_an_action_a_rule_file_changes_is_advice_not_a_verdict() -> None:
    records = observed(failed_with("advice", {"code": 79}))
    changed = Rules(name="advice", xid=msgspec.structs.replace(DEFAULT_XID_TABLE, actions={**DEFAULT_XID_TABLE.actions, 79: "RESET_GPU"}))
    before, after = only_verdict(records), only_verdict(records, changed)
    assert (before.code, before.kind) == (after.code, after.kind) == ("GpuFallenOffBus", "SYSTEM")
    assert (before.gpu_fault.action, after.gpu_fault.action) == ("RESTART_BM", "RESET_GPU")
    assert diff(final_verdicts(records), final_verdicts(records, changed)).changes == []  # faultline diff lists verdicts


def test_r14_3_a_quarantine_candidate_carries_the_strongest_action_of_its_counted_faults() -> None:
    rules = Rules(fleet=FleetSettings(threshold=3))
    records = observed(failed_with("q", {"code": 95}, {"code": 48}, {"code": 79}, {"code": 74}))
    latest = {e.key: e.value for e in run(records, rules, derived=True) if e.topic == QUARANTINE_CANDIDATES}
    node = latest["prod-a/node/gpu-17"]
    assert node.codes == ["Xid 95", "Xid 48", "Xid 79", "Xid 74"]
    # RESET_GPU, WORKFLOW_XID_48, RESTART_BM, WORKFLOW_NVLINK_ERR: the bare-metal restart is the strongest.
    assert (node.state, node.action) == ("candidate", "RESTART_BM")
    gpu = latest["prod-a/gpu/gpu-17/GPU-1234"]
    assert gpu.action == "RESTART_BM"


def test_r14_3_a_candidate_of_faults_without_advice_says_unknown() -> None:
    rules = Rules(fleet=FleetSettings(threshold=2))
    sxids = [{"code": c, "reason": "GPUSXidError", "message": sxid_message(c)} for c in (20034, 12028)]
    latest = {e.key: e.value for e in run(observed(failed_with("sx", *sxids)), rules, derived=True) if e.topic == QUARANTINE_CANDIDATES}
    assert latest["prod-a/node/gpu-17"].action == "UNKNOWN"
