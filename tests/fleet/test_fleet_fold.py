"""The fleet stage (app/core/fleet/fold.py) and the fleet view read from what it derives
(app/core/fleet/read_model.py, fleet_summary.py): rates per hour, quarantine in stream time, failure rates,
preemption waits, bounded state, determinism.

`run` plays the other stages' part: it turns output records (tests/fleet/records.py) into
the inputs those stages emit (app/core/stages/fleet_inputs.py), each knowing what it emitted
before, and folds them per key through the fleet stage after moving the stage's watermark
to the record's time (the bridge's progress keeps up with the records).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import msgspec
import pytest

from app.core.base.emit import Emit
from app.core.fleet.evidence import evidence_of
from app.core.base.clock import hour_of
from app.core.fleet.fold import FleetStats
from app.core.fleet.read_model import FleetState, read
from app.core.fleet.summary import fleet_summary, queue_rows
from app.core.base.rules import DEFAULT_FLEET, FleetSettings
from app.core.engine.topology import FLEET_STAGE
from app.model.fleet_records import (
    DERIVED_TOPICS,
    FAILURE_RATES,
    GPU_FAULT_RATES,
    NODE_FAULT_RATES,
    PREEMPTION_WAITS,
    QUARANTINE_CANDIDATES,
    FailureRate,
    GpuFaultRate,
    NodeFaultRate,
    PreemptionWait,
    QuarantineCandidate,
)
from app.embedded.pipeline import Pipeline
from app.replay.trace import encode_output, read_lines, replay
from tests.fleet.driver import run
from tests.fleet.records import (
    PREEMPTED_ENDING,
    T0,
    TIMEOUT_ENDING,
    dead_letter,
    fault,
    gpu_fault,
    hours,
    minutes,
    transition,
    verdict,
)

MIXED = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mixed.jsonl"


def latest(out: list[Emit], topic: str) -> dict[str, object]:
    """Latest record per key on a derived topic (as a compacted topic keeps them)."""
    return {e.key: e.value for e in out if e.topic == topic}


# --- rates -----------------------------------------------------------------------------------


def test_rates_count_distinct_fault_events_per_utc_hour() -> None:
    _, out = run([
        fault("ev-1", first_seen=T0 + minutes(5)),
        fault("ev-2", code=31, severity="USER", first_seen=T0 + minutes(20)),
        fault("ev-3", code=92, severity="WARN", first_seen=T0 + minutes(70)),
    ])
    nodes = latest(out, NODE_FAULT_RATES)
    assert set(nodes) == {"prod-a/gpu-17/2026-08-25T12:00:00Z", "prod-a/gpu-17/2026-08-25T13:00:00Z"}
    noon = nodes["prod-a/gpu-17/2026-08-25T12:00:00Z"]
    assert isinstance(noon, NodeFaultRate)
    assert (noon.faults, noon.critical, noon.user, noon.warn) == (2, 1, 1, 0)
    assert [(x.code, x.severity, x.faults) for x in noon.xids] == [(31, "USER", 1), (79, "CRITICAL", 1)]
    gpus = latest(out, GPU_FAULT_RATES)
    one = gpus["prod-a/gpu-17/GPU-aaaa/2026-08-25T13:00:00Z"]
    assert isinstance(one, GpuFaultRate)
    assert (one.node, one.gpu, one.gpu_index, one.faults, one.warn) == ("gpu-17", "GPU-aaaa", 0, 1, 1)


def test_a_repeating_fault_is_one_fault_whose_occurrences_grow() -> None:
    _, out = run([
        fault("ev-1", first_seen=T0, count=1),
        fault("ev-1", first_seen=T0, last_seen=T0 + minutes(3), count=4),
        fault("ev-1", first_seen=T0, last_seen=T0 + minutes(3), count=4),  # redelivered: nothing new
    ])
    rates = [e.value for e in out if e.topic == NODE_FAULT_RATES]
    assert [(r.faults, r.occurrences) for r in rates] == [(1, 1), (1, 4)]


def test_a_fault_is_counted_in_the_hour_of_its_first_seen() -> None:
    _, out = run([fault("ev-1", first_seen=T0 + minutes(50), last_seen=T0 + minutes(130), count=9)])
    assert list(latest(out, NODE_FAULT_RATES)) == ["prod-a/gpu-17/2026-08-25T12:00:00Z"]


def test_an_sxid_counts_for_its_node_only_and_a_gpu_without_uuid_by_its_index() -> None:
    _, out = run([
        fault("ev-1", code=20034, kind="SXID", gpu_uuid="", gpu_index=None),
        fault("ev-2", code=48, gpu_uuid="", gpu_index=5),
    ])
    assert latest(out, NODE_FAULT_RATES)["prod-a/gpu-17/2026-08-25T12:00:00Z"].faults == 2  # type: ignore[attr-defined]
    assert list(latest(out, GPU_FAULT_RATES)) == ["prod-a/gpu-17/index-5/2026-08-25T12:00:00Z"]


def test_hour_of_is_the_utc_hour_start() -> None:
    from datetime import timedelta, timezone

    local = datetime(2026, 8, 25, 14, 59, 59, tzinfo=timezone(timedelta(hours=2)))
    assert hour_of(local) == datetime(2026, 8, 25, 12, 0, tzinfo=timezone.utc)


# --- quarantine ----------------------------------------------------------------------------------


def quarantine(out: list[Emit]) -> list[QuarantineCandidate]:
    return [e.value for e in out if e.topic == QUARANTINE_CANDIDATES]


def test_quarantine_candidate_at_the_threshold_th_distinct_critical_fault() -> None:
    state, out = run([
        fault("ev-1", first_seen=T0),
        fault("ev-2", code=48, first_seen=T0 + hours(5)),
        fault("ev-3", code=31, severity="USER", first_seen=T0 + hours(6)),  # not critical
        fault("ev-4", code=74, first_seen=T0 + hours(9)),
        fault("ev-5", code=79, first_seen=T0 + hours(10)),  # already a candidate: its record is updated
    ])
    records = quarantine(out)
    assert [(r.key, r.state, r.at, r.faults) for r in records] == [
        ("prod-a/node/gpu-17", "candidate", T0 + hours(9), 3),
        ("prod-a/gpu/gpu-17/GPU-aaaa", "candidate", T0 + hours(9), 3),
        ("prod-a/node/gpu-17", "candidate", T0 + hours(9), 4),
        ("prod-a/gpu/gpu-17/GPU-aaaa", "candidate", T0 + hours(9), 4),
    ]
    node = records[0]
    assert (node.scope, node.node, node.gpu, node.threshold, node.window_seconds) == ("node", "gpu-17", "", 3, 86400)
    assert node.fault_keys == ["prod-a/ev-1", "prod-a/ev-2", "prod-a/ev-4"]
    assert node.codes == ["Xid 79", "Xid 48", "Xid 74"]
    assert (node.first_fault_at, node.last_fault_at) == (T0, T0 + hours(9))
    assert {k for k, r in state.view.candidates.items() if r.state == "candidate"} == {"prod-a/node/gpu-17", "prod-a/gpu/gpu-17/GPU-aaaa"}


def test_quarantine_counts_distinct_events_not_repeats() -> None:
    _, out = run([
        fault("ev-1", first_seen=T0, count=1),
        fault("ev-1", first_seen=T0, last_seen=T0 + minutes(10), count=7),
        fault("ev-2", first_seen=T0 + minutes(20)),
    ])
    assert quarantine(out) == []


def test_quarantine_is_per_gpu_as_well_as_per_node() -> None:
    _, out = run([
        fault("ev-1", gpu_uuid="GPU-a", first_seen=T0),
        fault("ev-2", gpu_uuid="GPU-b", first_seen=T0 + minutes(1)),
        fault("ev-3", gpu_uuid="GPU-c", first_seen=T0 + minutes(2)),
    ])
    assert [r.key for r in quarantine(out)] == ["prod-a/node/gpu-17"]  # no single GPU has 3


def test_quarantine_clears_when_the_window_slides_past_in_stream_time() -> None:
    state, out = run([
        fault("ev-1", first_seen=T0),
        fault("ev-2", first_seen=T0 + hours(1)),
        fault("ev-3", first_seen=T0 + hours(2)),
        # Only time moves: a verdict elsewhere, 30 h later (no wall clock involved).
        verdict("other", failed_at=T0 + hours(30)),
    ])
    cleared = sorted((r for r in quarantine(out) if r.state == "cleared"), key=lambda r: r.scope != "node")
    assert [(r.key, r.at) for r in cleared] == [
        ("prod-a/node/gpu-17", T0 + hours(24)),  # ev-1 left the 24 h window: 2 < 3
        ("prod-a/gpu/gpu-17/GPU-aaaa", T0 + hours(24)),
    ]
    assert cleared[0].faults == 2 and cleared[0].fault_keys == ["prod-a/ev-2", "prod-a/ev-3"]
    assert all(r.state == "cleared" for r in state.view.candidates.values())


def test_quarantine_stays_while_newer_faults_keep_the_count_up() -> None:
    state, out = run([
        fault("ev-1", first_seen=T0),
        fault("ev-2", first_seen=T0 + hours(1)),
        fault("ev-3", first_seen=T0 + hours(2)),
        fault("ev-4", first_seen=T0 + hours(23)),
        verdict("other", failed_at=T0 + hours(24) + minutes(30)),  # ev-1 out, 3 left
    ])
    assert [r.state for r in quarantine(out)] == ["candidate"] * 4  # became one at ev-3, updated at ev-4
    state, out = run([verdict("later", failed_at=T0 + hours(25) + minutes(30))], fleet=state)  # ev-2 out too
    assert [(r.state, r.at) for r in quarantine(out)] == [("cleared", T0 + hours(25))] * 2


def test_a_candidate_in_a_fault_storm_is_reported_as_it_escalates_not_per_fault() -> None:
    """Each counted fault up to twice the threshold, then each doubling: 30 faults, 6 node records."""
    _, out = run([fault(f"ev-{i:02}", first_seen=T0 + minutes(i)) for i in range(30)])
    node = [r for r in quarantine(out) if r.scope == "node"]
    assert [r.faults for r in node] == [3, 4, 5, 6, 12, 24]
    assert node[-1].fault_keys == [f"prod-a/ev-{i:02}" for i in range(24)]  # all it counted when reported
    assert {r.at for r in node} == {T0 + minutes(2)}


def test_quarantine_becomes_a_candidate_again_after_clearing() -> None:
    _, out = run([
        *(fault(f"ev-{i}", first_seen=T0 + minutes(i)) for i in range(3)),
        *(fault(f"ev-{i}", first_seen=T0 + hours(30) + minutes(i)) for i in range(3, 6)),
    ])
    assert [r.state for r in quarantine(out) if r.scope == "node"] == ["candidate", "cleared", "candidate"]
    _, out = run([fault(f"ev-{i:02}", first_seen=T0 + minutes(i)) for i in range(12)] + [
        verdict("other", failed_at=T0 + hours(30)),
        *(fault(f"ev-{i}", first_seen=T0 + hours(30) + minutes(i)) for i in range(12, 16)),
    ])
    reported = [(r.state, r.faults) for r in quarantine(out) if r.scope == "node"]
    assert reported == [("candidate", n) for n in (3, 4, 5, 6, 12)] + [("cleared", 2), ("candidate", 3), ("candidate", 4)]


def test_quarantine_threshold_and_window_are_settings() -> None:
    settings = FleetSettings(threshold=2, window_seconds=3600)
    _, out = run([fault("ev-1", first_seen=T0), fault("ev-2", first_seen=T0 + minutes(59))], settings)
    assert [r.state for r in quarantine(out)][:2] == ["candidate", "candidate"]
    _, out = run([fault("ev-1", first_seen=T0), fault("ev-2", first_seen=T0 + minutes(61))], settings)
    assert quarantine(out) == []


def test_a_late_critical_fault_older_than_the_window_does_not_count() -> None:
    _, out = run([
        fault("ev-1", first_seen=T0 + hours(30)),
        fault("ev-2", first_seen=T0 + hours(31)),
        fault("ev-3", first_seen=T0, last_seen=T0),  # arrives late, first seen 31 h before stream time
    ])
    assert quarantine(out) == []


def test_fleet_settings_refuse_a_window_longer_than_the_history() -> None:
    with pytest.raises(msgspec.ValidationError, match="history_hours"):
        msgspec.convert({"window_seconds": 72 * 3600, "history_hours": 48}, FleetSettings)


# --- failures ---------------------------------------------------------------------------------------


def failures(out: list[Emit]) -> dict[str, FailureRate]:
    return latest(out, FAILURE_RATES)  # type: ignore[return-value]


def test_failure_rates_per_namespace_code_kind_and_hour() -> None:
    _, out = run([
        verdict("a", code="Error", failed_at=T0 + minutes(1)),
        verdict("b", code="Error", failed_at=T0 + minutes(2)),
        verdict("c", code="GpuFallenOffBus", kind="SYSTEM", failed_at=T0 + minutes(3), fault=gpu_fault()),
        verdict("d", code="Error", failed_at=T0 + minutes(3), namespace="other"),
    ])
    rates = failures(out)
    assert {k: (r.failures, r.gpu_faults) for k, r in rates.items()} == {
        "prod-a/ml/2026-08-25T12:00:00Z/Error/USER": (2, 0),
        "prod-a/ml/2026-08-25T12:00:00Z/GpuFallenOffBus/SYSTEM": (1, 1),
        "prod-a/other/2026-08-25T12:00:00Z/Error/USER": (1, 0),
    }


def test_a_revision_that_changes_the_code_moves_the_failure() -> None:
    state, out = run([
        verdict("late", code="Error", failed_at=T0),
        verdict("late", code="GpuEccUncorrectable", kind="SYSTEM", failed_at=T0, revision=1, fault=gpu_fault(48)),
    ])
    rates = failures(out)
    assert rates["prod-a/ml/2026-08-25T12:00:00Z/Error/USER"].failures == 0
    assert rates["prod-a/ml/2026-08-25T12:00:00Z/GpuEccUncorrectable/SYSTEM"].failures == 1
    assert fleet_summary(state.view).totals.failures == 1


def test_a_redelivered_or_unchanged_verdict_counts_once() -> None:
    v = verdict("a")
    _, out = run([v, v, verdict("a", revision=1)])
    assert [e.value.failures for e in out if e.topic == FAILURE_RATES] == [1]


def test_each_jobset_generation_is_a_failure() -> None:
    _, out = run([
        verdict("js", code="GpuFallenOffBus", kind="SYSTEM", generation=0, terminal=False, failed_at=T0),
        verdict("js", code="ReachedMaxRestarts", generation=1, failed_at=T0 + minutes(10), revision=1),
    ])
    assert sum(r.failures for r in failures(out).values()) == 2


def test_a_pod_task_restarted_in_place_then_failing_again_is_two_failures() -> None:
    _, out = run([
        verdict("p", code="GpuXidError", failed_at=T0),  # pod 1 failed
        verdict("p", code="GpuXidError", failed_at=T0, terminal=False, revision=1),  # pod 2 appeared (R8.2)
        verdict("p", code="OOMKilled", failed_at=T0 + minutes(30), revision=2, pod="p-train-1-b"),  # pod 2 failed
    ])
    rates = failures(out)
    assert rates["prod-a/ml/2026-08-25T12:00:00Z/GpuXidError/USER"].failures == 1
    assert rates["prod-a/ml/2026-08-25T12:00:00Z/OOMKilled/USER"].failures == 1


# --- gangs ------------------------------------------------------------------------------------------------


def test_preemptions_and_readmission_waits_per_queue() -> None:
    state, out = run([
        transition("a", to="WaitingForReadmission", at=T0),
        transition("a", from_="WaitingForReadmission", to="Running", at=T0 + minutes(10), reason="re-admitted by kueue; running", waited_seconds=600.0),
        transition("b", to="Ended", at=T0 + minutes(20), code="GangEvicted", retry="user", reason=PREEMPTED_ENDING, cause="Preempted"),
        transition("c", to="Ended", at=T0 + minutes(30), code="GangEvicted", retry="system", reason=TIMEOUT_ENDING, cause="PodsReadyTimeout"),
        transition("d", to="WaitingForReadmission", at=T0 + minutes(40)),
        transition("e", from_="Running", to="Completed", at=T0 + minutes(45), reason="jobset completed"),  # not Kueue's doing
    ])
    buckets = latest(out, PREEMPTION_WAITS)
    record = buckets["prod-a/team-a/2026-08-25T12:00:00Z"]
    assert isinstance(record, PreemptionWait)
    assert (record.queue, record.queue_source) == ("team-a", "namespace")
    assert (record.evictions, record.preemptions, record.readmissions) == (4, 3, 1)
    assert (record.wait_seconds_total, record.wait_seconds_max) == (600.0, 600.0)
    [row] = queue_rows(state.view)
    assert (row.waiting, row.wait_seconds_avg) == (1, 600.0)  # d is still waiting


# --- the rest ------------------------------------------------------------------------------------------------


def test_dead_letters_are_counted_and_derive_nothing() -> None:
    state, out = run([dead_letter(), dead_letter()])
    assert (state.view.dead_letters, out) == (2, [])


def test_state_is_bounded_by_the_history_in_stream_time() -> None:
    settings = FleetSettings(history_hours=2, window_seconds=3600)
    state, _ = run([fault("ev-1", attempt="prod-a/ml/a/b/1", first_seen=T0), verdict("a", failed_at=T0)], settings)
    assert state.view.nodes and state.view.failures
    assert {type(s).__name__ for s in state.states.values()} == {"SourceStats", "RateStats", "FailureStats"}
    state, _ = run([verdict("z", failed_at=T0 + hours(30))], settings, state)
    # The view forgets what fell out of the history; the stage drops such states (expiry).
    assert not state.view.nodes and not state.view.gpus
    assert list(state.view.failures) == ["prod-a/ml/2026-08-26T18:00:00Z/Error/USER"]
    expires_at = FLEET_STAGE.expires_at
    assert expires_at is not None
    now = T0 + hours(30)
    new = "prod-a/failures/ml/2026-08-26T18:00:00Z"
    deadlines = {k: expires_at(s, state.rules) for k, s in state.states.items()}
    assert all(at is not None and at <= now for k, at in deadlines.items() if k != new)
    assert deadlines[new] is not None and deadlines[new] > now


def test_no_state_grows_with_the_fleet() -> None:
    """A flood of critical faults on one node keeps its state bounded (HITS_KEPT)."""
    from app.core.fleet.states import HITS_KEPT

    state, _ = run([fault(f"ev-{i}", first_seen=T0 + minutes(i / 10)) for i in range(500)])
    node = state.states["prod-a/node/gpu-17"]
    assert len(node.hits) == HITS_KEPT  # type: ignore[union-attr]
    assert len(msgspec.json.encode(node)) < 16_000


def test_a_node_with_faults_of_many_codes_in_every_hour_keeps_each_state_small() -> None:
    """Issue 17: a node's hours are states of their own, so no value holds every hour of
    the history times every code (one node's value passed 64 KB that way): the largest
    state is the same for 12 hours of such faults (HITS_KEPT critical ones) as for the
    whole history."""

    def largest(hours_of_faults: int) -> int:
        severities = ("USER", "WARN", "CRITICAL")
        faults = [
            fault(f"ev-{h:02d}-{c:02d}", code=c, severity=severities[c % 3], gpu_uuid=f"GPU-{c % 8}", first_seen=T0 + hours(h) + minutes(c))
            for h in range(hours_of_faults)
            for c in range(1, 31)
        ]
        state, _ = run(faults)
        return max(len(msgspec.json.encode(s)) for s in state.states.values())

    whole = largest(DEFAULT_FLEET.history_hours - 1)
    assert whole == largest(12)
    assert whole < 16_000


def mixed_emits() -> list[Emit]:
    return list(replay(read_lines(MIXED), Pipeline()))


def test_the_same_records_give_the_same_derived_records_byte_for_byte() -> None:
    first = [encode_output(e) for e in mixed_emits() if e.topic in DERIVED_TOPICS]
    second = [encode_output(e) for e in mixed_emits() if e.topic in DERIVED_TOPICS]
    assert first and first == second


def test_the_states_round_trip_through_json() -> None:
    state, _ = run([*mixed_emits(), *(transition(f"g{i}", at=T0 + hours(2)) for i in range(2))])
    for value in state.states.values():
        assert msgspec.json.decode(msgspec.json.encode(value), type=FleetStats) == value


def test_evidence_lists_faults_in_time_order_and_verdict_revisions() -> None:
    pipeline = Pipeline()
    list(replay(read_lines(MIXED), pipeline))
    key = "prod-a/ml/llm-pretrain-42/pretrain/1"
    evidence = evidence_of(pipeline.states["attempts"].get(key), pipeline.rules.version)
    assert evidence is not None and evidence.current is not None
    assert evidence.current.code == "MPIJobFailed" and [f.fault.code for f in evidence.faults] == [92, 63]  # in time order
    assert [(v.revision, v.code) for v in evidence.verdicts][-1] == (evidence.current.revision, "MPIJobFailed")
    assert any(p.name.endswith("worker-2") and p.faults == 1 for p in evidence.pods)
    assert evidence_of(pipeline.states["attempts"].get("prod-a/ml/none/x/1"), pipeline.rules.version) is None


def test_summary_of_the_mixed_example() -> None:
    view = FleetState()
    out = mixed_emits()
    for emit in out:
        read(view, emit)
    summary = fleet_summary(view)
    assert summary.nodes[0].node == "gpu-17" and summary.nodes[0].candidate
    assert [(q.scope, q.node) for q in summary.quarantine] == [("node", "gpu-17"), ("gpu", "gpu-17")]
    assert summary.totals.faults == 10 and summary.totals.severity.critical == 6
    assert [h.hour.hour for h in summary.hours] == [11, 12, 13]
    assert summary.recent[0].key == "prod-a/ml/ckpt-4/train/2"
    # Every derived record decodes as its schema says.
    for emit in (e for e in out if e.topic in DERIVED_TOPICS):
        encoded = msgspec.json.encode(emit.value)
        assert msgspec.json.decode(encoded, type=type(emit.value)) == emit.value
