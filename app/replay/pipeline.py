"""The embedded driver: every stage of the topology (app/core/topology.py) in one
process, with in-memory state.

A record a stage writes to an internal topic is handed at once, depth first, to the
stage that reads that topic, so one input's outputs are all out before the next input
is read: the same input order always gives the same output bytes (SPEC R7.3).

`wire=True` makes the hand-over and the state store behave as Kafka and the Faust tables
do: every internal record and every state is encoded and decoded again. The rule tests run
through both (tests/unit/conftest.py), so the codecs of the streaming path are held to the
same rules.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone
from typing import Any

import msgspec

from app.core.dead_letters import dead_letter
from app.core.emit import Emit
from app.core.rules import DEFAULT_RULES, Rules
from app.core.topology import INPUT_OF, STAGE_OF, STAGES, Failed, Stage, StageRecord, apply, decode_record
from app.model.decode import BadRecord, encode_internal

# How often, in stream time, expired state is swept (R7.4): every quarter of the
# retention, so state outlives its retention by at most that much and sweeps cost little.
SWEEPS_PER_RETENTION = 4
_DAWN = datetime.min.replace(tzinfo=timezone.utc)
_encoder = msgspec.json.Encoder()


class Pipeline:
    def __init__(self, rules: Rules = DEFAULT_RULES, *, wire: bool = False) -> None:
        self.rules = rules
        self.wire = wire
        # Stage name -> state key -> state, for every stage that keeps state.
        self.states: dict[str, dict[str, Any]] = {s.name: {} for s in STAGES if s.state is not None}
        self._state_decoders = {s.name: msgspec.json.Decoder(s.state) for s in STAGES if s.state is not None}
        # Topic -> the stage reading it, with that stage's states.
        self._readers = {topic: (stage, INPUT_OF[topic], self.states.get(stage.name)) for topic, stage in STAGE_OF.items()}
        self.stream_time = _DAWN
        self._next_sweep: datetime | None = None
        self.counts: Counter[str] = Counter()

    def feed(
        self, topic: str, key: str | None, value: bytes, offset: int | None = None, partition: int | None = None
    ) -> list[Emit]:
        """One source record in, every output record it causes out (dead letters included)."""
        self.counts["records"] += 1
        try:
            record = decode_record(topic, value)
        except BadRecord as exc:
            return [self._dead_letter(topic, key, partition, offset, str(exc), value)]
        out = self._fold(topic, key or "", record, partition, offset, value)
        if record.observed_at > self.stream_time:
            self._advance(record.observed_at)
        return out

    def feed_decoded(
        self, topic: str, key: str, record: StageRecord, raw: bytes = b"", offset: int | None = None, partition: int | None = None
    ) -> list[Emit]:
        """One source record already decoded (`decode_source`); `raw` is what a dead letter
        of it would quote."""
        self.counts["records"] += 1
        out = self._fold(topic, key, record, partition, offset, raw)
        if record.observed_at > self.stream_time:
            self._advance(record.observed_at)
        return out

    def _fold(self, topic: str, key: str, record: StageRecord, partition: int | None, offset: int | None, raw: bytes | None) -> list[Emit]:
        stage, reader, states = self._readers[topic]
        state_key = reader.key(key, record)
        if state_key is None:
            return []
        result = apply(stage, reader.fold, states.get(state_key) if states is not None else None, state_key, record, self.rules)
        if isinstance(result, Failed):
            return [self._dead_letter(topic, key, partition, offset, result.reason, raw if raw is not None else encode_internal(record))]
        state, emits = result
        if state is not None and states is not None:
            states[state_key] = self._stored(stage, state) if self.wire else state
        if not emits:
            return emits
        out: list[Emit] = []
        for emit in emits:
            if emit.topic not in self._readers:
                out.append(emit)
                continue
            handed = emit.value
            if self.wire:  # as through Kafka
                try:
                    handed = decode_record(emit.topic, encode_internal(handed))
                except BadRecord as exc:
                    out.append(self._dead_letter(emit.topic, emit.key, None, None, str(exc), encode_internal(emit.value)))
                    continue
            out.extend(self._fold(emit.topic, emit.key, handed, None, None, None))
        return out

    def _stored(self, stage: Stage, state: Any) -> Any:
        """A state as the Faust tables hand it back: encoded, then decoded."""
        return self._state_decoders[stage.name].decode(_encoder.encode(state))

    def _dead_letter(self, topic: str, key: str | None, partition: int | None, offset: int | None, reason: str, value: bytes) -> Emit:
        self.counts["dead_letters"] += 1
        return dead_letter(topic, key, partition, offset, reason, value)

    # --- expiry ----------------------------------------------------------------------------

    def _advance(self, at: datetime) -> None:
        """Stream time is the latest record time seen; it drives expiry (R7.4)."""
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
            for key in [k for k, s in states.items() if expired(s, at, self.rules)]:
                del states[key]
