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

The poison record is dead-lettered once. Delivery is at least once: the record can come
again, in the same run (a fetch handed to the agent before Faust's seek to the committed
offsets at start-up, fetched again after it) or after a restart before its offset was
committed. The runner recognises a repeat of any other record by its position in the
key's state; the poison record has no state, so the note says it instead: `letter` is
true only the first time in a run, and once Kafka has acknowledged the batch holding the
dead letter (`sent`) the note keeps that across restarts too. One window stays: a death
between that acknowledgement and the store into the page (no `await` lies between them),
or the partition moving to a worker whose own note knows nothing of it; the dead letter
then comes twice, byte for byte, and its source (topic, partition, offset) is the key to
recognise it by (docs/streaming.md, *Crash loops*).

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
# The record in hand; a suspect; a poison record; the poison record whose dead letter Kafka acknowledged.
_CURRENT, _SUSPECT, _POISON, _LETTERED = 0, _SLOT.size, 2 * _SLOT.size, 3 * _SLOT.size
_SIZE = 4 * _SLOT.size
_SIZE_BEFORE_LETTERED = 3 * _SLOT.size  # a note written before `_LETTERED`: its three slots are kept

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
            size = os.fstat(fd).st_size
            if size != _SIZE:
                if size != _SIZE_BEFORE_LETTERED:
                    os.ftruncate(fd, 0)  # new (or not ours): all zero, nothing noted
                os.ftruncate(fd, _SIZE)  # what it adds is zero: nothing noted
            self._page = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)
        self.agent = agent
        self._topics: dict[str, int] = {}
        self.suspect, self.poison = self._read(_SUSPECT), self._read(_POISON)
        # The poison record's dead letter: made in this run (in a batch, then acknowledged)
        # or acknowledged in an earlier one; `_acknowledged`: the note says so.
        self.lettered = self._read(_LETTERED)
        self._acknowledged = self.lettered is not None
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

    def letter(self, message: faust.types.Message) -> bool:
        """True the first time the poison record `message` comes: make its dead letter. A
        repeat (fetched again, or delivered again after a restart once Kafka had
        acknowledged its dead letter) is False: it is skipped."""
        position = self._position(message)
        if position == self.lettered:
            return False
        self.lettered, self._acknowledged = position, False
        return True

    def sent(self) -> None:
        """Kafka acknowledged the records of a batch: a dead letter among them is not made
        again after a restart."""
        if not self._acknowledged and self.lettered is not None:
            self._write(_LETTERED, self.lettered)
            self._acknowledged = True

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
