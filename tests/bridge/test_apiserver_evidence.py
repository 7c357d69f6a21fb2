"""More evidence on a real API server (issue 26, SPEC R14): a drained worker, a preempted
pod, GPUs the kubelet reports Unhealthy (a device plugin's and a DRA driver's), and a
taint-manager deletion after an Xid 79, written as the control plane and the kubelet
write them — each pod's `DisruptionTarget` condition and `allocatedResourcesStatus`
through the `pods/status` subresource. `faultline record` takes them down; the recorded
trace classifies as the stories' own records do offline. A tenant with `edit`'s rights on
pods cannot write either field (docs/security.md)."""

from __future__ import annotations

import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest

from app.core.base.rules import Rules
from app.model.records import ClassifiedFailure
from tests.bridge.helpers import wait_for
from tests.bridge.realkube import StoryPlayer, changes_in, faultline, interrupt, namespace, start_faultline, verdicts_in
from tests.unit import builders, stories
from tests.unit.builders import disruption_target, resource_status
from tests.unit.scenario import final_verdicts

pytestmark = pytest.mark.apiserver

CLUSTER = "real-e"


def evidence_stories(t0: datetime) -> list[dict[str, Any]]:
    builders.reset_ids()
    return [r for story in stories.EVIDENCE_STORIES.values() for r in story(t0=t0)]


def summary(v: ClassifiedFailure | dict[str, Any]) -> tuple[Any, ...]:
    """A verdict as both sides can tell it: the attempt without cluster, namespace or
    server-made uid, and what decided it."""
    v = v if isinstance(v, dict) else msgspec.to_builtins(v)
    parts = v["key"].split("/")[2:]
    attempt = tuple(parts[:2]) if v["identity"] == "workload" else tuple(parts)  # Kind/name (its uid is the server's), or run/action/attempt
    fault = v["gpu_fault"] or {}
    return attempt, v["code"], v["kind"], fault.get("kind"), fault.get("code"), fault.get("gpu_uuid"), fault.get("action"), (v["faulted_pod"] or {}).get("name"), tuple(v["reasons"])


def test_r14_the_bridges_records_of_disruptions_and_device_health_classify_as_the_offline_replay(apiserver, tmp_path):
    # Ahead of now: a device's first_seen is the bridge's clock when the story is played,
    # and must lie inside its pod's interval around the failure the story dates (R5.3).
    records = evidence_stories(datetime.now(timezone.utc) + timedelta(minutes=1))
    expected = sorted(summary(v) for v in final_verdicts(records).values())
    assert len(expected) == len(stories.EVIDENCE_STORIES) and {s[1] for s in expected} >= {"PodDisrupted", "GpuUnhealthy"}
    ns = namespace(apiserver, "evidence")
    trace, out, err = tmp_path / "trace.jsonl", tmp_path / "record.out", tmp_path / "record.err"
    args = ["record", "--kubeconfig", str(apiserver.kubeconfig), "--cluster", CLUSTER, "--namespaces", ns, "--progress-interval", "0.2", "--out", str(trace)]
    proc = start_faultline(*args, out=out, err=err)
    try:
        wait_for(lambda: "every watch has listed and is live" in err.read_text(), timeout=90, what="every watch live")
        player = StoryPlayer(apiserver, ns)
        changes = player.play(records)
        wait_for(lambda: changes_in(trace) == changes, timeout=60, what=f"{changes} changes in the trace")
    finally:
        interrupt(proc)
    assert proc.returncode == 0 and "Traceback" not in err.read_text(), err.read_text()
    # The API server kept what the kubelet and the control plane wrote, and the bridge recorded it.
    recorded = [orjson.loads(line)["value"] for line in trace.read_bytes().splitlines() if b'"type":"BOOKMARK"' not in line]
    pods = [v["object"] for v in recorded if v["object"]["kind"] == "Pod"]
    assert any(c.get("reason") == "EvictionByEvictionAPI" for p in pods for c in p["status"].get("conditions", []))
    devices = {d["resourceID"]: d["health"] for p in pods for c in p["status"].get("containerStatuses", [])
               for entry in c.get("allocatedResourcesStatus", []) for d in entry["resources"]}  # fmt: skip
    assert devices["gpu.nvidia.com/gpu-93/gpu-3"] == "Unhealthy" and devices["GPU-95aa0000-0000-4000-8000-000000000001"] == "Unknown"
    outputs = tmp_path / "outputs.jsonl"
    replayed = faultline("replay", "--trace", str(trace), "--out", str(outputs), timeout=120)
    assert replayed.returncode == 0, replayed.stderr
    assert sorted(summary(v) for v in verdicts_in(outputs).values()) == expected


def _tenant(kube: Any, ns: str) -> str:
    """A ServiceAccount with what the built-in `edit` role grants on pods (its aggregated
    rules, `system:aggregate-to-edit`: no controller-manager aggregates them here), and its token."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    kube.call("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "tenant"}})
    kube.call("POST", f"{rbac}/namespaces/{ns}/roles", {"metadata": {"name": "pod-editor"}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "delete", "deletecollection", "patch", "update", "get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["get", "list", "watch"]},
    ]})  # fmt: skip
    kube.call("POST", f"{rbac}/namespaces/{ns}/rolebindings", {
        "metadata": {"name": "tenant-pod-editor"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-editor"},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}],
    })  # fmt: skip
    return kube.create_token(ns, "tenant")


def _pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"nodeName": "gpu-98", "containers": [
        {"name": "main", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}  # fmt: skip


def _status(disruption: dict[str, Any] | None = None, health: str = "Unhealthy") -> dict[str, Any]:
    return {
        "phase": "Running",
        "conditions": [disruption] if disruption else [],
        "containerStatuses": [{"name": "main", "image": "trainer", "imageID": "", "ready": True, "restartCount": 0,
                               "state": {"running": {"startedAt": builders.ts(datetime.now(timezone.utc))}},
                               "allocatedResourcesStatus": [resource_status(**{"GPU-98": health})]}],
    }  # fmt: skip


def test_r14_a_tenant_cannot_write_the_status_fields_the_kubelet_and_the_control_plane_write(apiserver):
    ns = namespace(apiserver, "tenant")
    token = _tenant(apiserver, ns)
    path = f"/api/v1/namespaces/{ns}/pods"
    forged = _status(disruption_target("EvictionByEvictionAPI", datetime.now(timezone.utc)))
    # Created with a status: the server keeps its own.
    status, served = apiserver.request("POST", path, {**_pod("w"), "status": forged}, token=token)
    assert status == 201 and served["status"].get("conditions") is None and "containerStatuses" not in served["status"]
    # The status subresource: forbidden, by PUT and by PATCH.
    for method, body, content in (
        ("PUT", {**served, "status": forged}, "application/json"),
        ("PATCH", orjson.dumps({"status": forged}), "application/strategic-merge-patch+json"),
        ("PATCH", orjson.dumps({"status": forged}), "application/merge-patch+json"),
    ):
        status, answer = apiserver.request(method, f"{path}/w/status", body, token=token, content_type=content)
        assert status == 403, (method, content, answer)
        verb = {"PUT": "update", "PATCH": "patch"}[method]
        assert f'cannot {verb} resource "pods/status"' in answer["message"]
    # An update of the pod itself (allowed) keeps the stored status whatever it sends.
    current = apiserver.call("GET", f"{path}/w")
    status, updated = apiserver.request("PUT", f"{path}/w", {**current, "metadata": {**current["metadata"], "labels": {"touched": "yes"}}, "status": forged}, token=token)
    assert status == 200 and updated["metadata"]["labels"] == {"touched": "yes"}
    assert updated["status"].get("conditions") is None and "containerStatuses" not in updated["status"]
    # The kubelet's role writes both (here as the admin, through the same subresource).
    written = apiserver.call("PUT", f"{path}/w/status", {**updated, "status": forged})
    assert written["status"]["conditions"][0]["reason"] == "EvictionByEvictionAPI"
    assert written["status"]["containerStatuses"][0]["allocatedResourcesStatus"][0]["resources"][0]["health"] == "Unhealthy"


def test_r14_a_tenants_eviction_of_its_own_pod_is_written_by_the_server(apiserver):
    """docs/security.md: `edit` grants pods/eviction; the API server then writes the
    DisruptionTarget itself (kubernetes pkg/registry/core/pod/storage/eviction.go)."""
    ns = namespace(apiserver, "evictor")
    token = _tenant(apiserver, ns)
    path = f"/api/v1/namespaces/{ns}/pods"
    apiserver.call("POST", path, _pod("mine"))
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "mine", "namespace": ns}}
    status, answer = apiserver.request("POST", f"{path}/mine/eviction", eviction, token=token)
    assert status == 201, answer
    evicted = apiserver.call("GET", f"{path}/mine")  # terminating: no kubelet here to finish it
    (condition,) = [c for c in evicted["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert (condition["status"], condition["reason"], condition["message"]) == ("True", "EvictionByEvictionAPI", "Eviction API: evicting")
    assert evicted["metadata"].get("deletionTimestamp")


# Seconds from each evidence story's t0 back to when its GPU's container failed (the
# container that shows the device Unhealthy: tests/unit/stories.py).
DEVICE_FAILED_BEFORE_T0 = {"pod-bare-dra-unhealthy": 0.0, "jobset-gpu-unhealthy": 30.0}


def test_r14_2_a_pod_first_listed_after_it_failed_keeps_its_unhealthy_gpu_as_the_uninterrupted_watch(apiserver, tmp_path):
    """Issue 34: the evidence stories re-enacted on the API server (the kubelet's device
    health through pods/status), watched by a `run` all along; a second `run` is started
    once both GPU pods' failures lie more than the relevance slack (R5.3) behind it, so it
    first lists each pod already Failed, the device Unhealthy only on its terminated
    container. Each failure is dated 105 s before the stories are played: the watching run
    sees the device Unhealthy within the slack after it. The late run gives every attempt
    it can see (not the preempted pod, deleted) the watching run's verdict: both SYSTEM
    with the device's `GpuUnhealthy` fault (R14.2 amended: the device dated no later than
    the container's finishedAt), where it used to say the workload's failure, USER."""
    ns = namespace(apiserver, "listed-late")
    runs: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str) -> Path:
        out, err = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.err"
        args = ["run", "--kubeconfig", str(apiserver.kubeconfig), "--cluster", CLUSTER, "--namespaces", ns, "--progress-interval", "0.2",
                "--state", str(tmp_path / f"{name}-state"), "--out", str(out)]  # fmt: skip
        runs[name] = start_faultline(*args, out=tmp_path / f"{name}.out", err=err)
        wait_for(lambda: "every watch has listed and is live" in err.read_text(), timeout=90, what=f"{name}: live")
        return out

    try:
        watched = start("watching")
        failed = datetime.now(timezone.utc) - timedelta(seconds=105)
        builders.reset_ids()
        records = [r for name, story in stories.EVIDENCE_STORIES.items() for r in story(t0=failed + timedelta(seconds=DEVICE_FAILED_BEFORE_T0.get(name, 30.0)))]
        expected = sorted(summary(v) for v in final_verdicts(records).values())
        assert [(s[2], *s[3:5]) for s in expected].count(("SYSTEM", "DEVICE_HEALTH", 0)) == 2  # both GPU pods' attempts
        StoryPlayer(apiserver, ns).play(records)
        wait_for(lambda: sorted(summary(v) for v in verdicts_in(watched).values()) == expected, timeout=60, what="the watching run's verdicts")
        late = failed + Rules().slack + timedelta(seconds=2)
        time.sleep(max(0.0, (late - datetime.now(timezone.utc)).total_seconds()))
        listed = start("listed")
        # Every attempt it can see: all but the preempted pod's, deleted before it started.
        visible = {k for k in verdicts_in(watched) if "/hpo-12/" not in k}
        wait_for(lambda: set(verdicts_in(listed)) == visible, timeout=60, what="the late run's verdicts")
        try:  # then as the watching run's, if it gets there (a revision may follow a first verdict, R7.2)
            wait_for(lambda: same(verdicts_in(listed), verdicts_in(watched)), timeout=10, what="the same verdicts")
        except AssertionError:
            pass
    finally:
        for proc in runs.values():
            interrupt(proc)
    texts = {name: (tmp_path / f"{name}.err").read_text() for name in runs}
    assert all(proc.returncode == 0 for proc in runs.values()) and not any("Traceback" in t for t in texts.values()), texts
    alone, both = verdicts_in(listed), verdicts_in(watched)
    assert len(visible) == len(both) - 1 == len(alone)
    assert {k: summary(v) for k, v in alone.items()} == {k: summary(both[k]) for k in alone}
    assert [(s[2], *s[3:5]) for s in map(summary, alone.values())].count(("SYSTEM", "DEVICE_HEALTH", 0)) == 2


def same(alone: dict[str, dict[str, Any]], both: dict[str, dict[str, Any]]) -> bool:
    return all(summary(v) == summary(both[k]) for k, v in alone.items())
