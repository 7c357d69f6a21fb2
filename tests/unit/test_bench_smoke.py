"""The benchmarks still run (tiny sizes); their figures are measured in bench/, not here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("script", ["bench.core", "bench.replay", "bench.run_log", "bench.fleet_scale"])
def test_benchmark_smoke_mode_prints_its_figures(script):
    result = subprocess.run([sys.executable, "-m", script, "--smoke"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-1].startswith("summary: ")
    assert all(": " in line for line in lines)
