"""`faultline replay --from-kafka`: the source topics' history through a chosen rule set,
into a file or into separate replay topics, never the live outputs (SPEC R10)."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import TextIO

import msgspec
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from app.core.base.emit import Emit
from app.core.base.rules import Rules
from app.replay.kafka_history import HistoryError, KafkaHistory
from app.embedded.pipeline import Pipeline
from app.kafka import clients
from app.kafka.topics import TOPICS, admin_client
from app.settings import Settings


def replay_topic(settings: Settings, logical: str, rules: Rules) -> str:
    """Where a replay writes a logical output topic: `<prefix><topic>.replay.<name>-<hash>`
    (Kafka names allow no '@'), so two rule sets never share a topic."""
    return settings.topic(f"{logical}.replay.{rules.version.replace('@', '-')}")


async def replay_history(history: KafkaHistory, pipeline: Pipeline) -> AsyncIterator[list[Emit]]:
    """The outputs of each history record, in order."""
    async for record in history.records():
        if record.envelope is None:
            yield pipeline.feed(record.topic, record.key, record.value, offset=record.offset, partition=record.partition)
        else:
            yield pipeline.feed_decoded(
                record.topic, record.key or "", record.envelope, raw=record.value, offset=record.offset, partition=record.partition
            )


class Progress:
    """A line on stderr every few seconds on long runs: records, rate, time left."""

    def __init__(self, total: int, every: float = 5.0, out: TextIO = sys.stderr, clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.every, self.out, self.clock = total, every, out, clock
        self.start = self.last = clock()

    def tick(self, done: int) -> None:
        now = self.clock()
        if now - self.last < self.every:
            return
        self.last = now
        rate = done / max(now - self.start, 1e-9)
        left = (self.total - done) / rate if rate else float("inf")
        print(f"replay: {done}/{self.total} records ({100 * done / max(self.total, 1):.0f}%), {rate:.0f} rec/s, about {left:.0f}s left", file=self.out)


class TopicSink:
    """Writes outputs to the replay topics of `rules` (created like the live ones)."""

    def __init__(self, settings: Settings, rules: Rules, logical_topics: tuple[str, ...]) -> None:
        self.settings, self.rules = settings, rules
        self.names = {logical: replay_topic(settings, logical, rules) for logical in logical_topics}
        self._create()
        self.producer = clients.producer(settings, acks="all", enable_idempotence=True, linger_ms=20)
        self.pending: list = []

    def _create(self) -> None:
        with admin_client(self.settings) as admin:
            existing = set(admin.list_topics())
            configs = {spec.logical: spec.config for spec in TOPICS}  # shaped like the live ones
            new = [
                NewTopic(name, self.settings.partitions, self.settings.replication, topic_configs=dict(configs.get(logical, {})))
                for logical, name in self.names.items()
                if name not in existing
            ]
            if new:
                try:
                    admin.create_topics(new)
                except TopicAlreadyExistsError:
                    pass

    def write(self, emit: Emit) -> None:
        self.pending.append(self.producer.send(self.names[emit.topic], key=emit.key.encode(), value=msgspec.json.encode(emit.value)))
        if len(self.pending) >= 10_000:
            self.flush()

    def flush(self) -> None:
        self.producer.flush()
        for future in self.pending:
            future.get(timeout=60)
        self.pending.clear()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.producer.close()


__all__ = ["HistoryError", "KafkaError", "KafkaHistory", "Progress", "TopicSink", "replay_history", "replay_topic"]
