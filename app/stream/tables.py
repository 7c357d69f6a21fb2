"""A Faust table holding one stage's core state per key, with its expiry (SPEC R7.4).

Values are `codecs.Entry` JSON bytes, decoded on every read. A fold's new value is held
in `pending` until its batch's outputs are acknowledged (delivery.py), and
reads see it there first; `flush` then writes it to the store and the changelog.
Stream time is kept per table partition and cluster (SPEC R12.5: the stage's watermark,
else the latest `observed_at` folded into that partition): a worker that replays a
backlog reads its partitions at different speeds, so one worker-wide maximum would let a
fast partition expire the state of a slow one before that one's own records arrive.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Callable
from datetime import datetime
from typing import Any, Generic, TypeVar

import faust
import msgspec
from faust.streams import current_event

from app.core.progress import settles
from app.stream.codecs import Entry, Origin, Position, encode, entry_decoder
from app.stream.faust_fixes import as_current_event

S = TypeVar("S")

log = logging.getLogger("faultline.stream")


class StateTable(Generic[S]):
    def __init__(
        self,
        table: faust.Table,
        state_type: type,
        expired: Callable[[S, datetime], bool],
        *,
        waits_until: Callable[[S], datetime | None] | None = None,
        compressed: bool = False,
    ) -> None:
        """`waits_until`: until when a state waits on progress (SPEC R12.4); the table
        keeps an index of those keys per partition. `compressed`: values are
        zlib-compressed JSON (for a state that is one large value: a changelog record must
        stay under the broker's message size limit)."""
        self.table = table
        self._compressed = compressed
        self._decoder = entry_decoder(state_type)
        self._expired = expired
        self._waits_until = waits_until
        # Latest record time per table partition and cluster (stream time without progress).
        self.latest: dict[int, dict[str, datetime]] = {}
        # Per table partition: key -> until when its state waits on progress, built by one
        # scan per assignment.
        self._waiting: dict[int, dict[str, datetime]] = {}
        self._generation: int | None = None
        # Folded but not yet written: key -> (the event folded last, encoded Entry).
        self.pending: dict[bytes, tuple[faust.types.EventT, bytes]] = {}

    @property
    def name(self) -> str:
        return self.table.name

    def get(self, key: str) -> Entry[S] | None:
        raw_key = key.encode()
        pending = self.pending.get(raw_key)
        raw = pending[1] if pending is not None else self.table.get(raw_key)
        return self._load(raw) if raw is not None else None

    def put(self, key: str, previous: Entry[S] | None, origin: Origin, state: S, raw_state: bytes | None = None) -> None:
        """Hold `state`, the fold of `origin` into `previous`, until `flush`. Call from
        the agent folding `origin`: its current event names the table partition.
        `raw_state`: the state's JSON, when the fold policy has it already."""
        event = current_event()
        if event is None:
            raise RuntimeError(f"table {self.name}: put outside of the agent folding {origin.header()!r}")
        positions = dict(previous.positions) if previous is not None else {}
        positions[origin.stream] = origin.position
        self.hold(key, event, positions, state, raw_state)

    def hold(self, key: str, event: faust.types.EventT, positions: dict[str, Position], state: S, raw_state: bytes | None = None) -> None:
        """Hold `state`, reflecting `positions`, until `flush`; `event` (the last record
        folded into it) names the table partition."""
        partition = event.message.partition
        value = msgspec.Raw(raw_state) if raw_state is not None else state  # the same bytes either way
        raw = encode(Entry(partition=partition, positions=positions, state=value))
        self.pending[key.encode()] = (event, zlib.compress(raw, 1) if self._compressed else raw)
        index = self._waiting.get(partition)
        if index is not None and self._waits_until is not None:
            until = self._waits_until(state)
            if until is not None:
                index[key] = until
            else:
                index.pop(key, None)

    def waiting_keys(self, partition: int, cluster: str, stream_time: datetime | None, generation: int) -> list[str]:
        """Keys of `cluster` in `partition` whose state waits on progress that has come
        (`settles`), in key order. The index is built by one scan of the stored entries per
        partition, again after a rebalance (`generation`: another worker may have changed
        them meanwhile)."""
        if self._waits_until is None:
            return []
        if generation != self._generation:
            self._generation, self._waiting = generation, {}
        index = self._waiting.get(partition)
        if index is None:
            index = self._waiting[partition] = {}
            for raw_key in list(self.table.data.keys()) + list(self.pending):
                key = raw_key.decode()
                entry = self.get(key)
                if entry is not None and entry.partition == partition:
                    until = self._waits_until(entry.state)
                    if until is not None:
                        index[key] = until
        prefix = f"{cluster}/"
        return sorted(k for k, until in index.items() if k.startswith(prefix) and settles(until, stream_time))

    def _load(self, raw: bytes) -> Entry[S]:
        return self._decoder.decode(zlib.decompress(raw) if self._compressed else raw)

    async def flush(self) -> int:
        """Write every held value to the store and send it to its changelog partition.

        The changelog records go straight to the producer, as Faust's own table write
        would send them but without its producer buffer: that buffer sends one record
        per turn of the event loop, and while it holds more than 100 Faust stops handing
        records to every agent, so each batch of state writes stalled the whole worker
        (at 2,000 records/s offered most of a verdict's latency). They are sent before
        the batch's events are acked, and Faust flushes the producer before it commits
        an offset, so a committed record's state is in the changelog as before."""
        written = len(self.pending)
        store, send = self.table.data, self.table.app.producer.send
        topic = self.table.changelog_topic.get_topic_name()
        for raw_key, (event, raw) in self.pending.items():
            partition = event.message.partition
            # Faust's stores pick the partition (RocksDB: one database each) from the current event.
            with as_current_event(event):
                store[raw_key] = raw
            sent = await send(topic, raw_key, raw, partition, None, None)
            sent.add_done_callback(self._persisted)
        self.pending.clear()
        return written

    def _persisted(self, sent: asyncio.Future[Any]) -> None:
        """What Faust's table does once a changelog record is written: the store keeps
        the offset, so a restart recovers the changelog from there (RocksDB)."""
        if not sent.cancelled() and sent.exception() is None:
            metadata = sent.result()
            self.table.data.set_persisted_offset(metadata.topic_partition, metadata.offset)

    def advance(self, partition: int, cluster: str, at: datetime) -> None:
        latest = self.latest.setdefault(partition, {})
        known = latest.get(cluster)
        if known is None or at > known:
            latest[cluster] = at

    def sweep(self, now: Callable[[int, str], datetime | None]) -> int:
        """Drop every entry the core says has expired at the stream time `now(partition,
        cluster)` of its partition and cluster (keys start with the cluster). Runs from a
        timer, outside any event, so it writes the tombstones itself."""
        if not self.latest:
            return 0
        expired: list[tuple[bytes, int]] = []
        for key, raw in list(self.table.data.items()):
            if key in self.pending:  # folded since it was stored: judged after its flush
                continue
            try:
                entry = self._load(raw)
            except (msgspec.DecodeError, zlib.error):
                log.warning("table %s: undecodable entry for key %r left in place", self.name, key)
                continue
            at = now(entry.partition, key.decode("utf-8", "replace").partition("/")[0])
            if at is not None and self._expired(entry.state, at):
                expired.append((key, entry.partition))
        for key, partition in expired:
            del self.table.data[key]
            self._waiting.get(partition, {}).pop(key.decode("utf-8", "replace"), None)
            self.table.send_changelog(partition, key, None, key_serializer="raw", value_serializer="raw")
        return len(expired)
