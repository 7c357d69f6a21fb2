"""Command-line errors say what is wrong and how to fix it (issue 29): a trace path that is
a device, a trace read through a pipe, output cut short by a closed pipe."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
MIXED = ROOT / "examples" / "traces" / "mixed.jsonl"


@pytest.mark.parametrize("command", [["classify"], ["fleet"], ["replay", "--out", "-", "--trace"]])
def test_a_trace_that_is_a_device_is_named_with_the_fix(capsys, command):
    assert cli_main([*command, "/dev/null"]) == 2
    err = capsys.readouterr().err
    assert "/dev/null is a device, not a trace file: give the path of a .jsonl trace" in err
    assert "does not exist" not in err


def test_a_trace_read_through_a_pipe_is_classified(tmp_path):
    """`faultline classify <(zcat trace.jsonl.gz)`: the path exists, but is no regular file."""
    script = f"exec {sys.executable} -m app classify /dev/fd/3 3< <(cat {MIXED})"
    res = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("ATTEMPT ") and "GpuNvlinkError" in res.stdout


def test_output_cut_short_by_a_closed_pipe_is_no_error():
    script = f"{sys.executable} -m app classify {MIXED} | head -1; echo ${{PIPESTATUS[0]}}"
    res = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.stdout.splitlines()[-1] == "0" and "Traceback" not in res.stderr and "BrokenPipe" not in res.stderr, res.stderr
