"""SPEC R14.3: NVIDIA's recommended immediate action per Xid, as data in the Xid table.

The expected actions below are written out from NVIDIA's Xid catalogue ("Analyzing Xid
Errors with the Xid Catalog", sheet "Xids", column "Resolution Bucket (Immediate
Action)"), not read back from the table, so a wrong transcription fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.base.rules import DEFAULT_RULES, Rules
from app.core.base.xid import ACTION_STRENGTH, DEFAULT_XID_TABLE, XidTable, strongest
from app.rulefile import RuleFileError, load_rules, rules_document

xid = DEFAULT_XID_TABLE

# (code, immediate action) as NVIDIA's catalogue gives them.
CATALOGUE_SAMPLE = [
    (1, "CONTACT_SUPPORT"),  # an "Unused" row
    (8, "RESTART_APP"),
    (13, "RESTART_APP"),
    (14, "IGNORE"),
    (31, "RESTART_APP"),
    (32, "RESTART_APP"),
    (38, "IGNORE"),
    (43, "IGNORE"),
    (44, "IGNORE"),
    (45, "WORKFLOW_XID_45"),
    (46, "RESET_GPU"),
    (48, "WORKFLOW_XID_48"),
    (54, "CHECK_MECHANICALS"),
    (61, "CONTACT_SUPPORT"),
    (62, "RESET_GPU"),
    (63, "IGNORE"),
    (64, "RESET_GPU"),
    (68, "RESTART_APP"),
    (74, "WORKFLOW_NVLINK_ERR"),
    (78, "UPDATE_SWFW"),
    (79, "RESTART_BM"),
    (92, "IGNORE"),
    (94, "RESTART_APP"),
    (95, "RESET_GPU"),
    (109, "RESET_GPU"),
    (119, "RESET_GPU"),
    (120, "RESET_GPU"),
    (121, "IGNORE"),
    (136, "RESET_GPU"),
    (137, "IGNORE"),
    (140, "RESET_GPU"),
    (142, "CONTACT_SUPPORT"),
    (143, "RESET_GPU"),
    (144, "WORKFLOW_NVLINK5_ERR"),
    (149, "WORKFLOW_NVLINK5_ERR"),
    (150, "WORKFLOW_NVLINK5_ERR"),
    (151, "RESTART_VM"),
    (154, "XID_154"),
    (155, "RESET_GPU"),
    (157, "IGNORE"),
    (158, "RESET_GPU"),
    (159, "CHECK_UVM"),
    (161, "IGNORE"),
]


@pytest.mark.parametrize(("code", "action"), CATALOGUE_SAMPLE)
def test_r14_3_action_of_each_sampled_xid_is_nvidias(code: int, action: str) -> None:
    assert xid.action("XID", code) == action


def test_r14_3_catalogue_rows_count_and_tally_as_nvidias() -> None:
    """Codes 1-161 carry a bucket in the catalogue (162-172 have none); the count of each
    bucket, tallied from the catalogue's rows, shows a dropped or shifted row."""
    assert sorted(xid.actions) == list(range(1, 162))
    tally: dict[str, int] = {}
    for action in xid.actions.values():
        tally[action] = tally.get(action, 0) + 1
    assert tally == {
        "CONTACT_SUPPORT": 62,
        "RESTART_APP": 48,
        "IGNORE": 21,
        "RESET_GPU": 14,
        "WORKFLOW_NVLINK5_ERR": 7,
        "WORKFLOW_XID_45": 1,
        "WORKFLOW_XID_48": 1,
        "WORKFLOW_NVLINK_ERR": 1,
        "CHECK_MECHANICALS": 1,
        "UPDATE_SWFW": 1,
        "RESTART_BM": 1,
        "RESTART_VM": 1,
        "XID_154": 1,
        "CHECK_UVM": 1,
    }


@pytest.mark.parametrize("code", [162, 165, 167, 171, 172, 173, 0, 4242])
def test_r14_3_a_code_without_a_catalogue_action_is_unknown(code: int) -> None:
    assert xid.action("XID", code) == "UNKNOWN"


@pytest.mark.parametrize("code", [12028, 20034, 79, 48])
def test_r14_3_an_sxid_is_unknown_the_catalogue_covers_xids_only(code: int) -> None:
    assert xid.action("SXID", code) == "UNKNOWN"  # even where an Xid of that number has one


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (8, "GPU stopped processing"),
        (44, "Graphics Engine fault during context switch"),
        (46, "GPU stopped processing"),
        (121, "C2C Error"),
        (136, "Link Training Failed"),
        (143, "GPU Initialization Error"),
        (145, "NVLINK: RLW Error"),
        (151, "Key rotation Error"),
        (155, "NVLINK: SW Defined Error"),
        (167, "PCIE_FATAL_TIMEOUT"),
        (169, "Internal micro-controller halt"),
        # R3's own names stay where the catalogue words them differently.
        (74, "NVLink Error"),
        (94, "Contained ECC error"),
        (140, "Unrecovered ECC Error"),
        (154, "GPU recovery action changed"),
        (61, "Internal micro-controller breakpoint/warning"),
        # The catalogue says "Unused": no name, as for a code it does not list.
        (1, "Xid 1"),
        (14, "Xid 14"),
        (173, "Xid 173"),
    ],
)
def test_r14_3_codes_beyond_r3_are_named_from_the_catalogue(code: int, name: str) -> None:
    assert xid.name("XID", code) == name


@pytest.mark.parametrize(
    ("code", "severity", "action"),
    [(63, "CRITICAL", "IGNORE"), (94, "CRITICAL", "RESTART_APP"), (143, "WARN", "RESET_GPU"), (45, "USER", "WORKFLOW_XID_45"), (46, "WARN", "RESET_GPU")],
)
def test_r14_3_severities_stay_r3s_an_action_is_advice(code: int, severity: str, action: str) -> None:
    assert (xid.severity("XID", code), xid.action("XID", code)) == (severity, action)


def test_r14_3_the_order_runs_from_no_advice_to_escalation() -> None:
    rank = {action: i for i, action in enumerate(ACTION_STRENGTH)}
    assert ACTION_STRENGTH[0] == "UNKNOWN" and ACTION_STRENGTH[-1] == "CONTACT_SUPPORT"
    assert len(set(ACTION_STRENGTH)) == len(ACTION_STRENGTH)
    ladder = ["UNKNOWN", "IGNORE", "RESTART_APP", "RESET_GPU", "RESTART_VM", "RESTART_BM", "CHECK_MECHANICALS", "CONTACT_SUPPORT"]
    assert [rank[a] for a in ladder] == sorted(rank[a] for a in ladder)
    # A workflow ranks by the largest step its guidance can end in, below that step given outright.
    assert rank["RESTART_APP"] < rank["WORKFLOW_XID_45"] < rank["RESET_GPU"]  # alone: restart the fabric manager
    assert rank["CHECK_UVM"] < rank["RESET_GPU"]  # RESET_GPU only with UVM/vGPU
    assert rank["RESET_GPU"] < rank["WORKFLOW_XID_48"] < rank["RESTART_VM"]  # reset, or drain and reset
    assert rank["RESET_GPU"] < rank["WORKFLOW_NVLINK5_ERR"] < rank["RESTART_BM"]
    assert rank["RESTART_VM"] < rank["WORKFLOW_NVLINK_ERR"] < rank["RESTART_BM"]  # a GPU reset or a node reboot
    assert rank["IGNORE"] < rank["XID_154"] < rank["RESTART_APP"]  # defers to the Xid 154 line


def test_r14_3_every_action_in_the_table_is_in_the_order() -> None:
    assert set(xid.actions.values()) | {xid.default_action, xid.sxid_action} <= set(ACTION_STRENGTH)


def test_r14_3_strongest_action_among_a_candidates_faults() -> None:
    assert strongest(["RESTART_APP", "RESET_GPU", "IGNORE"]) == "RESET_GPU"
    assert strongest(["WORKFLOW_XID_48", "RESTART_BM", "RESET_GPU"]) == "RESTART_BM"
    assert strongest([xid.action("XID", c) for c in (63, 94, 48)]) == "WORKFLOW_XID_48"
    assert strongest(iter(["IGNORE"])) == "IGNORE"
    assert strongest([]) == "UNKNOWN"
    assert strongest(["UNKNOWN", "IGNORE"]) == "IGNORE"
    assert strongest(["REBOOT_PLEASE", "IGNORE"]) == "IGNORE"  # not NVIDIA's word: counts as UNKNOWN
    assert strongest(["REBOOT_PLEASE"]) == "UNKNOWN"


@given(st.lists(st.sampled_from(ACTION_STRENGTH + ("NOT_AN_ACTION",)), max_size=12), st.randoms(use_true_random=False))
def test_r14_3_strongest_is_the_same_in_every_order(actions: list[str], rnd) -> None:
    shuffled = list(actions)
    rnd.shuffle(shuffled)
    best = strongest(actions)
    assert strongest(shuffled) == best and best in ACTION_STRENGTH
    assert all(ACTION_STRENGTH.index(best) >= ACTION_STRENGTH.index(a) for a in actions if a in ACTION_STRENGTH)


RULE_FILE = """name = "actions"
[xid]
critical = [48, 62, 63, 64, 74, 79, 94, 95, 109, 119, 120, 140, 143]
default_action = "CONTACT_SUPPORT"
sxid_action = "RESET_GPU"
[xid.actions]
79 = "RESET_GPU"
143 = "RESTART_BM"
"""


def test_r14_3_a_rule_file_overrides_actions_and_severities(tmp_path: Path) -> None:
    path = tmp_path / "actions.toml"
    path.write_text(RULE_FILE)
    table = load_rules(path).xid
    assert table.action("XID", 79) == "RESET_GPU" and table.action("XID", 143) == "RESTART_BM"
    assert table.severity("XID", 143) == "CRITICAL"
    assert table.action("XID", 48) == "CONTACT_SUPPORT"  # a table given replaces the default wholesale
    assert table.action("SXID", 12028) == "RESET_GPU"
    assert table.name("XID", 143) == "GPU Initialization Error"  # fields not given keep their default


def test_r14_3_a_json_rule_file_overrides_an_action(tmp_path: Path) -> None:
    path = tmp_path / "actions.json"
    actions = {**{str(k): v for k, v in xid.actions.items()}, "63": "RESET_GPU"}
    path.write_text(json.dumps({"name": "j", "xid": {"actions": actions}}))
    table = load_rules(path).xid
    assert table.action("XID", 63) == "RESET_GPU" and table.action("XID", 79) == "RESTART_BM"


@pytest.mark.parametrize(
    ("content", "names"),
    [
        ('[xid.actions]\n79 = "REBOOT"\n', "$.xid.actions"),
        ('[xid]\nsxid_action = "reset_gpu"\n', "$.xid.sxid_action"),
        ('[xid]\ndefault_action = ""\n', "$.xid.default_action"),
        ('[xid.actions]\nseventy-nine = "RESET_GPU"\n', "$.xid.actions"),
    ],
)
def test_r14_3_a_rule_file_action_outside_the_catalogue_is_rejected_naming_the_field(tmp_path: Path, content: str, names: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(content)
    with pytest.raises(RuleFileError) as error:
        load_rules(path)
    assert names in str(error.value) and "faultline rules show" in str(error.value)


@pytest.mark.parametrize(
    "table",
    [
        XidTable(actions={**xid.actions, 79: "RESET_GPU"}),
        XidTable(actions={code: a for code, a in xid.actions.items() if code != 31}),
        XidTable(default_action="CONTACT_SUPPORT"),
        XidTable(sxid_action="RESET_GPU"),
    ],
)
def test_r14_3_changing_an_action_changes_the_rules_version(table: XidTable) -> None:
    assert Rules(xid=table).version != DEFAULT_RULES.version
    assert Rules(xid=XidTable(actions=dict(xid.actions))).version == DEFAULT_RULES.version


def test_r14_3_rules_show_prints_the_actions_and_reads_back_as_the_same_rule_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli import main  # the command line, as an operator runs it

    assert main(["rules", "show"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["xid"]["actions"]["79"] == "RESTART_BM" and shown["xid"]["actions"]["48"] == "WORKFLOW_XID_48"
    assert shown["xid"]["default_action"] == "UNKNOWN" and shown["xid"]["sxid_action"] == "UNKNOWN"
    assert shown["xid"]["names"]["143"] == "GPU Initialization Error"
    assert shown["xid"] == json.loads(json.dumps(rules_document(DEFAULT_RULES)["xid"]))
    # What `rules show` prints is a rule file: the full default table, which checks the
    # built-in data against the same types a rule file is held to.
    path = tmp_path / "shown.json"
    path.write_text(json.dumps({k: v for k, v in shown.items() if k != "rules_version"}))
    assert load_rules(path).xid == xid and shown["rules_version"] == DEFAULT_RULES.version
    assert msgspec.convert(msgspec.to_builtins(xid), XidTable) == xid
