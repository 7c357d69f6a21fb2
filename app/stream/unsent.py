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
read a record of the other one first) has its kept records dropped: what the new fold
sends is a newer view of the key, and its old records sent after it would take the view
back downstream (a verdict going backwards: issue 23). Those records are then not sent,
as before this module: a record that only a superseded view carried is lost with it.
"""

from __future__ import annotations

import logging
from typing import Any

import faust
from faust.types import TP

from app.stream.codecs import Origin, Sent
from app.stream.continuity import CommittedOffsets
from app.stream.delivery import cause_of
from app.stream.tables import StateTable

log = logging.getLogger("faultline.stream")


class Unsent:
    """One table's unsent records, by the input record that caused them, for the
    ownership begun with the consumer group's current generation."""

    def __init__(self, app: faust.App, table: StateTable[Any], committed: CommittedOffsets) -> None:
        self.app, self.table, self.committed = app, table, committed
        self.generation: int | None = None
        self.by_cause: dict[str, list[tuple[bytes, Sent]]] = {}  # cause -> (key, record)
        self.causes_of: dict[bytes, set[str]] = {}  # key -> causes it has records kept for

    async def take(self, message: faust.types.Message) -> list[Sent] | None:
        """The records `message` caused that may not have been sent (None: none known)."""
        generation = self.app.consumer_generation_id
        if generation != self.generation:
            self.generation = generation
            self.by_cause = await self._collect()
            self.causes_of = {}
            for cause, kept in self.by_cause.items():
                for key, _ in kept:
                    self.causes_of.setdefault(key, set()).add(cause)
        if not self.by_cause:
            return None
        kept = self.by_cause.pop(cause_of(message), None)
        return [sent for _, sent in kept] if kept is not None else None

    def folded(self, key: str) -> None:
        """`key` was folded again in this ownership: its kept records are superseded."""
        if not self.causes_of:
            return
        raw_key = key.encode()
        for cause in self.causes_of.pop(raw_key, ()):
            kept = [each for each in self.by_cause.get(cause, ()) if each[0] != raw_key]
            if kept:
                self.by_cause[cause] = kept
            else:
                self.by_cause.pop(cause, None)

    async def _collect(self) -> dict[str, list[tuple[bytes, Sent]]]:
        assigned = {(tp.topic, tp.partition) for tp in self.app.consumer.assignment()}
        by_partition: dict[tuple[str, int], list[tuple[int, bytes, Sent]]] = {}
        for raw_key, sent in self.table.outboxes():
            topic, partition, offset = sent.cause.rsplit(":", 2)
            source = (topic, int(partition))
            if source in assigned:
                by_partition.setdefault(source, []).append((int(offset), raw_key, sent))
        by_cause: dict[str, list[tuple[bytes, Sent]]] = {}
        for (topic, partition), caused in by_partition.items():
            committed = await self.committed.get(TP(topic, partition))
            for offset, raw_key, sent in caused:
                if committed is None or offset >= committed:
                    by_cause.setdefault(sent.cause, []).append((raw_key, sent))
        for records in by_cause.values():
            records.sort(key=_index_among_caused)  # stable: one entry's records keep their order
        if by_cause:
            log.info("table %s: %d records of %d input records may be unsent; sent again when those come", self.table.name, sum(map(len, by_cause.values())), len(by_cause))
        return by_cause


def _index_among_caused(kept: tuple[bytes, Sent]) -> int:
    """A re-keyed record's index among the records its cause caused (the next stage
    recognises repeats by it, so they must come in that order); others have none."""
    sent = kept[1]
    origin = Origin.from_header(sent.header.encode()) if sent.header is not None else None
    return origin.position.index if origin is not None else 0
