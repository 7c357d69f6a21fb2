"""The offline commands, as a user runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from app.model.fleet_records import DERIVED_TOPICS

from tests.unit import make_examples

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "traces"


def faultline(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, capture_output=True, text=True)


def test_examples_are_what_the_stories_generate():
    for name, stories in make_examples.TRACES.items():
        assert (EXAMPLES / name).read_bytes() == make_examples.trace(stories), f"regenerate with `make examples` ({name})"


def test_classify_prints_one_line_per_failed_attempt():
    result = faultline("classify", str(EXAMPLES / "mpijob-xid63.jsonl"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ATTEMPT", "CODE", "KIND", "GPU-H", "GPU", "FAULT", "POD", "RESTARTED"]
    # GPU-H (issue 30): 4 workers x 8 GPUs x the 45 min they ran; the launcher asks for none.
    assert lines[1].split() == ["prod-a/ml/llm-pretrain-42/pretrain/1", "MPIJobFailed", "SYSTEM", "24.0", "Xid", "63", "CRITICAL", "gpu-22/gpu0", "llm-pretrain-42-pretrain-worker-2"]
    assert lines[2].strip() == "GPU fault recorded on pod llm-pretrain-42-pretrain-worker-2"


def test_replay_writes_every_output_record_as_json_lines(tmp_path):
    out = tmp_path / "out.jsonl"
    result = faultline("replay", "--trace", str(EXAMPLES / "mixed.jsonl"), "--out", str(out))
    assert result.returncode == 0, result.stderr
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    topics = {r["topic"] for r in records}
    outputs = {"faultline.faults", "faultline.classified-failures", "faultline.gang-transitions"}
    assert outputs <= topics and topics - outputs <= set(DERIVED_TOPICS) and "faultline.node-fault-rates" in topics
    assert all(set(r) == {"topic", "key", "value"} and r["value"]["schema"].startswith("faultline.") for r in records)
    again = tmp_path / "again.jsonl"
    faultline("replay", "--trace", str(EXAMPLES / "mixed.jsonl"), "--out", str(again))
    assert again.read_bytes() == out.read_bytes()  # R7.3


def test_bad_trace_lines_are_reported_with_line_numbers_and_skipped(tmp_path):
    good = (EXAMPLES / "pod-task-xid74.jsonl").read_bytes().splitlines()
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(b"\n".join([good[0], b"{oops", *good[1:3], b'{"topic": "k8s.pods"}', *good[3:]]) + b"\n")
    out = tmp_path / "out.jsonl"
    result = faultline("replay", "--trace", str(trace), "--out", str(out))
    assert result.returncode == 0
    assert "line 2: skipped" in result.stderr and "line 5: skipped" in result.stderr
    assert "2 of" in result.stderr
    topics = [orjson.loads(line)["topic"] for line in out.read_bytes().splitlines()]
    assert topics.count("faultline.dead-letter") == 2 and "faultline.classified-failures" in topics


def test_nothing_readable_exits_non_zero(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("garbage\nmore garbage\n")
    result = faultline("classify", str(trace))
    assert result.returncode == 1 and "no record could be read" in result.stderr


def test_missing_trace_names_the_problem():
    result = faultline("classify", "does-not-exist.jsonl")
    assert result.returncode != 0 and "does not exist" in result.stderr


def test_r11_3_hostile_records_in_a_trace_are_dead_letters_and_every_command_exits_0(tmp_path):
    """Issue 16: a record nested too deeply, times at the calendar's ends, a '/' in an
    attempt label, a fault flood: `replay`, `classify` (with `--fleet`) and `fleet` say
    which lines they skipped and why, and exit 0; no traceback."""
    from tests.unit import hostile
    from tests.unit.builders import T0
    from tests.unit.stories import pod_task_nvlink

    lines = [*pod_task_nvlink(), *hostile.nested(T0), *hostile.out_of_range_times(T0), *hostile.slash_label(T0),
             *hostile.far_object_times("calendar", T0), *hostile.fault_flood("flood", T0, count=200), *hostile.restart_storm("storm", T0)]
    trace = tmp_path / "hostile.jsonl"
    trace.write_bytes(b"".join(hostile.trace_line(line) + b"\n" for line in lines))
    out = tmp_path / "out.jsonl"
    for args in (("replay", "--trace", str(trace), "--out", str(out)), ("classify", str(trace)), ("classify", "--fleet", str(trace)), ("fleet", str(trace))):
        result = faultline(*args)
        assert result.returncode == 0 and "Traceback" not in result.stderr, (args, result.stderr[-2000:])
        assert "10 of" in result.stderr and "nested too deeply" in result.stderr and "out of range" in result.stderr, args
    letters = [orjson.loads(line)["value"] for line in out.read_bytes().splitlines() if b'"faultline.dead-letter"' in line[:40]]
    assert len(letters) == 10 and all(letter["reason"] for letter in letters)
    assert "prod-a/ml/nightly-7f3a/train/1" in faultline("classify", str(trace)).stdout  # the valid attempt
