"""The records a table's entries hold unsent when this worker takes its partitions over.

A batch's states are made durable before the records their folds caused are sent
(delivery.py), and each entry keeps those records (its outbox) until its key's next
batch. A worker that dies in between leaves them only there. The input record that
caused them comes again (its offset was never committed), but folding it again is no
way to find them: the entry already reflects it (a repeat), a progress record that
settled states is nothing new to progress taken up from the table, and a key of a stage
reading two partitions (pods: k8s.pods and k8s.events) may be folded again from its
other partition first, and its new entry's outbox replace the old one.

So at each new ownership, before anything is folded, the outboxes of the table's
entries are read once; every record caused by an input record at or past its
partition's committed offset is sent again, byte for byte, and acknowledged by Kafka
before the first record of the ownership is folded (`Unsent.collect`, delivery.py).
Anything caused before the committed offset was sent: a batch's offsets are acknowledged
only after its records. Some of those records were sent already (every batch since the
last commit is read again): the next stage takes them for repeats, by position.

They leave in the order they were first sent. Each record carries where it was sent
(`Sent.order`: the consumer generation, the agent's batch in it, its index among the
batch's records), so the order is not reconstructed but read: a stage's records were
sent in batches one after the other, each batch's in its list's order, and a later
owner of a partition sends in a later generation. That order is the one every reader
depends on (each input partition's records in offset order: the next stage recognises
repeats by position in each stream; each key's in fold order: a pod's running view
before its failed one), and nothing is folded before they have left, so a key folded
again sends its new records after them. A record that comes again in this ownership
sends nothing more: what it caused was sent here, or is in the batch being written.

Records kept by a worker from before `Sent.order` existed carry none: they leave
first (they were sent before any that carry one), by cause (each input partition's in
offset order), each cause's in the order it made them.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import faust
from faust.types import TP

from app.stream.codecs import Origin, Sent
from app.stream.continuity import CommittedOffsets
from app.stream.tables import StateTable

log = logging.getLogger("faultline.stream")


def in_order_sent(kept: list[tuple[bytes, Sent]]) -> list[Sent]:
    """The records of `kept` (key, record: each key's in its outbox's order) in the order
    they were first sent (module docstring)."""
    ordered: list[tuple[tuple[Any, ...], Sent]] = []
    for n, (_, sent) in enumerate(kept):
        if sent.order is not None:
            ordered.append(((1, *sent.order), sent))
        else:
            partition, _, offset = sent.cause.rpartition(":")
            ordered.append(((0, partition, int(offset), _index_among_caused(sent), n), sent))
    ordered.sort(key=lambda item: item[0])
    return [sent for _, sent in ordered]


class Unsent:
    """One table's unsent records, read at each ownership begun (a new consumer generation)."""

    def __init__(self, app: faust.App, table: StateTable[Any], committed: CommittedOffsets, counts: Counter[str]) -> None:
        self.app, self.table, self.committed, self.counts = app, table, committed, counts
        self.generation: int | None = None

    def new_ownership(self, generation: int) -> bool:
        """Whether records fetched in `generation` begin an ownership not read yet."""
        return generation != self.generation

    async def collect(self, generation: int) -> list[Sent]:
        """The records the table's outboxes may hold unsent, in the order to send them
        again before anything of the ownership begun with `generation` is folded."""
        self.generation = generation
        kept = in_order_sent(await self._kept())
        if kept:
            causes = len({sent.cause for sent in kept})
            self.counts["unsent_sent_again"] += len(kept)
            log.info("table %s: %d records of %d input records may be unsent; sent again before anything is folded", self.table.name, len(kept), causes)
        return kept

    async def _kept(self) -> list[tuple[bytes, Sent]]:
        """(key, record) of every outbox record whose cause is at or past its partition's
        committed offset, each key's in its outbox's order."""
        assigned = {(tp.topic, tp.partition) for tp in self.app.consumer.assignment()}
        found: list[tuple[bytes, Sent, tuple[str, int], int]] = []
        for raw_key, sent in self.table.outboxes():
            topic, partition, offset = sent.cause.rsplit(":", 2)
            source = (topic, int(partition))
            if source in assigned:
                found.append((raw_key, sent, source, int(offset)))
        committed = {source: await self.committed.get(TP(*source)) for source in {f[2] for f in found}}
        return [(raw_key, sent) for raw_key, sent, source, offset in found if (c := committed[source]) is None or offset >= c]


def _index_among_caused(sent: Sent) -> int:
    """A re-keyed record's index among the records its cause caused (the next stage
    recognises repeats by it, so they must come in that order); others have none."""
    origin = Origin.from_header(sent.header.encode()) if sent.header is not None else None
    return origin.position.index if origin is not None else 0
