"""The stage topology: the one declaration of how records flow through faultline.

    k8s.pods, k8s.events --(cluster/pod uid)--> pods [PodState] -----> faults, attempt-facts, fleet-inputs
    k8s.jobs, k8s.workloads ------------------> jobs (stateless) ----> attempt-facts, gang-inputs
    attempt-facts --(attempt key)-------------> attempts [AttemptState] -> classified-failures, idle-quota, fleet-inputs
    gang-inputs --(cluster/JobSet uid)--------> gangs [GangStateData] --> gang-transitions, attempt-facts (quota), fleet-inputs
    fleet-inputs --(node, GPU, ns-hour, queue)-> fleet [FleetStats] -----> the derived topics (docs/fleet.md)

Each stage says here, once, which topics it reads, how a record of each is keyed and
folded, its expiry and which topics it writes. Every record carries its time
(`observed_at`, the bridge's clock), which moves stream time. The drivers — the embedded runner
(app/replay) and the Faust workers (app/stream) — run this declaration; neither routes,
keys or decodes records on its own. The internal topics (attempt-facts, gang-inputs,
fleet-inputs) are Kafka topics in the streaming path and a hand-over in the embedded one.

JobSets and their Workloads go through one stage (`jobs`): records of both topics reach
the gang stage in the order one reader interleaves them, never one topic running ahead.

The fold policy (`apply`) is defined once: a fold that raises (a bug, or input the rules
never expected), an output that cannot be encoded or a value past `max_value_bytes`
fails its record only: it is dead-lettered with the reason and processing goes on (SPEC
R11.3, R11.5). Folds return new states and never change the one they were given, so the
stored state is the state before the record. A source record whose time cannot be used
(out of range, R11.3) is dead-lettered before it is folded; one far ahead of its topic's
progress (a clock fault, R11.4) is folded but moves no stream time (the runner).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec

from app.core.stages.attempts import AttemptState, attempt_expires_at, fold_attempt
from app.core.stages.attempt_goodput import attempt_waits_until, settle_attempt
from app.core.base.emit import DROPPED, Emit
from app.core.fleet.fold import FleetStats, fleet_expires_at, fleet_waits_until, fold_fleet, settle_fleet
from app.core.stages.gangs import GangStateData, fold_gang, gang_expires_at, gang_waits_until, route_workload_record, settle_gang
from app.core.stages.jobs import route_job_record
from app.core.stages.pods import PodState, fold_event, fold_pod, key_of_event, key_of_pod, pod_state_expires_at
from app.core.base.progress import Watermarks
from app.core.base.rules import Rules
from app.model.decode import BadRecord, TypedEnvelope, decode_internal, decode_source
from app.model.envelope import BOOKMARK, EVENTS, JOBS, PODS, WORKLOADS
from app.model.facts import (
    ATTEMPT_FACTS,
    END_OF_TIME,
    FLEET_INPUTS,
    GANG_INPUTS,
    INTERNAL_TOPICS,
    AttemptFact,
    FleetInput,
    GangInput,
    Progress,
)
from app.model.fleet_records import DERIVED_TOPICS
from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER, FAULTS, GANG_TRANSITIONS, IDLE_QUOTA, STUCK_READMISSIONS

StageRecord = TypedEnvelope | AttemptFact | GangInput | FleetInput
# (state or None, state key, record, rules, the stage's watermarks) -> (new state or None, records to write)
Fold = Callable[[Any, str, Any, Rules, Watermarks], tuple[Any, list[Emit]]]
# (state, state key, rules, watermarks) -> the same, decided again on progress (R12.4)
Settle = Callable[[Any, str, Rules, Watermarks], tuple[Any, list[Emit]]]


class Input(msgspec.Struct, frozen=True):
    """One topic a stage reads: how its records are keyed and folded."""

    topic: str
    key: Callable[[str, Any], str | None]  # (the record's Kafka key, record) -> state key; None: nothing to do
    fold: Fold


class Stage(msgspec.Struct, frozen=True):
    name: str
    inputs: tuple[Input, ...]
    outputs: tuple[str, ...]  # logical topics (dead letters aside: every stage may write them)
    state: type | None = None  # None: a stateless router
    # SPEC R7.4: the stream time from which a state has expired (None: not by time while
    # it is as it is); a sweep drops the states whose time has come.
    expires_at: Callable[[Any, Rules], datetime | None] | None = None
    # R12.4: a state that waits on progress says until when (`waits_until`: its cluster's
    # stream time, or ANY_PROGRESS); it is decided again (`settle`) once progress gets there.
    waits_until: Callable[[Any, Rules], datetime | None] | None = None
    settle: Settle | None = None
    # Internal topics it forwards its own watermark to, under its own name (`<stage>:<topic>`,
    # `forwarded`), not the progress as it came: every stage that reads an internal topic
    # (each of its partitions hears of every source partition) and writes a stage whose
    # records reach it by another path too, so that the reader's watermark is the least
    # over this stage's partitions and waits for every path (R12.3).
    progress_as_own: tuple[str, ...] = ()

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(i.topic for i in self.inputs)


def _as_is(key: str, _: object) -> str:
    """Re-keyed records arrive with their stage key as the Kafka key."""
    return key


PODS_STAGE = Stage(
    name="pods",
    inputs=(Input(PODS, key_of_pod, fold_pod), Input(EVENTS, key_of_event, fold_event)),
    outputs=(FAULTS, ATTEMPT_FACTS, FLEET_INPUTS),
    state=PodState,
    expires_at=pod_state_expires_at,
)
JOBS_STAGE = Stage(
    name="jobs",
    inputs=(Input(JOBS, _as_is, route_job_record), Input(WORKLOADS, _as_is, route_workload_record)),
    outputs=(ATTEMPT_FACTS, GANG_INPUTS),
)
ATTEMPTS_STAGE = Stage(
    name="attempts",
    inputs=(Input(ATTEMPT_FACTS, _as_is, fold_attempt),),
    outputs=(CLASSIFIED_FAILURES, IDLE_QUOTA, FLEET_INPUTS),
    state=AttemptState,
    expires_at=attempt_expires_at,
    waits_until=attempt_waits_until,  # R17: the fleet told and idle quota decided, on progress
    settle=settle_attempt,
    progress_as_own=(FLEET_INPUTS,),  # the fleet hears of the pods and jobs by their own stages too
)
GANGS_STAGE = Stage(
    name="gangs",
    inputs=(Input(GANG_INPUTS, _as_is, fold_gang),),
    outputs=(GANG_TRANSITIONS, STUCK_READMISSIONS, ATTEMPT_FACTS, FLEET_INPUTS),
    state=GangStateData,
    expires_at=gang_expires_at,
    waits_until=gang_waits_until,
    settle=settle_gang,
    # The attempt stage hears of the jobs from the jobs stage too; the fleet from the attempt stage.
    progress_as_own=(ATTEMPT_FACTS, FLEET_INPUTS),
)
FLEET_STAGE = Stage(
    name="fleet",
    inputs=(Input(FLEET_INPUTS, _as_is, fold_fleet),),
    outputs=DERIVED_TOPICS,
    state=FleetStats,
    expires_at=fleet_expires_at,
    waits_until=fleet_waits_until,
    settle=settle_fleet,
)

STAGES: tuple[Stage, ...] = (PODS_STAGE, JOBS_STAGE, ATTEMPTS_STAGE, GANGS_STAGE, FLEET_STAGE)
# Every topic a stage reads has exactly one reader.
STAGE_OF: dict[str, Stage] = {i.topic: stage for stage in STAGES for i in stage.inputs}
INPUT_OF: dict[str, Input] = {i.topic: i for stage in STAGES for i in stage.inputs}


def _names(stage: Stage) -> dict[str, str]:
    """The names the progress of each source topic reaches `stage` under -> that source
    topic: as it came from a stage that forwards it so, `<writer>:<topic>` from one that
    forwards its own watermark (`Stage.progress_as_own`)."""
    out: dict[str, str] = {}
    for topic in stage.topics:
        writers = [s for s in STAGES if topic in s.outputs]
        if not writers:
            out[topic] = topic
        for w in writers:
            upstream = _names(w)
            out.update({f"{w.name}:{source}": source for source in upstream.values()} if topic in w.progress_as_own else upstream)
    return out


# R12.3: stage -> source topic -> every name its progress reaches the stage under, one per
# path (`_names`). A stage's watermark of a source topic is the least over them
# (`own_progress`). Once it hears progress of a cluster under one name it waits for every
# other name too (`EXPECTED`), so that its stream time runs ahead of no path and no source
# topic not yet heard from (R12.5, R12.7: a worker reads one topic behind another, a stage
# hears its inputs after another stage has folded them).
_SOURCE_OF: dict[str, dict[str, str]] = {stage.name: _names(stage) for stage in STAGES}
PATHS: dict[str, dict[str, tuple[str, ...]]] = {
    stage: {source: tuple(n for n, s in names.items() if s == source) for source in dict.fromkeys(names.values())}
    for stage, names in _SOURCE_OF.items()
}
# stage -> every name progress reaches it under: the runner ignores progress under any other,
# and a Faust worker drops it from the progress it takes up (`Watermarks.keeping`).
HEARD: dict[str, frozenset[str]] = {stage: frozenset(names) for stage, names in _SOURCE_OF.items()}
# stage -> a name progress reaches it under -> every other name it hears progress under.
EXPECTED: dict[str, dict[str, tuple[str, ...]]] = {
    stage: {name: tuple(sorted(n for n in names if n != name)) for name in names} for stage, names in HEARD.items()
}


def taken_up(stage: str, marks: Watermarks) -> Watermarks:
    """Progress a driver takes up where it was saved, perhaps by an older version: only the
    names the stage hears (`HEARD`: one it no longer hears would never move again), and,
    for every cluster it had heard, every name `EXPECTED` of it. Progress saved before a
    stage expected the names it had not heard yet would otherwise give it a stream time
    ahead of them until the next progress moved (R12.5)."""
    marks = marks.keeping(HEARD[stage])
    expected = EXPECTED[stage]
    for key in [*marks.latest, *marks.ended]:
        cluster, _, name = key.partition("/")
        for other in expected.get(name, ()):
            marks = marks.expect(cluster, other)
    return marks


OUTPUT_TOPICS: tuple[str, ...] = (FAULTS, CLASSIFIED_FAILURES, GANG_TRANSITIONS, STUCK_READMISSIONS, IDLE_QUOTA, DEAD_LETTER, *DERIVED_TOPICS)


def decode_record(topic: str, value: bytes) -> StageRecord:
    """A stage's input record from its bytes; BadRecord says what is wrong."""
    if topic in INTERNAL_TOPICS:
        return decode_internal(topic, value)
    return decode_source(topic, value)[0]  # names the source topics if it is none of them


# --- the fold policy ---------------------------------------------------------------------------


# Structs, not NamedTuples: one is made for every record (a Struct is made in C).
class Failed(msgspec.Struct, frozen=True, gc=False):
    reason: str


class Applied(msgspec.Struct, frozen=True, gc=False):
    """A fold's result, checked (SPEC R11.3, R11.5): the key's new state (None: keep
    none) with its JSON (None when the fold kept the state it was given), the records to
    write with theirs, and what the fold left out to stay bounded (counter -> count)."""

    state: Any
    emits: list[Emit]
    state_bytes: bytes | None
    emit_bytes: list[bytes]
    dropped: dict[str, int]


_encode = msgspec.json.Encoder().encode  # the bytes the drivers write (app/stream/codecs.py)


_NO_DROPS: dict[str, int] = {}


def _checked(stage: Stage, key: str, given: Any, result: tuple[Any, list[Emit]], rules: Rules) -> Applied | Failed:
    state, emits = result
    changed = state is not None and state is not given and state != given  # equal: nothing to write
    if not emits and not changed:
        return Applied(state, emits, None, [], _NO_DROPS)  # most records: nothing to write
    limit = rules.max_value_bytes
    dropped, written, emit_bytes = _NO_DROPS, [], []
    for emit in emits:
        if emit.topic == DROPPED:
            dropped = {**dropped, emit.key: dropped.get(emit.key, 0) + emit.value}
            continue
        raw = _encode(emit.value)  # an output that cannot be encoded fails its record
        if len(raw) > limit:
            return Failed(f"stage {stage.name}: this record would write a {emit.topic} record of {len(raw)} bytes, over max_value_bytes ({limit})")
        written.append(emit)
        emit_bytes.append(raw)
    state_bytes = None
    if changed:
        state_bytes = _encode(state)
        if len(state_bytes) > limit:
            return Failed(
                f"stage {stage.name}: the state of {key[:256]} would grow to {len(state_bytes)} bytes with this record, "
                f"over max_value_bytes ({limit}); the state stays as it was (SPEC R11.5)"
            )
    return Applied(state, written, state_bytes, emit_bytes, dropped)


def _failure(stage: Stage, exc: Exception, what: str) -> Failed:
    if isinstance(exc, BadRecord):  # a record the rules refuse, saying why
        return Failed(f"stage {stage.name}: {exc}")
    return Failed(f"stage {stage.name} failed {what}: {type(exc).__name__}: {exc}")


def apply(stage: Stage, fold: Fold, state: Any, key: str, record: StageRecord, rules: Rules, marks: Watermarks) -> Applied | Failed:
    """Fold one record. A fold that raises (a bug, or input the rules never expected),
    an output that cannot be encoded, or a state or output past `max_value_bytes` fails
    this record only: the driver dead-letters it with the `Failed` reason, keeps the
    state it had, and goes on (SPEC R11.3, R11.5)."""
    try:
        return _checked(stage, key, state, fold(state, key, record, rules, marks), rules)
    except Exception as exc:  # noqa: BLE001 - any failure of one record must not stop the stage
        return _failure(stage, exc, "on this record")


def settle(stage: Stage, state: Any, key: str, rules: Rules, marks: Watermarks) -> Applied | Failed:
    """`apply` for a state decided again on progress (R12.4), under the same policy."""
    assert stage.settle is not None
    try:
        return _checked(stage, key, state, stage.settle(state, key, rules, marks), rules)
    except Exception as exc:  # noqa: BLE001 - one state's failure must not stop the stage
        return _failure(stage, exc, f"to settle {key[:256]}")


# --- progress (SPEC R12) -------------------------------------------------------------------


def progress_in(record: StageRecord) -> bool:
    """Is this record progress (a source BOOKMARK or a forwarded `Progress`), not a change?"""
    return isinstance(record, Progress) or getattr(record, "type", None) == BOOKMARK


def forwarded(stage: Stage, progress: Progress, marks: Watermarks, partition: int, partitions: int, last: dict[tuple[str, str, int], Progress]) -> list[Emit]:
    """R12.3: what a stage writes on progress: the same progress to every partition of
    each internal topic it writes, so the next stage computes the same watermark. The
    drivers send a `Progress` value to every partition (`to_every_partition`).

    To a topic in `progress_as_own` a stage sends its own watermark instead (`marks`, of
    its input `partition` of `partitions`), under its own name: a stage that reads an
    internal topic hears of every source partition in each of its partitions, so the
    source partition's progress, forwarded as it came, would reach the reader from each of
    them and vouch for what the slowest has not written yet. Its own watermark, tagged
    with its own partition, makes the reader's the least over all of them.

    Only what differs from what this scope last sent under the same (cluster, name,
    partition) goes out (`last`, which this updates): a stage's own watermark is the least
    over its paths and stays where it was on most progress it hears (the attempt stage
    hears of the jobs from the jobs stage, then from the gang stage, and moves only on the
    second), and the next stage would take the same again in for nothing (issue 37: a third
    of the attempt stage's progress). `last` lives as long as the scope: a new ownership,
    or a restart, sends afresh, which the reader takes in as nothing new."""
    internal = [topic for topic in stage.outputs if topic in INTERNAL_TOPICS]
    if not internal:
        return []
    # Each value is decided once: it goes to every topic it is for, or to none.
    as_came = _unsent(progress, last) if any(t not in stage.progress_as_own for t in internal) else None
    own = _unsent(own_progress(stage, progress, marks, partition, partitions), last) if stage.progress_as_own else None
    return [Emit(topic, sent.topic, sent) for topic in internal if (sent := own if topic in stage.progress_as_own else as_came) is not None]


def _unsent(progress: Progress | None, last: dict[tuple[str, str, int], Progress]) -> Progress | None:
    """`progress` unless it is what `last` says was sent under its (cluster, name,
    partition) last; noted there as sent."""
    if progress is None:
        return None
    at = (progress.cluster, progress.topic, progress.partition)
    if last.get(at) == progress:
        return None
    last[at] = progress
    return progress


def own_progress(stage: Stage, progress: Progress, marks: Watermarks, partition: int, partitions: int) -> Progress | None:
    """The stage's own watermark of the source topic `progress` is of, as its input
    `partition` of `partitions` forwards it (`<stage>:<source topic>`): the least over
    every path that topic's progress reaches the stage by (`PATHS`: the attempt stage
    hears of a Workload from the jobs stage and, as `gangs:k8s.workloads`, from the gang
    stage), so what it vouches for downstream it has heard of by all of them. None while
    a path has shown none; the end of the input once every path has ended."""
    source = _SOURCE_OF[stage.name].get(progress.topic, progress.topic)
    paths = [marks.of(progress.cluster, name) for name in PATHS[stage.name].get(source, (progress.topic,))]
    if any(at is None for at in paths):
        return None
    mark = min(at for at in paths if at is not None)
    name = f"{stage.name}:{source}"
    return Progress(progress.cluster, name, partition, partitions, mark, final=mark == END_OF_TIME)


def to_every_partition(emit: Emit) -> bool:
    return isinstance(emit.value, Progress)
