"""Two clusters whose stream times are far apart (issue 29): each cluster's history is kept
on its own stream time in the fleet view (app/core/fleet/read_model.py), as the fleet stage
windows each on its own watermark (SPEC R12), so the page never says "0 GPU faults" beside
the quarantine candidates those faults made."""

from __future__ import annotations

import pytest

from app.core.base.emit import Emit
from app.core.fleet.read_model import FleetState, read
from app.core.fleet.summary import fleet_summary
from app.core.base.rules import DEFAULT_FLEET
from tests.fleet.driver import run
from tests.fleet.records import T0, fault, hours

BEHIND = "prod-b"  # five days behind prod-a, beyond the 48 h of history
AHEAD = "prod-a"


def derived() -> list[Emit]:
    _, out = run([
        fault("b-1", cluster=BEHIND, node="gpu-9", first_seen=T0),
        fault("b-2", cluster=BEHIND, node="gpu-9", code=48, first_seen=T0 + hours(1)),
        fault("b-3", cluster=BEHIND, node="gpu-9", code=74, first_seen=T0 + hours(2)),
        fault("b-4", cluster=BEHIND, node="gpu-9", code=94, first_seen=T0 + hours(3)),
        fault("a-1", cluster=AHEAD, node="gpu-17", first_seen=T0 + hours(5 * 24)),
    ])  # fmt: skip
    return out


@pytest.mark.parametrize("order", ["behind first", "ahead first"])
def test_a_cluster_far_behind_another_keeps_its_faults_beside_its_candidates(order):
    out = derived()
    by_cluster = {c: [e for e in out if getattr(e.value, "cluster", None) == c] for c in (BEHIND, AHEAD)}
    state = FleetState()
    for cluster in ([BEHIND, AHEAD] if order == "behind first" else [AHEAD, BEHIND]):
        for emit in by_cluster[cluster]:
            read(state, emit, DEFAULT_FLEET)
    summary = fleet_summary(state, DEFAULT_FLEET)
    candidates = {(c.cluster, c.node) for c in summary.quarantine if c.scope == "node"}
    assert candidates == {(BEHIND, "gpu-9")}
    assert (summary.totals.faults, summary.totals.severity.critical, summary.totals.nodes) == (5, 5, 2)
    nodes = {(r.cluster, r.node): (r.critical, r.candidate) for r in summary.nodes}
    assert nodes == {(BEHIND, "gpu-9"): (4, True), (AHEAD, "gpu-17"): (1, False)}
    assert state.stream_time == T0 + hours(5 * 24)  # the newest, for "stream time" on the page
    assert sum(p.critical for p in summary.hours) == 5  # the chart reaches back to the older cluster's hours


def test_a_cluster_still_forgets_what_its_own_stream_time_leaves_behind():
    out = derived()
    state = FleetState()
    for emit in out:
        read(state, emit, DEFAULT_FLEET)
    later = fault("b-5", cluster=BEHIND, node="gpu-3", severity="USER", code=13, first_seen=T0 + hours(3 * 24))
    _, more = run([later])
    for emit in more:
        read(state, emit, DEFAULT_FLEET)
    kept = {(r.cluster, r.node) for r in fleet_summary(state, DEFAULT_FLEET).nodes}
    assert kept == {(BEHIND, "gpu-3"), (AHEAD, "gpu-17")}  # prod-b's first day is past its 48 h
