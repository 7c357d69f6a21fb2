"""The embedded driver: every stage of the topology (app/core/topology.py) in one
process, with in-memory state.

A record a stage writes to an internal topic is handed at once, depth first, to the
stage that reads that topic, so one input's outputs are all out before the next input
is read: the same input order always gives the same output bytes (SPEC R7.3).

Progress (SPEC R12) flows as it does between Faust workers: a source BOOKMARK moves the
reading stage's watermark, is forwarded through its internal topics (one partition each
here) and settles every state waiting on it. A trace's end is a watermark of +infinity
for every topic (`finish`), so every decision still pending is taken.

`wire=True` makes the hand-over and the state store behave as Kafka and the Faust tables
do: every internal record and every state is encoded and decoded again. The rule tests run
through both (tests/unit/conftest.py), so the codecs of the streaming path are held to the
same rules.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import msgspec

from app.core.clock import CLOCK_FAULT
from app.core.dead_letters import dead_letter
from app.core.emit import Emit
from app.core.progress import NO_PROGRESS, Watermarks, end_of_input, progress_of, settles
from app.core.rules import DEFAULT_RULES, Rules
from app.core.topology import (
    INPUT_OF,
    STAGE_OF,
    STAGES,
    Applied,
    Failed,
    Stage,
    StageRecord,
    apply,
    decode_record,
    forwarded,
    progress_in,
    settle,
    time_fault,
)
from app.model.decode import BadRecord, encode_internal
from app.model.envelope import SOURCE_TOPICS
from app.model.facts import Progress

def _unchecked(emits: list[Emit]) -> Applied:
    """Records a driver writes itself (forwarded progress), as a fold's result."""
    return Applied(None, emits, None, [encode_internal(e.value) for e in emits], {})


# How often, in stream time, expired state is swept (R7.4): every quarter of the
# retention, so state outlives its retention by at most that much and sweeps cost little.
SWEEPS_PER_RETENTION = 4
Raw = bytes | Callable[[], bytes]  # a record's bytes, or how to find them
_DAWN = datetime.min.replace(tzinfo=timezone.utc)
_encoder = msgspec.json.Encoder()


class Pipeline:
    def __init__(self, rules: Rules = DEFAULT_RULES, *, wire: bool = False) -> None:
        self.rules = rules
        self.wire = wire
        # Stage name -> state key -> state, for every stage that keeps state.
        self.states: dict[str, dict[str, Any]] = {s.name: {} for s in STAGES if s.state is not None}
        # Stage name -> its watermarks, and the keys of its states waiting on progress.
        self.marks: dict[str, Watermarks] = {s.name: NO_PROGRESS for s in STAGES}
        # Stage name -> key -> until when its state waits on progress (R12.4).
        self._waiting: dict[str, dict[str, datetime]] = {s.name: {} for s in STAGES if s.waits_until is not None}
        self._state_decoders = {s.name: msgspec.json.Decoder(s.state) for s in STAGES if s.state is not None}
        # Topic -> the stage reading it, with that stage's states.
        self._readers = {topic: (stage, INPUT_OF[topic], self.states.get(stage.name)) for topic, stage in STAGE_OF.items()}
        self.latest: dict[str, datetime] = {}  # cluster -> latest record time seen
        self.stream_time = _DAWN  # the latest record time of any cluster: when to sweep
        self._next_sweep: datetime | None = None
        self.counts: Counter[str] = Counter()

    def feed(
        self,
        topic: str,
        key: str | None,
        value: bytes,
        offset: int | None = None,
        partition: int | None = None,
        partitions: int | None = None,
    ) -> list[Emit]:
        """One source record in, every output record it causes out (dead letters
        included). `partition` of `partitions`: where a Kafka reader found it (a trace is
        one partition)."""
        self.counts["records"] += 1
        try:
            record = decode_record(topic, value)
        except BadRecord as exc:
            return [self._dead_letter(topic, key, partition, offset, str(exc), value)]
        return self._source(topic, key or "", record, partition, partitions, offset, value)

    def feed_decoded(
        self,
        topic: str,
        key: str,
        record: StageRecord,
        raw: Raw = b"",
        offset: int | None = None,
        partition: int | None = None,
        partitions: int | None = None,
    ) -> list[Emit]:
        """One source record already decoded (`decode_source`); `raw` is what a dead letter
        of it would quote (or a function that finds it, called only for a dead letter)."""
        self.counts["records"] += 1
        return self._source(topic, key, record, partition, partitions, offset, raw)

    def finish(self) -> list[Emit]:
        """The end of the input (a trace): a watermark of +infinity for every source
        topic of every cluster seen, so every decision still pending is taken (R12.3)."""
        out: list[Emit] = []
        for cluster in sorted(self.latest):
            for topic in SOURCE_TOPICS:
                out += self._progress(STAGE_OF[topic], end_of_input(cluster, topic))
        return out

    def _source(
        self, topic: str, key: str, record: StageRecord, partition: int | None, partitions: int | None, offset: int | None, raw: Raw
    ) -> list[Emit]:
        fault = time_fault(topic, record, self.marks[STAGE_OF[topic].name], self.rules)
        if fault is not None:  # R11.3, R11.4: neither folded nor moving stream time
            self.counts["clock_faults"] += fault.startswith(CLOCK_FAULT)
            return [self._dead_letter(topic, key, partition, offset, fault, raw)]
        if progress_in(record):
            out = self._progress(STAGE_OF[topic], progress_of(topic, partition or 0, partitions or 1, record))
        else:
            out = self._fold(topic, key, record, partition, offset, raw)
        at = record.observed_at
        if at > self.latest.get(record.cluster, _DAWN):
            self.latest[record.cluster] = at
            if at > self.stream_time:
                self._advance(at)
        return out

    def _fold(self, topic: str, key: str, record: StageRecord, partition: int | None, offset: int | None, raw: Raw | None) -> list[Emit]:
        stage, reader, states = self._readers[topic]
        if isinstance(record, Progress):  # forwarded by the stage before
            return self._progress(stage, record)
        state_key = reader.key(key, record)
        if state_key is None:
            return []
        marks = self.marks[stage.name]
        result = apply(stage, reader.fold, states.get(state_key) if states is not None else None, state_key, record, self.rules, marks)
        if isinstance(result, Failed):
            return [self._dead_letter(topic, key, partition, offset, result.reason, raw if raw is not None else encode_internal(record))]
        if result.state is not None and states is not None:
            self._store(stage, states, state_key, result.state, result.state_bytes)
        return self._hand_over(result) if result.emits or result.dropped else result.emits

    def _hand_over(self, result: Applied) -> list[Emit]:
        """Outputs out; internal records to the stage reading them, depth first."""
        self.counts.update(result.dropped)
        out: list[Emit] = []
        for emit, raw in zip(result.emits, result.emit_bytes, strict=True):
            if emit.topic not in self._readers:
                out.append(emit)
                continue
            handed = emit.value
            if self.wire:  # as through Kafka
                try:
                    handed = decode_record(emit.topic, raw)
                except BadRecord as exc:
                    out.append(self._dead_letter(emit.topic, emit.key, None, None, str(exc), raw))
                    continue
            out.extend(self._fold(emit.topic, emit.key, handed, None, None, None))
        return out

    def _store(self, stage: Stage, states: dict[str, Any], key: str, state: Any, raw: bytes | None) -> None:
        if self.wire:  # as the Faust tables hand it back: encoded, then decoded
            state = self._state_decoders[stage.name].decode(raw if raw is not None else _encoder.encode(state))
        states[key] = state
        if stage.waits_until is not None:
            until = stage.waits_until(state, self.rules)
            if until is not None:
                self._waiting[stage.name][key] = until
            else:
                self._waiting[stage.name].pop(key, None)

    def _progress(self, stage: Stage, progress: Progress) -> list[Emit]:
        """R12.3, R12.4: move the stage's watermark, forward the progress, and decide again
        every state of that cluster waiting on progress (in key order: deterministic)."""
        marks = self.marks[stage.name].observe(progress)
        if marks is None:
            return []
        self.marks[stage.name] = marks
        out = self._hand_over(_unchecked(forwarded(stage, progress)))
        states = self.states.get(stage.name)
        if stage.settle is None or states is None:
            return out
        prefix = f"{progress.cluster}/"
        now = marks.stream_time(progress.cluster)
        for key in sorted(k for k, until in self._waiting[stage.name].items() if k.startswith(prefix) and settles(until, now)):
            result = settle(stage, states[key], key, self.rules, marks)
            if isinstance(result, Failed):
                out.append(self._dead_letter(progress.topic, key, progress.partition, None, result.reason, encode_internal(progress)))
                continue
            self._store(stage, states, key, result.state, result.state_bytes)
            out.extend(self._hand_over(result))
        return out

    def watermarks(self) -> list[tuple[str, str, datetime]]:
        """(cluster, source topic, watermark) as the stages reading the source topics know them (R12.6)."""
        out = []
        for topic in SOURCE_TOPICS:
            out += [w for w in self.marks[STAGE_OF[topic].name].known() if w[1] == topic]
        return sorted(out)

    def _dead_letter(self, topic: str, key: str | None, partition: int | None, offset: int | None, reason: str, value: Raw) -> Emit:
        self.counts["dead_letters"] += 1
        return dead_letter(topic, key, partition, offset, reason, value if isinstance(value, bytes) else value())

    # --- expiry ----------------------------------------------------------------------------

    def clock(self, stage: Stage, cluster: str) -> datetime:
        """R12.5: a stage's stream time for one cluster: its watermark, else the latest
        record time seen (never a timestamp written inside an object)."""
        return self.marks[stage.name].stream_time(cluster) or self.latest.get(cluster, _DAWN)

    def _advance(self, at: datetime) -> None:
        """Sweep expired state every quarter retention of record time (R7.4); each state
        is judged by its own cluster's stream time."""
        self.stream_time = at
        every = self.rules.retention / SWEEPS_PER_RETENTION
        if self._next_sweep is None:
            self._next_sweep = at + every
        if at < self._next_sweep:
            return
        self._next_sweep = at + every
        for stage in STAGES:
            expired, states = stage.expired, self.states.get(stage.name)
            if expired is None or states is None:
                continue
            now = {cluster: self.clock(stage, cluster) for cluster in self.latest}
            for key in [k for k, s in states.items() if expired(s, now.get(k.partition("/")[0], _DAWN), self.rules)]:
                del states[key]
                self._waiting.get(stage.name, {}).pop(key, None)
