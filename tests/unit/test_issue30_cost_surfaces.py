"""Issue 30 on the surfaces: `faultline diff --cost` (what a rule change is worth), the
fleet tables and /metrics. The accounting itself: test_issue30_gpu_seconds.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from app.core.base.emit import Emit
from app.core.fleet.view import LiveFleet
from app.core.base.rules import DEFAULT_RULES, Rules
from app.core.base.xid import XidTable
from app.model import records_v1
from app.model.fleet_records import DerivedRecord
from app.model.records import CLASSIFIED_FAILURES
from app.replay.diff import cost_of, diff, final_verdicts
from app.web.metrics import render_metrics
from tests.unit.scenario import run
from tests.unit.stories import pod_task_xid143, slow_burn

ROOT = Path(__file__).resolve().parents[2]
MIXED = ROOT / "examples" / "traces" / "mixed.jsonl"
RULE_FILE = ROOT / "examples" / "rules" / "xid-143-critical.toml"


def faultline(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _final(records: list[dict], rules: Rules):
    return final_verdicts((e.topic, e.key, e.value) for e in run(records, rules))


@pytest.mark.usefixtures("driver")
def test_gpu_seconds_diff_cost_moves_each_changed_attempts_gpu_seconds_between_kinds_and_codes():
    records = pod_task_xid143() + slow_burn() + pod_task_xid143(run="other-2")
    candidate_rules = Rules(name="candidate", window_seconds=3600, xid=XidTable(critical=XidTable().critical | {143}))
    base, candidate = _final(records, DEFAULT_RULES), _final(records, candidate_rules)
    cost = cost_of(diff(base, candidate), base, candidate, top=2)
    seconds = {key: v.gpu_seconds for key, v in candidate.items()}
    assert all(s for s in seconds.values())
    assert (cost.user_to_system, cost.system_to_user, cost.unknown) == (sum(seconds.values()), 0, 0)
    moves = {m.change: (m.attempts, m.gpu_seconds) for m in cost.moves}
    assert moves == {
        "Error (USER) -> GpuXidError (SYSTEM)": (2, seconds["prod-a/ml/bench-11/score/1"] + seconds["prod-a/ml/other-2/score/1"]),
        "PyTorchJobFailed (USER) -> PyTorchJobFailed (SYSTEM)": (1, seconds["prod-a/ml/ckpt-4/train/2"]),
    }
    assert [a.gpu_seconds for a in cost.top] == sorted(seconds.values(), reverse=True)[:2]
    assert cost.base_totals == {"SYSTEM": 0, "USER": sum(seconds.values())}
    assert cost.candidate_totals == {"SYSTEM": sum(seconds.values()), "USER": 0}


def test_gpu_seconds_diff_cost_counts_a_verdict_of_unknown_cost_apart():
    (v2,) = _final(pod_task_xid143(), DEFAULT_RULES).values()
    fields = {f: getattr(v2, f) for f in v2.__struct_fields__ if f not in ("identity", "gpu_seconds", "goodput")}
    v1 = records_v1.ClassifiedFailure(**fields)  # a replay written before issue 30 knows no cost
    moved = msgspec.structs.replace(v2, kind="SYSTEM", code="GpuXidError", gpu_seconds=None)
    base = final_verdicts([(CLASSIFIED_FAILURES, v2.key, v1)])
    cost = cost_of(diff(base, {v2.key: moved}), base, {v2.key: moved})
    assert (cost.user_to_system, cost.unknown, cost.top) == (0, 1, [])
    assert [(m.attempts, m.gpu_seconds, m.unknown) for m in cost.moves] == [(1, 0, 1)]


def test_gpu_seconds_diff_cost_from_the_command_line(tmp_path):
    base, candidate, wider = tmp_path / "base.jsonl", tmp_path / "candidate.jsonl", tmp_path / "window.jsonl"
    faultline("replay", "--trace", str(MIXED), "--out", str(base))
    faultline("replay", "--trace", str(MIXED), "--out", str(candidate), "--rules", str(RULE_FILE))
    faultline("replay", "--trace", str(MIXED), "--out", str(wider), "--rules", str(ROOT / "examples" / "rules" / "window-1h.toml"))
    text = faultline("diff", "--base", str(base), "--candidate", str(candidate), "--cost").splitlines()
    assert text[1] == "1 of 10 attempts changed"
    assert text[3].startswith("GPU-HOURS MOVED  USER -> SYSTEM 2.0, SYSTEM -> USER 0.0")
    assert "  cost       2.0 GPU-hours" in text  # bench-11: its one pod, 8 GPUs for 15 min
    text = faultline("diff", "--base", str(base), "--candidate", str(wider), "--cost").splitlines()
    assert "PyTorchJobFailed (USER) -> PyTorchJobFailed (SYSTEM)      1       12.0" in text
    assert any(line.startswith("prod-a/ml/ckpt-4/train/2") and line.endswith("12.0") for line in text)
    machine = json.loads(faultline("diff", "--base", str(base), "--candidate", str(candidate), "--cost", "--format", "json"))
    assert machine["cost"]["user_to_system"] == 2 * 3600 and machine["changes"][0]["base"]["gpu_seconds"] == 2 * 3600
    # SPEC R17.4: where each replay's GPU-hours went; a rule change moves lost GPU-hours between kinds.
    before, after = machine["cost"]["base_goodput"], machine["cost"]["candidate_goodput"]
    assert before["running_gpu_seconds"] == after["running_gpu_seconds"] > 0
    assert after["lost_system_gpu_seconds"] - before["lost_system_gpu_seconds"] == 2 * 3600 == before["lost_user_gpu_seconds"] - after["lost_user_gpu_seconds"]
    plain = json.loads(faultline("diff", "--base", str(base), "--candidate", str(candidate), "--format", "json"))
    assert plain["cost"] is None  # only asked for with --cost


def test_gpu_seconds_by_code_node_and_namespace_in_the_fleet_tables_and_metrics():
    text = faultline("fleet", str(MIXED))
    assert "GPU-HOURS LOST BY CODE" in text and "GPU-HOURS LOST BY NODE (the nodes the failed pods ran on)" in text
    assert "GPU-HOURS LOST BY NAMESPACE" in text and "GPU-hours lost)" in text
    live = LiveFleet()
    for line in faultline("fleet", str(MIXED), "--out", "-").splitlines():
        decoded = json.loads(line)
        live.observe(Emit(decoded["topic"], decoded["key"], msgspec.json.decode(json.dumps(decoded["value"]), type=DerivedRecord)))
    summary = live.summary()
    assert summary.totals.gpu_seconds == sum(r.gpu_seconds for r in summary.cost.by_node) > 0
    metrics = render_metrics(live)
    burned = [line for line in metrics.splitlines() if line.startswith("faultline_failed_gpu_seconds{")]
    assert sum(float(line.rsplit(" ", 1)[1]) for line in burned) == summary.totals.gpu_seconds


def _readme_sample(section: str, index: int = 0) -> list[str]:
    """The `index`-th output sample (a ``` block that is no shell) of a README section."""
    text = (ROOT / "README.md").read_text().split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    blocks = text.split("```")[1::2]
    return [b for b in blocks if not b.startswith("sh")][index].strip("\n").splitlines()


def test_gpu_seconds_the_readme_shows_the_real_cost_of_the_mixed_example(tmp_path):
    shown = _readme_sample("What failures cost")
    printed = faultline("fleet", str(MIXED)).splitlines()
    assert [line for line in shown if line != "..."] and all(line in printed for line in shown if line != "...")
    base, candidate = tmp_path / "base.jsonl", tmp_path / "candidate.jsonl"
    faultline("replay", "--trace", str(MIXED), "--out", str(base))
    faultline("replay", "--trace", str(MIXED), "--out", str(candidate), "--rules", str(RULE_FILE))
    printed = faultline("diff", "--base", str(base), "--candidate", str(candidate), "--cost").splitlines()
    shown = _readme_sample("Reclassify history")
    assert shown[0].startswith("base rules: default@") and printed[0].startswith("base rules: default@")
    assert shown[1:] == printed[1:]  # the whole of it: one rule file, one change (issue 38)
    # The second rule file, alone: its own change.
    wider = tmp_path / "window.jsonl"
    faultline("replay", "--trace", str(MIXED), "--out", str(wider), "--rules", str(ROOT / "examples" / "rules" / "window-1h.toml"))
    printed = faultline("diff", "--base", str(base), "--candidate", str(wider), "--cost").splitlines()
    shown = _readme_sample("Reclassify history", 1)
    assert shown[0].startswith("base rules: default@…    candidate rules: window-1h@…") and printed[0].startswith("base rules: default@")
    assert shown[-1] == "..." and shown[1:-1] == printed[1 : len(shown) - 1]
