"""SPEC R11.4 (as amended for R12.7, docs/rules.md *Clock faults*): a source record observed
more than `max_clock_skew` ahead of its topic's watermark at the stage is a clock fault:
counted, and stream time does not move on it; it is folded all the same, since a watch
that was down delivers its backlog exactly so and a restart must lose nothing. Without
progress there is nothing to measure against."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import msgspec
import orjson
import pytest

from app.core.base.rules import Rules
from app.core.engine.topology import STAGE_OF
from app.model.envelope import PODS
from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER
from app.embedded.pipeline import Pipeline
from tests.unit import builders as b
from tests.unit import hostile
from tests.unit.drivers import new_pipeline
from tests.unit.stories import STORIES, pod_task_plain_failure

pytestmark = pytest.mark.usefixtures("driver")  # every rule through every driver


def _valid(t0: datetime = b.T0) -> list[dict[str, Any]]:
    """Every story, a few minutes apart, in observation order, with the bridge's progress."""
    records = [r for i, story in enumerate(STORIES.values()) for r in story(run=f"v{i}", t0=t0 + b.minutes(7 * i))]
    records.sort(key=lambda r: datetime.fromisoformat(r["value"]["observed_at"]))
    return b.with_progress(records)


def _pod_record(name: str, at: datetime) -> dict[str, Any]:
    return b.record(b.pod(name, labels=b.attempt_labels(run=name)), at, "ADDED")


def _final(out: list) -> dict[str, bytes]:
    """The latest verdict per attempt (revisions aside: they count emissions)."""
    return {e.key: msgspec.json.encode(msgspec.structs.replace(e.value, revision=0)) for e in out if e.topic == CLASSIFIED_FAILURES}


def test_r11_4_a_change_far_ahead_of_its_topics_watermark_is_counted_and_folded_and_moves_no_stream_time() -> None:
    valid = _valid()
    pipeline = new_pipeline()
    head, tail = valid[:40], valid[40:]
    hostile.feed(pipeline, head, finish=False)
    clock, swept = pipeline.clock(STAGE_OF[PODS], b.CLUSTER), pipeline.stream_time
    watermark = pipeline.marks["pods"].of(b.CLUSTER, PODS)
    assert watermark is not None
    ahead = _pod_record("ahead", watermark + timedelta(hours=1, seconds=1))
    out = pipeline.feed(ahead["topic"], ahead["key"], orjson.dumps(ahead["value"]), offset=99)
    assert not [e for e in out if e.topic == DEAD_LETTER]
    assert pipeline.counts["clock_faults"] == 1
    assert pipeline.clock(STAGE_OF[PODS], b.CLUSTER) == clock and pipeline.stream_time == swept  # nor sweeps
    assert any(state.pod is not None and state.pod.name == "ahead" for state in pipeline.states["pods"].values())
    rest = hostile.feed(pipeline, tail)
    assert _final(rest) and not [e for e in rest if e.topic == DEAD_LETTER]


def test_r11_4_a_backlog_after_a_watch_was_down_longer_than_the_skew_is_classified_as_if_watched() -> None:
    """What a restart of `run` or of the bridge delivers after an outage longer than
    `max_clock_skew`: the failure's records, stamped when the watch came back, far ahead
    of the last progress before the outage; then progress again. The verdict is the one an
    uninterrupted watch gives."""
    story = pod_task_plain_failure(run="outage", t0=b.T0)
    watched = b.with_progress(story)
    expected = _final(hostile.feed(new_pipeline(), watched))
    down = b.T0 - b.minutes(10)
    before = [r for r in watched if datetime.fromisoformat(r["value"]["observed_at"]) < down]
    backlog = [r for r in story if datetime.fromisoformat(r["value"]["observed_at"]) >= down]
    back = b.T0 + timedelta(hours=3)
    for r in backlog:
        r["value"]["observed_at"] = b.ts(back)
    after = [b.progress(topic, back + timedelta(seconds=1)) for topic in b.SOURCE_KINDS]
    pipeline = new_pipeline()
    out = hostile.feed(pipeline, before + backlog + after)
    assert pipeline.counts["clock_faults"] == len(backlog) and not [e for e in out if e.topic == DEAD_LETTER]
    assert _final(out) == expected


def test_r11_4_within_the_skew_a_record_is_folded() -> None:
    pipeline = new_pipeline()
    hostile.feed(pipeline, _valid()[:40], finish=False)
    watermark = pipeline.marks["pods"].of(b.CLUSTER, PODS)
    assert watermark is not None
    near = _pod_record("near", watermark + timedelta(minutes=59))
    assert pipeline.feed(near["topic"], near["key"], orjson.dumps(near["value"])) == []
    assert any(state.pod is not None and state.pod.name == "near" for state in pipeline.states["pods"].values())


def test_r11_4_without_progress_a_quiet_gap_of_hours_is_no_clock_fault() -> None:
    records = pod_task_plain_failure(run="before", t0=b.T0) + pod_task_plain_failure(run="after", t0=b.T0 + timedelta(hours=9))
    out = hostile.feed(new_pipeline(), records)
    assert not [e for e in out if e.topic == DEAD_LETTER]
    assert {e.value.run for e in out if e.topic == CLASSIFIED_FAILURES} == {"before", "after"}


def test_r11_4_progress_is_never_a_clock_fault_and_records_after_it_are_measured_from_it() -> None:
    """The bridge was down for five hours: its progress jumps, and its records follow."""
    later = b.T0 + timedelta(hours=5)
    records = b.with_progress(pod_task_plain_failure(run="before", t0=b.T0))
    records += [b.progress(topic, later) for topic in b.SOURCE_KINDS]
    records += b.with_progress(pod_task_plain_failure(run="after", t0=later + b.minutes(1)))
    out = hostile.feed(new_pipeline(), records)
    assert not [e for e in out if e.topic == DEAD_LETTER]
    assert {e.value.run for e in out if e.topic == CLASSIFIED_FAILURES} == {"before", "after"}


def test_r11_4_max_clock_skew_is_a_rule_setting() -> None:
    wide = Rules(max_clock_skew_seconds=3 * 3600)
    assert wide.version != Rules().version
    for rules, counted in ((Rules(), 1), (wide, 0)):
        pipeline = Pipeline(rules, wire=new_pipeline().wire)
        hostile.feed(pipeline, _valid()[:40], finish=False)
        watermark = pipeline.marks["pods"].of(b.CLUSTER, PODS)
        assert watermark is not None
        line = _pod_record("two-hours-ahead", watermark + timedelta(hours=2))
        pipeline.feed(line["topic"], line["key"], orjson.dumps(line["value"]))
        assert pipeline.counts["clock_faults"] == counted


def test_r11_4_records_dated_far_away_change_no_valid_verdict() -> None:
    """Issue 16: 1,950 records dated decades ahead or behind once bent 134 of 329 valid
    verdicts (a future time drove expiry). Ahead they are clock faults, folded into their
    own objects only and moving no stream time; behind, late records of their own
    objects. No valid verdict moves."""
    valid = _valid()
    expected = _final(hostile.feed(new_pipeline(), valid))
    far = hostile.far_times("far", b.T0, count=1_950)
    mixed = valid[:30] + far + valid[30:]
    pipeline = new_pipeline()
    out = hostile.feed(pipeline, mixed)
    got = _final(out)
    assert {k: v for k, v in got.items() if "/far-" not in k} == expected
    ahead = [line for line in far if line["value"]["observed_at"] > "2040"]
    assert pipeline.counts["clock_faults"] == len(ahead)
