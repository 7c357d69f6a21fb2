"""A Faust table holding one stage's core state per key, with its expiry (SPEC R7.4).

Values are `codecs.Entry` JSON bytes: decoded on every read, written back after every
fold (a Faust table persists on assignment only). Stream time is kept per table
partition: the latest `observed_at` folded into that partition. A worker that replays a
backlog reads its partitions at different speeds, so one worker-wide maximum would let a
fast partition expire the state of a slow one before that one's own records arrive.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Generic, TypeVar

import faust
import msgspec

from app.stream.codecs import Entry, Origin, encode, entry_decoder

S = TypeVar("S")

log = logging.getLogger("faultline.stream")


class StateTable(Generic[S]):
    def __init__(self, table: faust.Table, state_type: type, expired: Callable[[S, datetime], bool]) -> None:
        self.table = table
        self._decoder = entry_decoder(state_type)
        self._expired = expired
        self.stream_time: dict[int, datetime] = {}

    @property
    def name(self) -> str:
        return self.table.name

    def get(self, key: str) -> Entry[S] | None:
        raw = self.table.get(key.encode())
        return self._decoder.decode(raw) if raw is not None else None

    def put(self, key: str, previous: Entry[S] | None, partition: int, origin: Origin, state: S) -> None:
        """Store `state` as the fold of `origin` into `previous`. Call only from the agent
        processing `origin` (Faust writes the changelog to that event's partition)."""
        positions = dict(previous.positions) if previous is not None else {}
        positions[origin.stream] = origin.position
        self.table[key.encode()] = encode(Entry(partition=partition, positions=positions, state=state))

    def advance(self, partition: int, at: datetime) -> None:
        known = self.stream_time.get(partition)
        if known is None or at > known:
            self.stream_time[partition] = at

    def sweep(self) -> int:
        """Drop every entry the core says has expired at its partition's stream time.
        Runs from a timer, outside any event, so it writes the tombstones itself."""
        if not self.stream_time:
            return 0
        expired: list[tuple[bytes, int]] = []
        for key, raw in list(self.table.data.items()):
            try:
                entry = self._decoder.decode(raw)
            except msgspec.DecodeError:
                log.warning("table %s: undecodable entry for key %r left in place", self.name, key)
                continue
            now = self.stream_time.get(entry.partition)
            if now is not None and self._expired(entry.state, now):
                expired.append((key, entry.partition))
        for key, partition in expired:
            del self.table.data[key]
            self.table.send_changelog(partition, key, None, value_serializer="raw")
        return len(expired)
