"""SPEC R13 where people look: the command line, `faultline diff` across record versions,
the fleet read model and the attempt drawer name workload attempts by kind and name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import orjson

from app.cli.fleet import pipeline_evidence
from app.cli.render import attempt_name
from app.core.base.emit import Emit
from app.core.fleet.read_model import FleetState, read
from app.model.records import CLASSIFIED_FAILURES, ClassifiedFailure
from app.model.records_v1 import ClassifiedFailure as ClassifiedFailureV1
from app.embedded.pipeline import Pipeline
from app.replay.trace import read_lines, replay

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "traces"


def faultline(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, capture_output=True, text=True)


def replayed(trace: Path) -> tuple[Pipeline, list[Emit]]:
    pipeline = Pipeline()
    return pipeline, list(replay(read_lines(trace), pipeline))


def test_r13_3_classify_names_a_workload_attempt_by_kind_and_name() -> None:
    result = faultline("classify", str(EXAMPLES / "workloads.jsonl"))
    assert result.returncode == 0, result.stderr
    rows = [line.split()[:3] for line in result.stdout.splitlines()[1:5]]
    assert [row[0] for row in rows] == ["prod-a/ml/TrainJob/llama-ft", "GPU", "prod-a/ml/JobSet/sweep-lr", "GPU"]
    assert rows[0][1].startswith("(") and rows[0][2] == "FailedJobs"  # the uid shortened: (cdc524c6)
    assert "prod-a/ml/Job/embed-shards (" in result.stdout and "prod-a/ml/Pod/notebook-gpu-7 (" in result.stdout
    assert "cronjob" not in result.stdout.lower()  # CPU-only Jobs are no attempts


def test_r13_3_attempt_name_is_the_key_under_labels() -> None:
    _, out = replayed(EXAMPLES / "mixed.jsonl")
    verdict = next(e.value for e in out if e.topic == CLASSIFIED_FAILURES)
    assert attempt_name(verdict) == verdict.key == "prod-a/ml/nightly-7f3a/train/1"


def _as_v1(line: bytes) -> bytes:
    """A replay line as faultline wrote it before R13 (ClassifiedFailure/v1)."""
    record = orjson.loads(line)
    value = record["value"]
    if value["schema"] == "faultline.ClassifiedFailure/v2":
        value = {k: v for k, v in value.items() if k != "identity"} | {"schema": "faultline.ClassifiedFailure/v1"}
        record["value"] = value
    return orjson.dumps(record)


def test_r13_3_diff_reads_a_v1_replay_against_a_v2_one(tmp_path: Path) -> None:
    new = tmp_path / "new.jsonl"
    assert faultline("replay", "--trace", str(EXAMPLES / "mixed.jsonl"), "--out", str(new)).returncode == 0
    old = tmp_path / "old.jsonl"
    old.write_bytes(b"".join(_as_v1(line) + b"\n" for line in new.read_bytes().splitlines()))
    assert b"ClassifiedFailure/v1" in old.read_bytes()
    same = faultline("diff", "--base", str(old), "--candidate", str(new))
    assert same.returncode == 0, same.stderr
    assert "0 of 10 attempts changed" in same.stdout  # a v1 verdict reads as the same verdict under labels
    workloads = tmp_path / "workloads.jsonl"
    assert faultline("replay", "--trace", str(EXAMPLES / "workloads.jsonl"), "--out", str(workloads)).returncode == 0
    both = faultline("diff", "--base", str(old), "--candidate", str(workloads), "--format", "json")
    changes = msgspec.json.decode(both.stdout)["changes"]
    named = {c["name"]: (c["base"] is None, c["candidate"] is None) for c in changes}
    assert named["prod-a/ml/nightly-7f3a/train/1"] == (False, True)
    trainjob = next(n for n in named if n.startswith("prod-a/ml/TrainJob/llama-ft ("))
    assert named[trainjob] == (True, False)


def test_r13_3_the_fleet_views_name_workload_attempts() -> None:
    pipeline, out = replayed(EXAMPLES / "workloads.jsonl")
    state = FleetState()
    for emit in out:
        read(state, emit)
    rows = {row.attempt: row for row in state.recent}
    trainjob = next(name for name in rows if name.startswith("prod-a/ml/TrainJob/llama-ft ("))
    assert rows[trainjob].identity == "workload" and rows[trainjob].key.startswith("prod-a/ml/TrainJob/llama-ft/")
    # The drawer finds a TrainJob's evidence by its attempt key, though its state is its JobSet's.
    evidence = pipeline_evidence(pipeline, rows[trainjob].key)
    assert evidence is not None and evidence.key == rows[trainjob].key
    assert {p.name for p in evidence.pods} >= {"llama-ft-node-1-0-x7k2p"} and all(f.attempt == evidence.key for f in evidence.faults)


def test_r13_3_the_fleet_read_model_reads_a_v1_verdict() -> None:
    _, out = replayed(EXAMPLES / "pod-task-xid74.jsonl")
    v2 = next(e.value for e in out if e.topic == CLASSIFIED_FAILURES)
    fields = {f: getattr(v2, f) for f in v2.__struct_fields__ if f not in ("identity", "gpu_seconds", "goodput")}
    v1 = msgspec.json.decode(msgspec.json.encode(ClassifiedFailureV1(**fields)), type=ClassifiedFailure | ClassifiedFailureV1)
    state = FleetState()
    read(state, Emit(CLASSIFIED_FAILURES, v1.key, v1))
    assert [(r.key, r.attempt, r.identity, r.code) for r in state.recent] == [(v2.key, v2.key, "labels", v2.code)]


def test_r13_3_metrics_count_workload_attempts_by_the_kind_of_their_object() -> None:
    from app.core.fleet.view import LiveFleet
    from app.web.metrics import render_metrics

    for trace in ("workloads.jsonl", "mixed.jsonl"):
        live = LiveFleet()
        for emit in replayed(EXAMPLES / trace)[1]:
            live.observe(emit)
        lines = [line for line in render_metrics(live, now=0).splitlines() if line.startswith("faultline_failed_attempts{")]
        if trace == "mixed.jsonl":
            assert lines and not any("workload_kind" in line for line in lines)  # under labels: as before R13
            continue
        assert sorted(lines) == [
            'faultline_failed_attempts{code="FailedIndexes",kind="SYSTEM",workload_kind="Job"} 1',
            'faultline_failed_attempts{code="FailedJobs",kind="SYSTEM",workload_kind="JobSet"} 1',
            'faultline_failed_attempts{code="FailedJobs",kind="SYSTEM",workload_kind="TrainJob"} 1',
            'faultline_failed_attempts{code="GpuGspError",kind="SYSTEM",workload_kind="Pod"} 1',
        ]
