"""Read the source topics' history from Kafka in one deterministic order (SPEC R10).

A replay must give the same bytes every time it reads the same topics, however the
broker happens to batch its fetches. So the reader snapshots each partition's end offset
when it starts, then merges all partitions of all source topics by the records' own
time: (observed_at, topic, partition, offset). Each object's records stay in their
partition's order, and topics are interleaved by record time, which is how the bridge
published them (and what the gang stage's order independence relies on, docs/rules.md).
A record whose time the stages will refuse (out of range, or a clock fault against its
partition's progress: SPEC R11.3, R11.4) keeps its partition's place instead, as one
that cannot be decoded does: a record dated 9999 must not hold back every record after
it in its partition until the end of the replay.

It uses its own consumer with no group: it never joins, commits for or disturbs the live
worker's consumer group.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import AsyncIterator
from datetime import datetime, timezone

import msgspec
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from app.core.base.clock import clock_fault, out_of_range
from app.core.base.rules import DEFAULT_RULES, Rules
from app.model.decode import BadRecord, TypedEnvelope, decode_source
from app.kafka import clients
from app.kafka.topics import admin_client
from app.model.envelope import BOOKMARK, SOURCE_TOPICS
from app.settings import Settings

_DAWN = datetime.min.replace(tzinfo=timezone.utc)
# Records buffered per partition before it is paused, so memory stays bounded.
_BUFFER = 5_000


class HistoryError(RuntimeError):
    """The history cannot be read; the message says why and what to do."""


class HistoryRecord(msgspec.Struct, frozen=True, gc=False):
    topic: str  # logical name, e.g. "k8s.pods"
    key: str | None
    value: bytes
    partition: int
    offset: int
    envelope: TypedEnvelope | None  # None when the record cannot be decoded (a dead letter)


class _Partition:
    def __init__(self, tp: TopicPartition, logical: str, rank: int, end: int) -> None:
        self.tp, self.logical, self.rank, self.end = tp, logical, rank, end
        self.buffer: deque[tuple[tuple, HistoryRecord]] = deque()
        self.last_time = _DAWN  # merge time for a record that cannot be decoded
        self.progress: datetime | None = None  # the latest BOOKMARK time read here
        self.fetched = 0  # the next offset not yet buffered
        self.paused = False

    @property
    def done(self) -> bool:
        return not self.buffer and self.fetched >= self.end


def _partition_numbers(settings: Settings, names: list[str]) -> dict[str, list[int]]:
    with admin_client(settings) as admin:
        existing = set(admin.list_topics())
        described = admin.describe_topics([n for n in names if n in existing]) if existing & set(names) else []
    return {t["name"]: sorted(p["partition_index"] for p in t["partitions"]) for t in described if not t.get("error_code")}


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


class KafkaHistory:
    """The source topics' records from `since` (Kafka record time; default the beginning)
    to `until` (default: the end offsets when reading started), in merge order.

    Uses aiokafka for reading (its record parsing is native: about twice kafka-python's
    rate here, and reading is most of a replay's time)."""

    def __init__(
        self, settings: Settings, since: datetime | None = None, until: datetime | None = None, rules: Rules = DEFAULT_RULES
    ) -> None:
        self.settings, self.since, self.until, self.rules = settings, since, until, rules
        self.total = 0
        self.consumer: AIOKafkaConsumer | None = None
        self.partitions: dict[TopicPartition, _Partition] = {}

    async def open(self) -> None:
        self.consumer = clients.aio_consumer(
            self.settings,
            group_id=None,
            enable_auto_commit=False,
            client_id="faultline-replay",
            max_partition_fetch_bytes=8 << 20,
            fetch_max_bytes=64 << 20,
        )
        try:
            await self.consumer.start()
            self.partitions = await self._assign()
        except HistoryError:
            await self.close()
            raise
        except KafkaError as exc:
            await self.close()
            raise HistoryError(f"cannot read from Kafka at {self.settings.bootstrap} ({exc}); set --bootstrap or FAULTLINE_BOOTSTRAP") from None
        self.total = sum(p.end - p.fetched for p in self.partitions.values())

    async def close(self) -> None:
        if self.consumer is not None:
            await self.consumer.stop()
            self.consumer = None

    async def _assign(self) -> dict[TopicPartition, _Partition]:
        consumer = self.consumer
        topics = {self.settings.topic(name): name for name in SOURCE_TOPICS}
        tps: list[TopicPartition] = []
        partitions = _partition_numbers(self.settings, list(topics))
        for name in topics:
            numbers = partitions.get(name)
            if not numbers:
                raise HistoryError(
                    f"source topic {name} does not exist on {self.settings.bootstrap}: check --topic-prefix, "
                    "or create it with `faultline topics create`"
                )
            tps += [TopicPartition(name, n) for n in sorted(numbers)]
        consumer.assign(tps)
        starts = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
        if self.since is not None:
            found = await consumer.offsets_for_times({tp: _ms(self.since) for tp in tps})
            starts = {tp: (found[tp].offset if found.get(tp) else ends[tp]) for tp in tps}
        if self.until is not None:
            found = await consumer.offsets_for_times({tp: _ms(self.until) + 1 for tp in tps})
            ends = {tp: (found[tp].offset if found.get(tp) else ends[tp]) for tp in tps}
        order = {name: rank for rank, name in enumerate(SOURCE_TOPICS)}
        partitions = {}
        for tp in tps:
            consumer.seek(tp, starts[tp])
            logical = topics[tp.topic]
            part = _Partition(tp, logical, order[logical], ends[tp])
            part.fetched = starts[tp]
            partitions[tp] = part
        return partitions

    async def _fill(self, parts: list[_Partition]) -> None:
        """Fetch until each of `parts` has a buffered record or is read to its end."""
        consumer = self.consumer
        while any(not p.buffer and not p.done for p in parts):
            for part in self.partitions.values():  # bound memory: fetch only for the ones not full
                full = len(part.buffer) >= _BUFFER or part.fetched >= part.end
                if full != part.paused:
                    (consumer.pause if full else consumer.resume)(part.tp)
                    part.paused = full
            batches = await consumer.getmany(timeout_ms=1_000, max_records=10_000)
            for tp, messages in batches.items():
                part = self.partitions[tp]
                for message in messages:
                    if message.offset < part.end:
                        part.buffer.append(self._entry(part, message))
                    part.fetched = message.offset + 1
            for part in self.partitions.values():
                # Compaction and transaction markers leave gaps: the position says where we are.
                if not part.paused and part.fetched < part.end and not part.buffer:
                    part.fetched = max(part.fetched, await consumer.position(part.tp))

    def _entry(self, part: _Partition, message) -> tuple[tuple, HistoryRecord]:
        value = message.value or b""
        key = message.key.decode("utf-8", "replace") if message.key is not None else None
        try:
            envelope, _ = decode_source(part.logical, value)
        except BadRecord:
            envelope = None
        else:
            self._place(part, envelope)
        record = HistoryRecord(part.logical, key, value, part.tp.partition, message.offset, envelope)
        return (part.last_time, part.rank, part.tp.partition, message.offset), record

    def _place(self, part: _Partition, envelope: TypedEnvelope) -> None:
        """Move the partition's merge time to this record's, unless the stages will
        refuse the record for its time."""
        at = envelope.observed_at
        progress = envelope.type == BOOKMARK
        if out_of_range(at, self.rules) or (not progress and clock_fault(at, part.progress, "", self.rules)):
            return
        if progress:
            part.progress = at if part.progress is None else max(part.progress, at)
        part.last_time = at

    async def records(self) -> AsyncIterator[HistoryRecord]:
        """Every record in merge order: (observed_at, topic, partition, offset)."""
        try:
            parts = list(self.partitions.values())
            await self._fill(parts)
            by_rank = {(p.rank, p.tp.partition): p for p in parts}
            heap = [(p.buffer[0][0], p.rank, p.tp.partition) for p in parts if p.buffer]
            heapq.heapify(heap)
            while heap:
                _, rank, number = heapq.heappop(heap)
                part = by_rank[(rank, number)]
                yield part.buffer.popleft()[1]
                if not part.buffer:
                    await self._fill([part])
                if part.buffer:
                    heapq.heappush(heap, (part.buffer[0][0], rank, number))
        except KafkaError as exc:
            raise HistoryError(f"reading {self.settings.bootstrap} failed: {exc}") from None
