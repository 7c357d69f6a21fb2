"""Where records go. The bridge calls a `Sink` from one thread only, in order: records,
gap markers, then `flush()` before it saves a position through `sink.positions` or
publishes progress.

Two sinks live here and in `app.bridge.kafka_sink`: Kafka (the `bridge` command) and a
trace file (`record`); the embedded mode's sink (`run`) is composed in `app.cli`, and
its event log holds trace lines too.
"""

from __future__ import annotations

from typing import IO, Protocol

import orjson

from app.bridge.positions import MemoryPositions, PositionStore
from app.bridge.records import BridgeGap, SourceRecord


class Sink(Protocol):
    positions: PositionStore

    def publish(self, record: SourceRecord) -> None:
        """Hand over one source record (it may be buffered)."""
        ...

    def publish_gap(self, gap: BridgeGap) -> None:
        """A watch was rebuilt after 410 Gone (its records were published just before)."""
        ...

    def publish_progress(self, topic: str, key: str, value: bytes) -> None:
        """A progress record (SPEC R12.1) for a source topic: to every partition of it.
        Called only after a flush covering every record it speaks for."""
        ...

    def flush(self) -> None:
        """Return once everything published so far is durable; raise DeliveryError if
        any of it could not be delivered."""
        ...

    def close(self) -> None: ...


def trace_line(topic: str, key: str, value: bytes) -> bytes:
    """One trace line, `{"topic", "key", "value"}` and a newline, around envelope bytes
    already encoded (DESIGN.md; `faultline replay --trace` reads it)."""
    return b'{"topic":' + orjson.dumps(topic) + b',"key":' + orjson.dumps(key) + b',"value":' + value + b"}\n"


class TraceSink:
    """A trace file: JSON Lines `{"topic", "key", "value"}` with logical topic names
    (DESIGN.md); a progress record is one line per topic. Gap markers are not source
    records: the bridge logs them, the trace does not hold them."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self.positions: PositionStore = MemoryPositions()
        self.written = 0
        self.progress = 0

    def publish(self, record: SourceRecord) -> None:
        self._out.write(trace_line(record.topic, record.key, record.value))
        self.written += 1

    def publish_gap(self, gap: BridgeGap) -> None:
        pass

    def publish_progress(self, topic: str, key: str, value: bytes) -> None:
        self._out.write(trace_line(topic, key, value))
        self.progress += 1

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        self._out.flush()
