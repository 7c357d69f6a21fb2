"""The embedded mode's sink (`faultline run`): each source and progress record goes into
the run's event log, then through the rules in this process at once. It is composed here,
where the watch meets the pipeline (the embedded driver's room), so that `app.bridge` imports neither `app.replay` nor
`app.stream`."""

from __future__ import annotations

from collections.abc import Callable

from app.bridge.positions import PositionStore
from app.bridge.records import BridgeGap, SourceRecord
from app.run.event_log import EventLog
from app.core.base.emit import Emit
from app.embedded.pipeline import Pipeline


class PipelineSink:
    """Every output record is handed to `on_emit`, in order; `delivered(index)` is told
    the log index of each record whose outputs were all handed over.

    A record is written to the log before the pipeline sees it, and handed to the OS
    before any output it caused leaves the process; `flush()` (before the bridge saves a
    position) makes the log durable. A change the log already holds (replayed by the
    watch after a restart) is neither written nor fed again."""

    def __init__(
        self, pipeline: Pipeline, on_emit: Callable[[Emit], None], log: EventLog, positions: PositionStore, delivered: Callable[[int], None]
    ) -> None:
        self.pipeline = pipeline
        self.log = log
        self.positions = positions
        self._on_emit = on_emit
        self._delivered = delivered

    def publish(self, record: SourceRecord) -> None:
        self._feed(record.topic, record.key, record.value)

    def publish_gap(self, gap: BridgeGap) -> None:
        pass  # the watch logged it; the pipeline reads source records only

    def publish_progress(self, topic: str, key: str, value: bytes) -> None:
        self._feed(topic, key, value)  # SPEC R12: a replay decides absences as the live run did

    def _feed(self, topic: str, key: str, value: bytes) -> None:
        if not self.log.append(topic, key, value):
            return
        emits = self.pipeline.feed(topic, key, value)
        if emits:
            self.log.flush()
            for emit in emits:
                self._on_emit(emit)
            self._delivered(self.log.last_index)

    def flush(self) -> None:
        self.log.sync()

    def close(self) -> None:
        self.log.close()
