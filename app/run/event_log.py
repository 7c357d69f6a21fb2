"""The event log of `faultline run --state DIR`: every source and progress record the run
fed its pipeline, in order, as the streaming path keeps them in Kafka. A restarted run
replays it to rebuild the pipeline's state, then resumes the watches.

On disk: `DIR/log/<index>.jsonl` segments of trace lines (`{"topic","key","value"}`, the
DESIGN.md format, so `faultline replay --trace` reads a segment as it is). A segment is
named for the index of its first line; lines are numbered on across segments.

- **Order and durability.** `append` writes a line into a buffer; `flush` hands it to
  the OS (the caller does so before anything the record caused leaves the process, so a
  kill -9 loses no line whose outputs were seen); `sync` fsyncs (the caller does so
  before it saves a watch position past the lines: a position never runs ahead of the
  log, even on power loss).
- **Each change once.** A change already in the log (the same object uid at the same or
  an older resourceVersion) is not appended again: after a restart the watches replay
  what changed since their saved position, and the lines written after it are in the log.
- **Torn tail.** Bytes after a segment's last newline are a line cut short by a kill or a
  crash: they are cut with a warning when the log is opened.
- **Retention (SPEC R7.4, stream time).** Stream time is the latest `observed_at` in the
  log. A segment spans at most a quarter of the retention; once every line of a segment
  is older than the retention, it is compacted: only the latest line of each object that
  still exists (its latest change is not a deletion; an Event is kept while the pod it
  is about exists) and the latest progress record of each topic are kept, in their order, in one base segment. So the log holds the
  retention's worth of changes plus one line per live object, and a pod that runs for
  days keeps its last state (R4.5: the faults of a wedged worker still join its attempt).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, NamedTuple

import msgspec

from app.bridge.errors import DeliveryError
from app.bridge.progress import revision_of
from app.bridge.sinks import trace_line
from app.model.envelope import EVENTS

log = logging.getLogger("faultline.run")

SUFFIX = ".jsonl"
COMPACTING = ".compacting"  # a base segment being written (a crash leaves it: removed on open)
SEGMENT_BYTES = 64 << 20  # a segment is closed at this size, or at a quarter of the retention
SPANS_PER_RETENTION = 4
BUFFER = 1 << 18


class _Metadata(msgspec.Struct):
    uid: str = ""
    resourceVersion: str = ""


class _Object(msgspec.Struct):
    metadata: _Metadata = msgspec.field(default_factory=_Metadata)


class _Envelope(msgspec.Struct):
    type: str
    observed_at: datetime
    object: _Object = msgspec.field(default_factory=_Object)


class _Line(msgspec.Struct):
    topic: str
    key: str
    value: _Envelope


class _AnyLine(msgspec.Struct):
    topic: str
    key: str
    value: msgspec.Raw


_envelope = msgspec.json.Decoder(_Envelope)
_line = msgspec.json.Decoder(_Line)
_any_line = msgspec.json.Decoder(_AnyLine)


class Entry(NamedTuple):
    """What the log needs to know of a line."""

    key: str | None  # the object's uid; for progress, its topic; None: neither (never skipped, never kept)
    version: str  # the object's resourceVersion; for progress, its observed_at
    deleted: bool
    at: datetime | None  # observed_at
    progress: bool
    about: str | None  # an Event's: the uid of the object it is about (its record key)

    @staticmethod
    def of(topic: str, key: str, envelope: _Envelope) -> Entry:
        if envelope.type == "BOOKMARK":
            return Entry("\0progress\0" + topic, str(envelope.observed_at), False, envelope.observed_at, True, None)
        meta = envelope.object.metadata
        about = key if topic == EVENTS else None
        return Entry(meta.uid or None, meta.resourceVersion, envelope.type == "DELETED", envelope.observed_at, False, about)


UNKNOWN = Entry(None, "", False, None, False, None)


def entry_of_value(topic: str, key: str, value: bytes) -> Entry:
    """The entry of an envelope; UNKNOWN for one the log cannot read (the pipeline
    dead-letters it: R11)."""
    try:
        return Entry.of(topic, key, _envelope.decode(value))
    except (msgspec.DecodeError, RecursionError):
        return UNKNOWN


def entry_of_line(raw: bytes) -> Entry | None:
    """The entry of a log line; None when it is not a trace line at all."""
    try:
        line = _line.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        try:
            _any_line.decode(raw)
        except (msgspec.DecodeError, RecursionError):
            return None
        return UNKNOWN
    return Entry.of(line.topic, line.key, line.value)


def covers(have: tuple[str, bool], incoming: Entry) -> bool:
    """Does the logged change `have` (resourceVersion, deleted) of an object already stand
    for `incoming`? resourceVersions are compared as etcd revisions when both are
    numbers (a watch replays them in order), else only for equality."""
    version, deleted = have
    a, b = revision_of(version), revision_of(incoming.version)
    if a is not None and b is not None and a != b:
        return b < a
    if version != incoming.version:
        return False
    return deleted or not incoming.deleted


class Segment:
    __slots__ = ("base", "bytes", "first", "lines", "newest", "oldest", "path")

    def __init__(self, folder: Path, first: int, base: bool = False) -> None:
        self.first = first
        self.path = folder / f"{first:020d}{SUFFIX}"
        self.lines = 0
        self.bytes = 0
        self.oldest: datetime | None = None
        self.newest: datetime | None = None
        self.base = base  # a compacted segment

    def count(self, size: int, at: datetime | None) -> None:
        self.lines += 1
        self.bytes += size
        if at is not None:
            self.oldest = at if self.oldest is None else min(self.oldest, at)
            self.newest = at if self.newest is None else max(self.newest, at)


class LogError(DeliveryError):
    """The log cannot be read or written (the message names the file and the cause): the
    bridge stops without saving a position past what was not written."""


class EventLog:
    def __init__(self, folder: Path, retention: timedelta, *, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.folder = folder
        self.retention = retention
        self.segment_bytes = segment_bytes
        self.span = retention / SPANS_PER_RETENTION
        self.stream_time: datetime | None = None
        self.next_index = 0
        self.skipped = 0  # changes not appended: already in the log
        self.cut = 0  # torn bytes cut when opened
        self.unreadable = 0  # complete lines that were not trace lines (skipped)
        # Object uid (or progress topic) -> (first index of the segment holding its latest
        # line, resourceVersion, deleted).
        self._latest: dict[str, tuple[int, str, bool]] = {}
        self._stale: Counter[int] = Counter()  # segment -> lines superseded by a later one
        self._segments: list[Segment] = []
        self._out: IO[bytes] | None = None
        self._unsynced = False
        self._replayed = False
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for leftover in folder.glob("*" + COMPACTING):
                leftover.unlink()
            for path in sorted(folder.glob("*" + SUFFIX)):
                if not path.stem.isdigit():
                    continue
                self._segments.append(Segment(folder, int(path.stem)))
                self.cut += _cut_torn_tail(path)
        except OSError as exc:
            raise LogError(f"cannot open the event log in {folder}: {exc}") from None

    @property
    def empty(self) -> bool:
        return not self._segments

    @property
    def last_index(self) -> int:
        """The index of the last line appended or replayed (-1: none)."""
        return self.next_index - 1

    def oldest(self) -> datetime | None:
        return min((s.oldest for s in self._segments if s.oldest is not None), default=None)

    # --- replay -------------------------------------------------------------------------

    def lines(self) -> Iterator[tuple[int, bytes]]:
        """(index, line) of every line, in order, once; lines that are not trace lines
        are skipped with a warning. Must be read to the end before the first append."""
        for segment in self._segments:
            index = segment.first
            try:
                handle = segment.path.open("rb", buffering=1 << 20)
            except OSError as exc:
                raise LogError(f"cannot read the event log segment {segment.path}: {exc}") from None
            with handle:
                for raw in handle:
                    entry = entry_of_line(raw)
                    if entry is None:
                        self.unreadable += 1
                        log.warning("event log %s: line %d is not a trace line; skipped", segment.path, index - segment.first + 1)
                    elif not self._seen(entry):
                        self._note(segment, entry, len(raw))
                        yield index, raw
                    index += 1
            self.next_index = max(self.next_index, index)
        self._replayed = True

    # --- writing -------------------------------------------------------------------------

    def append(self, topic: str, key: str, value: bytes) -> bool:
        """Add a record at the end; False (and nothing written) when the log already
        holds this change."""
        if not self._replayed:
            raise LogError("the event log must be replayed before it is appended to")
        entry = entry_of_value(topic, key, value)
        if self._seen(entry):
            self.skipped += 1
            return False
        line = trace_line(topic, key, value)
        self._advance(entry.at)  # first: a segment it closes may have expired at this time
        segment = self._active(entry.at)
        try:
            assert self._out is not None
            self._out.write(line)
        except OSError as exc:
            raise LogError(f"cannot write the event log segment {segment.path}: {exc}") from None
        self._note(segment, entry, len(line))
        self.next_index += 1
        self._unsynced = True
        return True

    def flush(self) -> None:
        """Hand what was appended to the OS: it then survives the process being killed."""
        if self._out is not None:
            try:
                self._out.flush()
            except OSError as exc:
                raise LogError(f"cannot write the event log in {self.folder}: {exc}") from None

    def sync(self) -> None:
        """Make what was appended durable (fsync): it then survives a power loss."""
        if not self._unsynced or self._out is None:
            return
        self.flush()
        try:
            os.fsync(self._out.fileno())
        except OSError as exc:
            raise LogError(f"cannot sync the event log in {self.folder}: {exc}") from None
        self._unsynced = False

    def close(self) -> None:
        if self._out is not None:
            try:
                self.sync()
            finally:
                self._out.close()
                self._out = None

    # --- internals ------------------------------------------------------------------------

    def _seen(self, entry: Entry) -> bool:
        if entry.key is None or entry.progress:
            return False
        have = self._latest.get(entry.key)
        return have is not None and covers((have[1], have[2]), entry)

    def _advance(self, at: datetime | None) -> None:
        if at is not None and (self.stream_time is None or at > self.stream_time):
            self.stream_time = at

    def _note(self, segment: Segment, entry: Entry, size: int) -> None:
        segment.count(size, entry.at)
        self._advance(entry.at)
        if entry.key is not None:
            previous = self._latest.get(entry.key)
            if previous is not None:
                self._stale[previous[0]] += 1
            self._latest[entry.key] = (segment.first, entry.version, entry.deleted)

    def _lives(self, entry: Entry) -> bool:
        """Is what this line tells still needed? Not a deleted object's; but an Event's,
        deleted (its TTL ran out), while the object it is about exists: the fault it
        recorded is in that object's state (R4.5)."""
        if not entry.deleted:
            return True
        if entry.about is None:
            return False
        about = self._latest.get(entry.about)
        return about is not None and not about[2]

    def _active(self, at: datetime | None) -> Segment:
        """The segment to append to: a new one when the last is full or spans a quarter
        of the retention (then older segments may have expired)."""
        last = self._segments[-1] if self._segments else None
        due = last is None or last.base or last.bytes >= self.segment_bytes
        if last is not None and not due and at is not None and last.oldest is not None:
            due = at - last.oldest >= self.span
        if not due and self._out is not None:
            assert last is not None
            return last
        try:
            if due:
                self.close()
                last = Segment(self.folder, self.next_index)
                self._segments.append(last)
                self._out = last.path.open("ab", buffering=BUFFER)
                sync_folder(self.folder)
                self.retire()
            else:
                assert last is not None
                self._out = last.path.open("ab", buffering=BUFFER)
        except OSError as exc:
            raise LogError(f"cannot open an event log segment in {self.folder}: {exc}") from None
        return self._segments[-1]

    def retire(self) -> None:
        """Compact the segments whose every line is older than the retention (stream
        time) into one base segment (see the module's docstring)."""
        if self.stream_time is None:
            return
        cutoff = self.stream_time - self.retention
        expired: list[Segment] = []
        for segment in self._segments[:-1]:  # never the one appended to
            if segment.newest is not None and segment.newest >= cutoff:
                break
            expired.append(segment)
        if not expired or (len(expired) == 1 and expired[0].base and not self._stale[expired[0].first]):
            return
        try:
            self._compact(expired)
        except OSError as exc:
            raise LogError(f"cannot compact the event log in {self.folder}: {exc}") from None

    def _compact(self, expired: list[Segment]) -> None:
        firsts = {s.first for s in expired}
        base = Segment(self.folder, expired[0].first, base=True)
        kept: set[str] = set()
        temporary = base.path.with_suffix(COMPACTING)
        with temporary.open("wb", buffering=BUFFER) as out:
            for segment in expired:
                with segment.path.open("rb", buffering=1 << 20) as handle:
                    for raw in handle:
                        entry = entry_of_line(raw)
                        if entry is None or entry.key is None or entry.key in kept or not self._lives(entry):
                            continue
                        latest = self._latest.get(entry.key)
                        if latest != (segment.first, entry.version, entry.deleted):
                            continue  # superseded by a later line
                        out.write(raw)
                        base.count(len(raw), entry.at)
                        kept.add(entry.key)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, base.path)
        sync_folder(self.folder)
        for segment in expired[1:]:
            segment.path.unlink(missing_ok=True)
        sync_folder(self.folder)
        for key, (first, version, deleted) in list(self._latest.items()):
            if first in firsts:
                if key in kept:
                    self._latest[key] = (base.first, version, deleted)
                else:
                    del self._latest[key]
        for first in firsts:
            self._stale.pop(first, None)
        before = sum(s.lines for s in expired)
        self._segments[: len(expired)] = [base]
        log.info(
            "event log: %d line(s) older than the retention (%s) compacted to %d (the latest state of each object that still exists)",
            before,
            self.retention,
            base.lines,
        )


def _cut_torn_tail(path: Path) -> int:
    """Cut the bytes after the last newline (a line a kill or crash cut short); how many."""
    size = path.stat().st_size
    if size == 0:
        return 0
    with path.open("r+b") as handle:
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return 0
        keep, end = 0, size
        while end > 0:
            start = max(0, end - (1 << 16))
            handle.seek(start)
            found = handle.read(end - start).rfind(b"\n")
            if found >= 0:
                keep = start + found + 1
                break
            end = start
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())
    log.warning(
        "event log %s ended in a torn line (%d byte(s) after the last newline: a stop mid-write); cut",
        path,
        size - keep,
    )
    return size - keep


def sync_folder(folder: Path) -> None:
    """Make a file's creation, rename or removal in `folder` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
