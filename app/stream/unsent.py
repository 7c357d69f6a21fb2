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
byte for byte, when that input record comes. Anything caused before the committed offset
was sent: a batch's offsets are acknowledged only after its records.

The order they leave in is the order they were made in, as far as the next stage can
tell (`KeptRecords`): after every record kept before them in their input partition (it
recognises repeats by position in each stream) and in their key's outbox (a stage
reading two partitions, pods: k8s.pods and k8s.events, folds a key's records from both,
and a restart may read them in the other order). A key folded again before its cause
comes back sends them then, before the new fold's records: they are not a view the new
fold repeats but what happened (a fault found once is sent once). The key's new entry
keeps them in its outbox, so a second crash before they leave finds them again.
"""

from __future__ import annotations

import bisect
import logging
from collections import Counter
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
    each with the key of the entry that held it; no I/O.

    They were made in one order, which two orders witness: their input partitions' (by
    offset) and each key's (its outbox). The next stage must meet them in both: in its
    streams' order, or it takes a record for a repeat, and each key's in fold order, or an
    older view of the key arrives after a newer one (a pod's running view after its failed
    one: a verdict that costs the whole attempt instead of the failed pod). So a cause's
    records leave only after everything kept before them in either order (`_release`),
    whichever comes first: the cause, or its key folded again."""

    def __init__(self, kept: list[tuple[bytes, Sent]], counts: Counter[str] | None = None) -> None:
        """`kept`: (key, record), each key's records in its outbox's order; `counts` gets
        `unsent_sent_early`: the records that left before their cause came."""
        self.counts: Counter[str] = Counter() if counts is None else counts
        by_cause: dict[str, list[tuple[bytes, Sent]]] = {}
        self.causes_of: dict[bytes, list[str]] = {}  # key -> its causes, in its outbox's order
        for raw_key, sent in kept:
            by_cause.setdefault(sent.cause, []).append((raw_key, sent))
            causes = self.causes_of.setdefault(raw_key, [])
            if sent.cause not in causes[-1:]:
                causes.append(sent.cause)
        for records in by_cause.values():
            records.sort(key=_index_among_caused)  # stable: one entry's records keep their order
        self.by_cause = by_cause
        # key -> cause -> the key's cause before it (a fleet key may hold a batch's worth)
        self._previous = {key: dict(zip(causes[1:], causes)) for key, causes in self.causes_of.items()}
        self.offsets: dict[str, list[int]] = {}  # input partition -> kept causes' offsets, ascending
        for cause in by_cause:
            partition, offset = _split(cause)
            self.offsets.setdefault(partition, []).append(offset)
        for offsets in self.offsets.values():
            offsets.sort()
        self.released: set[str] = set()  # causes whose records left before the cause came
        # Records that left, by the key whose entry held them, until that key is held again:
        # its new entry keeps them, as its old one did, until they are acknowledged.
        self.left: dict[bytes, list[Sent]] = {}

    def __bool__(self) -> bool:
        return bool(self.by_cause or self.released or self.left)

    def __len__(self) -> int:
        return sum(map(len, self.by_cause.values()))

    def take(self, cause: str) -> list[Sent] | None:
        """`cause` came again: what it caused that may be unsent, after what must leave
        before it ([]: it all left already; None: nothing is known of it)."""
        if cause in self.released:
            self.released.discard(cause)
            return []
        if cause not in self.by_cause:
            return None
        out: list[Sent] = []
        self._release(cause, out, cause)
        self.released.discard(cause)
        return out

    def superseded(self, raw_key: bytes) -> list[Sent]:
        """`raw_key` is folded again before the causes of its kept records came: those
        records, after what must leave before them, to send before what the new fold makes."""
        out: list[Sent] = []
        for cause in reversed(self.causes_of.get(raw_key, ())):
            if cause in self.by_cause:  # the key's last kept cause: the others are before it
                self._release(cause, out)
                break
        return out

    def holds(self, raw_key: bytes) -> bool:
        """Whether `raw_key`'s entry holds records that have not left yet."""
        return any(cause in self.by_cause for cause in self.causes_of.get(raw_key, ()))

    def carried(self, raw_key: bytes) -> list[Sent]:
        """The records of `raw_key`'s old entry that left in this ownership: its new entry
        keeps them in its outbox."""
        return self.left.pop(raw_key, [])

    def _release(self, cause: str, out: list[Sent], came: str | None = None) -> None:
        """`cause`'s records into `out`, after every kept record before them (depth first,
        without recursion: the chains may be long); `came`: the cause that came, if one did."""
        stack, expanded = [cause], set()
        while stack:
            at = stack[-1]
            if at not in self.by_cause:
                stack.pop()
                continue
            if at not in expanded:
                expanded.add(at)
                stack.extend(before for before in self._before(at) if before in self.by_cause)
                continue
            stack.pop()
            kept = self.by_cause.pop(at)
            self.released.add(at)
            if at != came:
                self.counts["unsent_sent_early"] += len(kept)
            for raw_key, sent in kept:
                self.left.setdefault(raw_key, []).append(sent)
                out.append(sent)

    def _before(self, cause: str) -> list[str]:
        """The kept causes just before `cause`: in its partition, and in each key's outbox."""
        partition, offset = _split(cause)
        offsets = self.offsets[partition]
        at = bisect.bisect_left(offsets, offset)
        before = [f"{partition}:{offsets[at - 1]}"] if at else []
        for raw_key, _ in self.by_cause[cause]:
            previous = self._previous[raw_key].get(cause)
            if previous is not None:
                before.append(previous)
        return before


class Unsent:
    """One table's unsent records for the ownership begun with the consumer group's
    current generation."""

    def __init__(self, app: faust.App, table: StateTable[Any], committed: CommittedOffsets, counts: Counter[str]) -> None:
        self.app, self.table, self.committed, self.counts = app, table, committed, counts
        self.generation: int | None = None
        self.kept = KeptRecords([], counts)

    async def take(self, message: faust.types.Message) -> list[Sent] | None:
        """The records `message` caused that may not have been sent ([]: sent already
        in this ownership; None: none known)."""
        generation = self.app.consumer_generation_id
        if generation != self.generation:
            self.generation = generation
            self.kept = KeptRecords(await self._collect(), self.counts)
            if self.kept:
                log.info("table %s: %d records of %d input records may be unsent; sent again when those come", self.table.name, len(self.kept), len(self.kept.by_cause))
        if not self.kept:
            return None
        return self.kept.take(cause_of(message))

    def folded(self, key: str) -> tuple[list[Sent], list[Sent]]:
        """`key` is folded again in this ownership: (its kept records, after what must
        leave before them, to send before what the new fold causes; the records of its
        old entry that left in this ownership, for its new entry's outbox)."""
        if not self.kept:
            return [], []
        raw_key = key.encode()
        return self.kept.superseded(raw_key), self.kept.carried(raw_key)

    def holds(self, raw_key: bytes) -> bool:
        """Whether `raw_key`'s entry holds records kept unsent in this ownership: a sweep
        leaves it until they have left (dropped, its records would go with it on a second
        crash, and its cause, when it came, would be folded again from no state)."""
        return self.kept.holds(raw_key)

    async def _collect(self) -> list[tuple[bytes, Sent]]:
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
