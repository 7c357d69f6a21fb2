"""The broker benchmarks still run (tiny sizes, on the session's broker)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("script", ["bench.replay_kafka", "bench.pipeline", "bench.rss"])
def test_broker_benchmark_smoke_mode_prints_its_figures(script, kafka_bootstrap):
    env = {**os.environ, "FAULTLINE_KAFKA_BOOTSTRAP": kafka_bootstrap}
    args = ["--smoke"] + (["--rate", "200"] if script == "bench.pipeline" else [])
    result = subprocess.run([sys.executable, "-m", script, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert lines[-1].startswith("summary: ") and all(": " in line for line in lines)


@pytest.mark.apiserver
def test_mark_benchmark_smoke_mode_prints_its_figures(kafka_bootstrap):
    """bench.mark starts an API server of its own (as the tests' is found: KUBEBUILDER_ASSETS or the cache)."""
    env = {**os.environ, "FAULTLINE_KAFKA_BOOTSTRAP": kafka_bootstrap}
    result = subprocess.run([sys.executable, "-m", "bench.mark", "--smoke", "--rate", "200"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    assert lines[-1].startswith("summary: ") and all(": " in line for line in lines)
    assert "0 missing" in lines[-1]
