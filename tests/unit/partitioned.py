"""The topology over several partitions per topic, as Faust workers run it, in one
process and in an order the test chooses (SPEC R12.3, R12.7): each stage has one `Scope`
per input partition (`whole=False`, as app/stream/agents.py keeps them), a record goes to
the partition of its key, progress to every partition. A test holds back some internal
partitions (`held`) while the others run on — a worker catching up reads one partition
behind the rest — and releases them later; its outputs must be the embedded driver's.

Only the order of delivery is the test's: each stage's step is the shared `Runner`
(app/core/engine/runner.py), as in both drivers. No expiry sweeps (not what it tests)."""

from __future__ import annotations

import zlib
from collections import Counter, deque
from collections.abc import Iterable
from typing import Any

import msgspec
import orjson

from app.core.base.emit import Emit
from app.core.base.progress import end_of_input
from app.core.base.rules import DEFAULT_RULES, Rules
from app.core.engine.runner import Outcome, Runner, Scope, Source
from app.core.engine.topology import STAGE_OF, STAGES, Stage
from app.model.envelope import EVENTS, SOURCE_TOPICS
from app.model.facts import INTERNAL_TOPICS, Progress

_encode = msgspec.json.Encoder().encode


class _States:
    """A stage's states (every key's records come through one partition, in order)."""

    def __init__(self) -> None:
        self.states: dict[str, Any] = {}

    def load(self, key: str) -> tuple[Any | None, bool]:
        return self.states.get(key), False

    def items(self) -> Iterable[tuple[str, Any]]:
        return self.states.items()


class _Partitions:
    """A stage's states, one store per partition as a worker's table partitions: a scope
    builds its waiting and expiry indexes from its own partition's states only (sharing
    one store let a partition read ahead settle another's states at its own watermarks)."""

    def __init__(self, partitions: int) -> None:
        self.partitions = [_States() for _ in range(partitions)]

    def items(self) -> Iterable[tuple[str, Any]]:
        return [item for store in self.partitions for item in store.items()]


def partition_of(key: str, partitions: int) -> int:
    return zlib.crc32(key.encode()) % partitions


class Partitioned:
    def __init__(self, rules: Rules = DEFAULT_RULES, partitions: int = 2) -> None:
        self.partitions = partitions
        self.counts: Counter[str] = Counter()
        self.runners = {s.name: Runner(s, rules, self.counts) for s in STAGES}
        self.scopes = {(s.name, p): Scope(whole=False) for s in STAGES for p in range(partitions)}
        self.stores = {s.name: _Partitions(partitions) for s in STAGES}
        # (internal topic, partition) -> records not yet read by the stage reading it
        self.queues: dict[tuple[str, int], deque[Emit]] = {(t, p): deque() for t in INTERNAL_TOPICS for p in range(partitions)}
        self.held: set[tuple[str, int]] = set()  # internal partitions read later
        self.out: list[Emit] = []
        self.clusters: set[str] = set()

    def feed(self, topic: str, key: str, value: bytes) -> None:
        """One source record (a BOOKMARK to every partition, R12.2), then every internal
        record that is not held back."""
        envelope = msgspec.json.decode(value)
        progress = envelope.get("type") == "BOOKMARK"
        if topic == EVENTS:  # the bridge keys an Event by the object it is about (app/bridge/resources.py `key_of`)
            key = str((envelope.get("object") or {}).get("involvedObject", {}).get("uid") or key)
        for p in range(self.partitions) if progress else [partition_of(key, self.partitions)]:
            self._read(topic, key, p, lambda scope, store, source: self.runners[STAGE_OF[topic].name].receive(scope, store, source, value))
        self.pump()

    def play(self, lines: list[dict[str, Any]], held: set[tuple[str, int]], hold_from: int, hold_until: int | None = None) -> list[Emit]:
        """Trace lines in, `held` read late from line `hold_from` until line `hold_until`
        (None: the end of the input); every output."""
        for i, line in enumerate(lines):
            if i == hold_from:
                self.held = set(held)
            if i == hold_until:
                self.held = set()
            self.feed(line["topic"], line["key"], orjson.dumps(line["value"]))
        return self.finish()

    def finish(self) -> list[Emit]:
        """Everything held is read, then the end of the input (R12.3)."""
        self.held = set()
        self.pump()
        for cluster in sorted(self.clusters):
            for topic in SOURCE_TOPICS:
                stage = STAGE_OF[topic]
                for p in range(self.partitions):
                    self._read(topic, "", p, lambda scope, store, source: self.runners[stage.name].progress(scope, store, source, end_of_input(cluster, topic)))
                self.pump()
        return self.out

    def pump(self) -> None:
        """Read the internal partitions not held, one record each in turn, until none has any."""
        while True:
            ready = [(t, p) for (t, p), q in sorted(self.queues.items()) if q and (t, p) not in self.held]
            if not ready:
                return
            for topic, p in ready:
                emit = self.queues[(topic, p)].popleft()
                value = emit.value
                self._read(topic, emit.key, p, lambda scope, store, source, v=value: self.runners[STAGE_OF[topic].name].receive(scope, store, source, _encode(v)))

    def _read(self, topic: str, key: str, partition: int, step: Any) -> None:
        stage = STAGE_OF[topic]
        source = Source(topic, topic, key, partition, None, self.partitions)
        outcome = step(self.scopes[(stage.name, partition)], self.stores[stage.name].partitions[partition] if stage.state is not None else None, source)
        if outcome.time is not None:
            self.clusters.add(outcome.time[0])
        self._written(stage, partition, outcome)

    def _written(self, stage: Stage, partition: int, outcome: Outcome) -> None:
        for write in outcome.writes:
            self.stores[stage.name].partitions[partition].states[write.key] = write.state
        for each in outcome.out:
            emit = each.emit
            if emit.topic not in INTERNAL_TOPICS:
                self.out.append(emit)
            elif isinstance(emit.value, Progress):
                for p in range(self.partitions):
                    self.queues[(emit.topic, p)].append(emit)
            else:
                self.queues[(emit.topic, partition_of(emit.key, self.partitions))].append(emit)
