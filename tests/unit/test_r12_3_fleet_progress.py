"""R12.3, R12.4 over several partitions (tests/unit/partitioned.py), on the paths into the
fleet stage. Every partition of attempt-facts (and of gang-inputs) hears of every source
partition's progress. Forwarded as it came, tagged with the source partition, that progress
reached the fleet stage from each of them, and the fleet kept per source partition the
latest, not the least: an attempt partition running ahead vouched for times whose fleet
inputs another had not written yet. The fleet decides on its stream time (an hour past its
history is no longer counted, the quarantine window slides), so with several workers it
decided before the inputs it was deciding on had come, unlike the embedded driver.

Each stage that reads an internal topic and writes fleet inputs now forwards its own
watermark there, tagged with its own partition (`Stage.progress_as_own`), and the fleet
waits for every path (`topology.EXPECTED`): its stream time never passes that of any
partition of a stage that writes to it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.base.rules import DEFAULT_RULES, Rules
from app.core.engine.topology import ATTEMPTS_STAGE, FLEET_STAGE, GANGS_STAGE, PATHS
from app.model.envelope import SOURCE_TOPICS
from app.model.facts import ATTEMPT_FACTS, GANG_INPUTS
from app.model.fleet_records import DERIVED_TOPICS, GOODPUT
from tests.unit.gang_builders import CLUSTER
from tests.unit.goodput_world import PodsWorld, failed_under_kueue, preempted_and_readmitted, run
from tests.unit.partitioned import Partitioned, partition_of

PARTITIONS = 2
# One hour of history: an input that comes after the fleet's stream time has left its
# hour is no longer counted, so a fleet stream time ahead of its inputs shows in its records.
SHORT = msgspec.structs.replace(DEFAULT_RULES, fleet=msgspec.structs.replace(DEFAULT_RULES.fleet, history_hours=1, window_seconds=3600))
TWO_HOURS = 2 * 3600


def succeeded_then_quiet(**kw: Any) -> PodsWorld:
    """A gang under Kueue whose pods run half an hour and succeed; two quiet hours follow."""
    world = PodsWorld(**kw)
    world.create_jobset().create_workload().admit().unsuspend().pods_created().pause(60).pods_running().workers_ready()
    world.idle_for(1800, every=600).pods_succeeded().complete().finish().pods_deleted()
    return world.idle_for(TWO_HOURS, every=600)


def _then_quiet(story: Callable[[], PodsWorld]) -> Callable[[], PodsWorld]:
    return lambda: story().idle_for(TWO_HOURS, every=600)


STORIES: dict[str, Callable[[], PodsWorld]] = {
    "succeeded_then_quiet": succeeded_then_quiet,
    "preempted_and_readmitted_then_quiet": _then_quiet(preempted_and_readmitted),
    "failed_under_kueue_then_quiet": _then_quiet(failed_under_kueue),
}
HOLDABLE = [(t, p) for t in (ATTEMPT_FACTS, GANG_INPUTS) for p in range(PARTITIONS)]


class _Watched(Partitioned):
    """`Partitioned`, checking after every record read that the fleet's watermark of each
    source topic (over every path: `PATHS`) is no later than that of any partition of a
    stage writing to it (`ahead` keeps each breach)."""

    def __init__(self, rules: Rules) -> None:
        super().__init__(rules, partitions=PARTITIONS)
        self.ahead: list[tuple[str, str, int, datetime | None, datetime]] = []

    def _read(self, topic: str, key: str, partition: int, step: Any) -> None:
        super()._read(topic, key, partition, step)
        for source in SOURCE_TOPICS:
            for fleet in range(PARTITIONS):
                now = self._mark(FLEET_STAGE.name, fleet, source)
                if now is None:
                    continue
                for stage in (ATTEMPTS_STAGE, GANGS_STAGE):
                    for p in range(PARTITIONS):
                        theirs = self._mark(stage.name, p, source)
                        if source in PATHS[stage.name] and (theirs is None or theirs < now):
                            self.ahead.append((source, stage.name, p, theirs, now))

    def _mark(self, stage: str, partition: int, source: str) -> datetime | None:
        marks = self.scopes[(stage, partition)].marks
        paths = [marks.of(CLUSTER, name) for name in PATHS[stage].get(source, ())]
        return None if not paths or None in paths else min(at for at in paths if at is not None)


def _partitioned(lines: list[dict[str, Any]], held: set[tuple[str, int]], hold_from: int, hold_until: int | None = None) -> _Watched:
    driver = _Watched(SHORT)
    driver.play(lines, held, hold_from, hold_until)
    return driver


def _latest(emits: list[Any]) -> dict[tuple[str, str], bytes]:
    """The latest derived record per (topic, key), but for a goodput hour every attempt
    moved out of (one told the fleet before its queue was known moves to its queue: R12.7)."""
    latest = {(e.topic, e.key): e.value for e in emits if e.topic in DERIVED_TOPICS}
    return {k: msgspec.json.encode(v) for k, v in latest.items() if k[0] != GOODPUT or v.attempts}


def _attempt_partition(lines: list[dict[str, Any]]) -> int:
    """The partition of attempt-facts the story's one attempt is read from."""
    keys = {key for key, _ in _partitioned(lines, set(), 0).stores[ATTEMPTS_STAGE.name].items()}
    assert len(keys) == 1, keys
    return partition_of(keys.pop(), PARTITIONS)


def test_r12_3_an_attempt_partition_behind_the_others_holds_back_the_fleet_stream_time() -> None:
    lines = succeeded_then_quiet().records
    expected = _latest(run(succeeded_then_quiet(), SHORT))
    assert any(topic == GOODPUT for topic, _ in expected)  # the hour the pods ran in is counted
    running = next(i for i, line in enumerate(lines) if line["value"].get("type") == "BOOKMARK") + 1
    # The attempt's partition of attempt-facts is read late from its first progress on:
    # its goodput reaches the fleet after two hours of progress read by every other partition.
    # Forwarded as it came, the other partition's progress took the fleet two hours on, and
    # it dropped the goodput of the hour the pods ran in as past its history.
    driver = _partitioned(lines, {(ATTEMPT_FACTS, _attempt_partition(lines))}, running)
    assert _latest(driver.out) == expected
    assert driver.ahead == []


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_r12_3_any_partition_into_the_fleet_read_behind_the_others_gives_the_embedded_fleet_records(data: st.DataObject) -> None:
    story = data.draw(st.sampled_from(sorted(STORIES)), label="story")
    lines = STORIES[story]().records
    held = data.draw(st.sets(st.sampled_from(HOLDABLE), min_size=1), label="held")
    start = data.draw(st.integers(0, len(lines) - 1), label="hold from")
    stop = data.draw(st.one_of(st.none(), st.integers(start + 1, len(lines))), label="hold until")
    driver = _partitioned(lines, held, start, stop)
    assert _latest(driver.out) == _latest(run(STORIES[story](), SHORT))
    assert driver.ahead == []
