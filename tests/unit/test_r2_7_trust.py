"""SPEC R2.7: a forged or misdirected GPU fault changes nothing it should not.

Each forgery a user who may write Events could try, replayed: the victim's verdict, the
fleet's quarantine candidates and stream time stay as they were without it. (A user
forging a fault on their own pod, reported from their own node, is stopped by the
cluster-side guard, ops/k8s/ and docs/security.md; `trusted_reporters` is the second line.)
"""

from __future__ import annotations

from datetime import datetime

import orjson
import pytest

from app.core.fleet.view import LiveFleet
from app.core.base.rules import DEFAULT_RULES, Rules
from app.model.records import CLASSIFIED_FAILURES, FAULTS
from tests.unit.builders import NODE, T0, event, minutes, pod, record, running, terminated, updated, xid_message
from tests.unit.drivers import new_pipeline

pytestmark = pytest.mark.usefixtures("driver")


def _victim(namespace: str = "team-a", node: str = NODE) -> tuple[dict, list[dict]]:
    """A pod task that fails on its own (exit 1: Error, USER)."""
    p = pod("victim", namespace=namespace, node=node, containers={"main": running(T0 - minutes(30))})
    failed = updated(p, phase="Failed", containerStatuses=[{"name": "main", "state": terminated(1, T0, "Error")}])
    return p, [record(p, T0 - minutes(30), "ADDED"), record(failed, T0 + minutes(0.5))]


def _forged(target: dict, *, namespace: str | None = None, node_token: str = NODE, at: datetime = T0 - minutes(1), **kw) -> dict:  # type: ignore[no-untyped-def]
    body = event(target, first=at, message=xid_message(79, node=node_token), **kw)
    if namespace is not None:
        body["metadata"]["namespace"] = namespace  # created where the forger may write
    return body


def _run(records: list[dict], rules: Rules = DEFAULT_RULES) -> tuple[dict, list, LiveFleet]:
    pipeline, fleet = new_pipeline(rules), LiveFleet()
    out = []
    for r in records:
        for emit in pipeline.feed(r["topic"], r["key"], orjson.dumps(r["value"])):
            fleet.observe(emit)
            out.append(emit)
    for emit in pipeline.finish():
        fleet.observe(emit)
        out.append(emit)
    verdicts = {e.key: (e.value.code, e.value.kind) for e in out if e.topic == CLASSIFIED_FAILURES}
    return verdicts, [e.value for e in out if e.topic == FAULTS], fleet


def test_r2_7_a_an_event_created_in_another_namespace_does_not_speak_for_its_pod() -> None:
    victim, records = _victim("team-a")
    honest, _, _ = _run(records)
    assert list(honest.values()) == [("Error", "USER")]
    forged = _forged(victim, namespace="team-b")  # involvedObject still names team-a's pod
    verdicts, faults, _ = _run([records[0], record(forged, T0 - minutes(1), "ADDED"), records[1]])
    assert verdicts == honest and faults == []
    # Naming the pod in another namespace than the pod's own is not trusted either.
    forged = _forged(victim)
    forged["involvedObject"]["namespace"] = "team-b"
    verdicts, faults, _ = _run([records[0], record(forged, T0 - minutes(1), "ADDED"), records[1]])
    assert verdicts == honest and faults == []


def test_r2_7_b_a_faults_node_is_the_pods_never_the_token_in_its_message() -> None:
    """A tenant on gpu-17 names the healthy gpu-99 in its fault messages: gpu-99 is never a
    quarantine candidate; the faults are counted against gpu-17, where they were reported."""
    records = []
    for i in range(3):
        p = pod(f"w{i}", containers={"main": running(T0 - minutes(30))})
        records += [record(p, T0 - minutes(30), "ADDED"), record(_forged(p, node_token="gpu-99", at=T0 + minutes(i)), T0 + minutes(i), "ADDED")]
    _, faults, fleet = _run(records)
    assert len(faults) == 3 and {f.fault.node for f in faults} == {NODE}
    assert {k for k, r in fleet.state.candidates.items() if r.state == "candidate"} == {f"prod-a/node/{NODE}", f"prod-a/gpu/{NODE}/GPU-1234"}
    assert not any("gpu-99" in key for key in (*fleet.state.nodes, *fleet.state.gpus))


def test_r2_7_c_client_timestamps_are_capped_by_the_bridges_clock() -> None:
    """One Event dated 2099 neither moves the fleet's stream time nor clears its quarantine
    candidates; its fault counts when the bridge saw it."""
    records = []
    for i in range(3):
        p = pod(f"w{i}", containers={"main": running(T0 - minutes(30))})
        records += [record(p, T0 - minutes(30), "ADDED"), record(_forged(p, at=T0 + minutes(i)), T0 + minutes(i), "ADDED")]
    _, _, before = _run(records)
    assert before.state.candidates
    late = pod("late", containers={"main": running(T0 - minutes(30))})
    dated = event(late, first=datetime(2099, 1, 1, tzinfo=T0.tzinfo), last=datetime(2099, 1, 2, tzinfo=T0.tzinfo))
    seen = T0 + minutes(5)
    _, faults, after = _run([*records, record(late, T0 - minutes(30), "ADDED"), record(dated, seen, "ADDED")])
    forged = [f.fault for f in faults if f.fault.pod.name == "late"]
    assert [(f.first_seen, f.last_seen) for f in forged] == [(seen, seen)]
    assert after.state.stream_time is not None and after.state.stream_time.year < 2099
    def candidates(view: LiveFleet) -> set[tuple[str, str]]:
        return {(k, r.state) for k, r in view.state.candidates.items()}

    assert candidates(after) == candidates(before) and all(state == "candidate" for _, state in candidates(after))


def test_r2_7_d_only_listed_reporters_are_trusted_when_a_list_is_set() -> None:
    victim, records = _victim()
    forged = _forged(victim)
    forged["reportingComponent"] = "kubectl"
    forged["source"]["component"] = "kubectl"
    honest = _forged(victim)  # the node agent: reportingComponent gpu-health-agent
    rules = Rules(trusted_reporters=("gpu-health-agent",))
    verdicts, faults, _ = _run([records[0], record(forged, T0 - minutes(1), "ADDED"), records[1]], rules)
    assert list(verdicts.values()) == [("Error", "USER")] and faults == []
    verdicts, faults, _ = _run([records[0], record(honest, T0 - minutes(1), "ADDED"), records[1]], rules)
    assert list(verdicts.values()) == [("GpuFallenOffBus", "SYSTEM")] and len(faults) == 1
    # events.k8s.io/v1 names its reporter reportingController, which comes first.
    forged["reportingController"] = "gpu-health-agent"
    verdicts, _, _ = _run([records[0], record(forged, T0 - minutes(1), "ADDED"), records[1]], rules)
    assert list(verdicts.values()) == [("GpuFallenOffBus", "SYSTEM")]
    assert DEFAULT_RULES.trusted_reporters == ()  # default: any reporter
