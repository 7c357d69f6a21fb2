"""A Faust table holding one stage's core state per key, and its outbox (SPEC R7.3).

Values are `codecs.Entry` JSON bytes, decoded on every read. A fold's new value is held
in `pending` until its batch is flushed, and reads see it there first. `flush` makes the
batch's values durable — the store and the changelog, acknowledged by Kafka — before the
records their folds caused are sent (app/stream/delivery.py): a record whose outputs left
the stage is never folded again, so a restart that reads the stage's input partitions in
another order cannot send a view that contradicts one already sent. Each value carries
those records (its outbox) until its next batch, so a repeat of the record that caused
them sends them again.

`TableStore` is the table as the runner's `StateStore` (app/core/engine/runner.py) for one
record: it recognises a repeat by the positions the entry reflects.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, Generic, TypeVar

import faust
import msgspec

from app.core.engine.runner import Progressed
from app.stream.codecs import COMPRESS_OVER, ENTRY_LIMIT, Entry, Origin, Position, Sent, encode, entry_decoder
from app.stream.faust_fixes import as_current_event, partition_event

S = TypeVar("S")

log = logging.getLogger("faultline.stream")

_ZLIB = b"\x78"  # the first byte of a zlib stream; JSON starts with `{`
# The key of a table partition's progress (`Progressed`): no state key starts with "/"
# (state keys start with the cluster's name, which is never empty).
_PROGRESS = "/progress/{}"
_progressed_decoder = msgspec.json.Decoder(Progressed)


class _Outbox(msgspec.Struct):
    """An entry's outbox alone: its state is skipped, not decoded."""

    outbox: list[Sent] = []


_outbox_decoder = msgspec.json.Decoder(_Outbox)


class StateTable(Generic[S]):
    def __init__(self, table: faust.Table, state_type: type, counts: Counter[str] | None = None) -> None:
        self.table = table
        self.counts: Counter[str] = counts if counts is not None else Counter()
        self._decoder = entry_decoder(state_type)
        # Folded but not yet written: key -> (the event folded last, encoded Entry).
        self.pending: dict[bytes, tuple[faust.types.EventT, bytes]] = {}
        self._outboxes: dict[bytes, list[Sent]] = {}  # the outbox of each held value
        # Progress to write after the partition's states: partition -> (event, JSON).
        self.pending_progress: dict[int, tuple[faust.types.EventT, bytes]] = {}

    @property
    def name(self) -> str:
        return self.table.name

    def get(self, key: str) -> Entry[S] | None:
        raw_key = key.encode()
        pending = self.pending.get(raw_key)
        raw = pending[1] if pending is not None else self.table.get(raw_key)
        return self._load(raw) if raw is not None else None

    def hold(self, key: str, event: faust.types.EventT, positions: dict[str, Position], state: Any, raw_state: bytes | None, outbox: list[Sent]) -> None:
        """Hold `state`, reflecting `positions`, with the records its folds in this batch
        caused, until `flush`; `event` (the last record folded into it) names the table
        partition."""
        partition = event.message.partition
        value = msgspec.Raw(raw_state) if raw_state is not None else state  # the same bytes either way
        raw_key = key.encode()
        # Folded again in the same batch: its outbox holds every record of the batch.
        outbox = self._outboxes[raw_key] = self._outboxes.get(raw_key, []) + outbox
        raw = encode(Entry(partition=partition, positions=positions, state=value, outbox=outbox))
        if len(raw) > COMPRESS_OVER:
            raw = zlib.compress(raw, 1)
            if len(raw) > ENTRY_LIMIT:
                self.counts["outbox_overflows"] += 1
                log.warning("table %s: the outbox of %r does not fit its entry; written without it (a crash before its records are sent loses them)", self.name, key[:256])
                raw = encode(Entry(partition=partition, positions=positions, state=value))
        self.pending[raw_key] = (event, raw)

    def progressed(self, partition: int) -> Progressed | None:
        """The progress a table partition's states were last written with (by whichever
        worker held it), or None. Read from that partition's own store: a RocksDB table
        reads the database of the current event's partition, and a new ownership's scope
        asks before its first record makes its partition current (R12.3): the current one
        is then the partition of the record folded before, whose store has no such key."""
        with as_current_event(partition_event(partition)):
            raw = self.table.data.get(_PROGRESS.format(partition).encode())
        if raw is None:
            return None
        try:
            return _progressed_decoder.decode(raw)
        except msgspec.DecodeError:
            log.warning("table %s: undecodable progress of partition %d ignored", self.name, partition)
            return None

    def hold_progress(self, event: faust.types.EventT, progressed: Progressed) -> None:
        """Write a partition's progress with its next states (after them, in the same
        changelog partition: it is never durable ahead of them)."""
        self.pending_progress[event.message.partition] = (event, encode(progressed))

    def items(self, partition: int) -> Iterator[tuple[str, Any]]:
        """(key, state) of every entry of one table partition, held values first."""
        for raw_key, entry in self.entries():
            if entry.partition == partition:
                yield raw_key.decode(), entry.state

    def entries(self) -> Iterator[tuple[bytes, Entry[S]]]:
        """Every entry this worker holds, held values first."""
        seen = set(self.pending)
        for raw_key, (_, raw) in list(self.pending.items()):
            yield raw_key, self._load(raw)
        for raw_key, raw in list(self.table.data.items()):
            if raw_key in seen or raw_key[:1] == b"/":
                continue
            try:
                yield raw_key, self._load(raw)
            except (msgspec.DecodeError, zlib.error):
                log.warning("table %s: undecodable entry for key %r left in place", self.name, raw_key)

    def outboxes(self) -> Iterator[tuple[bytes, Sent]]:
        """(key, record) of the outboxes of the entries in the store (not those held)."""
        for raw_key, raw in list(self.table.data.items()):
            if raw_key[:1] == b"/":
                continue
            try:
                for sent in _outbox_decoder.decode(zlib.decompress(raw) if raw[:1] == _ZLIB else raw).outbox:
                    yield raw_key, sent
            except (msgspec.DecodeError, zlib.error):
                log.warning("table %s: undecodable entry for key %r left in place", self.name, raw_key)

    def _load(self, raw: bytes) -> Entry[S]:
        return self._decoder.decode(zlib.decompress(raw) if raw[:1] == _ZLIB else raw)

    async def flush(self) -> int:
        """Make every held value durable: write it to the store and its changelog
        partition, and wait until Kafka has acknowledged the changelog records.

        The changelog records go straight to the producer, as Faust's own table write
        would send them but without its producer buffer: that buffer sends one record
        per turn of the event loop, and while it holds more than 100 Faust stops handing
        records to every agent, so each batch of state writes stalled the whole worker."""
        written = len(self.pending)
        if not written and not self.pending_progress:
            return 0
        store, send = self.table.data, self.table.app.producer.send
        topic = self.table.changelog_topic.get_topic_name()
        sends = []
        progress = [(_PROGRESS.format(p).encode(), held) for p, held in self.pending_progress.items()]
        for raw_key, (event, raw) in [*self.pending.items(), *progress]:
            partition = event.message.partition
            # Faust's stores pick the partition (RocksDB: one database each) from the current event.
            with as_current_event(event):
                store[raw_key] = raw
            sent = await send(topic, raw_key, raw, partition, None, None)
            sent.add_done_callback(self._persisted)
            sends.append(sent)
        self.pending.clear()
        self._outboxes.clear()
        self.pending_progress.clear()
        await asyncio.gather(*sends)
        return written

    def _persisted(self, sent: asyncio.Future[Any]) -> None:
        """What Faust's table does once a changelog record is written: the store keeps
        the offset, so a restart recovers the changelog from there (RocksDB)."""
        if not sent.cancelled() and sent.exception() is None:
            metadata = sent.result()
            self.table.data.set_persisted_offset(metadata.topic_partition, metadata.offset)

    def delete(self, expired: Iterable[tuple[bytes, int]]) -> int:
        """Drop entries (key, table partition); runs from a timer, outside any event, so
        it writes the tombstones itself."""
        count = 0
        for raw_key, partition in expired:
            if raw_key in self.pending:  # folded since it was judged: judged again after its flush
                continue
            del self.table.data[raw_key]
            self.table.send_changelog(partition, raw_key, None, key_serializer="raw", value_serializer="raw")
            count += 1
        return count


class PartitionStates:
    """One table partition's states as a `StateStore` outside any record (an expiry
    sweep: it rebuilds the partition's expiry index)."""

    __slots__ = ("table", "partition")

    def __init__(self, table: StateTable[Any], partition: int) -> None:
        self.table, self.partition = table, partition

    def load(self, key: str) -> tuple[Any | None, bool]:
        entry = self.table.get(key)
        return (entry.state if entry is not None else None), False

    def items(self) -> Iterable[tuple[str, Any]]:
        return self.table.items(self.partition)


class TableStore:
    """A `StateTable` as the runner's `StateStore` while one record is folded: a repeat
    of a record an entry already reflects is recognised by the entry's positions."""

    __slots__ = ("table", "partition", "origin", "loaded")

    def __init__(self, table: StateTable[Any], partition: int, origin: Origin) -> None:
        self.table, self.partition, self.origin = table, partition, origin
        self.loaded: dict[str, Entry[Any]] = {}

    def load(self, key: str) -> tuple[Any | None, bool]:
        entry = self.table.get(key)
        if entry is None:
            return None, False
        self.loaded[key] = entry
        return entry.state, entry.applied(self.origin)

    def items(self) -> Iterable[tuple[str, Any]]:
        return self.table.items(self.partition)

    def positions(self, key: str) -> dict[str, Position]:
        """The positions of `key`'s entry with the record in hand's."""
        previous = self.loaded.get(key)
        positions = dict(previous.positions) if previous is not None else {}
        positions[self.origin.stream] = self.origin.position
        return positions
