"""Error messages of the command line: each names the problem and the fix, exits non-zero
without a traceback, and comes quickly."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli import main

ROOT = Path(__file__).resolve().parents[2]
MIXED = ROOT / "examples" / "traces" / "mixed.jsonl"


def test_classify_on_a_directory_says_it_is_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["classify", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path} is a directory" in err and ".jsonl" in err


def test_r10_a_rule_file_making_an_xid_both_user_and_critical_is_rejected_naming_the_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = tmp_path / "both.toml"
    rules.write_text('name = "both"\n[xid]\nuser = [13, 31]\ncritical = [13, 79]\n')
    assert main(["classify", str(MIXED), "--rules", str(rules)]) == 2
    err = capsys.readouterr().err
    assert "xid.user and xid.critical both list Xid 13" in err and "remove it from one" in err
    assert main(["rules", "show", "--rules", str(rules)]) == 2


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again: nothing listens there


@pytest.mark.parametrize("command", [["topics", "create"], ["tail", "faultline.faults"], ["publish", str(MIXED)], ["worker"]])
def test_no_broker_is_said_within_seconds(command: list[str]) -> None:
    pytest.importorskip("kafka")
    bootstrap = f"127.0.0.1:{_refused_port()}"
    started = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "app", *command, "--bootstrap", bootstrap], capture_output=True, text=True,
                         timeout=60, stdin=subprocess.DEVNULL, cwd=ROOT)
    took = time.monotonic() - started
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert f"cannot reach Kafka at {bootstrap}" in res.stderr and "--bootstrap / FAULTLINE_BOOTSTRAP" in res.stderr, res.stderr
    assert took < 8, f"{took:.1f}s"  # was 30 s of silence


def test_a_secret_has_no_flag_and_tls_files_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["tail", "x", "--sasl-password", "visible-in-ps"])
    assert main(["tail", "x", "--security-protocol", "SSL", "--ssl-cafile", str(tmp_path / "missing.pem")]) == 2
    assert "ssl_cafile" in capsys.readouterr().err
    assert main(["tail", "x", "--security-protocol", "SASL_SSL"]) == 2
    assert "FAULTLINE_SASL_PASSWORD" in capsys.readouterr().err
