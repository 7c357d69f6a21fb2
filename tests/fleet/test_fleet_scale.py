"""Issue 17, embedded: no table value and no output record grows with the number of
failed attempts (bench/fleet_scale.py runs the same at 100,000 attempts on 2,000 nodes)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from bench.fleet_scale import LIMIT, fleet_command, measure_embedded, totals_line, write_trace

NODES = 200
# Whatever the number of attempts: the largest state is a node's quarantine count at
# HITS_KEPT critical faults (~7 KB), the largest record the candidate record that lists
# them. Before the node's hours were states of their own, the worst node's value was
# 20 KB at 1,000 attempts here and 55 KB at 4,000.
BOUND = 12 * 1024


def test_the_largest_state_and_record_stay_under_a_bound_at_n_and_4n_attempts(tmp_path: Path) -> None:
    sizes = {}
    for attempts in (1_000, 4_000):
        trace = write_trace(tmp_path / f"{attempts}.jsonl", attempts, NODES, progress_every=timedelta(minutes=10))
        embedded = measure_embedded(trace)
        assert embedded.summary.totals.failures == attempts
        sizes[attempts] = (embedded.states.top(), embedded.records.top())
        assert set(embedded.states.bytes) == {"pods", "attempts", "gangs", "fleet"}
    assert all(state <= BOUND and record <= BOUND for state, record in sizes.values()), sizes
    assert BOUND < LIMIT


def test_the_measured_replay_shows_the_totals_of_faultline_fleet(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "fleet.jsonl", 300, 40, progress_every=timedelta(minutes=10))
    want, _ = fleet_command(trace)
    assert want.startswith("faults ") and "failures 300 " in want
    assert totals_line(measure_embedded(trace).summary) == want
