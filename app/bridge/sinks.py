"""Where records go. The watcher calls a `Sink` from one thread only, in order: records,
gap markers, then `flush()` before it saves a position through `sink.positions`.

Three sinks: Kafka (`app.bridge.kafka_sink`, the `bridge` command), a trace file
(`record`) and the in-process pipeline (`run`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import IO, Protocol

import orjson

from app.bridge.positions import MemoryPositions, PositionStore
from app.bridge.records import BridgeGap, SourceRecord
from app.core.emit import Emit
from app.replay.pipeline import Pipeline

log = logging.getLogger("faultline.bridge")


class Sink(Protocol):
    positions: PositionStore

    def publish(self, record: SourceRecord) -> None:
        """Hand over one source record (it may be buffered)."""
        ...

    def publish_gap(self, gap: BridgeGap) -> None:
        """A watch was rebuilt after 410 Gone (its records were published just before)."""
        ...

    def flush(self) -> None:
        """Return once everything published so far is durable; raise DeliveryError if
        any of it could not be delivered."""
        ...

    def close(self) -> None: ...


def log_gap(gap: BridgeGap) -> None:
    scope = gap.namespace or "all namespaces"
    log.warning(
        "%s (%s): watch gone at resourceVersion %s, relisted at %s; %d object(s) vanished meanwhile and were published as DELETED",
        gap.kind,
        scope,
        gap.from_resource_version,
        gap.relisted_resource_version,
        gap.deleted,
    )


class TraceSink:
    """A trace file: JSON Lines `{"topic", "key", "value"}` with logical topic names
    (DESIGN.md). Gap markers are not source records: they are logged, not written."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self.positions: PositionStore = MemoryPositions()
        self.written = 0

    def publish(self, record: SourceRecord) -> None:
        self._out.write(
            b'{"topic":'
            + orjson.dumps(record.topic)
            + b',"key":'
            + orjson.dumps(record.key)
            + b',"value":'
            + record.value
            + b"}\n"
        )
        self.written += 1

    def publish_gap(self, gap: BridgeGap) -> None:
        log_gap(gap)

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        self._out.flush()


class PipelineSink:
    """The embedded mode: each record goes through the core at once; every output record
    is handed to `on_emit` (in order)."""

    def __init__(self, pipeline: Pipeline, on_emit: Callable[[Emit], None]) -> None:
        self.pipeline = pipeline
        self._on_emit = on_emit
        self.positions: PositionStore = MemoryPositions()

    def publish(self, record: SourceRecord) -> None:
        for emit in self.pipeline.feed(record.topic, record.key, record.value):
            self._on_emit(emit)

    def publish_gap(self, gap: BridgeGap) -> None:
        log_gap(gap)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
