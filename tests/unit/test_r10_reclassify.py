"""SPEC R10: rule sets as data, replay with another rule set, and the diff."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from app.core.base.rules import DEFAULT_RULES, Rules
from app.core.base.xid import XidTable
from app.replay.diff import diff, final_verdicts
from app.rulefile import RuleFileError, load_rules
from tests.unit.scenario import run
from tests.unit.stories import pod_task_xid143, slow_burn

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver

ROOT = Path(__file__).resolve().parents[2]
RULE_FILE = ROOT / "examples" / "rules" / "xid-143-critical.toml"
WINDOW_FILE = ROOT / "examples" / "rules" / "window-1h.toml"


def test_r10_1_a_rule_file_names_and_versions_its_rule_set():
    rules = load_rules(RULE_FILE)
    assert rules.name == "xid143-critical" and 143 in rules.xid.critical
    assert rules.version.startswith("xid143-critical@") and rules.version != DEFAULT_RULES.version
    # Each example rule file changes one thing: its effect is its own (README, *Reclassify history*).
    assert msgspec.structs.replace(rules, name="default", xid=DEFAULT_RULES.xid) == DEFAULT_RULES
    window = load_rules(WINDOW_FILE)
    assert window.window_seconds == 3600 and msgspec.structs.replace(window, name="default", window_seconds=DEFAULT_RULES.window_seconds) == DEFAULT_RULES
    assert load_rules(None) is DEFAULT_RULES


@pytest.mark.parametrize(
    ("content", "names"),
    [
        ("windw_seconds = 60\n", "windw_seconds"),
        ("window_seconds = -1\n", "$.window_seconds"),
        ('[xid]\nsxid_severity = "HIGH"\n', "$.xid.sxid_severity"),
        ('[xid]\ncritical = ["79"]\n', "$.xid.critical[0]"),
        ("name = 'has space'\n", "$.name"),
        ("name = \n", "not valid TOML"),
    ],
)
def test_r10_1_a_bad_rule_file_gets_an_error_naming_the_field(tmp_path, content, names):
    path = tmp_path / "bad.toml"
    path.write_text(content)
    with pytest.raises(RuleFileError, match=None) as error:
        load_rules(path)
    assert names in str(error.value) and str(path) in str(error.value)


def test_r10_1_a_json_rule_file_works_too(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"name": "j", "slack_seconds": 300}))
    assert load_rules(path).slack_seconds == 300


def _final(records, rules):
    return final_verdicts((e.topic, e.key, e.value) for e in run(records, rules))


def test_r10_2_diff_lists_each_changed_attempt_with_both_verdicts_and_the_reason():
    records = pod_task_xid143() + slow_burn() + pod_task_xid143(run="other-2")
    candidate_rules = Rules(name="candidate", window_seconds=3600, xid=XidTable(critical=XidTable().critical | {143}))
    result = diff(_final(records, DEFAULT_RULES), _final(records, candidate_rules))
    assert result.attempts_compared == 3 and len(result.changes) == 3
    by_key = {c.key: c for c in result.changes}
    xid143 = by_key["prod-a/ml/bench-11/score/1"]
    assert (xid143.base.code, xid143.base.kind, xid143.candidate.code, xid143.candidate.kind) == ("Error", "USER", "GpuXidError", "SYSTEM")
    assert "severity for Xid 143 changed (WARN -> CRITICAL)" in xid143.because
    burn = by_key["prod-a/ml/ckpt-4/train/2"]
    assert burn.base.fault is None and burn.candidate.fault.startswith("Xid 79 CRITICAL")
    assert "relevance window" in burn.because
    assert result.transitions == {"Error (USER) -> GpuXidError (SYSTEM)": 2, "PyTorchJobFailed (USER) -> PyTorchJobFailed (SYSTEM)": 1}
    assert result.base_rules == [DEFAULT_RULES.version] and result.candidate_rules == [candidate_rules.version]


def test_r10_2_same_rules_diff_to_nothing():
    records = pod_task_xid143() + slow_burn()
    assert diff(_final(records, DEFAULT_RULES), _final(records, DEFAULT_RULES)).changes == []


def test_r10_2_reclassify_walkthrough_from_the_command_line(tmp_path):
    trace = ROOT / "examples" / "traces" / "mixed.jsonl"
    base, candidate = tmp_path / "base.jsonl", tmp_path / "candidate.jsonl"

    def faultline(*args):
        result = subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        return result.stdout

    faultline("replay", "--trace", str(trace), "--out", str(base))
    faultline("replay", "--trace", str(trace), "--out", str(candidate), "--rules", str(RULE_FILE))
    text = faultline("diff", "--base", str(base), "--candidate", str(candidate))
    assert "1 of 10 attempts changed" in text and "Xid 143 changed (WARN -> CRITICAL)" in text
    machine = json.loads(faultline("diff", "--base", str(base), "--candidate", str(candidate), "--format", "json"))
    assert [c["key"] for c in machine["changes"]] == ["prod-a/ml/bench-11/score/1"] and machine["attempts_compared"] == 10
    wider = tmp_path / "wider.jsonl"
    faultline("replay", "--trace", str(trace), "--out", str(wider), "--rules", str(WINDOW_FILE))
    machine = json.loads(faultline("diff", "--base", str(base), "--candidate", str(wider), "--format", "json"))
    assert [c["key"] for c in machine["changes"]] == ["prod-a/ml/ckpt-4/train/2"]  # the Xid 79 45 minutes before
    shown = json.loads(faultline("rules", "show", "--rules", str(RULE_FILE)))
    assert shown["rules_version"] == load_rules(RULE_FILE).version and 143 in shown["xid"]["critical"]


def test_r10_1_rules_version_is_the_same_however_a_code_set_was_built() -> None:
    """The version names the rules, not how a process happened to build their sets: a
    rule file's version printed by `faultline rules show` equals the one a worker computes."""
    one, other = frozenset([13, 31, 43, 45]), frozenset([45, 43, 31, 13])
    assert list(one) != list(other)  # the same codes, iterated in another order
    assert Rules(xid=XidTable(user=one)).version == Rules(xid=XidTable(user=other)).version
