"""SPEC R11.5: state per key is bounded by rule settings (faults kept per pod, lengths of
tokens and messages, generations per attempt); what is dropped is counted, and a record
that would push one state value past `max_value_bytes` is dead-lettered, never written."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
import pytest

from app.core.evidence.fault_events import kept_faults
from app.core.base.emit import Emit
from app.core.evidence.fault_events import FaultEvent
from app.core.evidence.fault_message import ParsedMessage
from app.core.base.rules import DEFAULT_RULES, Rules
from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER, FAULTS
from app.embedded.pipeline import Pipeline
from tests.unit import builders as b
from tests.unit import hostile
from tests.unit.drivers import new_pipeline
from tests.unit.stories import pod_task_plain_failure

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver


def _verdict(out: list[Emit]) -> Any:
    return [e.value for e in out if e.topic == CLASSIFIED_FAILURES][-1]


def _largest_state(pipeline: Pipeline) -> int:
    return max(len(msgspec.json.encode(s)) for states in pipeline.states.values() for s in states.values())


def test_r11_5_a_fault_flood_keeps_at_most_max_faults_per_pod_and_counts_the_rest() -> None:
    flood = hostile.fault_flood("flood", b.T0, count=3_000)
    pipeline = new_pipeline()
    out = hostile.feed(pipeline, flood)
    [state] = pipeline.states["pods"].values()
    assert len(state.faults) == DEFAULT_RULES.max_faults_per_pod == 32
    assert pipeline.counts["dropped_faults"] == 3_000 - 32
    assert _largest_state(pipeline) < 64 * 1024  # it was 2.1 MB
    assert len([e for e in out if e.topic == FAULTS]) == 3_000  # R2.6: each one published as it came
    verdict = _verdict(out)  # a critical fault inside R5's window of the failure (at T0 + 10 min)
    assert (verdict.code, verdict.kind, verdict.gpu_fault.severity) == ("GpuFallenOffBus", "SYSTEM", "CRITICAL")
    assert b.T0 - b.minutes(20) <= verdict.gpu_fault.first_seen <= b.T0 + b.minutes(12)


def test_r11_5_without_the_fault_limit_the_byte_bound_holds_the_line() -> None:
    pipeline = Pipeline(Rules(max_faults_per_pod=10_000), wire=new_pipeline().wire)
    out = hostile.feed(pipeline, hostile.fault_flood("flood", b.T0, count=1_200))  # ~730 fit in 512 KiB
    letters = [e.value for e in out if e.topic == DEAD_LETTER]
    assert len(letters) > 400 and all("over max_value_bytes (524288)" in x.reason for x in letters)
    assert _largest_state(pipeline) <= 512 * 1024


def test_r11_5_faults_from_another_node_are_not_kept_once_the_pod_is_known() -> None:
    pipeline = new_pipeline()
    out = hostile.feed(pipeline, hostile.fault_flood("elsewhere", b.T0, count=3_100, trusted=False))
    [state] = pipeline.states["pods"].values()
    assert state.faults == {} and pipeline.counts["dropped_faults"] == 0  # R2.5b: they never can be trusted
    assert not [e for e in out if e.topic == FAULTS] and _verdict(out).gpu_fault is None


def test_r11_5_faults_held_before_their_pod_is_known_are_bounded_too() -> None:
    flood = hostile.fault_flood("early", b.T0, count=100)
    pipeline = new_pipeline()
    hostile.feed(pipeline, flood[1:-1])  # the Events, never their pod
    [state] = pipeline.states["pods"].values()
    assert state.pod is None and len(state.faults) == 32 and pipeline.counts["dropped_faults"] == 68


def _fault(uid: str, severity: str, first: int, last: int | None = None) -> FaultEvent:
    parsed = ParsedMessage(kind="XID", code={"CRITICAL": 79, "USER": 31, "WARN": 92}[severity], severity=severity)  # type: ignore[arg-type]
    at = b.T0 + timedelta(minutes=first)
    return FaultEvent(uid, "pod", "p", b.NS, b.NS, b.NODE, "", parsed, at, b.T0 + timedelta(minutes=last if last is not None else first), 1)


def test_r11_5_the_earliest_fault_of_each_severity_is_kept_and_then_the_latest() -> None:
    faults = {f"w{i:03d}": _fault(f"w{i:03d}", "WARN", i) for i in range(100)}
    faults["c-early"] = _fault("c-early", "CRITICAL", -300)  # long before: R6.3's earliest critical
    faults["c-recent"] = _fault("c-recent", "CRITICAL", 80)  # the earliest critical near the latest fault
    faults["c-later"] = _fault("c-later", "CRITICAL", 95)
    faults["u-early"] = _fault("u-early", "USER", -10)
    kept, dropped = kept_faults(faults, DEFAULT_RULES)
    assert len(kept) == 32 and dropped == len(faults) - 32
    assert {"c-early", "c-recent", "c-later", "u-early", "w000"} <= set(kept)  # w000: the earliest warn
    assert "w069" in kept  # the earliest warn inside the window before the latest fault
    assert {f"w{i:03d}" for i in range(74, 100)} <= set(kept)  # then the latest ones
    assert kept_faults(dict(list(faults.items())[:32]), DEFAULT_RULES) == (dict(list(faults.items())[:32]), 0)


def test_r11_5_long_tokens_and_messages_are_cut_and_counted() -> None:
    pipeline = new_pipeline()
    out = hostile.feed(pipeline, hostile.long_tokens("tokens", b.T0))
    faults = [e.value.fault for e in out if e.topic == FAULTS]
    assert len(faults) == 6 and all(len(f.process) == DEFAULT_RULES.max_token_chars and f.process.endswith("…") for f in faults)
    verdict = _verdict(out)
    assert verdict.code == "GpuFallenOffBus" and len(verdict.message) < DEFAULT_RULES.max_message_chars + 200
    assert pipeline.counts["truncated_texts"] == 7  # six tokens, one termination message
    assert _largest_state(pipeline) < 32 * 1024


def test_r11_5_a_record_that_would_push_a_state_past_max_value_bytes_is_dead_lettered() -> None:
    rules = Rules(max_value_bytes=4096)
    assert rules.version != DEFAULT_RULES.version
    story = pod_task_plain_failure(run="wide")
    wide = msgspec.json.decode(msgspec.json.encode(story[-1]))
    wide["value"]["object"]["status"]["containerStatuses"] += [
        {"name": f"sidecar-{i:03d}", "state": b.running()} for i in range(200)
    ]
    pipeline = Pipeline(rules, wire=new_pipeline().wire)
    out = hostile.feed(pipeline, [story[0], wide])
    [letter] = [e.value for e in out if e.topic == DEAD_LETTER]
    assert "over max_value_bytes (4096)" in letter.reason and letter.offset == 1 and letter.topic == "k8s.pods"
    [state] = pipeline.states["pods"].values()
    assert state.pod is not None and state.pod.phase == "Running"  # the state before it, never the oversized one
    assert not [e for e in out if e.topic == CLASSIFIED_FAILURES]


def test_r11_5_generations_kept_per_attempt_are_bounded() -> None:
    pipeline = new_pipeline()
    out = hostile.feed(pipeline, hostile.restart_storm("storm", b.T0))  # restarts: 0 -> 1,000,000,000
    [state] = pipeline.states["attempts"].values()
    assert sorted(g.number for g in state.ended.values()) == list(range(1_000_000_000 - 64, 1_000_000_000))
    assert pipeline.counts["dropped_generations"] == 1_000_000_000 - 64
    assert _verdict(out).generation == 1_000_000_000 - 1 and len(_verdict(out).reasons) == 63


def test_r11_5_the_bounds_are_rule_settings() -> None:
    base = DEFAULT_RULES.version
    for change in ({"max_faults_per_pod": 64}, {"max_token_chars": 64}, {"max_message_chars": 1024}, {"max_generations": 8}, {"max_value_bytes": 65536}):
        assert Rules(**change).version != base, change


def test_r11_5_an_attempt_state_leaves_out_its_defaults_and_reads_one_written_with_them() -> None:
    """Most attempts never drop a pod generation nor end one: their stored state says
    nothing of it (bytes per attempt), and a state an earlier release wrote with every
    field decodes to the same state."""
    from app.core.stages.attempts import AttemptState

    pipeline = new_pipeline()
    hostile.feed(pipeline, pod_task_plain_failure(), finish=False)
    [state] = pipeline.states["attempts"].values()
    assert state.pod_generations_dropped == 0 and state.ended == {}
    stored = msgspec.json.encode(state)
    assert b"pod_generations_dropped" not in stored and b'"ended"' not in stored
    written_with_every_field = msgspec.json.encode(msgspec.structs.asdict(state))
    assert b"pod_generations_dropped" in written_with_every_field
    assert msgspec.json.decode(written_with_every_field, type=AttemptState) == msgspec.json.decode(stored, type=AttemptState) == state


def _gpu_names_flood(count: int) -> list[dict]:
    """A failing pod task whose node agent (trusted: its pod's node) names a new GPU in each
    of `count` critical Xid Events, as forged Events in the tenant's namespace would."""
    p = hostile._pod_task("gpus", b.T0)
    out = [b.record(p, b.T0 - b.minutes(40), "ADDED")]
    for i in range(count):
        first = b.T0 - b.minutes(35) + timedelta(seconds=i)
        tails = f"gpu_uuid=GPU-forged-{i:04d} gpu_index={i} pci=0000:3b:00.0"
        out.append(b.record(b.event(p, message=b.xid_message(79, extra=tails), first=first), first, "ADDED"))
    out.append(b.record(hostile._failed(p, b.T0 + b.minutes(10)), b.T0 + b.minutes(10)))
    return out


def test_r11_5_a_pods_faults_count_for_at_most_gpus_per_pod_gpus_in_the_fleet() -> None:
    """Each GPU a fault names is a key of the fleet stage (its quarantine count and its
    hourly rate). Faults naming 200 GPUs on one pod: the first 32 named keep their keys;
    the rest count for the node only, and are counted as left out. Each fault is still
    published (R2.6) with the GPU it names."""
    from app.core.stages.pods import DROPPED_GPU_NAMES, GPUS_PER_POD

    pipeline = new_pipeline()
    out = hostile.feed(pipeline, _gpu_names_flood(200))
    fleet_keys = pipeline.states["fleet"].keys()
    gpu_keys = {k for k in fleet_keys if "/gpu/" in k and "/rate/" not in k}
    rate_gpu_keys = {k for k in fleet_keys if "/rate/" in k and "/gpu/" in k}
    assert len(gpu_keys) == GPUS_PER_POD == 32
    assert {k.rsplit("/", 1)[1] for k in gpu_keys} == {f"GPU-forged-{i:04d}" for i in range(32)}  # the first named
    assert {k.rsplit("/", 1)[1] for k in rate_gpu_keys} <= {f"GPU-forged-{i:04d}" for i in range(32)}
    assert pipeline.counts[DROPPED_GPU_NAMES] == 200 - 32
    [node] = [s for k, s in pipeline.states["fleet"].items() if "/node/" in k and "/rate/" not in k]
    assert len(node.hits) >= 100  # the node counts every one of them (HITS_KEPT)
    assert len({e.value.fault.gpu_uuid for e in out if e.topic == FAULTS}) == 200


def test_r11_5_a_pod_on_a_node_of_16_gpus_keeps_every_gpus_key() -> None:
    pipeline = new_pipeline()
    hostile.feed(pipeline, _gpu_names_flood(16))
    assert len({k for k in pipeline.states["fleet"] if "/gpu/" in k and "/rate/" not in k}) == 16
    assert pipeline.counts["dropped_gpu_names"] == 0
