"""The records a table's entries hold unsent when this worker takes its partitions over.

A batch's states are made durable before the records their folds caused are sent
(delivery.py), and each entry keeps those records (its outbox) until its key's next
batch. A worker that dies in between leaves them only there. The input record that
caused them comes again (its offset was never committed), but the step that would look
for them from that record is not always taken:
- a progress record settles the states that waited on it; after the restart the stage's
  progress is taken up from the table, where it was written with those states, so the
  same progress is nothing new, and the states no longer wait: nothing asks for them;
So at each new ownership, before anything is folded, the outboxes of the table's entries
are read once; every record caused by an input record at or past its partition's
committed offset (which will be read again) is kept by that cause, and is sent again,
byte for byte and in the order it was first caused, when that input record comes.
Anything caused before the committed offset was sent: a batch's offsets are acknowledged
only after its records.

A key folded again before its cause comes back (a stage reading several partitions may
read a record of the other one first) must not lose what it kept: its records are not a
view the new fold repeats but what happened (a fault found once is sent once), so they
are sent then, before the new fold's records (which come after them downstream, as they
were made after them). The next stage recognises repeats by position in each stream it
reads, so a record sent early takes with it every record kept before it in its input
partition, in order; their causes, when they come, find them sent. The key's new entry
keeps its old records in its outbox, so a second crash before they leave finds them
again.
"""

from __future__ import annotations

import bisect
import logging
from typing import Any

import faust
from faust.types import TP

from app.stream.codecs import Origin, Sent
from app.stream.continuity import CommittedOffsets
from app.stream.delivery import cause_of
from app.stream.tables import StateTable

log = logging.getLogger("faultline.stream")


class KeptRecords:
    """Records kept unsent, by the input record that caused them (`topic:partition:offset`),
    each with the key of the entry that holds it; no I/O."""

    def __init__(self, kept: list[tuple[bytes, Sent]]) -> None:
        by_cause: dict[str, list[tuple[bytes, Sent]]] = {}
        for raw_key, sent in kept:
            by_cause.setdefault(sent.cause, []).append((raw_key, sent))
        for records in by_cause.values():
            records.sort(key=_index_among_caused)  # stable: one entry's records keep their order
        self.by_cause = by_cause
        self.causes_of: dict[bytes, set[str]] = {}  # key -> causes it has records kept for
        self.offsets: dict[str, list[int]] = {}  # input partition -> kept causes' offsets, ascending
        for cause, records in by_cause.items():
            for raw_key, _ in records:
                self.causes_of.setdefault(raw_key, set()).add(cause)
            partition, offset = _split(cause)
            self.offsets.setdefault(partition, []).append(offset)
        for offsets in self.offsets.values():
            offsets.sort()
        self.sent_early: set[str] = set()  # causes whose records went out before they came
        # Records sent early, by the key whose entry held them, until that key is held
        # again: its new entry keeps them, as its old one did, until they have left.
        self.early: dict[bytes, list[Sent]] = {}

    def __bool__(self) -> bool:
        return bool(self.by_cause or self.sent_early or self.early)

    def __len__(self) -> int:
        return sum(map(len, self.by_cause.values()))

    def take(self, cause: str) -> list[Sent] | None:
        """What `cause` caused that may be unsent: [] if it was sent early, None if
        nothing is known of it."""
        if cause in self.sent_early:
            self.sent_early.discard(cause)
            return []
        kept = self.by_cause.pop(cause, None)
        if kept is None:
            return None
        self._forget(cause, kept)
        return [sent for _, sent in kept]

    def superseded(self, raw_key: bytes) -> list[Sent]:
        """`raw_key` is folded again before the causes of its kept records came: those
        records, and every record kept before them in their input partitions, to send now,
        in the order they were made."""
        causes = self.causes_of.get(raw_key)
        if not causes:
            return []
        last: dict[str, int] = {}
        for cause in causes:
            partition, offset = _split(cause)
            last[partition] = max(offset, last.get(partition, -1))
        out: list[Sent] = []
        for partition, up_to in sorted(last.items()):
            offsets = self.offsets[partition]
            end = bisect.bisect_right(offsets, up_to)
            for offset in offsets[:end]:
                cause = f"{partition}:{offset}"
                kept = self.by_cause.pop(cause, None)
                if kept is None:  # came already
                    continue
                self._forget(cause, kept)
                self.sent_early.add(cause)
                for key, sent in kept:
                    self.early.setdefault(key, []).append(sent)
                    out.append(sent)
            del offsets[:end]
        return out

    def carried(self, raw_key: bytes) -> list[Sent]:
        """The records `raw_key`'s old entry held that were sent early: its new entry
        keeps them in its outbox."""
        return self.early.pop(raw_key, [])

    def _forget(self, cause: str, kept: list[tuple[bytes, Sent]]) -> None:
        for raw_key, _ in kept:
            causes = self.causes_of.get(raw_key)
            if causes is not None:
                causes.discard(cause)
                if not causes:
                    del self.causes_of[raw_key]


class Unsent:
    """One table's unsent records for the ownership begun with the consumer group's
    current generation."""

    def __init__(self, app: faust.App, table: StateTable[Any], committed: CommittedOffsets) -> None:
        self.app, self.table, self.committed = app, table, committed
        self.generation: int | None = None
        self.kept = KeptRecords([])

    async def take(self, message: faust.types.Message) -> list[Sent] | None:
        """The records `message` caused that may not have been sent ([]: sent already
        in this ownership; None: none known)."""
        generation = self.app.consumer_generation_id
        if generation != self.generation:
            self.generation = generation
            self.kept = KeptRecords(await self._collect())
            if self.kept:
                log.info("table %s: %d records of %d input records may be unsent; sent again when those come", self.table.name, len(self.kept), len(self.kept.by_cause))
        if not self.kept:
            return None
        return self.kept.take(cause_of(message))

    def folded(self, key: str) -> tuple[list[Sent], list[Sent]]:
        """`key` is folded again in this ownership: (the records kept for it and those
        before them in their partitions, to send before what the new fold caused; the
        records of its old entry sent early, for its new entry's outbox)."""
        if not self.kept:
            return [], []
        raw_key = key.encode()
        return self.kept.superseded(raw_key), self.kept.carried(raw_key)

    async def _collect(self) -> list[tuple[bytes, Sent]]:
        assigned = {(tp.topic, tp.partition) for tp in self.app.consumer.assignment()}
        by_partition: dict[tuple[str, int], list[tuple[int, bytes, Sent]]] = {}
        for raw_key, sent in self.table.outboxes():
            topic, partition, offset = sent.cause.rsplit(":", 2)
            source = (topic, int(partition))
            if source in assigned:
                by_partition.setdefault(source, []).append((int(offset), raw_key, sent))
        kept: list[tuple[bytes, Sent]] = []
        for (topic, partition), caused in by_partition.items():
            committed = await self.committed.get(TP(topic, partition))
            kept.extend((raw_key, sent) for offset, raw_key, sent in caused if committed is None or offset >= committed)
        return kept


def _split(cause: str) -> tuple[str, int]:
    """`topic:partition:offset` -> (`topic:partition`, offset)."""
    partition, _, offset = cause.rpartition(":")
    return partition, int(offset)


def _index_among_caused(kept: tuple[bytes, Sent]) -> int:
    """A re-keyed record's index among the records its cause caused (the next stage
    recognises repeats by it, so they must come in that order); others have none."""
    sent = kept[1]
    origin = Origin.from_header(sent.header.encode()) if sent.header is not None else None
    return origin.position.index if origin is not None else 0
