"""`faultline fleet TRACE` (terminal tables) and its options."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from app.cli import main
from app.model.fleet_records import DERIVED_TOPICS, DerivedRecord, QuarantineCandidate
from app.settings import parse_duration
from app.replay.trace import OutputLine

MIXED = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mixed.jsonl"
DERIVED = OutputLine[DerivedRecord]


def test_fleet_prints_the_summary_tables(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fleet", str(MIXED)]) == 0
    out = capsys.readouterr().out
    for heading in ("FLEET HEALTH", "QUARANTINE CANDIDATES", "TOP NODES", "TOP GPUS", "FAILURES BY CODE AND KIND"):
        assert heading in out
    assert "quarantine: >= 3 critical faults in 24h" in out
    lines = out.splitlines()
    candidates = lines[lines.index("QUARANTINE CANDIDATES") + 1 : lines.index("QUARANTINE CANDIDATES") + 4]
    assert candidates[0].split() == ["SCOPE", "NODE", "GPU", "FAULTS", "SINCE", "ACTION", "CODES"]
    assert candidates[1].split()[:4] == ["node", "gpu-17", "-", "4"] and "Xid 74, Xid 79, Xid 79, Xid 48" in candidates[1]
    assert " RESTART_BM " in candidates[1]  # SPEC R14.3: the strongest of NVIDIA's actions for those faults (Xid 79's)
    top = lines[lines.index("TOP NODES (* quarantine candidate)") + 2].split()
    assert top[:6] == ["gpu-17", "*", "7", "4", "2", "1"]
    assert any(line.split()[2:5] == ["GpuEccUncorrectable", "SYSTEM", "2"] for line in lines)


def test_fleet_settings_come_from_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fleet", str(MIXED), "--quarantine-threshold", "5", "--quarantine-window", "90m"]) == 0
    out = capsys.readouterr().out
    assert "quarantine: >= 5 critical faults in 90m" in out
    assert "QUARANTINE CANDIDATES\nnone" in out


def test_fleet_writes_the_derived_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "derived.jsonl"
    assert main(["fleet", str(MIXED), "--out", str(out)]) == 0
    records = [msgspec.json.decode(line, type=DERIVED) for line in out.read_bytes().splitlines()]
    assert {r.topic for r in records} <= set(DERIVED_TOPICS)
    quarantine = [r.value for r in records if isinstance(r.value, QuarantineCandidate)]
    assert {(q.key, q.state) for q in quarantine} == {("prod-a/node/gpu-17", "candidate"), ("prod-a/gpu/gpu-17/GPU-1234", "candidate")}
    assert all(r.key == r.value.key for r in records)


def test_a_bad_setting_is_named_with_its_one_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """The fleet settings are declared once (app/core/base/rules.py FleetSettings), one flag each."""
    assert main(["fleet", str(MIXED), "--quarantine-window", "soon"]) == 2
    assert "fix --quarantine-window or FAULTLINE_QUARANTINE_WINDOW" in capsys.readouterr().err
    assert main(["fleet", str(MIXED), "--quarantine-threshold", "0"]) == 2
    assert "quarantine_threshold = 0 (from flag --quarantine-threshold) is invalid: expected int >= 1" in capsys.readouterr().err
    assert main(["fleet", str(MIXED), "--quarantine-window", "3d"]) == 2
    assert "raise --fleet-history-hours / FAULTLINE_FLEET_HISTORY_HOURS" in capsys.readouterr().err
    assert main(["fleet", str(MIXED), "--quarantine-window", "3d", "--fleet-history-hours", "72"]) == 0
    with pytest.raises(SystemExit):
        main(["fleet", str(MIXED), "--history-hours", "72"])  # the old second name is gone


def test_a_missing_trace_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fleet", str(tmp_path / "nope.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "seconds"), [("3600", 3600), ("90m", 5400), ("24h", 86400), ("1d", 86400), ("1.5h", 5400), ("45s", 45)])
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds
