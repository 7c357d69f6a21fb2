"""`faultline record` and `faultline run` against the protocol double: the same watch,
written to a trace file or classified in this process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson
import pytest

from app.bridge.resources import KINDS
from app.cli import bridge as bridge_cli
from app.cli import main as cli_main
from app.model.envelope import TraceLine
from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER
from app.embedded.pipeline import Pipeline
from app.replay.trace import read_lines, replay
from tests.bridge.helpers import CLUSTER, apply_story, pod, source_lines, wait_for, watched_changes
from tests.unit import builders, stories
from tests.unit.scenario import final_verdicts

ROOT = Path(__file__).resolve().parents[2]


def story() -> list[dict]:
    """Three attempts whose objects carry times around now, as a live cluster's would
    (a fault's relevance is judged against failure times, some of which are the
    records' observed_at, which the bridge stamps with the wall clock)."""
    builders.reset_ids()
    t0 = datetime.now(timezone.utc) - timedelta(minutes=2)
    return [*stories.pod_task_nvlink(t0=t0), *stories.mpijob_row_remap(t0=t0), *stories.rayjob_user_fault(t0=t0)]


def summary(verdicts) -> dict[str, tuple]:
    """What must not depend on the transport: per attempt (without the cluster), the verdict."""
    return {
        key.split("/", 1)[1]: (v.code, v.kind, v.gpu_fault.code if v.gpu_fault else None, v.faulted_pod.name if v.faulted_pod else None)
        for key, v in verdicts.items()
    }


def start_cli(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "app", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs
    )


def test_record_writes_a_trace_that_classifies_like_the_story(kube, tmp_path):
    records = story()
    changes = watched_changes(records)
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    out = tmp_path / "trace.jsonl"
    proc = start_cli("record", "--kubeconfig", str(kubeconfig), "--cluster", CLUSTER, "--out", str(out), "--max-records", str(changes))
    try:
        wait_for(lambda: len(kube.watches) == len(KINDS), timeout=30, what="every watch of the recorder")
        apply_story(kube, records)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill() if proc.poll() is None else None
    assert proc.returncode == 0, stderr.decode()
    assert f"recorded {changes} records to {out}".encode() in stderr
    lines = source_lines(out.read_bytes())
    assert len(lines) == changes
    for line in lines:
        parsed = orjson.loads(line)
        assert list(parsed) == ["topic", "key", "value"]
        TraceLine(**{**parsed, "value": b""})  # the DESIGN.md trace line shape
    progress = [orjson.loads(line) for line in out.read_bytes().splitlines() if b'"type":"BOOKMARK"' in line]
    assert progress, "the trace holds progress records"
    for line in progress:
        assert line["key"] == line["value"]["object"]["kind"] and line["value"]["cluster"] == CLUSTER
    emits = list(replay(read_lines(out), Pipeline()))
    recorded = {e.key: e.value for e in emits if e.topic == CLASSIFIED_FAILURES}
    # Every line is read, progress records aside (the pipeline reads those once it knows them).
    assert [e.value.reason for e in emits if e.topic == DEAD_LETTER and '"BOOKMARK"' not in e.value.value] == []
    assert summary(recorded) == summary(final_verdicts(records))
    assert len(recorded) == 3


def test_record_stops_cleanly_on_ctrl_c(kube, tmp_path):
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    out = tmp_path / "trace.jsonl"
    proc = start_cli("record", "--kubeconfig", str(kubeconfig), "--cluster", CLUSTER, "--out", str(out), "--kinds", "Pod")
    try:
        wait_for(lambda: kube.watches, timeout=30, what="the recorder's watch")
        for i in range(50):
            kube.create("pods", pod(f"p{i}"))
        wait_for(lambda: out.exists() and len(source_lines(out.read_bytes())) == 50, what="50 lines")
        kube.create("pods", pod("last"))
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        _, stderr = proc.communicate(timeout=15)
        assert time.monotonic() - started < 5
    finally:
        proc.kill() if proc.poll() is None else None
    assert proc.returncode == 0, stderr.decode()
    data = out.read_bytes()
    assert data.endswith(b"\n")
    names = [orjson.loads(line)["value"]["object"]["metadata"]["name"] for line in source_lines(data)]
    assert len(names) in (50, 51) and names[:50] == [f"p{i}" for i in range(50)]
    assert b"recorded" in stderr and b"Traceback" not in stderr


def test_run_classifies_live_and_prints_verdicts_as_they_come(kube, tmp_path, capsys):
    records = story()
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    out = tmp_path / "outputs.jsonl"

    def play() -> None:
        wait_for(lambda: len(kube.watches) == len(KINDS), timeout=30, what="every watch")
        apply_story(kube, records)

    player = threading.Thread(target=play)
    player.start()
    code = cli_main(["run", "--kubeconfig", str(kubeconfig), "--cluster", CLUSTER, "--state", str(tmp_path / "state"), "--out", str(out),
                     "--max-records", str(watched_changes(records))])
    player.join()
    captured = capsys.readouterr()
    assert code == 0, captured.err
    lines = captured.out.splitlines()
    [header] = [line for line in lines if line.startswith("WHAT ")]  # one header
    printed = [line for line in lines if line.startswith(("verdict ", "revised "))]
    expected = final_verdicts(records)
    assert len(printed) >= 3
    for key, verdict in expected.items():
        live_key = CLUSTER + "/" + key.split("/", 1)[1]
        assert any(line.split()[1:4] == [live_key, verdict.code, verdict.kind] for line in printed), (live_key, printed)
    # aligned under the header although printed one verdict at a time
    assert {[m.start() for m in re.finditer(r"\S+", line)][2] for line in printed} == {header.index("CODE")}
    assert "Xid 74 CRITICAL gpu-17/gpu0" in captured.out
    assert "=None" not in captured.out and max(len(line) for line in lines) <= 200
    written = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert {w["topic"] for w in written} >= {CLASSIFIED_FAILURES, "faultline.faults"}
    assert "3 verdict(s)" in captured.err or "verdict(s)" in captured.err


def test_commands_are_registered_with_their_flags():
    import argparse

    parser = argparse.ArgumentParser()
    bridge_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bridge", "--cluster", "a", "--bootstrap", "k:9092", "--topic-prefix", "p."])
    assert args.run is bridge_cli.run_bridge and args.cluster == "a" and args.topic_prefix == "p."
    args = parser.parse_args(["record", "--cluster", "a", "--out", "t.jsonl", "--duration", "5"])
    assert args.run is bridge_cli.run_record and args.duration == 5.0
    args = parser.parse_args(["run", "--cluster", "a", "--namespaces", "ml"])
    assert args.run is bridge_cli.run_live and args.out is None


def test_a_missing_cluster_name_is_exit_code_2_with_the_fix(capsys):
    assert cli_main(["record", "--out", "/dev/null"]) == 2
    assert "--cluster NAME or set FAULTLINE_CLUSTER" in capsys.readouterr().err


def kubeconfig_with_server(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: c\n  cluster:\n    server: {server}\n"
        "users:\n- name: u\n  user:\n    token: t\n"
        "contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n"
    )
    return path


def test_a_kubeconfig_that_does_not_exist_is_named_with_the_fix(tmp_path, capsys):
    assert cli_main(["record", "--kubeconfig", str(tmp_path / "nope"), "--cluster", "c", "--out", str(tmp_path / "t.jsonl")]) == 1
    err = capsys.readouterr().err
    assert f"the kubeconfig {tmp_path / 'nope'} does not exist" in err and "No configuration found" not in err


def test_no_kubeconfig_anywhere_says_where_it_looked(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("FAULTLINE_KUBECONFIG", raising=False)
    assert cli_main(["run", "--cluster", "c"]) == 1
    err = capsys.readouterr().err
    assert "no Kubernetes client configuration" in err and "~/.kube/config does not exist" in err and "--kubeconfig FILE" in err


def test_a_kubeconfig_that_is_not_yaml_is_an_error_not_a_traceback(tmp_path, capsys):
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nclusters: [\n  - name: x\n    cluster: {server: https://h\n")
    assert cli_main(["record", "--kubeconfig", str(bad), "--cluster", "c", "--out", str(tmp_path / "t.jsonl")]) == 1
    err = capsys.readouterr().err
    assert f"the kubeconfig {bad} is not valid YAML (line" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("this is not a kubeconfig\n", "is not a kubeconfig: its YAML is a string (line 1), not a mapping"),
        ("- name: c\n", "is not a kubeconfig: its YAML is a list (line 1), not a mapping"),
        ("apiVersion: v1\nclusters: prod\n", "`clusters` (line 2) is a string, not a list"),
        ("clusters:\n- cluster: {server: https://h}\n", "`clusters[0]` (line 2) has no `name`"),
        ("", "is empty"),
    ],
    ids=["text", "list", "clusters-a-string", "no-name", "empty"],
)
def test_a_kubeconfig_of_the_wrong_shape_names_the_file_what_is_wrong_and_the_fix(tmp_path, capsys, text, said):
    """Issue 29 item 8: the client's own error was `'str' object does not support item assignment`."""
    bad = tmp_path / "kubeconfig"
    bad.write_text(text)
    assert cli_main(["run", "--kubeconfig", str(bad), "--cluster", "c", "--state", str(tmp_path / "state")]) == 1
    err = capsys.readouterr().err
    assert f"the kubeconfig {bad} " in err and said in err, err
    assert "kubectl config view --raw" in err and "--kubeconfig FILE" in err
    assert "Traceback" not in err and "item assignment" not in err


def test_an_api_server_host_that_does_not_resolve_fails_at_once(tmp_path, capsys):
    kubeconfig = kubeconfig_with_server(tmp_path / "kubeconfig", "https://nowhere.invalid:6443")
    started = time.monotonic()
    assert cli_main(["record", "--kubeconfig", str(kubeconfig), "--cluster", "c", "--out", str(tmp_path / "t.jsonl")]) == 1
    assert time.monotonic() - started < 5
    err = capsys.readouterr().err
    assert "cannot resolve the API server's host 'nowhere.invalid'" in err and "server address in the kubeconfig" in err


def test_an_unreachable_api_server_is_retried_then_given_up_with_one_line_per_watch(tmp_path, capsys, caplog):
    import logging
    import socket

    caplog.set_level(logging.INFO, logger="faultline.bridge")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = kubeconfig_with_server(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
    code = cli_main(["record", "--kubeconfig", str(kubeconfig), "--cluster", "c", "--kinds", "Pod,Event", "--out", str(tmp_path / "t.jsonl"),
                     "--give-up-after", "1", "--backoff-initial", "0.05", "--backoff-max", "0.2"])
    err = capsys.readouterr().err
    assert code == 1
    assert "has failed every request for" in err and "connection refused" in err and "--give-up-after" in err
    logged = [r.getMessage() for r in caplog.records]
    for kind in ("Pod", "Event"):
        lines = [m for m in logged if m.startswith(f"{kind} (all namespaces): connection refused")]
        assert len(lines) == 1, logged  # one line per outage, however many tries
    assert not any(r.exc_info for r in caplog.records) and not any("urllib3" in m for m in logged)
