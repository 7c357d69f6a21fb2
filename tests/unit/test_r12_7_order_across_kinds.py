"""SPEC R12.7: no output depends on the order in which different kinds' records arrive.

After a restart of `run` or the bridge, or a relist, each watch delivers its backlog in
one burst, milliseconds apart, before or after another kind's: the records of a window
of time arrive with one `observed_at` (the bridge's clock when the burst came), in any
interleaving that keeps each object's own order, and with no progress inside the window
(a watch that is down writes none). Every example trace and every Kueue story of the
R9/R15 suites, so delivered, gives the transitions (`from`, `to`, `code`, `retry`,
`waited_seconds`), the verdicts and the faults it gives in the order the bridge first saw
it. (`at` and the reason text may say when the bridge could know: that moves with it.)
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.base.emit import Emit
from app.core.base.rules import Rules
from app.model.fleet_records import GOODPUT
from app.model.records import CLASSIFIED_FAILURES, FAULTS, GANG_TRANSITIONS, IDLE_QUOTA
from app.embedded.pipeline import Pipeline
from app.model.envelope import SOURCE_TOPICS
from tests.unit import builders as b
from tests.unit import drivers
from tests.unit.gang_builders import Line
from tests.unit.gang_stories import STORIES
from tests.unit.stories import jobset_kueue_preempted

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples" / "traces").glob("*.jsonl"))


# A watch down longer than `max_clock_skew` delivers a backlog the clock-fault rule (R11.4)
# would judge on its own; here only the order is at stake.
RULES = Rules(max_clock_skew_seconds=30 * 86_400)


def _outputs(lines: list[Line]) -> list[Emit]:
    pipeline = Pipeline(RULES, wire=drivers.current == "wire")
    out: list[Emit] = []
    for line in lines:
        out += pipeline.feed(line["topic"], line["key"], orjson.dumps(line["value"]))
    return out + pipeline.finish()


def answer(lines: list[Line]) -> dict[str, Any]:
    """What must not move: each gang's transitions, each attempt's final verdict and every
    fault, without the times that say when the bridge could know them. Two more are the
    bridge's by definition, so a burst moves them: when a JobSet restarted in place (R8.1:
    it writes no time for a restart, only `status.restarts`) or a RayJob's try was retried
    (R16.4: `Retrying` and `status.failed`, no time), which anchors that generation's
    interim verdict and bounds its GPU-seconds; and when a running container's device
    health was first and last seen (R14.2: the field has no time). In any order, once a
    tracked object's failure gave its key a terminal verdict, no interim verdict follows
    (R8.1, R16.1-R16.4).

    Where the GPU-hours went (SPEC R17) is read from the objects' own times too: a terminal
    verdict's `goodput`, the latest `faultline.goodput` record per hour (but for an hour
    every attempt moved out of), and each stretch of idle quota reported (when it began,
    why, and whether it is over). Its lost and useful GPU-seconds are its failures': where
    a JobSet restarted in place or a RayJob retried a try, those of that interim verdict
    move with a burst, and with them the running time of pods that never said when they
    stopped."""
    transitions: dict[str, list[tuple[Any, ...]]] = {}
    verdicts: dict[str, tuple[Any, ...]] = {}
    faults: dict[str, tuple[Any, ...]] = {}
    goodput: dict[str, Any] = {}
    idle: set[tuple[Any, ...]] = set()
    ended: set[str] = set()  # keys whose tracked object's failure came out: no interim verdict follows (R8.1, R16)
    restarted = False  # a JobSet restarted in place or a RayJob's try retried: its interim verdict's GPU-seconds move with a burst
    for emit in _outputs(lines):
        value = emit.value
        if emit.topic == GANG_TRANSITIONS:
            transitions.setdefault(emit.key, []).append((value.from_, value.to, value.code, value.retry, value.waited_seconds))
        elif emit.topic == CLASSIFIED_FAILURES:
            fault = value.gpu_fault
            assert value.terminal or emit.key not in ended, f"an interim verdict of {emit.key} after its terminal one"
            if value.terminal and value.tracked.kind != "Pod":  # R8.2: a pod task's last pod is terminal until a newer one comes
                ended.add(emit.key)
            interim = not value.terminal and value.tracked.kind in ("JobSet", "RayJob")
            restarted = restarted or interim
            verdicts[emit.key] = (
                value.code,
                value.kind,
                value.terminal,
                value.generation,
                None if interim else value.failed_at,
                None if interim else value.gpu_seconds,
                (fault.kind, fault.code, fault.severity, fault.pod.uid if fault.pod else None) if fault is not None else None,
                value.faulted_pod,
                value.goodput,
            )
        elif emit.topic == FAULTS:
            fault = value.fault
            seen = None if fault.kind == "DEVICE_HEALTH" else (fault.first_seen, fault.last_seen)
            faults[emit.key] = (value.attempt, fault.kind, fault.code, fault.severity, fault.pod, fault.node, seen)
        elif emit.topic == GOODPUT:
            goodput[emit.key] = value
        elif emit.topic == IDLE_QUOTA:
            idle.add((emit.key, value.since, value.why, value.idle, value.gpus))
    hours = {k: _figures(v, restarted, _HOURS_MOVED) for k, v in goodput.items() if v.attempts and (not restarted or _quota_in(v))}
    verdicts = {k: (*v[:-1], _figures(v[-1], restarted, _VERDICT_MOVED)) for k, v in verdicts.items()}
    return {"transitions": transitions, "verdicts": verdicts, "faults": faults, "goodput": hours, "idle": idle}


# What a JobSet's restart in place moves (above): on its final verdict, the lost GPU-seconds
# of its interim verdicts; in its hours, those too, and the running time of its pods whose
# own records never said when they stopped (they ran until the restart was seen).
_VERDICT_MOVED = ("useful_gpu_seconds", "lost_gpu_seconds")
_HOURS_MOVED = ("running_gpu_seconds", "useful_gpu_seconds", "lost_user_gpu_seconds", "lost_system_gpu_seconds", "idle_gpu_seconds", "goodput")


def _quota_in(record: Any) -> bool:
    """An hour with Kueue's part in it (what a restart does not move)."""
    return any((record.reserved_gpu_seconds, record.wait_seconds, record.waits))


def _figures(record: Any, restarted: bool, moved: tuple[str, ...]) -> tuple[Any, ...] | None:
    """R17's figures, without those a JobSet's restart in place moves, where one did."""
    if record is None:
        return None
    return tuple(v for f, v in zip(record.__struct_fields__, msgspec.structs.astuple(record)) if not restarted or f not in moved)


def _is_progress(line: Line) -> bool:
    return line["value"]["type"] == "BOOKMARK"


def in_a_burst(lines: list[Line], start: int, stop: int, picks: list[int]) -> list[Line]:
    """`lines[start:stop]` delivered as one burst: stamped with the latest `observed_at`
    among them, without progress, interleaved by `picks` (each an index into the objects
    that still have a record to deliver) keeping each object's own order; then, live
    again, the bridge's progress on each topic whose progress the window held, as of the
    burst."""
    window = [msgspec.json.decode(msgspec.json.encode(line)) for line in lines[start:stop] if not _is_progress(line)]
    if not window:
        return list(lines)
    at = max(line["value"]["observed_at"] for line in window)
    resumed = {line["topic"]: {**line, "value": {**line["value"], "observed_at": at}} for line in lines[start:stop] if _is_progress(line)}
    queues: dict[tuple[str, str], list[Line]] = {}
    for line in window:
        line["value"]["observed_at"] = at
        queues.setdefault((line["topic"], line["key"]), []).append(line)
    pending = list(queues.values())
    burst: list[Line] = []
    for pick in picks:
        pending = [q for q in pending if q]
        if not pending:
            break
        burst.append(pending[pick % len(pending)].pop(0))
    burst += [line for q in pending for line in q]
    return list(lines[:start]) + burst + list(resumed.values()) + list(lines[stop:])


# Stories with a change neither object wrote a time for: Kueue deactivating a Workload it
# had already evicted keeps its Evicted condition's time. Such a change is placed as late
# as the objects allow (before the Workload's next timed change, R12.7), so in a burst it
# may fall after a suspension it preceded when watched live: every interleaving of a burst
# still gives one answer, but not always the live one.
UNTIMED = {"r9_8_inactive_stale_preempted"}


def _check_every_burst(lines: list[Line], data: st.DataObject, *, as_watched: bool = True) -> None:
    start = data.draw(st.integers(0, len(lines) - 1), label="window start")
    stop = data.draw(st.integers(start + 1, len(lines)), label="window stop")
    picks = data.draw(st.lists(st.integers(0, 1_000), min_size=stop - start, max_size=stop - start), label="picks")
    expected = answer(lines) if as_watched else answer(in_a_burst(lines, start, stop, [0] * (stop - start)))
    assert answer(in_a_burst(lines, start, stop, picks)) == expected


@pytest.mark.parametrize("story", sorted(STORIES))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_r12_7_a_kueue_story_in_bursts_of_any_interleaving_gives_the_same_transitions(story: str, data: st.DataObject) -> None:
    _check_every_burst(STORIES[story]().records, data, as_watched=story not in UNTIMED)


@pytest.mark.parametrize("trace", EXAMPLES, ids=lambda p: p.name)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_r12_7_an_example_trace_in_bursts_of_any_interleaving_gives_the_same_answers(trace: Path, data: st.DataObject) -> None:
    _check_every_burst([orjson.loads(raw) for raw in trace.read_bytes().splitlines()], data)


def test_r12_7_the_workloads_backlog_before_or_after_the_jobsets_keeps_the_wait() -> None:
    """The restart of the issue: stopped before the Workload's eviction, started again
    after the readmission; each watch delivers its backlog in one burst, the Workload's
    first or the JobSet's first. The preemption and Kueue's wait survive either way."""
    lines = [orjson.loads(raw) for raw in (EXAMPLES[0].parent / "jobset-preempt-readmit.jsonl").read_bytes().splitlines()]

    def evicted(line: Line) -> bool:
        conditions = line["value"]["object"].get("status", {}).get("conditions", [])
        return any(c["type"] == "Evicted" and c["status"] == "True" for c in conditions)

    def resumed(line: Line) -> bool:
        obj = line["value"]["object"]
        conditions = obj.get("status", {}).get("conditions", [])
        return obj.get("kind") == "JobSet" and any(c["type"] == "Suspended" and c["status"] == "False" for c in conditions) and not obj["spec"]["suspend"]

    start = next(i for i, line in enumerate(lines) if not _is_progress(line) and evicted(line))
    stop = next(i for i, line in enumerate(lines) if i > start and not _is_progress(line) and resumed(line)) + 1
    # The window's objects in order of first appearance: the Workload (its eviction opens
    # it), then the JobSet; 0 takes the Workload's next record while it has one.
    size = stop - start
    for picks in ([0] * size, [1] * size):
        got = answer(in_a_burst(lines, start, stop, picks))["transitions"]
        [(key, steps)] = got.items()
        assert [(f, t) for f, t, *_ in steps] == [
            ("Pending", "Running"),
            ("Running", "WaitingForReadmission"),
            ("WaitingForReadmission", "Running"),
            ("Running", "Completed"),
        ]
        assert steps[2][4] == 905.0  # Kueue's wait: Evicted at 11:30:10, Admitted again at 11:45:15


def _delivered_in_turn(lines: list[Line], start: int, stop: int, turn: Callable[[Line], int]) -> list[Line]:
    """`lines[start:stop]` in a burst that delivers whole backlogs in turn (lowest `turn`
    first, one value for all of an object's records), each in its own order."""
    ahead = sorted(lines[start:stop], key=turn)
    return in_a_burst([*lines[:start], *ahead, *lines[stop:]], start, stop, [0] * (stop - start))


@pytest.mark.usefixtures("driver")
def test_r16_4_a_retried_trys_late_evidence_never_follows_the_rayjobs_final_verdict() -> None:
    """The RayJob's backlog (its first try retried, the second try's failure) and the
    second try's pods arrive before the first try's pods and Xid Event: the first try's
    interim verdict, revised by them, came out after the attempt's terminal verdict. The
    attempt's key must end with its terminal verdict, and every verdict must say what it
    says when watched live."""
    lines = [orjson.loads(raw) for raw in (EXAMPLES[0].parent / "rayjob-retried.jsonl").read_bytes().splitlines()]
    start = next(i for i, line in enumerate(lines) if line["topic"] == "k8s.events" and not _is_progress(line))

    def turn(line: Line) -> int:
        labels = line["value"]["object"].get("metadata", {}).get("labels", {})
        return 0 if line["topic"] == "k8s.jobs" else 1 if labels.get("ray.io/cluster") == "rl-sweep-p7d3x" else 2

    burst = _delivered_in_turn(lines, start, len(lines), turn)
    verdicts = [e.value for e in _outputs(burst) if e.topic == CLASSIFIED_FAILURES]
    final = max(i for i, v in enumerate(verdicts) if v.terminal)
    assert [v.revision for v in verdicts[final + 1 :] if v.key == verdicts[final].key and not v.terminal] == []
    assert answer(burst) == answer(lines)


def test_r12_7_a_jobset_created_suspended_whose_backlog_comes_first_still_waits_out_the_preemption() -> None:
    """Kueue's webhook creates a JobSet suspended: its first record carries no time of the
    job controller's (no `Suspended` condition yet). Delivered in one burst with the
    Workload's backlog after it — up to the readmission — its later suspension is still set
    beside Kueue's eviction by their own times: a record with no time of its own is placed
    no later than the job's next timed change, not at the burst."""
    lines = sorted(jobset_kueue_preempted(), key=lambda line: line["value"]["observed_at"])

    def resumed_again(line: Line) -> bool:
        obj = line["value"]["object"]
        conditions = obj.get("status", {}).get("conditions", [])
        return obj["kind"] == "JobSet" and not obj["spec"]["suspend"] and any(c["type"] == "Suspended" and c["reason"] == "ResumeJobs" for c in conditions)

    stop = [i for i, line in enumerate(lines) if resumed_again(line)][-1]  # the resume after the readmission
    got = answer(in_a_burst(lines, 0, stop, [0] * stop))["transitions"]
    [(_, steps)] = got.items()
    assert [(f, t, code) for f, t, code, *_ in steps] == [
        ("Pending", "Running", None),
        ("Running", "WaitingForReadmission", None),
        ("WaitingForReadmission", "Running", None),
        ("Running", "Completed", None),
    ]
    assert steps[2][4] == 21 * 60  # Kueue's wait: evicted 80 minutes before the end, admitted again 59 before
    assert got == answer(lines)["transitions"]


# Two days of the bridge's progress past a trace's last change, as a bridge left running writes it.
_DAYS_OF_PROGRESS = 48


def _with_two_days_of_progress(lines: list[Line]) -> list[Line]:
    last = max(datetime.fromisoformat(line["value"]["observed_at"]) for line in lines)
    return lines + [b.progress(topic, last + timedelta(hours=h)) for h in range(1, _DAYS_OF_PROGRESS + 1) for topic in SOURCE_TOPICS]


@pytest.mark.usefixtures("driver")
@pytest.mark.parametrize(
    "trace", ["pod-task-xid74.jsonl", "rayjob-retried.jsonl", "jobset-preempt-readmit.jsonl", "lws-group-recreated.jsonl", "workloads.jsonl", "mixed.jsonl"]
)
def test_r12_5_one_topic_read_behind_or_ahead_of_the_others_gives_the_same_answers(trace: str) -> None:
    """R12.5 with R12.7: a stage's stream time waits for progress of every topic it hears
    (`topology.EXPECTED`). A worker that reads a topic's backlog (its changes and its
    progress) after every other topic's, or before them — a first start on retained
    topics, a new group replaying history — must answer as if it read them in order. Before,
    the stream time was the least over the topics a stage had heard progress of: with the
    Events read behind two days of the pods' progress, the pod stage's stream time passed
    the failed pod's expiry before its Xid Event came, and the GPU fault was lost (Xid 74
    read as `Interrupted`); with the pods read behind, the fleet's hours closed before
    the pods' failures reached them."""
    lines = _with_two_days_of_progress([orjson.loads(raw) for raw in (EXAMPLES[0].parent / trace).read_bytes().splitlines()])
    in_order = answer(lines)
    for topic in SOURCE_TOPICS:
        theirs = [line for line in lines if line["topic"] == topic]
        others = [line for line in lines if line["topic"] != topic]
        assert answer(others + theirs) == in_order, f"{topic} read behind the others"
        assert answer(theirs + others) == in_order, f"{topic} read ahead of the others"


_LAGS = [timedelta(minutes=m) for m in (0, 1, 5, 30, 120, 600, 3000)]


@pytest.mark.usefixtures("driver")
@pytest.mark.parametrize("trace", EXAMPLES, ids=lambda p: p.name)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(lags=st.tuples(*[st.sampled_from(_LAGS)] * len(SOURCE_TOPICS)))
def test_r12_5_each_topic_read_behind_by_its_own_lag_gives_the_same_answers(trace: Path, lags: tuple[timedelta, ...]) -> None:
    """A worker catching up reads each topic at its own pace: every topic's lines (changes
    and progress) arrive as if observed `lag` later, from a minute to two days. Before the
    stream time waited for every topic a stage hears, 48 of 114 such orders of the example
    traces changed a verdict, a fault or an hour's GPU-seconds."""
    lines = _with_two_days_of_progress([orjson.loads(raw) for raw in trace.read_bytes().splitlines()])
    lag = dict(zip(SOURCE_TOPICS, lags, strict=True))
    order = sorted(range(len(lines)), key=lambda i: (datetime.fromisoformat(lines[i]["value"]["observed_at"]) + lag[lines[i]["topic"]], i))
    assert answer([lines[i] for i in order]) == answer(lines)
