"""The embedded driver: every stage of the topology (app/core/engine/topology.py) in one
process, with in-memory state, each record through its stage's `Runner`
(app/core/engine/runner.py, the per-record step every driver shares).

A record a stage writes to an internal topic is handed at once, depth first, to the
stage that reads that topic, so one input's outputs are all out before the next input
is read: the same input order always gives the same output bytes (SPEC R7.3).

Progress (SPEC R12) flows as it does between Faust workers: a source BOOKMARK moves the
reading stage's watermark, is forwarded through its internal topics (one partition each
here) and settles every state waiting on it. A trace's end is a watermark of +infinity
for every topic (`finish`), so every decision still pending is taken. Each stage is one
scope (`Scope`, reading every partition); the latest record time of a cluster, stream
time's fallback (R12.5), is the latest of every source record this pipeline read.

`wire=True` makes the hand-over and the state store behave as Kafka and the Faust tables
do: every internal record and every state is encoded and decoded again. The rule tests run
through both (tests/unit/conftest.py), so the codecs of the streaming path are held to the
same rules.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

import msgspec

from app.core.base.dead_letters import dead_letter
from app.core.base.emit import Emit
from app.core.base.progress import Watermarks, end_of_input, waiting_topics
from app.core.base.rules import DEFAULT_RULES, Rules
from app.core.engine.runner import Out, Outcome, Raw, Runner, Scope, Source, Write
from app.core.engine.topology import STAGE_OF, STAGES, Stage, StageRecord
from app.model.envelope import SOURCE_TOPICS

# How often, in stream time, expired state is swept (R7.4): every quarter of the
# retention, so state outlives its retention by at most that much and sweeps cost little.
SWEEPS_PER_RETENTION = 4
_DAWN = datetime.min.replace(tzinfo=timezone.utc)
_encode = msgspec.json.Encoder().encode  # the bytes Kafka and the Faust tables would hold


class _States:
    """One stage's states as a `StateStore`: a dict (the embedded driver never sees a
    record twice)."""

    __slots__ = ("states",)

    def __init__(self, states: dict[str, Any]) -> None:
        self.states = states

    def load(self, key: str) -> tuple[Any | None, bool]:
        return self.states.get(key), False

    def items(self) -> Iterable[tuple[str, Any]]:
        return self.states.items()


class Pipeline:
    def __init__(self, rules: Rules = DEFAULT_RULES, *, wire: bool = False) -> None:
        self.rules = rules
        self.wire = wire
        self.counts: Counter[str] = Counter()
        self.latest: dict[str, datetime] = {}  # cluster -> latest record time read (every scope's fallback)
        # Stage name -> state key -> state, for every stage that keeps state.
        self.states: dict[str, dict[str, Any]] = {s.name: {} for s in STAGES if s.state is not None}
        # Stage name -> its progress, latest record times, waiting and expiry indexes.
        self.scopes: dict[str, Scope] = {s.name: Scope(whole=True, latest=self.latest, waiting=True) for s in STAGES}
        self._runners = {s.name: Runner(s, rules, self.counts) for s in STAGES}
        self._stores = {name: _States(states) for name, states in self.states.items()}
        self._state_decoders = {s.name: msgspec.json.Decoder(s.state) for s in STAGES if s.state is not None}
        # Topic -> the stage reading it, its runner, scope and store.
        self._readers = {
            topic: (stage, self._runners[stage.name], self.scopes[stage.name], self._stores.get(stage.name))
            for topic, stage in STAGE_OF.items()
        }
        self.stream_time = _DAWN  # the latest record time of any cluster: when to sweep
        self._next_sweep = _DAWN  # the first record time sets the first sweep
        self._sweep_every = rules.retention / SWEEPS_PER_RETENTION

    @property
    def marks(self) -> dict[str, Watermarks]:
        """Stage name -> its watermarks (R12.6)."""
        return {name: scope.marks for name, scope in self.scopes.items()}

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
        reader = self._readers.get(topic)
        if reader is None:  # a topic no stage reads
            self.counts["dead_letters"] += 1
            return [dead_letter(topic, key, partition, offset, f"unknown source topic {topic!r}: expected one of {', '.join(SOURCE_TOPICS)}", value)]
        stage, runner, scope, store = reader
        outcome = runner.receive(scope, store, Source(topic, topic, key or "", partition, offset, partitions), value)
        return self._source(stage, outcome)

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
        stage, runner, scope, store = self._readers[topic]
        return self._source(stage, runner.receive_decoded(scope, store, Source(topic, topic, key, partition, offset, partitions), record, raw))

    def finish(self) -> list[Emit]:
        """The end of the input (a trace): a watermark of +infinity for every source
        topic of every cluster seen, so every decision still pending is taken (R12.3)."""
        out: list[Emit] = []
        for cluster in sorted(self.latest):
            for topic in SOURCE_TOPICS:
                stage, runner, scope, store = self._readers[topic]
                self._deliver(stage, runner.progress(scope, store, Source(topic, topic, ""), end_of_input(cluster, topic)), out)
        return out

    def _source(self, stage: Stage, outcome: Outcome) -> list[Emit]:
        out: list[Emit] = []
        if outcome.out or outcome.writes:
            self._deliver(stage, outcome, out)
        time = outcome.time
        if time is not None:  # every source record in time moves its cluster's time, progress included
            cluster, at = time
            if at > self.latest.get(cluster, _DAWN):
                self.latest[cluster] = at
            if at > self.stream_time:
                self.stream_time = at
                if at >= self._next_sweep:
                    self._sweep(at)
        return out

    def _deliver(self, stage: Stage, outcome: Outcome, out: list[Emit]) -> None:
        """The outcome's states stored, its records out (appended to `out`, the one list
        of the source record's outputs); internal records to the stage reading them,
        depth first, each as the value the stage wrote (no encode, unless `wire`)."""
        for write in outcome.writes:
            self._store(stage, write, outcome.out[write.first : write.end])
        readers, wire = self._readers, self.wire
        for each in outcome.out:
            emit = each.emit
            topic = emit.topic
            reader = readers.get(topic)
            if reader is None:
                out.append(emit)
                continue
            raw = each.raw
            next_stage, runner, scope, store = reader
            if wire:  # as through Kafka
                outcome = runner.receive(scope, store, Source(topic, topic, emit.key), raw if raw is not None else _encode(emit.value))
            else:
                value = emit.value
                outcome = runner.receive_decoded(scope, store, Source(topic, topic, emit.key), value, raw if raw is not None else (lambda v=value: _encode(v)))
            if outcome.out or outcome.writes:
                self._deliver(next_stage, outcome, out)

    def _store(self, stage: Stage, write: Write, caused: list[Out]) -> None:
        """A state the runner folded, with the records its fold caused (a Faust table
        keeps them with it: bench/fleet_scale.py measures that)."""
        state = write.state
        if self.wire:  # as the Faust tables hand it back: encoded, then decoded
            state = self._state_decoders[stage.name].decode(write.raw if write.raw is not None else _encode(state))
        self.states[stage.name][write.key] = state

    def watermarks(self) -> list[tuple[str, str, datetime]]:
        """(cluster, source topic, watermark) as the stages reading the source topics know them (R12.6)."""
        out = []
        for topic in SOURCE_TOPICS:
            out += [w for w in self.scopes[STAGE_OF[topic].name].marks.known() if w[1] == topic]
        return sorted(out)

    def waiting(self) -> list[tuple[str, str]]:
        """(cluster, source topic) some stage's stream time waits for (R12.5)."""
        return waiting_topics(scope.marks for scope in self.scopes.values())

    # --- expiry ----------------------------------------------------------------------------

    def clock(self, stage: Stage, cluster: str) -> datetime:
        """R12.5: a stage's stream time for one cluster: its watermark, else the latest
        record time read (never a timestamp written inside an object)."""
        return self.scopes[stage.name].clock(cluster)

    def _sweep(self, at: datetime) -> None:
        """Sweep expired state every quarter retention of record time (R7.4); each state
        is judged by its own cluster's stream time."""
        first = self._next_sweep == _DAWN
        self._next_sweep = at + self._sweep_every
        if first:
            return
        for stage in STAGES:
            states = self.states.get(stage.name)
            if stage.expires_at is None or states is None:
                continue
            runner, scope = self._runners[stage.name], self.scopes[stage.name]
            for key in runner.expired(scope, self._stores[stage.name]):
                del states[key]
                runner.forget(scope, key)
