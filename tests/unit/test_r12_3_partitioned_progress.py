"""R12.3 over several partitions (tests/unit/partitioned.py): a stage that reads an internal
topic hears of every source partition in each of its own partitions. Forwarded as it came,
a source partition's progress reached the next stage from each of them, so the one
partition that ran ahead vouched for what another had not written yet: with its gang's
partition of gang-inputs behind, the attempt stage took a preempted gang's quota (the
Workload's eviction still in flight) as held with no pod running, reported idle quota the
embedded driver never reports, and took it back when the eviction came
(tests/integration/test_stream_ownership.py, test_stream_equivalence.py, three workers).
Each stage partition now forwards its own watermark, tagged with its own partition."""

from __future__ import annotations

from typing import Any

import msgspec
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.engine.topology import GANGS_STAGE
from app.model.envelope import JOBS, WORKLOADS
from app.model.facts import ATTEMPT_FACTS, GANG_INPUTS, Progress
from app.model.fleet_records import GOODPUT
from app.model.records import CLASSIFIED_FAILURES, GANG_TRANSITIONS, IDLE_QUOTA
from tests.unit.gang_builders import CLUSTER, JOBSET_UID
from tests.unit.goodput_world import R17_STORIES, preempted_and_readmitted, run
from tests.unit.partitioned import Partitioned, partition_of

PARTITIONS = 2


def _idle(emits: list[Any]) -> list[tuple[Any, ...]]:
    return sorted((e.key, e.value.since, e.value.idle, e.value.at, e.value.why) for e in emits if e.topic == IDLE_QUOTA)


def _evicted(line: dict[str, Any]) -> bool:
    conditions = line["value"]["object"].get("status", {}).get("conditions", [])
    return line["topic"] == WORKLOADS and any(c["type"] == "Evicted" and c["status"] == "True" for c in conditions)


def _partitioned(lines: list[dict[str, Any]], held: set[tuple[str, int]], hold_from: int, hold_until: int | None = None) -> list[Any]:
    return Partitioned(partitions=PARTITIONS).play(lines, held, hold_from, hold_until)


def test_r12_3_a_gang_partition_behind_the_others_holds_back_the_attempt_stage_watermark() -> None:
    lines = preempted_and_readmitted().records
    gang = partition_of(f"{CLUSTER}/{JOBSET_UID}", PARTITIONS)
    evicted = next(i for i, line in enumerate(lines) if _evicted(line))
    # The gang's partition of gang-inputs is read late from the eviction on: its quota
    # facts (the hold ended) reach the attempt stage after every pod record.
    out = _partitioned(lines, {(GANG_INPUTS, gang)}, evicted)
    assert _idle(out) == _idle(run(preempted_and_readmitted())) == []


def test_r12_3_a_partition_of_an_internal_topic_forwards_its_own_watermark_tagged_with_its_partition() -> None:
    driver = Partitioned(partitions=PARTITIONS)
    driver.held = {(GANG_INPUTS, 1)}
    for p in range(PARTITIONS):
        bookmark = {"type": "BOOKMARK", "observed_at": "2026-08-25T12:00:00Z", "cluster": CLUSTER, "object": {"apiVersion": "v1", "kind": "Workload", "metadata": {"resourceVersion": "1"}}}
        driver.feed(WORKLOADS, "Workload", orjson.dumps(bookmark))
    attempts = driver.scopes[("attempts", 0)].marks
    # Gang partition 0 has read both source partitions' progress; partition 1 none yet.
    assert driver.scopes[(GANGS_STAGE.name, 0)].marks.of(CLUSTER, WORKLOADS) is not None
    assert attempts.latest[f"{CLUSTER}/gangs:{WORKLOADS}"] == {0: driver.scopes[(GANGS_STAGE.name, 0)].marks.of(CLUSTER, WORKLOADS)}
    assert attempts.of(CLUSTER, f"gangs:{WORKLOADS}") is None and attempts.stream_time(CLUSTER) is None
    driver.held = set()
    driver.pump()
    attempts = driver.scopes[("attempts", 0)].marks
    assert attempts.of(CLUSTER, f"gangs:{WORKLOADS}") == attempts.of(CLUSTER, WORKLOADS) is not None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_r12_3_any_partition_read_behind_the_others_gives_the_embedded_records(data: st.DataObject) -> None:
    story = data.draw(st.sampled_from(sorted(R17_STORIES)), label="story")
    lines = R17_STORIES[story]().records
    held = data.draw(st.sets(st.sampled_from([(t, p) for t in (GANG_INPUTS, ATTEMPT_FACTS) for p in range(PARTITIONS)]), min_size=1), label="held")
    start = data.draw(st.integers(0, len(lines) - 1), label="hold from")
    stop = data.draw(st.integers(start + 1, len(lines)), label="hold until")
    out = _partitioned(lines, held, start, stop)
    expected = run(R17_STORIES[story]())
    assert _idle(out) == _idle(expected)
    assert _latest(out, GANG_TRANSITIONS) == _latest(expected, GANG_TRANSITIONS)
    assert _latest(out, CLASSIFIED_FAILURES, "goodput") == _latest(expected, CLASSIFIED_FAILURES, "goodput")
    assert _hours(out) == _hours(expected)


def _latest(emits: list[Any], topic: str, field: str | None = None) -> dict[str, bytes]:
    """The latest record per key (`field`: that field of it)."""
    return {e.key: msgspec.json.encode(getattr(e.value, field) if field else e.value) for e in emits if e.topic == topic}


def _hours(emits: list[Any]) -> dict[str, bytes]:
    """The latest `faultline.goodput` per hour but for an hour every attempt moved out of
    (an attempt told the fleet before its queue was known moves to its queue: R12.7)."""
    latest = {e.key: e.value for e in emits if e.topic == GOODPUT}
    return {k: msgspec.json.encode(v) for k, v in latest.items() if v.attempts}
