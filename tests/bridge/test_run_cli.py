"""`faultline run` as a command (against the protocol double): it reads a rule file as
every command does, says so when no watch ever reached the API server, and names what is
wrong with its state folder."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import orjson
import pytest

from app.bridge.resources import KINDS
from app.cli import main as cli_main
from app.model.records import CLASSIFIED_FAILURES
from tests.bridge.helpers import CLUSTER, apply_story, wait_for, watched_changes
from tests.bridge.test_cli import kubeconfig_with_server, story

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "examples" / "rules" / "xid-143-critical.toml"


def unreachable_kubeconfig(path: Path) -> Path:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return kubeconfig_with_server(path, f"http://127.0.0.1:{port}")


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_run_classifies_with_the_rule_file_of_rules_or_faultline_rules(kube, tmp_path, capsys, monkeypatch, how):
    records = story()
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    out = tmp_path / "outputs.jsonl"
    args = ["run", "--kubeconfig", str(kubeconfig), "--cluster", CLUSTER, "--state", str(tmp_path / "state"), "--out", str(out),
            "--max-records", str(watched_changes(records))]
    if how == "flag":
        args += ["--rules", str(RULES)]
    else:
        monkeypatch.setenv("FAULTLINE_RULES", str(RULES))

    player = threading.Thread(target=lambda: (wait_for(lambda: len(kube.watches) == len(KINDS), timeout=30, what="every watch"), apply_story(kube, records)))
    player.start()
    code = cli_main(args)
    player.join()
    assert code == 0, capsys.readouterr().err
    versions = {orjson.loads(line)["value"]["rules_version"] for line in out.read_bytes().splitlines()
                if orjson.loads(line)["topic"] == CLASSIFIED_FAILURES}
    assert versions and all(v.startswith("xid143-critical@") for v in versions), versions


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_run_with_a_bad_rule_file_exits_2_naming_it_before_it_starts(tmp_path, capsys, monkeypatch, how):
    bad = tmp_path / "bad.toml"
    bad.write_text("[xid\n")
    args = ["run", "--kubeconfig", str(unreachable_kubeconfig(tmp_path / "kubeconfig")), "--cluster", "c", "--state", str(tmp_path / "state"),
            "--duration", "5"]  # bounded, should it start
    if how == "flag":
        args += ["--rules", str(bad)]
    else:
        monkeypatch.setenv("FAULTLINE_RULES", str(bad))
    assert cli_main(args) == 2
    err = capsys.readouterr().err
    assert f"rule file {bad}" in err and "Traceback" not in err
    assert not (tmp_path / "state").exists()  # nothing started


def test_run_for_a_duration_with_no_watch_ever_connected_exits_1_with_the_reason(tmp_path, capsys, caplog):
    kubeconfig = unreachable_kubeconfig(tmp_path / "kubeconfig")
    code = cli_main(["run", "--kubeconfig", str(kubeconfig), "--cluster", "c", "--state", str(tmp_path / "state"), "--duration", "1",
                     "--kinds", "Pod,Event", "--backoff-initial", "0.05", "--backoff-max", "0.2"])
    err = capsys.readouterr().err
    assert code == 1
    assert "no watch ever reached the API server (--duration 1s ran out" in err and "the warnings above say why" in err
    assert any("connection refused" in r.getMessage() for r in caplog.records)
    assert "verdict(s)" not in err  # not the summary of a run that read something


def test_run_for_a_duration_that_reached_the_server_exits_0_though_nothing_failed(kube, tmp_path, capsys):
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    code = cli_main(["run", "--kubeconfig", str(kubeconfig), "--cluster", "c", "--state", str(tmp_path / "state"), "--duration", "1"])
    assert code == 0, capsys.readouterr().err


@pytest.mark.parametrize("under", [False, True], ids=["the folder", "a parent"])
def test_a_state_folder_that_is_a_file_is_named_with_the_fix(tmp_path, capsys, under):
    taken = tmp_path / "state"
    taken.write_text("")
    state = taken / "prod-a" if under else taken
    code = cli_main(["run", "--kubeconfig", str(unreachable_kubeconfig(tmp_path / "kubeconfig")), "--cluster", "c", "--state", str(state)])
    err = capsys.readouterr().err
    assert code == 1
    assert f"{taken} is a file, not a folder. Give --state a folder (it is created if missing)" in err
    assert "Errno" not in err and "Traceback" not in err
    # The folder it suggests is beside the file, not under it (issue 38).
    suggested = Path(err.split(", e.g. ", 1)[1].split(",", 1)[0].split()[0].rstrip("."))
    assert taken not in (suggested, *suggested.parents) and tmp_path in suggested.parents
