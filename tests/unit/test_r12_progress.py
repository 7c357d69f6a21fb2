"""SPEC R12: event-time progress — the bridge's BOOKMARKs, watermarks per (cluster, topic),
their forwarding between stages, decisions they settle, and stream time."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import orjson
import pytest

from app.core.fleet.view import LiveFleet, Waiting, Watermark
from app.core.base.progress import NO_PROGRESS, Watermarks, end_of_input
from app.core.base.rules import DEFAULT_RULES
from app.core.engine.runner import Runner, Source
from app.core.engine.topology import FLEET_STAGE, HEARD, taken_up
from app.model.decode import encode_internal
from app.model.envelope import EVENTS, JOBS, PODS, SOURCE_TOPICS, WORKLOADS
from app.model.facts import END_OF_TIME, FLEET_INPUTS, Progress
from app.model.records import DEAD_LETTER, GANG_TRANSITIONS
from app.web.metrics import render_metrics
from tests.unit import builders as b
from tests.unit.drivers import new_pipeline
from tests.unit.gang_builders import GangWorld, to_input
from tests.unit.stories import pod_task_plain_failure

pytestmark = pytest.mark.usefixtures("driver")


def _feed(pipeline, line: dict, **where) -> list:  # type: ignore[no-untyped-def]
    return pipeline.feed(line["topic"], line["key"], orjson.dumps(line["value"]), **where)


# --- R12.1 the progress record ---------------------------------------------------------------


@pytest.mark.parametrize("topic", SOURCE_TOPICS)
def test_r12_1_a_bookmark_is_progress_with_no_object_state(topic: str) -> None:
    pipeline = new_pipeline()
    assert _feed(pipeline, b.progress(topic, b.T0)) == []  # no dead letter: no uid is needed
    assert pipeline.counts["dead_letters"] == 0
    stage = {PODS: "pods", EVENTS: "pods", JOBS: "jobs", WORKLOADS: "jobs"}[topic]
    assert pipeline.marks[stage].of(b.CLUSTER, topic) == b.T0


def test_r12_1_a_bookmark_still_needs_a_well_formed_envelope() -> None:
    line = b.progress(PODS, b.T0)
    line["value"]["cluster"] = "a/b"
    out = _feed(new_pipeline(), line)
    assert [e.topic for e in out] == [DEAD_LETTER] and "cluster" in out[0].value.reason


# --- R12.3 the watermark ---------------------------------------------------------------------


def test_r12_3_watermark_is_the_least_over_partitions_and_unknown_until_each_has_shown_progress() -> None:
    marks = NO_PROGRESS
    for partition, minutes in ((0, 5), (2, 3)):
        marks = marks.observe(Progress(b.CLUSTER, PODS, partition, 3, b.T0 + b.minutes(minutes))) or marks
    assert marks.of(b.CLUSTER, PODS) is None  # partition 1 has shown none
    marks = marks.observe(Progress(b.CLUSTER, PODS, 1, 3, b.T0 + b.minutes(4))) or marks
    assert marks.of(b.CLUSTER, PODS) == b.T0 + b.minutes(3)
    assert marks.observe(Progress(b.CLUSTER, PODS, 2, 3, b.T0 + b.minutes(1))) is None  # never goes back
    assert marks.of("prod-b", PODS) is None and marks.of(b.CLUSTER, EVENTS) is None  # per (cluster, topic)
    assert (marks.observe(end_of_input(b.CLUSTER, PODS)) or marks).of(b.CLUSTER, PODS) == END_OF_TIME


def test_r12_3_progress_is_forwarded_through_the_internal_topics_tagged_with_its_partition() -> None:
    pipeline = new_pipeline()
    line = b.progress(JOBS, b.T0)
    _feed(pipeline, line, partition=1, partitions=2)
    # The gang and attempt stages heard of partition 1 of 2: not yet a watermark, and
    # from now on they wait for every other topic they hear as well (R12.5).
    assert pipeline.marks["gangs"].of(b.CLUSTER, JOBS) is None
    assert pipeline.marks["gangs"].latest == {f"{b.CLUSTER}/{JOBS}": {1: b.T0}, f"{b.CLUSTER}/{WORKLOADS}": {}}
    # The attempt stage hears it from the jobs stage; the gang stage (whose quota facts,
    # SPEC R17, reach it by another path) forwards its own watermark, under its own name,
    # once it has one: until then the attempt stage waits for it.
    heard = {k: v for k, v in pipeline.marks["attempts"].latest.items() if v}
    assert heard == {f"{b.CLUSTER}/{JOBS}": {1: b.T0}}
    assert pipeline.marks["attempts"].latest.keys() == {f"{b.CLUSTER}/{name}" for name in HEARD["attempts"]}
    _feed(pipeline, b.progress(JOBS, b.T0 + b.minutes(1)), partition=0, partitions=2)
    assert pipeline.marks["gangs"].of(b.CLUSTER, JOBS) == b.T0  # the slower partition
    assert pipeline.marks["gangs"].stream_time(b.CLUSTER) is None  # the Workloads not heard from yet
    assert pipeline.marks["attempts"].latest[f"{b.CLUSTER}/gangs:{JOBS}"] == {0: b.T0}  # the gang stage's one partition
    assert pipeline.marks["attempts"].of(b.CLUSTER, JOBS) == pipeline.marks["attempts"].of(b.CLUSTER, f"gangs:{JOBS}") == b.T0
    # The fleet stage hears of the jobs from the gang and attempt stages, each its own
    # watermark (the attempt stage's the least over both its paths), never the source
    # partitions' progress as it came: one of their partitions could run ahead of another.
    fleet = pipeline.marks["fleet"]
    assert fleet.latest[f"{b.CLUSTER}/attempts:{JOBS}"] == fleet.latest[f"{b.CLUSTER}/gangs:{JOBS}"] == {0: b.T0}
    assert JOBS not in {k.partition("/")[2] for k in fleet.latest}
    assert fleet.stream_time(b.CLUSTER) is None  # the Workloads, pods and Events not heard from yet
    for topic in (WORKLOADS, PODS, EVENTS):
        _feed(pipeline, b.progress(topic, b.T0 + b.minutes(2)))
    assert pipeline.marks["fleet"].stream_time(b.CLUSTER) == b.T0


def test_r12_3_a_stage_partition_s_end_of_input_ends_the_watermark_once_every_partition_has_ended() -> None:
    marks = NO_PROGRESS
    for partition in (0, 1):
        marks = marks.observe(Progress(b.CLUSTER, f"attempts:{PODS}", partition, 2, b.T0)) or marks
    ended = marks.observe(Progress(b.CLUSTER, f"attempts:{PODS}", 0, 2, END_OF_TIME, final=True))
    assert ended is not None and ended.of(b.CLUSTER, f"attempts:{PODS}") == b.T0  # partition 1 may still write
    assert ended.stream_time(b.CLUSTER) == b.T0
    ended = ended.observe(Progress(b.CLUSTER, f"attempts:{PODS}", 1, 2, END_OF_TIME, final=True))
    assert ended is not None and ended.of(b.CLUSTER, f"attempts:{PODS}") == END_OF_TIME
    assert ended.stream_time(b.CLUSTER) is None  # the end of the input is no stream time


def test_r12_3_progress_under_a_name_a_stage_no_longer_hears_under_holds_back_no_stream_time() -> None:
    # An older version forwarded the jobs' progress to the fleet stage as it came: saved
    # with a fleet partition's states, or sent by a worker not yet upgraded, it would never
    # move again, and the fleet's stream time with it.
    pipeline = new_pipeline()
    for topic in SOURCE_TOPICS:
        _feed(pipeline, b.progress(topic, b.T0))
    fleet = pipeline.scopes["fleet"]
    assert fleet.marks.stream_time(b.CLUSTER) == b.T0
    stale = Progress(b.CLUSTER, JOBS, 0, 1, b.T0 - b.minutes(5))
    runner = Runner(FLEET_STAGE, DEFAULT_RULES, Counter())
    assert runner.receive(fleet, None, Source(FLEET_INPUTS, FLEET_INPUTS, JOBS), encode_internal(stale)).out == []
    assert fleet.marks.latest.keys() == {f"{b.CLUSTER}/{name}" for name in HEARD["fleet"]}
    saved = fleet.marks.observe(stale)
    assert saved is not None and saved.stream_time(b.CLUSTER) == b.T0 - b.minutes(5)
    assert saved.keeping(HEARD["fleet"]) == fleet.marks
    assert fleet.marks.keeping(HEARD["fleet"]) is fleet.marks


def test_r12_5_a_stages_stream_time_waits_for_progress_of_every_topic_it_hears() -> None:
    """A worker reads one topic behind another (R12.7): a stage that has heard progress of
    some of its topics has no stream time until it has heard of all of them, so no expiry,
    window or limit runs ahead of a topic whose backlog is still to come."""
    pipeline = new_pipeline()
    for topic in (JOBS, WORKLOADS):
        _feed(pipeline, b.progress(topic, b.T0 + b.minutes(90)))
    assert pipeline.marks["gangs"].stream_time(b.CLUSTER) == b.T0 + b.minutes(90)  # every topic it hears
    assert pipeline.marks["attempts"].stream_time(b.CLUSTER) is None  # the pods' not yet
    assert pipeline.scopes["attempts"].stream_time(b.CLUSTER) is None  # nor a record's time instead
    assert pipeline.marks["fleet"].stream_time(b.CLUSTER) is None
    _feed(pipeline, b.progress(PODS, b.T0))
    assert pipeline.marks["attempts"].stream_time(b.CLUSTER) is None  # the events' neither
    _feed(pipeline, b.progress(EVENTS, b.T0 + b.minutes(5)))
    assert pipeline.marks["attempts"].stream_time(b.CLUSTER) == pipeline.marks["fleet"].stream_time(b.CLUSTER) == b.T0


def test_r12_5_progress_taken_up_from_an_older_save_waits_for_every_topic_the_stage_hears() -> None:
    """A worker taking up a partition saved before R12.5 waited for unheard topics: the
    attempt stage had heard the jobs and Workloads, not yet the pods and Events. Taken up
    as saved, its stream time would be the jobs' watermark (idle quota decided with a pod's
    run still to come) until the next progress moved, then go back."""
    pipeline = new_pipeline()
    for topic in (JOBS, WORKLOADS):
        _feed(pipeline, b.progress(topic, b.T0 + b.minutes(90)))
    heard = pipeline.marks["attempts"]
    names = {n for n in HEARD["attempts"] if n.endswith((JOBS, WORKLOADS))}
    older = Watermarks(  # as the version before saved it: only the names it had heard
        latest={k: v for k, v in heard.latest.items() if k.partition("/")[2] in names},
        partitions={k: v for k, v in heard.partitions.items() if k.partition("/")[2] in names},
        marks={k: v for k, v in heard.marks.items() if k.partition("/")[2] in names},
    )
    assert older.stream_time(b.CLUSTER) == b.T0 + b.minutes(90)
    taken = taken_up("attempts", older)
    assert taken.stream_time(b.CLUSTER) is None
    assert taken.latest.keys() == {f"{b.CLUSTER}/{name}" for name in HEARD["attempts"]} == heard.latest.keys()
    assert taken_up("attempts", heard) is heard  # saved by this version: taken up as it is
    for name in sorted(HEARD["attempts"] - names):  # the pods' and Events' progress, by every path
        taken = taken.observe(Progress(b.CLUSTER, name, 0, 1, b.T0)) or taken
    assert taken.stream_time(b.CLUSTER) == b.T0


def test_r12_5_with_no_progress_at_all_the_stream_time_is_the_latest_record_time() -> None:
    pipeline = new_pipeline()
    for line in pod_task_plain_failure():
        _feed(pipeline, line)
    latest = pipeline.latest[b.CLUSTER]
    assert pipeline.scopes["pods"].stream_time(b.CLUSTER) == latest
    assert pipeline.marks["pods"].stream_time(b.CLUSTER) is None


def test_r12_3_the_end_of_a_trace_takes_every_pending_decision() -> None:
    world = GangWorld(policy="false").start().suspend()  # no record after the suspension
    pipeline = new_pipeline()
    out = [e for line in world.records for e in _feed(pipeline, line)]
    assert [e.value.to for e in out if e.topic == GANG_TRANSITIONS] == ["Running"]
    ended = [e.value for e in pipeline.finish() if e.topic == GANG_TRANSITIONS]
    assert [(t.to, t.retry) for t in ended] == [("Ended", "system")]
    assert pipeline.finish() == []  # the end comes once


# --- R12.4 decisions settled by progress -----------------------------------------------------


def test_r12_4_a_watermark_advance_settles_every_blocked_gang_not_only_one_whose_record_arrived() -> None:
    worlds = [GangWorld(policy="true", cluster=b.CLUSTER).start().suspend()]
    lines = list(worlds[0].records)
    second = GangWorld(policy="false", cluster=b.CLUSTER, start=b.T0 + timedelta(seconds=1))
    second.js["metadata"].update(name="other", uid="other-uid")
    second.wl["metadata"].update(name="jobset-other", uid="other-wl", labels={"kueue.x-k8s.io/job-uid": "other-uid"})
    second.wl["metadata"]["ownerReferences"][0]["uid"] = "other-uid"
    lines += second.start().suspend().records
    pipeline = new_pipeline()
    for line in lines:
        _feed(pipeline, line)
    assert sorted(pipeline.scopes["gangs"].waiting) == sorted(pipeline.states["gangs"])  # both wait on progress
    at = max(to_input(line).observed_at for line in lines) + b.minutes(1)
    out = _feed(pipeline, b.progress(JOBS, at)) + _feed(pipeline, b.progress(WORKLOADS, at))
    ended = sorted((t.jobset.name, t.to, t.retry) for t in (e.value for e in out if e.topic == GANG_TRANSITIONS))
    assert ended == [("other", "Ended", "system"), ("run-abc-a0-1", "Ended", "system")]
    assert not pipeline.scopes["gangs"].waiting


# --- R12.5 stream time -----------------------------------------------------------------------


def test_r12_5_an_object_timestamp_never_moves_stream_time() -> None:
    pipeline = new_pipeline()
    for r in pod_task_plain_failure(t0=b.T0):
        _feed(pipeline, r)
    pod = b.pod("forger", labels=b.attempt_labels(run="x"), containers={"main": b.running(b.T0)})
    forged = b.event(pod, code=79, first=b.T0.replace(year=2099), last=b.T0.replace(year=2099))
    _feed(pipeline, b.record(forged, b.T0 + b.minutes(1), "ADDED"))
    late = b.T0 + pipeline.rules.retention * 2  # a record dated well past the retention...
    _feed(pipeline, b.record(b.pod("tick", labels={}, gpus=0, containers={"main": b.running(late)}), late, "ADDED"))
    assert pipeline.states["attempts"] == {}  # ...expires the finished attempt; 2099 played no part
    assert pipeline.clock(pipeline_stage("attempts"), b.CLUSTER) == late


def test_r12_5_stream_time_is_the_watermark_once_there_is_one() -> None:
    pipeline = new_pipeline()
    for r in pod_task_plain_failure(t0=b.T0):
        _feed(pipeline, r)
    for topic in SOURCE_TOPICS:
        _feed(pipeline, b.progress(topic, b.T0 + b.minutes(10)))
    late = b.T0 + pipeline.rules.retention * 2
    _feed(pipeline, b.record(b.pod("tick", labels={}, gpus=0, containers={"main": b.running(late)}), b.T0 + b.minutes(55), "ADDED"))
    # The record says "55 minutes in", the watermark "10 minutes in": the state stays.
    assert len(pipeline.states["attempts"]) == 1
    assert pipeline.clock(pipeline_stage("attempts"), b.CLUSTER) == b.T0 + b.minutes(10)
    # Progress moves it (records far ahead of the watermark would be clock faults, R11.4).
    for at in (late, late + b.minutes(90)):  # the second round is due for an expiry sweep
        for topic in SOURCE_TOPICS:
            _feed(pipeline, b.progress(topic, at))
    assert pipeline.states["attempts"] == {}


def pipeline_stage(name: str):  # type: ignore[no-untyped-def]
    from app.core.engine.topology import STAGES

    return next(s for s in STAGES if s.name == name)


# --- R12.6 operations ------------------------------------------------------------------------


def test_r12_6_metrics_show_how_far_each_watermark_trails_the_wall_clock() -> None:
    pipeline = new_pipeline()
    for topic in (PODS, EVENTS):
        _feed(pipeline, b.progress(topic, b.T0))
    view = LiveFleet(watermarks=lambda: [Watermark(c, t, at) for c, t, at in pipeline.watermarks()])
    text = render_metrics(view, now=b.T0.timestamp() + 42.5)
    assert f'faultline_watermark_lag_seconds{{cluster="{b.CLUSTER}",topic="k8s.pods"}} 42.5' in text
    assert f'faultline_watermark_lag_seconds{{cluster="{b.CLUSTER}",topic="k8s.events"}} 42.5' in text
    assert "k8s.jobs" not in text  # no progress of it yet: no watermark to show


def test_r12_5_metrics_name_the_topics_a_stream_time_waits_for() -> None:
    """Jobs and Workloads have progressed, the pods and Events not yet: every stage that
    hears them waits (R12.5), and /metrics says for which topics, so a publisher that
    never writes a topic's progress is seen, not silent."""
    pipeline = new_pipeline()
    for topic in (JOBS, WORKLOADS):
        _feed(pipeline, b.progress(topic, b.T0))
    view = LiveFleet(
        watermarks=lambda: [Watermark(c, t, at) for c, t, at in pipeline.watermarks()],
        waiting=lambda: [Waiting(c, t) for c, t in pipeline.waiting()],
    )
    text = render_metrics(view, now=b.T0.timestamp())
    waiting = sorted(line for line in text.splitlines() if line.startswith("faultline_watermark_waiting{"))
    assert waiting == [f'faultline_watermark_waiting{{cluster="{b.CLUSTER}",topic="{t}"}} 1' for t in (EVENTS, PODS)]
    for topic in (PODS, EVENTS):
        _feed(pipeline, b.progress(topic, b.T0))
    assert pipeline.waiting() == [] and "faultline_watermark_waiting" not in render_metrics(view, now=b.T0.timestamp())


def test_r12_5_a_worker_names_the_topics_its_stage_partitions_wait_for() -> None:
    from app.core.base.progress import waiting_topics
    from app.core.engine.runner import Scope
    from app.model.facts import Progress

    attempts, fleet = Scope(whole=False), Scope(whole=False)
    attempts.marks = (attempts.marks.observe(Progress(b.CLUSTER, JOBS, 0, 2, b.T0)) or attempts.marks).expect(b.CLUSTER, PODS)
    fleet.marks = (fleet.marks.observe(Progress(b.CLUSTER, f"gangs:{WORKLOADS}", 0, 1, b.T0)) or fleet.marks).expect(b.CLUSTER, f"attempts:{PODS}")
    # The jobs heard from one partition of two, the pods expected; the fleet's stage-named paths count for their source topics.
    assert waiting_topics([attempts.marks, fleet.marks]) == [(b.CLUSTER, JOBS), (b.CLUSTER, PODS)]


def test_r12_6_a_stages_own_forwarded_watermark_counts_for_its_source_topic_in_the_gauge() -> None:
    """A worker's `/metrics` watermark is per source topic: the fleet stage hears of the
    pods as `k8s.pods` and, from the attempt stage, as `attempts:k8s.pods` (R12.3); the
    gauge shows the least of them under `k8s.pods`, never the stage-prefixed name."""
    from app.core.engine.runner import Scope
    from app.model.facts import Progress
    from app.stream.agents import source_watermarks

    pods, fleet = Scope(whole=False), Scope(whole=False)
    pods.marks = pods.marks.observe(Progress(b.CLUSTER, PODS, 0, 1, b.T0 + b.minutes(5))) or pods.marks
    fleet.marks = fleet.marks.observe(Progress(b.CLUSTER, PODS, 0, 1, b.T0 + b.minutes(5))) or fleet.marks
    fleet.marks = fleet.marks.observe(Progress(b.CLUSTER, f"attempts:{PODS}", 0, 1, b.T0 + b.minutes(2))) or fleet.marks
    assert source_watermarks([pods, fleet]) == [(b.CLUSTER, PODS, b.T0 + b.minutes(2))]
