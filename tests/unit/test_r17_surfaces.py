"""SPEC R17 where people look: `faultline goodput` and its sample in the README, the
`faultline fleet` tables, /metrics and the read model of the fleet page (the page itself:
tests/fleet/test_page_browser.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from app.core.base.emit import Emit
from app.core.base.rules import DEFAULT_RULES
from app.core.fleet.view import LiveFleet
from app.model.fleet_records import GOODPUT
from app.model.records import IDLE_QUOTA
from app.web.metrics import render_metrics
from tests.fleet import promtext
from tests.unit.goodput_world import PodsWorld, pods_never_start, run

ROOT = Path(__file__).resolve().parents[2]
MIXED = ROOT / "examples" / "traces" / "mixed.jsonl"


def faultline(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _readme_sample(section: str) -> list[str]:
    text = (ROOT / "README.md").read_text().split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    blocks = text.split("```")[1::2]
    return next(b for b in blocks if not b.startswith("sh")).strip("\n").splitlines()


def test_r17_4_faultline_goodput_prints_the_figures_the_readme_shows() -> None:
    printed = faultline("goodput", str(MIXED)).splitlines()
    shown = _readme_sample("Where the GPU-hours went")
    assert shown[-1] == "..." and shown[:-1] == printed[: len(shown) - 1]
    assert printed[0].startswith("WHERE THE GPU-HOURS WENT  prod-a (stream time 2026-08-25 13:39 UTC): reserved 20.0 GPU-h")
    assert "FAILED ATTEMPTS (each up to its failure)" in printed and any(line.startswith("prod-a/ml/ckpt-4/train/2") for line in printed)


def test_r17_3_faultline_goodput_lists_idle_quota_with_when_it_ended(tmp_path: Path) -> None:
    trace = tmp_path / "idle.jsonl"
    trace.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in pods_never_start().records))
    printed = faultline("goodput", str(trace)).splitlines()
    idle = printed[printed.index(next(line for line in printed if line.startswith("IDLE QUOTA"))) + 2]
    assert idle.split() == ["prod-a/team-a/run-abc/a0/1", "team-a/team-a", "32", "2026-09-15", "10:30", "UTC", "2026-09-15", "10:55", "UTC", "no-running-pod"]


def test_r17_4_faultline_fleet_says_where_the_gpu_hours_went() -> None:
    printed = faultline("fleet", str(MIXED)).splitlines()
    start = next(i for i, line in enumerate(printed) if line.startswith("WHERE THE GPU-HOURS WENT  prod-a"))
    assert printed[start + 1].split()[:3] == ["NAMESPACE", "QUEUE", "RESERVED"]
    assert printed[start + 2].split()[:3] == ["ml", "team-a", "20.0"]


def _live(out: list[Emit]) -> LiveFleet:
    live = LiveFleet()
    for emit in out:
        live.observe(emit)
    return live


def test_r17_4_metrics_and_the_read_model_show_goodput_and_idle_quota() -> None:
    world = PodsWorld().create_jobset().create_workload().admit().unsuspend().pods_created().idle_for(1200)  # idle now
    out = run(world, end=False)
    assert [e.value.idle for e in out if e.topic == IDLE_QUOTA] == [True]
    live = _live(out)
    summary = live.summary()
    [idle] = summary.idle_quota
    assert (idle.attempt, idle.gpus, idle.queue, idle.why) == ("prod-a/team-a/run-abc/a0/1", 32, "team-a/team-a", "no-running-pod")
    types, samples = promtext.parse(render_metrics(live))
    assert types["faultline_idle_quota"] == types["faultline_idle_quota_gpus"] == types["faultline_goodput_gpu_seconds"] == "gauge"
    assert samples[("faultline_idle_quota_gpus", frozenset({("cluster", "prod-a"), ("queue", "team-a/team-a")}))] == 32
    # Released: no longer idle; its hour counted, all of it idle.
    world.release_quota().progress()
    out = run(world)
    live = _live(out)
    assert live.summary().idle_quota == []
    [cluster] = live.summary().goodput
    assert cluster.totals.reserved_gpu_seconds == cluster.totals.idle_gpu_seconds > 0 and cluster.totals.goodput == 0.0
    _, samples = promtext.parse(render_metrics(live))
    reserved = samples[("faultline_goodput_gpu_seconds", frozenset({("cluster", "prod-a"), ("figure", "reserved"), ("queue", "team-a/team-a")}))]
    assert reserved == cluster.totals.reserved_gpu_seconds
    assert samples[("faultline_goodput_ratio", frozenset({("cluster", "prod-a")}))] == 0.0
    assert not any(name == "faultline_idle_quota_gpus" for name, _ in samples)
    assert sum(1 for e in out if e.topic == GOODPUT) >= 1 and DEFAULT_RULES.max_idle_quota_seconds == 900
