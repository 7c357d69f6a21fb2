"""The embedded mode's sink (`faultline run`): each source record goes through the rules
in this process at once. It is composed here, where the watch meets the pipeline, so that
`app.bridge` imports neither `app.replay` nor `app.stream`."""

from __future__ import annotations

import typing
from collections.abc import Callable

import msgspec

from app.bridge.positions import MemoryPositions, PositionStore
from app.bridge.records import BridgeGap, SourceRecord
from app.core.emit import Emit
from app.model.envelope import Envelope
from app.replay.pipeline import Pipeline



def _envelope_admits_progress() -> bool:
    """Does the source envelope's `type` admit BOOKMARK (SPEC R12.1)?"""
    field = next(f for f in msgspec.structs.fields(Envelope) if f.name == "type")
    return "BOOKMARK" in typing.get_args(field.type)


# The seam where `run` passes the bridge's progress (SPEC R12.2) straight to the pipeline.
# A pipeline that does not read progress records yet would dead-letter each one, so they
# are fed only once the source envelope admits them.
PIPELINE_READS_PROGRESS = _envelope_admits_progress()


def feed_progress(pipeline: Pipeline, topic: str, key: str, value: bytes) -> list[Emit]:
    """What a progress record makes the pipeline emit (nothing while it cannot read one)."""
    if not PIPELINE_READS_PROGRESS:
        return []
    return list(pipeline.feed(topic, key, value))


class PipelineSink:
    """Every output record is handed to `on_emit`, in order. Positions live as long as
    the process (a live run starts from a fresh list)."""

    def __init__(self, pipeline: Pipeline, on_emit: Callable[[Emit], None]) -> None:
        self.pipeline = pipeline
        self._on_emit = on_emit
        self.positions: PositionStore = MemoryPositions()

    def publish(self, record: SourceRecord) -> None:
        for emit in self.pipeline.feed(record.topic, record.key, record.value):
            self._on_emit(emit)

    def publish_gap(self, gap: BridgeGap) -> None:
        pass  # the watch logged it; the pipeline reads source records only

    def publish_progress(self, topic: str, key: str, value: bytes) -> None:
        for emit in feed_progress(self.pipeline, topic, key, value):
            self._on_emit(emit)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
