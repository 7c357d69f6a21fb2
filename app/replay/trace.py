"""Trace files: JSON Lines of source records, `{"topic", "key", "value"}` (DESIGN.md)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

import msgspec

from app.core.base.dead_letters import dead_letter
from app.core.base.emit import Emit
from app.model.decode import BadRecord, decode_trace_line, parse_trace_line
from app.embedded.pipeline import Pipeline

NOT_A_RECORD = "(not a trace record)"  # the topic counted for a line that is not a record


T = TypeVar("T")


class OutputLine(msgspec.Struct, Generic[T], frozen=True):
    """One line of `faultline replay` output."""

    topic: str
    key: str
    value: T


_encoder = msgspec.json.Encoder()


def encode_output(emit: Emit) -> bytes:
    return _encoder.encode(OutputLine(emit.topic, emit.key, emit.value))


def read_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of every non-blank line."""
    with path.open("rb", buffering=1 << 20) as handle:
        for number, line in enumerate(handle, start=1):
            if len(line) > 2 or line.strip():  # JSON decoding ignores the trailing newline
                yield number, line


def _value_of(line: bytes) -> bytes:
    return bytes(parse_trace_line(line).value)


def feed_line(pipeline: Pipeline, number: int, line: bytes, seen: Callable[[str], None] | None = None) -> list[Emit]:
    """One trace line through the pipeline; a bad line becomes a dead letter (R11.1) whose
    `offset` is its line number. `seen` is told the line's topic (for counters)."""
    fast = decode_trace_line(line)
    if fast is not None:
        if seen is not None:
            seen(fast.topic)
        # A dead letter quotes the record's value, as the worker's does: found again only
        # for the few lines that need one.
        return pipeline.feed_decoded(fast.topic, fast.key, fast.value, raw=lambda: _value_of(line), offset=number)
    try:
        record = parse_trace_line(line)
    except BadRecord as exc:
        if seen is not None:
            seen(NOT_A_RECORD)
        pipeline.counts["records"] += 1
        pipeline.counts["dead_letters"] += 1
        return [dead_letter("", None, None, number, str(exc), line.rstrip())]
    if seen is not None:
        seen(record.topic)
    return pipeline.feed(record.topic, record.key, bytes(record.value), offset=number)


def replay(
    lines: Iterable[tuple[int, bytes]], pipeline: Pipeline, seen: Callable[[str], None] | None = None, *, finish: bool = True
) -> Iterator[Emit]:
    """Feed trace lines through the pipeline (`feed_line`), and the replay goes on past a
    bad line. The end of the lines is the end of the input (`finish`: every pending
    decision is taken, R12.3) unless `finish=False` (more lines to come)."""
    for number, line in lines:
        yield from feed_line(pipeline, number, line, seen)
    if finish:
        yield from pipeline.finish()
