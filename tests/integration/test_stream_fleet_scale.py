"""Issue 17 on a real broker: two workers in one group each serve the fleet page with
the totals `faultline fleet` prints for the same trace, and no record of the run
(output, internal or changelog) passes 64 KB. `python -m bench.fleet_scale --kafka`
runs the same code at 100,000 failed attempts on 2,000 nodes."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from bench.fleet_scale import LIMIT, fleet_command, run_workers, write_trace


def test_either_of_two_workers_shows_the_totals_of_faultline_fleet(kafka_bootstrap: str, tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "fleet.jsonl", 800, 200, progress_every=timedelta(minutes=30))
    want, _ = fleet_command(trace)
    run = run_workers(kafka_bootstrap, trace, want, tmp_path, workers=2, timeout=240)
    assert list(run.pages.values()) == [want, want]
    assert all(n > 0 for n in run.read.values()), f"each worker processes part of the trace: {run.read}"
    assert any(topic.endswith("-changelog") for topic in run.largest.bytes) and "faultline.fleet-inputs" in run.largest.bytes
    assert run.largest.top() <= LIMIT, run.largest.lines("record")
