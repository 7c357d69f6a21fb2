"""R7.4: a sweep drops exactly the states whose expiry time has passed at their cluster's
stream time, though it reads only those the runner's expiry index says are due."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import msgspec
import pytest

from app.core.fleet.fold import fleet_expires_at
from app.core.fleet.states import FailureStats, GpuTimeStats, RateStats, horizon_at
from app.core.base.rules import DEFAULT_FLEET, DEFAULT_RULES, Rules
from app.core.engine.runner import KeyTimes, Scope
from app.core.engine.topology import STAGES
from app.embedded.pipeline import Pipeline
from app.replay.trace import read_lines, replay

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "traces"
# A short retention and history: states expire at most sweeps.
SHORT = msgspec.structs.replace(
    DEFAULT_RULES,
    retention_seconds=1200.0,
    fleet=msgspec.structs.replace(DEFAULT_FLEET, window_seconds=1800, history_hours=2, threshold=2),
)


def _due_by_judging_every_state(pipeline: Pipeline) -> set[str]:
    """What a sweep that reads every state would drop."""
    due = set()
    for stage in STAGES:
        states, expires_at = pipeline.states.get(stage.name), stage.expires_at
        if states is None or expires_at is None:
            continue
        scope = pipeline.scopes[stage.name]
        for key, state in states.items():
            now, at = scope.stream_time(key.partition("/")[0]), expires_at(state, pipeline.rules)
            if now is not None and at is not None and now >= at:
                due.add(f"{stage.name}:{key}")
    return due


def _held(pipeline: Pipeline) -> set[str]:
    return {f"{name}:{key}" for name, states in pipeline.states.items() for key in states}


class _Checked(Pipeline):
    def __init__(self, rules: Rules) -> None:
        super().__init__(rules)
        self.dropped = 0

    def _sweep(self, at: datetime) -> None:
        first = self._next_sweep == datetime.min.replace(tzinfo=timezone.utc)  # the first sweep only sets the next
        due, before = _due_by_judging_every_state(self), _held(self)
        super()._sweep(at)
        if not first:
            assert before - _held(self) == due
            self.dropped += len(due)


@pytest.mark.parametrize("trace", ["mixed.jsonl", "workloads.jsonl", "jobset-restart-xid94.jsonl", "evidence.jsonl"])
def test_r7_4_a_sweep_drops_exactly_the_states_due(trace: str) -> None:
    pipeline = _Checked(SHORT)
    for _ in replay(read_lines(EXAMPLES / trace), pipeline):
        pass
    assert pipeline.dropped > 0


def test_r7_4_the_expiry_index_rebuilt_from_the_store_is_the_one_kept_as_states_are_written() -> None:
    """As after a restart or rebalance: a scope without an index builds it from its states,
    and finds what judging every state finds; a key the driver keeps (does not forget) is
    found again at the next sweep."""
    pipeline = Pipeline(SHORT)
    lines = list(read_lines(EXAMPLES / "mixed.jsonl"))
    for _ in replay(lines[: len(lines) // 2], pipeline, finish=False):
        pass
    due = 0
    for stage in STAGES:
        states: dict[str, Any] | None = pipeline.states.get(stage.name)
        expires_at = stage.expires_at
        if states is None or expires_at is None:
            continue
        runner, live, store = pipeline._runners[stage.name], pipeline.scopes[stage.name], pipeline._stores[stage.name]
        later = Scope(whole=True, latest={c: at + timedelta(days=1) for c, at in live.latest.items()})
        assert later.expiring is None
        found = runner.expired(later, store)
        assert later.expiring is not None and live.expiring is not None
        assert later.expiring.times == live.expiring.times  # rebuilt == kept up as states were written
        judged = sorted(k for k, s in states.items() if (at := expires_at(s, SHORT)) is not None and at <= later.latest[k.partition("/")[0]])
        assert found == judged
        assert runner.expired(later, store) == found  # none forgotten: all found again
        due += len(found)
    assert due > 0


def test_r7_4_an_hourly_fleet_state_expires_when_its_hour_leaves_the_history() -> None:
    pipeline = Pipeline(SHORT)
    for _ in replay(read_lines(EXAMPLES / "mixed.jsonl"), pipeline, finish=False):
        pass
    fleet = SHORT.fleet
    assert fleet is not None
    hourly = [s for s in pipeline.states["fleet"].values() if isinstance(s, RateStats | FailureStats | GpuTimeStats)]
    assert hourly
    for state in hourly:
        at = fleet_expires_at(state, SHORT)
        assert at is not None
        tick = timedelta(microseconds=1)
        assert not state.hour < horizon_at(at - tick, fleet.history_hours)  # still kept a moment before
        assert state.hour < horizon_at(at, fleet.history_hours)


def test_r7_4_a_key_whose_time_moves_is_due_at_its_latest_time_only() -> None:
    """The index pushes a key again only when its time moves earlier; one that moved later
    (a state written again) is found at its new time, never at the old one."""
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    index = KeyTimes()
    index.set("c/a", t0)
    index.set("c/a", t0 + timedelta(hours=2))  # later: no new heap entry
    index.set("c/b", t0 + timedelta(hours=3))
    index.set("c/b", t0 + timedelta(hours=1))  # earlier: found at the earlier time
    assert index.due("c", lambda at: at <= t0 + timedelta(minutes=30)) == []
    assert index.due("c", lambda at: at <= t0 + timedelta(hours=1)) == ["c/b"]
    assert index.due("c", lambda at: at <= t0 + timedelta(hours=2)) == ["c/a", "c/b"]  # found keys stay
    index.discard("c/a")
    index.set("c/b", None)
    assert index.due("c", lambda at: True) == []
    index.set("c/a", t0)  # back, at a time before the entry it had
    assert index.due("c", lambda at: at <= t0) == ["c/a"]
    assert sum(len(h) for h in index.heaps.values()) <= 2


def test_r7_4_the_index_forgets_keys_that_stopped_waiting_or_expiring() -> None:
    """A key set far ahead and then discarded leaves its heap entry behind until a rebuild:
    the heap stays in proportion to the keys that still have a time."""
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    index = KeyTimes()
    for i in range(5_000):
        index.set(f"c/{i}", t0 + timedelta(days=30))  # far ahead
        index.set(f"c/{i}", None)  # no longer waits
    index.set("c/live", t0)
    assert len(index) == 1
    assert len(index.heaps["c"]) <= 2 * len(index) + 1024 + 1 and len(index.queued) <= 2 * len(index) + 1024 + 1
    assert index.due("c", lambda at: at <= t0) == ["c/live"]
