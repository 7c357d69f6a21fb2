"""SPEC R10.1: one rule file gives the same outputs in every command that takes it, and
`rules_version` covers every setting that can change an output record (the fleet's too).

The broker half (a worker with the same file) is tests/integration/test_rule_file_everywhere.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from app.cli import main
from app.core.base.rules import DEFAULT_RULES, FleetSettings, Rules
from app.model.fleet_records import DERIVED_TOPICS, QUARANTINE_CANDIDATES
from app.model.records import CLASSIFIED_FAILURES

MIXED = Path(__file__).resolve().parents[2] / "examples" / "traces" / "mixed.jsonl"
FLEET_VARIABLES = ("FAULTLINE_RULES", "FAULTLINE_QUARANTINE_THRESHOLD", "FAULTLINE_QUARANTINE_WINDOW",
                   "FAULTLINE_FLEET_HISTORY_HOURS", "FAULTLINE_RECENT_VERDICTS")  # fmt: skip


@pytest.fixture(autouse=True)
def _no_stray_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in FLEET_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def rule_file(tmp_path: Path, body: str, name: str = "rules.toml") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def shown(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    """`faultline rules show ARGS` as data."""
    assert main(["rules", "show", *args]) == 0
    return json.loads(capsys.readouterr().out)


def replayed(capsys: pytest.CaptureFixture[str], tmp_path: Path, *args: str) -> list[dict]:
    out = tmp_path / "replay.jsonl"
    assert main(["replay", "--trace", str(MIXED), "--out", str(out), *args]) == 0
    capsys.readouterr()
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_r10_1_a_fleet_setting_alone_changes_the_rules_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = rule_file(tmp_path, 'name = "site"\n', "base.toml")
    fleet = rule_file(tmp_path, 'name = "site"\n[fleet]\nthreshold = 1\n', "fleet.toml")
    versions = {shown(capsys, "--rules", str(path))["rules_version"] for path in (base, fleet)}
    assert len(versions) == 2
    for field, value in (("window_seconds", 3600), ("history_hours", 72)):
        changed = rule_file(tmp_path, f'name = "site"\n[fleet]\n{field} = {value}\n', f"{field}.toml")
        assert shown(capsys, "--rules", str(changed))["rules_version"] not in versions
    # The size of the page's recent-verdicts list is in no record: not in the version.
    recent = rule_file(tmp_path, 'name = "site"\n[fleet]\nrecent_verdicts = 5\n', "recent.toml")
    assert shown(capsys, "--rules", str(recent))["rules_version"] == shown(capsys, "--rules", str(base))["rules_version"]
    # A flag that sets what the file would set gives the file's rule set.
    assert shown(capsys, "--rules", str(base), "--quarantine-threshold", "1")["rules_version"] == shown(capsys, "--rules", str(fleet))["rules_version"]


def test_r10_1_a_driver_without_the_fleet_stage_keeps_the_rules_version() -> None:
    rules = Rules(fleet=FleetSettings(threshold=1))
    off = rules.without_fleet_stage()
    assert off.fleet is None and off.version == rules.version != DEFAULT_RULES.version


def test_r10_1_one_rule_file_gives_the_same_fleet_health_in_every_offline_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = rule_file(tmp_path, 'name = "site"\n[fleet]\nthreshold = 1\n')
    version = shown(capsys, "--rules", str(path))["rules_version"]

    replay = replayed(capsys, tmp_path, "--rules", str(path))
    derived = [line for line in replay if line["topic"] in DERIVED_TOPICS]
    candidates = {line["key"] for line in derived if line["topic"] == QUARANTINE_CANDIDATES}
    assert len(candidates) == 6  # 2 with the default threshold of 3
    assert {line["value"]["rules_version"] for line in replay if line["topic"] == CLASSIFIED_FAILURES} == {version}

    fleet_out = tmp_path / "fleet.jsonl"
    assert main(["fleet", str(MIXED), "--rules", str(path), "--out", str(fleet_out)]) == 0
    assert "quarantine: >= 1 critical faults in 24h" in capsys.readouterr().out
    assert [json.loads(line) for line in fleet_out.read_text().splitlines()] == derived

    assert main(["classify", str(MIXED), "--fleet", "--rules", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "quarantine: >= 1 critical faults in 24h" in printed
    lines = printed.splitlines()
    rows = lines[lines.index("QUARANTINE CANDIDATES") + 2 : lines.index("TOP NODES (* quarantine candidate)") - 1]
    key = {"node": "{cluster}/node/{node}", "gpu": "{cluster}/gpu/{node}/{gpu}"}
    assert {key[row.split()[0]].format(cluster="prod-a", node=row.split()[1], gpu=row.split()[2]) for row in rows} == candidates


def test_r10_1_flags_and_variables_override_only_the_settings_they_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = rule_file(tmp_path, "[fleet]\nthreshold = 1\nwindow_seconds = 7200\nrecent_verdicts = 7\n")
    assert shown(capsys, "--rules", str(path))["fleet"] == {"threshold": 1, "window_seconds": 7200, "history_hours": 48, "recent_verdicts": 7}
    assert shown(capsys, "--rules", str(path), "--quarantine-window", "3h")["fleet"] == {
        "threshold": 1, "window_seconds": 10800, "history_hours": 48, "recent_verdicts": 7,
    }  # fmt: skip
    monkeypatch.setenv("FAULTLINE_QUARANTINE_THRESHOLD", "2")
    assert shown(capsys, "--rules", str(path))["fleet"]["threshold"] == 2  # a variable over the file
    assert shown(capsys, "--rules", str(path), "--quarantine-threshold", "4")["fleet"]["threshold"] == 4  # a flag over both
    # The window and the history are checked together, wherever each came from.
    assert main(["rules", "show", "--rules", str(path), "--quarantine-window", "3d"]) == 2
    err = capsys.readouterr().err
    assert "quarantine_window = '3d' (from flag --quarantine-window) is longer than fleet_history_hours = 48 (from the rule file)" in err


def test_r10_1_the_rule_file_may_come_from_the_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = rule_file(tmp_path, 'name = "site"\n[fleet]\nthreshold = 1\n')
    version = shown(capsys, "--rules", str(path))["rules_version"]
    monkeypatch.setenv("FAULTLINE_RULES", str(path))
    assert shown(capsys)["rules_version"] == version
    verdicts = [line for line in replayed(capsys, tmp_path) if line["topic"] == CLASSIFIED_FAILURES]
    assert verdicts and {line["value"]["rules_version"] for line in verdicts} == {version}
    monkeypatch.setenv("FAULTLINE_RULES", str(tmp_path / "missing.toml"))
    assert main(["replay", "--trace", str(MIXED), "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "(from FAULTLINE_RULES; unset it or give --rules)" in capsys.readouterr().err


def test_r10_1_the_help_says_which_source_of_a_fleet_setting_wins(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["replay"], ["classify"], ["fleet"], ["serve"], ["worker"], ["rules", "show"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "flag > environment variable > the rule file's [fleet] > default" in text, command
        assert "--quarantine-threshold" in text and "--rules" in text


def test_r10_1_fleet_settings_are_declared_once() -> None:
    """Only FleetSettings declares them; the worker's settings do not (app/settings.py)."""
    from app.settings import FLEET_SETTINGS, Settings

    fields = {f.name for f in msgspec.structs.fields(Settings)}
    assert not fields & {"quarantine_threshold", "quarantine_window", "fleet_history_hours", "recent_verdicts"}
    assert [info.field for info in FLEET_SETTINGS] == [f.name for f in msgspec.structs.fields(FleetSettings)]



def test_r10_1_what_rules_show_prints_is_a_rule_file_of_the_same_version(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`rules show > site.json`, edit, use: the printed set loads as it stands (its
    `rules_version` is ignored, not an unknown field) and, unedited, is the same rule set:
    whole seconds read back as floats do not change the version."""
    printed = shown(capsys, "--rules", str(rule_file(tmp_path, 'name = "site"\nwindow_seconds = 900\n')))
    assert isinstance(printed["slack_seconds"], int)
    assert shown(capsys, "--rules", str(rule_file(tmp_path, json.dumps(printed), "shown.json"))) == printed
    edited = rule_file(tmp_path, json.dumps({**printed, "window_seconds": 600}), "edited.json")
    assert shown(capsys, "--rules", str(edited))["rules_version"] != printed["rules_version"]
    toml = rule_file(tmp_path, 'rules_version = "stale@000000000000"\nname = "site"\nwindow_seconds = 900.0\n', "floats.toml")
    assert shown(capsys, "--rules", str(toml))["rules_version"] == printed["rules_version"]
    assert Rules(window_seconds=900.0, name="site").version == Rules(window_seconds=900, name="site").version
