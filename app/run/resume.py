"""A restarted `faultline run`: the event log replayed through a fresh pipeline before
the watches resume (docs/run.md, *Start, stop, restart*)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import NamedTuple

from app.core.base.emit import Emit
from app.run.event_log import EventLog
from app.run.run_state import RunState
from app.embedded.pipeline import Pipeline
from app.replay.trace import feed_line


class Resumed(NamedTuple):
    log: EventLog  # open for appending
    replayed: int  # lines fed again
    oldest: datetime | None  # the oldest observed_at the log still holds


def resume(state: RunState, pipeline: Pipeline, keep: Callable[[Emit], None], show: Callable[[Emit], None]) -> Resumed:
    """Feed every line of the state folder's log to `pipeline`. The outputs of a line an
    earlier run printed go to `keep` (they were seen); those of a line after `delivered`
    (a stop cut their printing short) to `show`, and `delivered` moves past it. Then the
    log retires what the retention no longer needs."""
    log = EventLog(state.log_folder, pipeline.rules.retention)
    delivered = state.delivered
    replayed = 0
    for index, line in log.lines():
        replayed += 1
        emits = feed_line(pipeline, index, line)
        if index <= delivered.index:
            for emit in emits:
                keep(emit)
            continue
        for emit in emits:
            show(emit)
        if emits:
            delivered.mark(index)
    log.retire()
    return Resumed(log, replayed, log.oldest())
