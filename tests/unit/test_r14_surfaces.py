"""SPEC R14 where people look: `faultline classify` of the drained-worker example,
`faultline diff` between rule sets with and without disruption reasons (which attempts
changed, and the evidence), the action of each quarantine candidate in `faultline fleet`
and on the fleet page, the attempt drawer's device faults, and records written before
R14 (Fault/v1, NodeFaultRate/v1, GpuFaultRate/v1) read as v2."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import msgspec

from app.cli import main
from app.cli.fleet import pipeline_evidence
from app.core.base.emit import Emit
from app.core.fleet.read_model import FleetState, read
from app.core.fleet.summary import fleet_summary
from app.model import records_v1
from app.model.fleet_records import GPU_FAULT_RATES, NODE_FAULT_RATES, GpuFaultRate, NodeFaultRate
from app.model.records import CLASSIFIED_FAILURES, FAULTS, Fault
from app.replay.diff import ReplayRecord
from app.embedded.pipeline import Pipeline
from app.replay.trace import OutputLine, read_lines, replay
from app.web.page import PAGE

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "traces"
NO_DISRUPTIONS = ROOT / "examples" / "rules" / "no-disruptions.toml"


def faultline(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, capture_output=True, text=True)


def replayed(trace: Path) -> tuple[Pipeline, list[Emit]]:
    pipeline = Pipeline()
    return pipeline, list(replay(read_lines(trace), pipeline))


def test_r14_1_the_drained_worker_example_is_pod_disrupted() -> None:
    result = faultline("classify", str(EXAMPLES / "jobset-drained-worker.jsonl"))
    assert result.returncode == 0, result.stderr
    row = result.stdout.splitlines()[1].split()
    assert row[0] == "prod-a/ml/JobSet/resnet-drain" and row[2:6] == ["PodDisrupted", "SYSTEM", "10.6", "-"]
    assert "disrupted by the cluster (EvictionByEvictionAPI): Eviction" in result.stdout


def test_r14_1_diff_with_and_without_disruption_reasons_names_the_changed_attempts_and_the_evidence(tmp_path: Path) -> None:
    trace = EXAMPLES / "evidence.jsonl"
    base, candidate = tmp_path / "without.jsonl", tmp_path / "with.jsonl"
    assert faultline("replay", "--trace", str(trace), "--rules", str(NO_DISRUPTIONS), "--out", str(base)).returncode == 0
    assert faultline("replay", "--trace", str(trace), "--out", str(candidate)).returncode == 0
    text = faultline("diff", "--base", str(base), "--candidate", str(candidate))
    assert text.returncode == 0, text.stderr
    assert "2 of 5 attempts changed" in text.stdout
    assert "FailedJobs (USER) -> PodDisrupted (SYSTEM)" in text.stdout and "Interrupted (SYSTEM) -> PodDisrupted (SYSTEM)" in text.stdout
    assert "because    the pod was disrupted: pod resnet-drain-workers-1-0-m2x7q disrupted by the cluster (EvictionByEvictionAPI) now decides" in text.stdout
    assert "candidate  PodDisrupted SYSTEM  disruption: pod hpo-12-trial-1 (PreemptionByScheduler)" in text.stdout
    machine = json.loads(faultline("diff", "--base", str(base), "--candidate", str(candidate), "--format", "json").stdout)
    changed = {c["name"].split(" (")[0]: c for c in machine["changes"]}
    assert set(changed) == {"prod-a/ml/JobSet/resnet-drain", "prod-a/ml/hpo-12/trial/1"}  # device health and the Xid 79 drain: unchanged
    drained = changed["prod-a/ml/JobSet/resnet-drain"]
    assert (drained["base"]["evidence"], drained["candidate"]["evidence"]) == (None, "disruption: pod resnet-drain-workers-1-0-m2x7q (EvictionByEvictionAPI)")
    assert drained["candidate"]["faulted_pod"] == "resnet-drain-workers-1-0-m2x7q"
    back = faultline("diff", "--base", str(candidate), "--candidate", str(base))
    assert "pod hpo-12-trial-1's disruption (PreemptionByScheduler) no longer decides" in back.stdout


def test_r14_2_the_attempt_drawer_lists_a_device_fault_with_its_key() -> None:
    pipeline, out = replayed(EXAMPLES / "evidence.jsonl")
    verdict = next(e.value for e in out if e.topic == CLASSIFIED_FAILURES and e.key.startswith("prod-a/ml/Pod/vllm-bench-0/"))
    evidence = pipeline_evidence(pipeline, verdict.key)
    assert evidence is not None
    (fault,) = evidence.faults
    uid = verdict.tracked.uid
    assert (fault.key, fault.event_uid, fault.fault.kind) == (f"prod-a/{uid}/gpu.nvidia.com/gpu-93/gpu-3", None, "DEVICE_HEALTH")
    published = [e.value for e in out if e.topic == FAULTS and e.value.key == fault.key][-1]
    assert published == fault


def test_r14_3_faultline_fleet_and_the_page_show_each_candidates_action(tmp_path: Path, capsys) -> None:
    assert main(["fleet", str(EXAMPLES / "mixed.jsonl")]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("QUARANTINE CANDIDATES")
    assert lines[at + 1].split()[5] == "ACTION" and "RESTART_BM" in lines[at + 2]
    _, out = replayed(EXAMPLES / "mixed.jsonl")
    state = FleetState()
    for emit in out:
        read(state, emit)
    summary = msgspec.json.decode(msgspec.json.encode(fleet_summary(state)))  # what /api/fleet serves
    assert {row["key"]: row["action"] for row in summary["quarantine"]} == {
        "prod-a/node/gpu-17": "RESTART_BM", "prod-a/gpu/gpu-17/GPU-1234": "RESTART_BM",
    }  # fmt: skip
    assert "c.action" in PAGE and "NVIDIA recommends" in PAGE  # the page shows it on each candidate


def test_r14_records_written_before_r14_read_as_v2() -> None:
    """Fault/v1 and the v1 fault rates (kept by a compacted topic, or in an old replay)
    read as v2: an Event's fault, its action not recorded (UNKNOWN)."""
    _, out = replayed(EXAMPLES / "pod-task-xid74.jsonl")
    fault = next(e.value for e in out if e.topic == FAULTS)
    rate = next(e.value for e in out if e.topic == NODE_FAULT_RATES)
    gpu_rate = next(e.value for e in out if e.topic == GPU_FAULT_RATES)
    decode = msgspec.json.Decoder(OutputLine[ReplayRecord])
    old_fault = _as_v1(fault, "faultline.Fault/v1", drop=("action", "resource", "message"))
    line = decode.decode(msgspec.json.encode({"topic": FAULTS, "key": fault.key, "value": old_fault}))
    assert isinstance(line.value, records_v1.Fault)
    assert records_v1.upgraded(line.value) == msgspec.structs.replace(fault, fault=msgspec.structs.replace(fault.fault, action="UNKNOWN"))
    state = FleetState()
    for value, schema in ((rate, "faultline.NodeFaultRate/v1"), (gpu_rate, "faultline.GpuFaultRate/v1")):
        old = decode.decode(msgspec.json.encode({"topic": "t", "key": value.key, "value": _as_v1(value, schema)})).value
        assert isinstance(old, records_v1.DerivedRecordV1)
        read(state, Emit("t", value.key, old))
    assert list(state.nodes.values()) == [rate] and isinstance(state.nodes[rate.key], NodeFaultRate)
    assert list(state.gpus.values()) == [gpu_rate] and isinstance(state.gpus[gpu_rate.key], GpuFaultRate)


def _as_v1(record: msgspec.Struct, schema: str, drop: tuple[str, ...] = ()) -> dict:
    body = msgspec.json.decode(msgspec.json.encode(record))
    body["schema"] = schema
    if "fault" in body:
        body["fault"] = {k: v for k, v in body["fault"].items() if k not in drop}
    return body


def test_r14_fault_records_are_v2() -> None:
    _, out = replayed(EXAMPLES / "evidence.jsonl")
    schemas = {msgspec.json.decode(msgspec.json.encode(e.value))["schema"] for e in out if e.topic == FAULTS}
    assert schemas == {"faultline.Fault/v2"}
    kinds = {e.value.fault.kind for e in out if e.topic == FAULTS and isinstance(e.value, Fault)}
    assert kinds == {"XID", "DEVICE_HEALTH"}
    assert timedelta(0) <= max(e.value.fault.last_seen - e.value.fault.first_seen for e in out if e.topic == FAULTS)
