"""Crash-loop protection (SPEC R11.3): a record whose handling kills the worker — a
C-level crash, an exception outside the fold policy, an OOM kill — is recognised when the
worker starts again, and the second time it is dead-lettered instead of handled.

Before an agent handles a record it notes the record's position in a small file of its
own under the worker's data directory, a memory-mapped page: the note is a store into
memory (it costs no system call), and the kernel keeps the page when the process dies,
however it dies. After the record is handled the note is cleared. A note found set at
start-up names the record that was in hand when the worker died: it becomes a *suspect*.
If the worker dies again with the same suspect in hand, that record has killed it twice,
and from then on it is dead-lettered without being handled. Two deaths, not one: a worker
killed from outside (a node drained, a kill while it happened to be handling an innocent
record) must not lose that record, and the same record in hand at two unrelated deaths in
a row is very unlikely. A suspect handled without a death is cleared.

The note outlives a restart only where the data directory does (a volume that survives a
container restart, as the RocksDB tables need too; ops/k8s/worker.yaml).
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import zlib
from pathlib import Path

import faust

log = logging.getLogger("faultline.stream")

# A slot: set, then a record's position: topic (crc32 of its name), partition, offset.
_SLOT = struct.Struct("<?3xIi4xq")
_CURRENT, _SUSPECT, _POISON = 0, _SLOT.size, 2 * _SLOT.size  # the record in hand; a suspect; a poison record
_SIZE = 3 * _SLOT.size

Position = tuple[int, int, int]

REASON = (
    "this record stopped the worker twice while it was being handled (crash-loop protection, SPEC R11.3): "
    "it is dead-lettered instead of handled again"
)


class InFlight:
    """One agent's note of the record in hand, with its suspect and its poison record."""

    def __init__(self, directory: Path, agent: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / f"{agent}.note", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size != _SIZE:
                os.ftruncate(fd, 0)
                os.ftruncate(fd, _SIZE)  # new (or not ours): all zero, nothing noted
            self._page = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)
        self.agent = agent
        self._topics: dict[str, int] = {}
        self.suspect, self.poison = self._read(_SUSPECT), self._read(_POISON)
        self._found: list[tuple[int, str]] = []  # logged once the worker's logging is set up (`report`)
        died_with = self._read(_CURRENT)
        if died_with is None:
            return
        if died_with == self.suspect:
            self.poison, self.suspect = died_with, None
            self._found.append((logging.ERROR, f"the record at {_describe(died_with)} stopped the worker twice: it will be dead-lettered"))
        else:
            self.suspect = died_with
            self._found.append((logging.WARNING, f"the worker stopped while handling the record at {_describe(died_with)}: it is handled once more"))
        self._write(_SUSPECT, self.suspect)
        self._write(_POISON, self.poison)
        self._write(_CURRENT, None)

    def report(self) -> None:
        """Log what the notes said at start-up."""
        for level, text in self._found:
            log.log(level, "%s: %s", self.agent, text)
        self._found.clear()

    def _position(self, message: faust.types.Message) -> Position:
        topic = self._topics.get(message.topic)
        if topic is None:
            topic = self._topics[message.topic] = zlib.crc32(message.topic.encode())
        return topic, message.partition, message.offset

    def poisoned(self, message: faust.types.Message) -> bool:
        """Has this record stopped the worker twice? (Dead-letter it instead.)"""
        return self.poison is not None and self._position(message) == self.poison

    def begin(self, message: faust.types.Message) -> None:
        _SLOT.pack_into(self._page, _CURRENT, True, *self._position(message))

    def end(self, message: faust.types.Message) -> None:
        self._page[_CURRENT] = 0
        if self.suspect is not None and self._position(message) == self.suspect:
            log.info("%s: the record at %s was handled this time: no longer a suspect", self.agent, _describe(self.suspect))
            self.suspect = None
            self._write(_SUSPECT, None)

    def _read(self, slot: int) -> Position | None:
        noted, *position = _SLOT.unpack_from(self._page, slot)
        return tuple(position) if noted else None  # type: ignore[return-value]

    def _write(self, slot: int, position: Position | None) -> None:
        _SLOT.pack_into(self._page, slot, position is not None, *(position or (0, 0, 0)))


def _describe(position: Position) -> str:
    topic, partition, offset = position
    return f"partition {partition} offset {offset} (topic crc32 {topic:08x})"
