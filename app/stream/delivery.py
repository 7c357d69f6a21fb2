"""How a stage's records are delivered: the machinery every agent shares, no rule.

Delivery (at-least-once, exact: SPEC R7.3, R11.1). Each agent folds its records in
batches:
  0. check that each record is the next offset of its partition (`Continuity`);
  1. hand it to the stage's runner (app/core/engine/runner.py): decode, time check, progress,
     key, redelivery check, fold; a bad record becomes a dead letter and processing goes on;
  2. a record the key's entry already reflects (a repeat after a crash) is not folded
     again: the records its fold caused are taken from the entry's outbox instead;
  3. the new states are held in the table's `pending`, each with the records its folds
     caused (its outbox); the records to send are held in the batch, in fold order;
  4. at the end of the batch the states are written to the store and the changelog, and
     Kafka acknowledges them;
  5. only then are the batch's records sent, and Kafka acknowledges them;
  6. only then are the batch's events acked, which lets Faust commit their offsets.
A batch ends when `batch_max` records are folded or no record is waiting, so an idle
stream flushes at once and a busy one pays two acknowledgement round trips per batch
instead of per record.

Why states first. A stage reading several partitions (pods: k8s.pods and k8s.events) may
read them in another interleaving after a restart. Had a batch's records been sent before
its states were durable, a crash in between would make the stage fold those records again
from older states, in another order, and send views that contradict what it sent before
(a downstream stage recognising repeats by position would keep the wrong one). With the
states first, a record is folded again only if nothing it caused was sent, so whatever
order the restart reads in, the stage never contradicts itself; a record whose state is
durable but whose records may not have been sent is recognised as a repeat when it comes
again (its offset is past the committed one: offsets are committed only after step 5) and
sends them again from the outbox, byte for byte, in the order they were made (after what
was made before them in its partition and for its key: unsent.py, which reads the
outboxes a new ownership finds once, before anything is folded).
An error in 4 or 5 stops the worker before 6: nothing is acked, nothing is lost.

Records sent to a re-key topic carry the position of the source record that caused
them (header `faultline-origin`), so the next stage recognises repeats the same way.
One agent per table: a fold's state is written after an `await`, so two agents folding
into one table could lose an update.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import faust
import msgspec
from mode import CrashingSupervisor

from app.core.base.dead_letters import dead_letter
from app.core.engine.runner import Out, encoded
from app.core.engine.topology import to_every_partition
from app.settings import Settings
from app.stream import in_flight
from app.stream.codecs import ORIGIN_HEADER, Origin, Position, Sent, encode
from app.stream.continuity import IDLE_CHECK_SECONDS, CommittedOffsets, Continuity
from app.stream.fault_injection import FaultInjection
from app.stream.faust_fixes import Fetched, InFlight, ack_offsets, forget_unacked, track
from app.stream.stopping import StopDeadline
from app.stream.tables import StateTable
from app.stream.unsent import Unsent

log = logging.getLogger("faultline.stream")

RAW: dict[str, Any] = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}

# Safety net for a batch left waiting while the agent waits for a record that does not
# come (its queued records were dropped by a rebalance): Faust's rebalance waits for
# every fetched record to be acked.
IDLE_FLUSH_SECONDS = 0.05
# Fetches an agent's queue holds before the fetch loop waits for it (as Faust's stream
# buffer makes it wait): a fetch is up to `fetch_partition_bytes` per partition.
INBOX_FETCHES = 4


class Batch:
    """One agent's records since its last flush: the states waiting to be written
    (`StateTable.pending`), the records to send once they are, the offsets to ack after
    both. Its lock keeps the idle flusher and the sweep out of a fetch being folded."""

    def __init__(
        self,
        app: faust.App,
        inbox: asyncio.Queue[Fetched],
        table: StateTable[Any] | None,
        producer: Any,
        before_flush: Callable[[Batch], Awaitable[None]] | None = None,
        linger: float = 0.0,
        injection: FaultInjection | None = None,
    ) -> None:
        self.app, self.inbox, self.table, self.producer, self.injection = app, inbox, table, producer, injection
        self.before_flush, self.linger = before_flush, linger
        self.started = 0.0  # monotonic time of the batch's first record
        self.outputs: list[Sent] = []
        self.offsets: dict[Any, list[int]] = {}  # input partition -> offsets folded, to ack
        self.count = 0  # records in the batch
        self.seq = 0  # batches flushed in this process: with the generation, `Sent.order`
        self.token: InFlight | None = None  # the batch as Faust's consumer counts it in flight
        self.sources: list[Any] = []  # the records of a batch, for the fault-injection seam only
        self.lock = asyncio.Lock()

    @property
    def events(self) -> int:
        """Records in the batch (0: nothing to flush)."""
        return self.count

    async def flush(self) -> None:
        """Steps 4-6: durable states, then acknowledged records, then offsets."""
        if self.before_flush is not None and self.count:
            await self.before_flush(self)  # a stage that folds a whole batch at once
        if self.table is not None:
            await self.table.flush()
        if self.injection is not None and self.injection.on:
            self.injection.states_durable(self.outputs)
        if self.outputs:
            await send_all(self.producer, self.outputs)
            self.outputs = []
        if self.injection is not None and self.injection.on:
            self.injection.outputs_acknowledged(self.sources)
            self.sources = []
        ack_offsets(self.app, self.offsets, self.token)
        self.offsets, self.count, self.token = {}, 0, None
        self.seq += 1

    def add(self, tp: Any, offset: int) -> None:
        if not self.count:
            self.started = time.monotonic()
            self.token = InFlight()
            track(self.app, self.token)
        self.count += 1
        offsets = self.offsets.get(tp)
        if offsets is None:
            self.offsets[tp] = [offset]
        else:
            offsets.append(offset)

    def forget(self) -> None:
        """Stopping with the batch unwritten: its records are delivered again after a restart."""
        if self.token is not None:
            forget_unacked(self.app, [self.token])
        self.offsets, self.count, self.token = {}, 0, None

    def lingered(self) -> bool:
        """Old enough to flush (a stage with a costly flush waits `linger` seconds)."""
        return time.monotonic() - self.started >= self.linger

    def nothing_queued(self) -> bool:
        return self.inbox.empty()


async def send_all(producer: Any, records: list[Sent]) -> None:
    """Send `records` in order and wait until Kafka has acknowledged every one. Straight
    to the producer: Faust's Topic.send wraps each record in futures and callbacks this
    delivery does not use."""
    send = producer.send
    sends = [await send(r.topic, r.key.encode(), bytes(r.value), r.partition, None, _headers(r)) for r in records]
    await asyncio.gather(*sends)


def _headers(record: Sent) -> list[tuple[str, bytes]] | None:
    return [(ORIGIN_HEADER, record.header.encode())] if record.header is not None else None


class Delivery:
    """The output topics, the counters and the delivery steps of one Faust app's agents."""

    def __init__(self, app: faust.App, settings: Settings) -> None:
        self.app, self.settings = app, settings
        self.counts: Counter[str] = Counter()
        self.records: Counter[str] = Counter()  # input records read, by logical topic
        self.logical: dict[str, str] = {}  # Kafka topic name -> logical name
        self.committed = CommittedOffsets(settings)
        app.add_dependency(self.committed)
        self.out: dict[str, faust.TopicT] = {}
        self.names: dict[str, str] = {}  # logical name -> Kafka topic name, of every output
        self.rekey: set[str] = set()
        self._every_partition = range(settings.partitions)
        self.stop = StopDeadline(settings.stop_timeout)
        self._injection = FaultInjection()  # a test seam, off unless its variable is set
        # Kafka topic name -> the queue its agent takes fetches from (faust_fixes patch 13).
        self.inboxes: dict[str, asyncio.Queue[Fetched]] = {}
        self.batches: dict[str, Batch] = {}  # agent name -> its batch

    def output(self, logical: str, *, partitions: int | None = None, rekey: bool = False) -> None:
        """A topic the agents write. Records sent to a re-key topic carry their origin."""
        name = self.settings.topic(logical)
        self.logical[name] = logical
        self.out[logical] = self.app.topic(name, partitions=partitions or self.settings.partitions, **RAW)
        self.names[logical] = name
        if rekey:
            self.rekey.add(logical)

    def source(self, *logical: str, partitions: int | None = None) -> faust.TopicT:
        names = [self.settings.topic(name) for name in logical]
        self.logical.update(zip(names, logical, strict=True))
        return self.app.topic(*names, partitions=partitions or self.settings.partitions, **RAW)

    def table(self, name: str, partitions: int | None = None) -> faust.Table:
        # bytes key and value types make Faust use the raw codec for the table and its changelog.
        return self.app.Table(
            name, default=None, partitions=partitions or self.settings.partitions, key_type=bytes, value_type=bytes
        )

    def register(
        self,
        topic: faust.TopicT,
        name: str,
        handle: Callable[[Any, Any, Batch], None],
        table: StateTable[Any] | None = None,
        before_flush: Callable[[Batch], Awaitable[None]] | None = None,
        linger: float = 0.0,
        unsent: Unsent | None = None,
    ) -> None:
        """An agent running `handle(tp, record, batch)` on every record of `topic`, a fetch
        at a time, in batches (and `before_flush` at the end of each, for a stage that
        folds a batch at once; such a stage may `linger`: keep its batch open that many
        seconds for more records); `unsent`: what its table's outboxes hold unsent, sent
        again at each new ownership before anything is folded (unsent.py).

        Faust subscribes the agent's topics, assigns their partitions and runs the agent;
        the records come from the fetch loop a fetch at a time (`faust_fixes.hand_fetches_to_stages`),
        not through Faust's stream. It runs under `CrashingSupervisor`: an agent that
        raises (a send Kafka could not complete, a store error) must stop the worker, not
        be restarted in place. Faust's default supervisor would restart it at once, and
        the failed batch, never acked, would be skipped later as "applied" once a
        successor's position is stored. Crashing makes the restart redeliver from the last
        committed offset."""
        inbox: asyncio.Queue[Fetched] = asyncio.Queue(maxsize=INBOX_FETCHES)
        for kafka_topic in topic.topics:
            self.inboxes[kafka_topic] = inbox
        body = self._body(name, inbox, set(topic.topics), handle, table, before_flush, linger, unsent)
        self.app.agent(topic, name=name, supervisor_strategy=CrashingSupervisor)(body)

    def _body(
        self,
        name: str,
        inbox: asyncio.Queue[Fetched],
        topics: set[str],
        handle: Callable[[Any, Any, Batch], None],
        table: StateTable[Any] | None,
        before_flush: Callable[[Batch], Awaitable[None]] | None,
        linger: float,
        unsent: Unsent | None,
    ) -> Callable[[faust.StreamT], Any]:
        continuity = Continuity(self.app, name, self.committed)
        noted = in_flight.InFlight(Path(self.settings.worker_dir) / "in-flight", name)
        injection = self._injection
        limit = self.settings.batch_max
        app, logical_of, counts, records = self.app, self.logical, self.counts, self.records

        def current(generation: int) -> bool:
            """Records fetched in `generation` may be folded: no rebalance since (Faust
            seeks back to the committed offsets after one and fetches them again)."""
            return generation == app.consumer_generation_id and app.flow_control.is_active()

        async def fold(fetched: Fetched, batch: Batch) -> None:
            generation = fetched.generation
            if not current(generation):
                return
            if unsent is not None and unsent.new_ownership(generation):
                if batch.count:
                    await self.flush(batch)
                kept = await unsent.collect(generation)
                if kept:  # before anything of the ownership is folded (unsent.py)
                    await send_all(app.producer, kept)
                if not current(generation):
                    return
            for tp, record in fetched.records:
                offset = record.offset
                if not continuity.follows(tp, offset):
                    if not await continuity.check(tp, offset):
                        continue  # past a hole: comes again, the rewind fetches it
                    if not current(generation):
                        return
                logical = logical_of.get(record.topic, record.topic)
                records[logical] += 1
                if noted.poisoned(record):  # it stopped the worker twice (SPEC R11.3)
                    counts["crash_loop_dead_letters"] += 1
                    batch.outputs.append(self.dead_letter(record, in_flight.REASON))
                else:
                    noted.begin(record)
                    if injection.on:
                        injection.check(logical, record)
                        batch.sources.append(record)
                    handle(tp, record, batch)
                    noted.end(record)
                batch.add(tp, offset)
                if batch.count >= limit:
                    await self.flush(batch)
                    if not current(generation):
                        return
            if batch.count and batch.nothing_queued() and batch.lingered():
                await self.flush(batch)

        async def agent(stream: faust.StreamT) -> None:
            batch = Batch(app, inbox, table, app.producer, before_flush, linger, injection)
            self.batches[name] = batch
            idle = asyncio.ensure_future(self._flush_when_idle(batch))
            watch = asyncio.ensure_future(self._check_continuity_when_idle(continuity, batch, topics))
            noted.report()
            try:
                while True:
                    fetched = await inbox.get()
                    async with batch.lock:
                        await fold(fetched, batch)
            except Exception as exc:  # the worker stops (CrashingSupervisor): within stop_timeout
                self.stop.arm(f"agent {name} stopped: {type(exc).__name__}: {exc}")
                raise
            finally:
                idle.cancel()
                watch.cancel()
                if batch.count:  # stopping with a batch unwritten: it must be delivered again
                    batch.forget()

        agent.__name__ = agent.__qualname__ = name  # Faust labels agents by function name
        return agent

    async def flush(self, batch: Batch) -> None:
        self.counts["batches"] += 1
        await batch.flush()

    async def _flush_when_idle(self, batch: Batch) -> None:
        while True:
            await asyncio.sleep(IDLE_FLUSH_SECONDS)
            if not batch.events or batch.lock.locked() or not batch.lingered():
                continue
            async with batch.lock:
                try:
                    await self.flush(batch)
                except Exception as exc:  # the worker must stop with the batch unacked
                    self.stop.arm(f"a batch could not be written: {type(exc).__name__}: {exc}")
                    await self.app.crash(exc)
                    return

    async def _check_continuity_when_idle(self, continuity: Continuity, batch: Batch, topics: set[str]) -> None:
        while True:
            await asyncio.sleep(IDLE_CHECK_SECONDS)
            if not batch.nothing_queued():
                continue  # records are coming: they show holes themselves
            async with batch.lock:
                try:
                    await continuity.when_idle(topics, acked=not batch.events)
                except Exception as exc:  # DroppedRecords: a restart re-reads from the committed offset
                    self.stop.arm(f"{type(exc).__name__}: {exc}")
                    await self.app.crash(exc)
                    return

    def kafka_records(self, outs: list[Out], origin: Origin, cause: str, batch: Batch | None = None) -> tuple[list[Sent], list[int]]:
        """The Kafka records of a fold's outputs, in order: progress to every partition of
        its topic (SPEC R12.3), a re-keyed record tagged with the origin and its index
        among the records `origin` caused; `cause` names the input record; each marked
        with where it will be sent, the next records of `batch` (`Sent.order`). With, for
        each output, the index of its first record (and the count at the end)."""
        records: list[Sent] = []
        starts: list[int] = []
        index = 0
        if batch is not None:
            generation, seq, base = self.app.consumer_generation_id, batch.seq, len(batch.outputs)
        for out in outs:
            starts.append(len(records))
            emit = out.emit
            value = msgspec.Raw(encoded(out))
            topic = self.names[emit.topic]
            rekey = emit.topic in self.rekey
            for partition in self._every_partition if to_every_partition(emit) else _BY_KEY:
                header = None
                if rekey:
                    header = Origin(origin.topic, origin.partition, Position(origin.position.offset, index)).header().decode()
                    index += 1
                order = (generation, seq, base + len(records)) if batch is not None else None
                records.append(Sent(topic, emit.key, value, partition, header, cause, order))
        starts.append(len(records))
        self.counts["outputs"] += len(outs)
        return records, starts

    def dead_letter(self, message: faust.types.Message, reason: str) -> Sent:
        """SPEC R11.1: where the bad record is (its Kafka topic, partition and offset) and why."""
        self.counts["dead_letters"] += 1
        letter = dead_letter(message.topic, message.key, message.partition, message.offset, reason, message.value or b"")
        return Sent(self.names[letter.topic], letter.key, msgspec.Raw(encode(letter.value)), None, None, cause_of(message))


def cause_of(message: faust.types.Message) -> str:
    """An input record, as an outbox names it."""
    return f"{message.topic}:{message.partition}:{message.offset}"


_BY_KEY = (None,)


def origin_of(message: faust.types.Message) -> Origin:
    return Origin(message.topic, message.partition, Position(message.offset))


def relayed(origin: Origin, message: faust.types.Message) -> Origin:
    """The origin to tag a record with that a stage writes while folding `message`, a
    record of an internal topic that came from `origin`: the stage's own input partition
    joins the origin's stream. A stage two hops from the source receives records of one
    source partition through several partitions of the topic between, interleaved; each
    (source partition, partition between) is in order, so that is the stream a
    redelivery is recognised in."""
    return Origin(f"{origin.topic}>{message.topic}:{message.partition}", origin.partition, origin.position)


def upstream_origin(message: faust.types.Message) -> Origin:
    """The source record a re-keyed record came from (its header), else its own position."""
    headers = message.headers or ()
    for name, value in headers.items() if isinstance(headers, Mapping) else headers:
        if name == ORIGIN_HEADER and value is not None:
            origin = Origin.from_header(bytes(value))
            if origin is not None:
                return origin
    return origin_of(message)
