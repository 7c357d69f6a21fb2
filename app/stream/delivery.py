"""How a stage's records are delivered: the machinery every agent shares, no rule.

Delivery (at-least-once, SPEC R7.3, R11.1). Each agent folds its records in batches:
  0. check that each record is the next offset of its partition (`Continuity`);
  1. decode; a bad record becomes a dead letter and processing goes on;
  2. if the key's entry (held or stored) already reflects this record's position, skip
     it: it is a redelivery after a crash, and its outputs were written before its state;
  3. fold from the latest state (a value held in this batch first), send every output
     without waiting, and hold the new state in the table's `pending`;
  4. at the end of the batch wait until Kafka has acknowledged every output sent;
  5. only then write the held states (with their records' positions) to the table;
  6. and only then ack the batch's events, which lets Faust commit their offsets.
A batch ends when `batch_max` records are folded or no record is waiting, so an idle
stream flushes at once and a busy one pays one acknowledgement round trip per batch
instead of per record. A crash before 5 makes the whole batch fold again from the same
states, and the folds are deterministic, so its outputs are repeated byte for byte. An
error in 4 or 5 stops the worker before 6: nothing is acked, nothing is lost.

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
from mode import CrashingSupervisor

from app.core.dead_letters import dead_letter
from app.core.emit import Emit
from app.core.topology import to_every_partition
from app.settings import Settings
from app.stream import in_flight
from app.stream.codecs import ORIGIN_HEADER, Origin, Position, encode
from app.stream.continuity import IDLE_CHECK_SECONDS, CommittedOffsets, Continuity
from app.stream.fault_injection import FaultInjection
from app.stream.faust_fixes import forget_unacked
from app.stream.stopping import StopDeadline
from app.stream.tables import StateTable

log = logging.getLogger("faultline.stream")

RAW: dict[str, Any] = {"key_type": bytes, "value_type": bytes, "key_serializer": "raw", "value_serializer": "raw"}

# Safety net for a batch left waiting while the agent waits for a record that does not
# come (its queued records were dropped by a rebalance): Faust's rebalance waits for
# every fetched record to be acked.
IDLE_FLUSH_SECONDS = 0.05


class Batch:
    """One agent's records since its last flush: the outputs Kafka has not acknowledged
    yet, the table values waiting on them (`StateTable.pending`), the events waiting on
    both. Its lock keeps the idle flusher out of a record being folded."""

    def __init__(
        self,
        stream: faust.StreamT,
        table: StateTable[Any] | None,
        before_flush: Callable[[Batch], Awaitable[None]] | None = None,
        linger: float = 0.0,
    ) -> None:
        self.stream, self.table, self.before_flush, self.linger = stream, table, before_flush, linger
        self.started = 0.0  # monotonic time of the batch's first event
        self.sends: list[asyncio.Future[Any]] = []
        self.events: list[faust.types.EventT] = []
        self.lock = asyncio.Lock()

    async def flush(self) -> None:
        """Steps 4-6: acknowledged outputs, then state, then offsets."""
        if self.before_flush is not None and self.events:
            await self.before_flush(self)  # a stage that folds a whole batch at once
        if self.sends:
            await asyncio.gather(*self.sends)
            self.sends.clear()
        if self.table is not None:
            await self.table.flush()
        for event in self.events:
            await self.stream.ack(event)
        self.events.clear()

    def add(self, event: faust.types.EventT) -> None:
        if not self.events:
            self.started = time.monotonic()
        self.events.append(event)

    def lingered(self) -> bool:
        """Old enough to flush (a stage with a costly flush waits `linger` seconds)."""
        return time.monotonic() - self.started >= self.linger

    def nothing_queued(self) -> bool:
        queue = getattr(self.stream.channel, "queue", None)
        return queue is None or queue.empty()


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
        self.rekey: set[str] = set()
        self.stop = StopDeadline(settings.stop_timeout)
        self._injection = FaultInjection()  # a test seam, off unless its variable is set

    def output(self, logical: str, *, partitions: int | None = None, rekey: bool = False) -> None:
        """A topic the agents write. Records sent to a re-key topic carry their origin."""
        name = self.settings.topic(logical)
        self.logical[name] = logical
        self.out[logical] = self.app.topic(name, partitions=partitions or self.settings.partitions, **RAW)
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
        handle: Callable[[faust.types.Message, Batch], Any],
        table: StateTable[Any] | None = None,
        before_flush: Callable[[Batch], Awaitable[None]] | None = None,
        linger: float = 0.0,
    ) -> None:
        """An agent running `handle` on every record of `topic`, in batches (and
        `before_flush` at the end of each, for a stage that folds a batch at once; such a
        stage may `linger`: keep its batch open that many seconds for more records).

        It runs under `CrashingSupervisor`: an agent that raises (a send Kafka could not
        complete, a store error) must stop the worker, not be restarted in place. Faust's
        default supervisor would restart it on the *next* record, and the failed batch,
        never acked, would be skipped later as "applied" once a successor's position is
        stored. Crashing makes the restart redeliver from the last committed offset."""
        body = self._body(name, set(topic.topics), handle, table, before_flush, linger)
        self.app.agent(topic, name=name, supervisor_strategy=CrashingSupervisor)(body)

    def _body(
        self,
        name: str,
        topics: set[str],
        handle: Callable[[faust.types.Message, Batch], Any],
        table: StateTable[Any] | None,
        before_flush: Callable[[Batch], Awaitable[None]] | None,
        linger: float,
    ) -> Callable[[faust.StreamT], Any]:
        continuity = Continuity(self.app, name, self.committed)
        noted = in_flight.InFlight(Path(self.settings.worker_dir) / "in-flight", name)
        injection = self._injection
        limit = self.settings.batch_max

        async def agent(stream: faust.StreamT) -> None:
            batch = Batch(stream.noack(), table, before_flush, linger)  # events are acked by Batch.flush only
            idle = asyncio.ensure_future(self._flush_when_idle(batch))
            watch = asyncio.ensure_future(self._check_continuity_when_idle(continuity, batch, topics))
            noted.report()
            try:
                async for event in batch.stream.events():
                    async with batch.lock:
                        message = event.message
                        if not await continuity.check(message):
                            forget_unacked(self.app, [event])  # comes again: the rewind fetches it
                            continue
                        logical = self.logical.get(message.topic, message.topic)
                        self.records[logical] += 1
                        if noted.poisoned(message):  # it stopped the worker twice (SPEC R11.3)
                            self.counts["crash_loop_dead_letters"] += 1
                            await self.dead_letter(message, in_flight.REASON, batch)
                        else:
                            noted.begin(message)
                            if injection.on:
                                injection.check(logical, message)
                            await handle(message, batch)
                            noted.end(message)
                        batch.add(event)
                        if len(batch.events) >= limit or (batch.nothing_queued() and batch.lingered()):
                            await self.flush(batch)
            except Exception as exc:  # the worker stops (CrashingSupervisor): within stop_timeout
                self.stop.arm(f"agent {name} stopped: {type(exc).__name__}: {exc}")
                raise
            finally:
                idle.cancel()
                watch.cancel()
                if batch.events:  # stopping with a batch unwritten: it must be delivered again
                    forget_unacked(self.app, batch.events)

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

    async def send(self, emits: list[Emit], origin: Origin, batch: Batch, index: int = 0, encoded: list[bytes] | None = None) -> int:
        """Send every output; the batch waits for Kafka's acknowledgements (step 4).
        Progress goes to every partition of its topic (SPEC R12.3). `index` numbers the
        records `origin` caused (a re-keyed record's position); returns the next one.
        `encoded`: the outputs' bytes, when the fold policy has them already."""
        for i, emit in enumerate(emits):
            value = encoded[i] if encoded is not None else emit.value if isinstance(emit.value, bytes) else encode(emit.value)
            topic = self.out[emit.topic].get_topic_name()
            targets = range(self.settings.partitions) if to_every_partition(emit) else (None,)
            for partition in targets:
                headers = None
                if emit.topic in self.rekey:
                    tagged = Origin(origin.topic, origin.partition, Position(origin.position.offset, index))
                    headers = [(ORIGIN_HEADER, tagged.header())]
                # Straight to the producer: Faust's Topic.send wraps each record in futures
                # and callbacks this delivery does not use (the batch waits on its sends).
                batch.sends.append(await self.app.producer.send(topic, emit.key.encode(), value, partition, None, headers))
                index += 1
        self.counts["outputs"] += len(emits)
        return index

    async def dead_letter(self, message: faust.types.Message, reason: str, batch: Batch) -> None:
        """SPEC R11.1: where the bad record is (its Kafka topic, partition and offset) and why."""
        self.counts["dead_letters"] += 1
        letter = dead_letter(message.topic, message.key, message.partition, message.offset, reason, message.value or b"")
        await self.send([letter], origin_of(message), batch)


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
