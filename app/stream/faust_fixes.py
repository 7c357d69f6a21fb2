"""Where faultline reaches into Faust's internals, in one place.

Each function says what it works around; `build_app` applies them. They were written
against the exact versions of faust-streaming, mode-streaming, aiokafka and kafka-python
in constraints.txt. `TARGETS` declares every internal name each of them relies on, with
the shape it expects; `require_targets` (at a worker's start) and
tests/unit/test_faust_fence.py check them, so an upgrade that renames or reshapes one
fails loudly instead of leaving a patch that silently does nothing (docs/streaming.md,
*Upgrading Faust*). An import-linter contract (pyproject.toml) keeps the imports of
Faust's, mode's and aiokafka's internal modules in this module.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import re
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal, NamedTuple

from faust.streams import _current_event
from faust.transport.drivers import aiokafka as faust_aiokafka
from aiokafka.client import ConnectionGroup
from faust.types.tuples import ack_lock
from mode.services import WaitResults

_PATCHED = "_faultline_seeks_uncommitted"
_PATCHED_URL = "_faultline_takes_assignment_for_an_earlier_url"

log = logging.getLogger("faultline.stream")


def seek_uncommitted_partitions_to_beginning() -> None:
    """1. A faust-streaming 0.15 / aiokafka 0.14 record loss (applied once per process).

    Faust can throw away records it has already fetched (around its start-up and rebalance
    handling: stale-generation records are skipped, agent buffers are cleared) and relies on
    seeking every partition back to its committed offset afterwards. aiokafka's
    `seek_to_committed` seeks only partitions whose committed offset is > 0, so a partition
    with nothing committed yet keeps its advanced fetch position and the discarded records
    are never delivered (seen here: a worker restarted less than a commit interval after
    its previous run lost records 1..30 of a partition). The patch seeks such partitions
    back to their beginning too. Records delivered twice are recognised by the stages
    (their positions), and `continuity.Continuity` stops the worker should a hole remain.
    """
    thread_class = faust_aiokafka.AIOKafkaConsumerThread
    if getattr(thread_class, _PATCHED, False):
        return
    original = thread_class.seek_to_committed

    async def seek_to_committed(self: Any) -> Mapping[Any, int]:
        committed = await original(self)
        uncommitted = [tp for tp, offset in committed.items() if not offset and not self.consumer._is_changelog_tp(tp)]
        if uncommitted:
            await self.call_thread(self._ensure_consumer().seek_to_beginning, *uncommitted)
        return committed

    thread_class.seek_to_committed = seek_to_committed
    setattr(thread_class, _PATCHED, True)


@contextmanager
def as_current_event(event: Any) -> Iterator[None]:
    """2. Make `event` Faust's current event, as it is while an agent processes it.

    A table write goes to the partition of the current event (its changelog partition
    and, with RocksDB, its database). The stages write a batch's states after the batch's
    outputs are acknowledged, when the event that produced each state is no longer current.
    """
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)


class PartitionEvent:
    """What Faust's stores read of the current event: the partition of its message (a
    RocksDB table keeps a database per partition and picks it from there). A stage that
    takes its records a fetch at a time (patch 13) has no Faust event per record."""

    __slots__ = ("partition", "message", "ref", "__weakref__")

    def __init__(self, partition: int) -> None:
        self.partition, self.message = partition, self
        self.ref = weakref.ref(self)


_PARTITION_EVENTS: dict[int, PartitionEvent] = {}


def in_partition(partition: int) -> PartitionEvent:
    """12. Make a table partition current, as Faust's stream makes a record's event current
    while an agent processes it: the tables read the partition's own database (without a
    current event, Faust's RocksDB store looks a key up in every partition's), and a
    state held for writing names its partition by the event it returns (app/stream/tables.py;
    `as_current_event` makes it current again when the state is written)."""
    event = partition_event(partition)
    _current_event.set(event.ref)
    return event


def partition_event(partition: int) -> PartitionEvent:
    """The event that names a table partition (12), without making it current: for a
    read of one partition's own store whichever record was folded last
    (`as_current_event`)."""
    event = _PARTITION_EVENTS.get(partition)
    if event is None:
        event = _PARTITION_EVENTS[partition] = PartitionEvent(partition)
    return event


def forget_unacked(app: Any, batches: Iterable[InFlight]) -> None:
    """3. Let a stopping worker stop although `batches` will never be acked.

    A stage acks its records only after their batch's outputs and state are written
    (delivery.py). When an agent stops with a batch unwritten (it crashed, or the worker
    is shutting down), Faust's shutdown would wait for those acks for ever ("Wait for
    streams..."). Acking them would let Faust commit their offsets and lose them; taking
    them off its list of messages in flight lets it commit what was acked and stop, and
    a restart delivers them again."""
    in_flight = app.consumer._unacked_messages
    for batch in batches:
        in_flight.discard(batch)


FAUST_FETCH_WAIT_MS = 1500  # what Faust gives aiokafka's fetch_max_wait_ms


FAUST_FETCH_MIN_BYTES = 1  # aiokafka's fetch_min_bytes: Faust does not set it


def short_fetch_wait_between_rebalances(app: Any, wait_ms: int, min_bytes: int = FAUST_FETCH_MIN_BYTES) -> None:
    """4. Hold fetches for at most `wait_ms` (answered early once `min_bytes` are there)
    while processing, Faust's 1500 ms (answered at the first byte) while a rebalance (and
    the start-up's) is under way.

    aiokafka keeps one fetch request in flight per broker; when it asks for partitions
    with nothing new (a caught-up re-key topic, an idle output topic), the broker holds it
    up to fetch_max_wait_ms, and partitions whose records were consumed meanwhile wait for
    it: with 1500 ms the worker sat idle and verdicts waited seconds (bench/pipeline.py).
    But with a short wait from the start, records fetched during the start-up's recovery,
    before Faust's seek back to the committed offsets, were skipped: in about half of the
    restarts of test_stream_crash.py a stage found a hole and stopped (`continuity.Continuity`);
    with Faust's wait during rebalances, 0 in 10. The fetcher reads the value for each
    request it builds."""

    def set_wait(ms: int, least: int) -> None:
        consumer = getattr(getattr(app.consumer, "_thread", None), "_consumer", None)
        fetcher = getattr(consumer, "_fetcher", None)
        if fetcher is not None:
            fetcher._fetch_max_wait_ms, fetcher._fetch_min_bytes = ms, least

    start, end = app.on_rebalance_start, app.on_rebalance_end

    def on_rebalance_start() -> None:
        set_wait(FAUST_FETCH_WAIT_MS, FAUST_FETCH_MIN_BYTES)
        start()

    def on_rebalance_end() -> None:
        end()
        set_wait(wait_ms, min_bytes)

    app.on_rebalance_start, app.on_rebalance_end = on_rebalance_start, on_rebalance_end


def take_assignment_made_for_an_earlier_url() -> None:
    """5. A worker restarted with the same --worker-id at another address must not hang.

    With static membership (`consumer_group_instance_id`) the broker hands a rejoining
    member the assignment the leader made for it before, without a rebalance; Faust puts
    the member's URL (its canonical_url: host and web port) in that assignment and asserts
    it is its own, so a worker restarted on another web port (or a container with a new
    hostname) failed that assert in the coordinator and hung alive, consuming nothing.
    The URL only routes Faust's table requests between workers (its /router/, not served
    unless `web_faust_routes`), so the assignment is taken with this worker's URL; the
    group learns the new one at its next rebalance. Applied once per process."""
    from faust.assignor.client_assignment import ClientMetadata
    from faust.assignor.partition_assignor import PartitionAssignor

    if getattr(PartitionAssignor, _PATCHED_URL, False):
        return
    original = PartitionAssignor.on_assignment

    def on_assignment(self: Any, assignment: Any) -> None:
        metadata = ClientMetadata.loads(self._decompress(assignment.user_data))
        url = str(self._url)
        if metadata.url != url:
            log.info("taking the assignment made for this worker id at %s (now %s): a static member restarted", metadata.url, url)
            metadata.url = url
            assignment.user_data = self._compress(metadata.dumps())
        original(self, assignment)

    PartitionAssignor.on_assignment = on_assignment
    setattr(PartitionAssignor, _PATCHED_URL, True)


async def rewind(app: Any, tp: Any, offset: int) -> None:
    """6. Fetch `tp` again from `offset`: records were dropped before an agent saw them.

    Faust counts the offsets it jumped over as a gap that needs no ack (meant for
    compacted topics and transaction markers), so its commits could pass the dropped
    records; the gap is forgotten with them. The records at and after `offset` come again,
    in order; gaps that are real are found again as they are read.

    Records fetched before the seek may still be handed over after it: the read offset is
    held at `offset` from before the seek until that record comes (`HeldReadOffsets`), or
    Faust's fetch loop would take the records asked for again as already read and drop
    them once more. The seek itself runs on the consumer's thread, where the fetcher hands
    out records and moves the position past them: Faust's own `seek` sets the position
    from this thread, and a hand-over in progress there overwrites it: the records asked
    for never came and the partition stood still, uncommitted (the three-worker test, 1 in
    about 6 runs on a loaded machine; aiokafka alone, seeking from another thread while it
    hands out records, lost 17 of 200 seeks, and 0 of 200 made on its own thread)."""
    consumer = app.consumer
    offsets = consumer._read_offset
    if isinstance(offsets, HeldReadOffsets):
        offsets.hold(tp, offset)
    consumer._gap.pop(tp, None)
    thread = consumer._thread
    await thread.call_thread(thread._ensure_consumer().seek, tp, offset)


class HeldReadOffsets(defaultdict):  # type: ignore[type-arg]
    """Faust's read offsets per partition (fix 6), held at a rewind's offset until the
    record at that offset comes: the records fetched before the rewind that are handed
    over meanwhile (and skipped by the agent) must not move it past the records asked for
    again. The gaps those records opened are closed when it comes."""

    def __init__(self, consumer: Any) -> None:
        super().__init__(lambda: None, consumer._read_offset)
        self.consumer = consumer
        self.held: dict[Any, int] = {}

    def hold(self, tp: Any, offset: int) -> None:
        self.held[tp] = offset
        super().__setitem__(tp, offset)

    def __setitem__(self, tp: Any, offset: Any) -> None:
        held = self.held.get(tp)
        if held is not None and offset is not None:
            if offset != held:
                return  # fetched before the rewind
            del self.held[tp]
            self.consumer._gap.pop(tp, None)
        super().__setitem__(tp, offset)

    def handed(self, tp: Any, first: int, last: int) -> None:
        """Records `first`..`last` of `tp` handed to a stage in one fetch (patch 13): the
        read offset moves to `last` unless it is held at an offset they do not reach."""
        held = self.held.get(tp)
        if held is not None and first <= held <= last:
            self[tp] = held
        self[tp] = last

    def __delitem__(self, tp: Any) -> None:
        self.held.pop(tp, None)
        super().__delitem__(tp)

    def pop(self, tp: Any, *default: Any) -> Any:
        self.held.pop(tp, None)  # revoked: the next owner seeks to the committed offset
        return super().pop(tp, *default)

    def clear(self) -> None:
        self.held.clear()
        super().clear()

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Faust's seek to the committed offsets (after a rebalance) sets them all: no hold
        outlives it."""
        for tp in dict(*args, **kwargs):
            self.held.pop(tp, None)
        super().update(*args, **kwargs)


def hold_read_offsets_on_rewind(app: Any) -> None:
    """Install `HeldReadOffsets` (fix 6) before the fetch loop binds Faust's read offsets."""
    consumer = app.consumer
    consumer._read_offset = HeldReadOffsets(consumer)


def read_offsets(app: Any) -> Mapping[Any, int | None]:
    """11. The offset of the last record Faust handed to the agents, per partition (for
    the consumer lag, app/stream/lag.py): Faust keeps it in `_read_offset` and has no
    public accessor."""
    return app.consumer._read_offset


_ROCKSDB_ORIGINAL = "_faultline_original_as_options"
ROCKSDB_WRITE_BUFFER_BYTES = 4 << 20  # per table partition; the manager bounds them all
ROCKSDB_WRITE_BUFFERS = 2


def bounded_rocksdb_memory(block_cache_bytes: int, write_buffer_bytes: int) -> None:
    """7. One memory budget for every RocksDB table partition of the worker.

    Faust opens one database per table partition, each with its own 2 GiB block cache and
    up to three 64 MiB write buffers: a worker's memory grew with every partition written
    (175 -> 330 MB over 200k records while its tables stayed flat). Here every database
    shares one block cache of `block_cache_bytes` (index and filter blocks counted in it)
    and one write-buffer manager of `write_buffer_bytes`, which flushes the largest
    write buffer when all of them together pass it. The rocksdict driver only (the one
    installed); applies to the databases opened after the call."""
    import rocksdict
    from faust.stores.rocksdb import RocksDBOptions

    original = getattr(RocksDBOptions, _ROCKSDB_ORIGINAL, RocksDBOptions.as_options)
    cache = rocksdict.Cache(block_cache_bytes)
    manager = rocksdict.WriteBufferManager(write_buffer_bytes, False)

    def as_options(self: Any) -> Any:
        if not self.use_rocksdict:
            return original(self)
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_max_open_files(self.max_open_files)
        options.set_write_buffer_size(min(ROCKSDB_WRITE_BUFFER_BYTES, write_buffer_bytes))
        options.set_max_write_buffer_number(ROCKSDB_WRITE_BUFFERS)
        options.set_target_file_size_base(self.target_file_size_base)
        options.set_write_buffer_manager(manager)
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(self.bloom_filter_size, block_based=True)
        table.set_block_cache(cache)
        table.set_cache_index_and_filter_blocks(True)
        table.set_index_type(rocksdict.BlockBasedIndexType.binary_search())
        options.set_block_based_table_factory(table)
        return options

    setattr(RocksDBOptions, _ROCKSDB_ORIGINAL, original)
    RocksDBOptions.as_options = as_options


def on_stop_signal(worker: Any, callback: Callable[[str], None]) -> None:
    """8. Tell `callback` the name of a stop signal (SIGTERM, SIGINT) as mode's worker
    starts its shutdown on it (its `_schedule_shutdown`), so that a stop that hangs is
    cut short (app/stream/stopping.py)."""
    schedule = worker._schedule_shutdown

    def scheduled(signal: Any) -> None:
        callback(getattr(signal, "name", str(signal)))
        schedule(signal)

    worker._schedule_shutdown = scheduled


_PATCHED_DELIVERY = "_faultline_delivers_without_tasks"


def deliver_records_without_tasks_when_nothing_can_wait() -> None:
    """9. Hand a fetched record to its streams without starting four tasks for it.

    Faust's fetch loop waits for each record's delivery with `wait_first`: it starts a
    task for the delivery and one for each of the rebalance, stop and crash events,
    waits for the first to finish and cancels the rest, about eight turns of the event
    loop per record; profiled, the event loop was a third of a busy worker's time. The
    delivery can only wait while flow is suspended (a rebalance), while the conductor's
    index is being rebuilt, while the producer's buffer is over its limit or while one of
    the record's stream queues is full. When none of that holds, it runs to its end
    without waiting, so it is awaited in place; otherwise Faust's way is kept, so a
    rebalance can still cut a waiting delivery short. Applied once per process."""
    from faust.transport.consumer import Consumer

    if getattr(Consumer, _PATCHED_DELIVERY, False):
        return
    original = Consumer.wait_first

    async def wait_first(self: Any, *coros: Any, timeout: Any = None) -> Any:
        if len(coros) == 2 and timeout is None and getattr(getattr(coros[0], "cr_code", None), "co_name", "") == "on_message":
            message = coros[0].cr_frame.f_locals.get("message")
            if message is not None and _delivers_at_once(self, message):
                coros[1].close()  # the rebalance waiter: nothing will wait for it
                result = await coros[0]
                return WaitResults([coros[0]], [result], False)
        return await original(self, *coros, timeout=timeout)

    Consumer.wait_first = wait_first
    setattr(Consumer, _PATCHED_DELIVERY, True)


def _delivers_at_once(consumer: Any, message: Any) -> bool:
    """Will the conductor's delivery of `message` finish without waiting? (fix 9)"""
    app = consumer.app
    if consumer.suspend_flow.is_set() or consumer.should_stop or not app.flow_control.is_active():
        return False
    conductor, buffer = app.topics, app.producer.buffer
    if conductor._tp_to_callback_lock.locked() or buffer.size > buffer.max_messages:
        return False
    return not any(channel.queue.full() for channel in conductor._tp_index.get(message.tp, ()))


def without_per_event_monitor(app: Any) -> None:
    """10. Keep Faust's Monitor out of the per-record path.

    The Monitor is a sensor: Faust calls it four times for every record (message in,
    event in, event out, message out), and it keeps counters, timings and per-stream
    statistics for Faust's own web views, which the worker does not serve. Its calls were
    a tenth of a busy worker's time. The Monitor object stays (the consumer records its
    end offsets and commits on it); it is only taken out of the sensors the records
    pass through. faultline's own counters are GET /faultline/ and /metrics."""
    original = app.on_init_dependencies

    def on_init_dependencies() -> Any:
        dependencies = original()  # adds the Monitor to the sensors
        app.sensors.remove(app.monitor)
        return dependencies

    app.on_init_dependencies = on_init_dependencies


_PATCHED_FETCHES = "_faultline_hands_fetches_to_stages"
_INBOXES = "_faultline_inboxes"


class Fetched(NamedTuple):
    """One fetch's records of one stage's input partitions, in the order Faust would have
    handed them over one by one (its scheduler: round robin over topics and partitions),
    and the consumer generation they were fetched in."""

    generation: int
    records: list[tuple[Any, Any]]  # (TP, aiokafka ConsumerRecord)


def hand_fetches_to_stages(app: Any, inboxes: Mapping[str, asyncio.Queue[Fetched]]) -> None:
    """13. Give each stage its records a fetch at a time, not one Faust event at a time.

    Faust hands every fetched record to its agents one by one: the fetch loop wraps it in
    a message, the conductor in an event for each subscribed stream, the stream's queue
    and iterator hand it over (a turn of the event loop each), and the stream acks it
    (docs/streaming.md, *What Faust still does*). The stages fold records in batches and
    ack them in bulk after the batch's states and records are written (delivery.py), so
    for the topics named in `inboxes` (topic name -> the stage's queue) the records of
    each fetch are taken out of the fetch loop as they come from aiokafka, filtered as
    Faust's `getmany` filters them (the partitions active now, flow not stopped), and put
    in the stage's queue as one `Fetched`; every other topic (the tables' changelogs)
    goes Faust's way. A full queue waits as Faust's delivery does: until the stage takes
    the fetch or a rebalance stops the flow (the fetch is then dropped, and fetched again
    from the committed offsets after it, as Faust's own buffers are cleared). The read
    offsets (the consumer lag) move as Faust's loop moves them. Applied once per process;
    `inboxes` per app."""
    from faust.transport.consumer import Consumer

    setattr(app.consumer, _INBOXES, inboxes)
    if getattr(Consumer, _PATCHED_FETCHES, False):
        return
    original = Consumer._wait_next_records

    async def _wait_next_records(self: Any, timeout: float) -> Any:
        records, active = await original(self, timeout)
        mine: Mapping[str, asyncio.Queue[Fetched]] | None = getattr(self, _INBOXES, None)
        if not records or not mine or not self.flow_active or self.should_stop:
            return records, active
        taken: dict[int, tuple[asyncio.Queue[Fetched], dict[Any, list[Any]]]] = {}
        for tp in [tp for tp in records if tp.topic in mine]:
            fetched = records.pop(tp)
            if active is not None and tp not in active and tp not in self._buffered_partitions:
                continue  # not active now: Faust's getmany drops them too
            inbox = mine[tp.topic]
            taken.setdefault(id(inbox), (inbox, {}))[1][tp] = fetched
        generation = self.app.consumer_generation_id
        for inbox, by_tp in taken.values():
            handed = Fetched(generation, list(self.scheduler.iterate(by_tp)))
            if not inbox.full():
                inbox.put_nowait(handed)
            elif not await _put_unless_stopped(inbox, handed, self.suspend_flow):
                continue  # a rebalance stopped the flow: fetched again after it
            offsets = self._read_offset
            for tp, fetched in by_tp.items():
                if isinstance(offsets, HeldReadOffsets):
                    offsets.handed(tp, fetched[0].offset, fetched[-1].offset)
                else:
                    offsets[tp] = fetched[-1].offset
        return records, active

    Consumer._wait_next_records = _wait_next_records
    setattr(Consumer, _PATCHED_FETCHES, True)


async def _put_unless_stopped(inbox: asyncio.Queue[Fetched], fetched: Fetched, suspend_flow: asyncio.Event) -> bool:
    """Put `fetched` in a full `inbox` once the stage has taken one; False (not put) if a
    rebalance stops the flow first."""
    put, stop = asyncio.ensure_future(inbox.put(fetched)), asyncio.ensure_future(suspend_flow.wait())
    try:
        await asyncio.wait((put, stop), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not put.done():
            put.cancel()
    return put.done() and not put.cancelled()


class InFlight:
    """13. A stage's batch of records as Faust's consumer counts it in flight (what
    `Consumer.wait_empty` waits for before a rebalance or a stop commits): one token per
    batch instead of a message per record."""

    __slots__ = ("acked", "refcount", "__weakref__")

    def __init__(self) -> None:
        self.acked, self.refcount = False, 1


def track(app: Any, token: InFlight) -> None:
    """13. A batch begun: the consumer waits for it to be acked before a rebalance commits."""
    app.consumer._unacked_messages.add(token)


def ack_offsets(app: Any, offsets: Mapping[Any, list[int]], token: InFlight | None = None) -> None:
    """13. Ack a batch's records, partition -> offsets, as Faust's `Consumer.ack` acks one
    message each (under its lock: the committed offset moves over what is acked without a
    gap), and take the batch's token off the records in flight."""
    consumer = app.consumer
    added = 0
    with ack_lock:
        committed_of, acked_of, index_of = consumer._committed_offset, consumer._acked, consumer._acked_index
        for tp, acked in offsets.items():
            committed = committed_of[tp]
            index, into = index_of[tp], acked_of[tp]
            for offset in acked:
                if (committed is None or offset >= committed) and offset not in index:
                    index.add(offset)
                    into.append(offset)
                    added += 1
        consumer._n_acked += added
        if token is not None:
            token.acked = True
            consumer._unacked_messages.discard(token)
        waiter = consumer._waiting_for_ack
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


_PATCHED_CONNECTS = "_faultline_backs_off_reconnects"
RECONNECT_FIRST_SECONDS = 0.2  # after a first failed connection (aiokafka retries every 0.1 s)
RECONNECT_MAX_SECONDS = 10.0  # the longest wait between two connections to a broker that is down
PROBE_SECONDS = 1.0  # how often a broker that is down is probed (a TCP connection, closed at once)


class _Reconnects:
    """One broker address as seen from one event loop: its failed connections in a row,
    when the next may be made, and the probe that says when it is back."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.failures = 0
        self.next_at = 0.0
        self.back = asyncio.Event()
        self.probe: asyncio.Task[None] | None = None

    async def wait(self) -> None:
        """Until the next connection may be made, or the probe found the broker back."""
        delay = self.next_at - asyncio.get_running_loop().time()
        if delay > 0:
            try:
                await asyncio.wait_for(self.back.wait(), timeout=delay)
            except asyncio.TimeoutError:
                pass

    def failed(self) -> None:
        self.failures += 1
        delay = min(RECONNECT_MAX_SECONDS, RECONNECT_FIRST_SECONDS * 2 ** min(self.failures - 1, 16))
        loop = asyncio.get_running_loop()
        self.next_at = loop.time() + delay
        if self.probe is None or self.probe.done():
            self.probe = loop.create_task(self._probe())

    def connected(self) -> None:
        self.failures, self.next_at = 0, 0.0

    async def _probe(self) -> None:
        while self.failures:
            await asyncio.sleep(PROBE_SECONDS)
            if not self.failures:
                return
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), timeout=PROBE_SECONDS)
            except (OSError, asyncio.TimeoutError):
                continue
            writer.close()
            self.next_at = 0.0  # back: every connection waiting is made now
            back, self.back = self.back, asyncio.Event()
            back.set()
            return


_RECONNECTS: weakref.WeakKeyDictionary[Any, dict[tuple[str, int], _Reconnects]] = weakref.WeakKeyDictionary()


def back_off_reconnects() -> None:
    """14. Space out the connections to a broker that is down, and make them again as soon
    as it is back.

    aiokafka retries a broker that refuses connections every `retry_backoff_ms` (100 ms)
    in each of its loops (metadata, fetcher, group coordinator, heartbeat, producer
    sender) and of each client (the consumer, the producer, the committed-offsets
    reader), and each failed connection asks for a metadata update that tries every
    broker again: ~140 connections a second per worker during an outage, each an ERROR
    the log filter counts (app/stream/logs.py), a tenth of a core. Here a connection to
    an address that failed waits before it is made again, 0.2 s after the first failure,
    twice as long after each next one, at most `RECONNECT_MAX_SECONDS`; meanwhile a probe
    (a TCP connection, closed at once) tries the address every `PROBE_SECONDS` and, once
    it answers, lets every waiting connection through. The wait happens before
    aiokafka's `AIOKafkaClient._get_conn` takes its connection lock, so a broker that is
    down does not hold up connections to the others. Per event loop (Faust's consumer has
    one of its own); applied once per process."""
    from aiokafka.client import AIOKafkaClient

    if getattr(AIOKafkaClient, _PATCHED_CONNECTS, False):
        return
    original = AIOKafkaClient._get_conn

    async def _get_conn(self: Any, node_id: Any, *args: Any, **kwargs: Any) -> Any:
        conn = self._conns.get((node_id, kwargs.get("group", ConnectionGroup.DEFAULT)))
        broker = self.cluster.broker_metadata(node_id) if conn is None or not conn.connected() else None
        if broker is None:
            return await original(self, node_id, *args, **kwargs)
        by_address = _RECONNECTS.setdefault(asyncio.get_running_loop(), {})
        address = (broker.host, broker.port)
        reconnects = by_address.get(address)
        if reconnects is None:
            reconnects = by_address[address] = _Reconnects(*address)
        await reconnects.wait()
        conn = await original(self, node_id, *args, **kwargs)
        if conn is None:  # aiokafka logged the failure and asked for a metadata update
            reconnects.failed()
        else:
            reconnects.connected()
        return conn

    AIOKafkaClient._get_conn = _get_conn
    setattr(AIOKafkaClient, _PATCHED_CONNECTS, True)


_PATCHED_LEAVE = "_faultline_leaves_while_a_rebalance_waits"
LEAVE_AFTER_SECONDS = 1.0  # how long a stopping consumer's close may wait on a rebalance before it leaves


def leave_the_group_when_stopping() -> None:
    """15. A stopping worker leaves the consumer group within a second, even mid-rebalance.

    aiokafka's `GroupCoordinator.close` waits for its coordination task to finish what it
    is doing before it sends LeaveGroup. In a rebalance that task is waiting for the
    JoinGroup answer (which comes once every member has joined) or running Faust's
    rebalance callback, which the worker's thread answers and a stopping worker may never
    answer; the worker ends at its stop deadline without having left, and the partitions
    it took in the new generation sit idle until its session timeout (60 s). Here, when a
    close has not ended within `LEAVE_AFTER_SECONDS` and the member still has a
    generation, LeaveGroup is sent then (aiokafka's own `_maybe_leave_group`; behind a
    JoinGroup in flight on the coordinator's connection it is answered once the join is,
    the broker answering a connection's requests in order; the coordinator, closing,
    joins no more). Faust commits its offsets before it stops the consumer (`Consumer.on_stop`),
    so nothing is committed after the leave. A close that ends at once leaves as before.
    A static member (`--worker-id`) does not leave, as Kafka's static membership intends
    (aiokafka sends none for it either: its LeaveGroup v0/v1 cannot name a group
    instance). Applied once per process."""
    from aiokafka.consumer.group_coordinator import GroupCoordinator

    if getattr(GroupCoordinator, _PATCHED_LEAVE, False):
        return
    original = GroupCoordinator.close

    async def close(self: Any) -> None:
        closing = asyncio.ensure_future(original(self))
        done, _ = await asyncio.wait({closing}, timeout=LEAVE_AFTER_SECONDS)
        if not done and self._group_instance_id is None and self.generation > 0:
            log.info("the consumer's close waits on a rebalance: leaving the group now")
            await self._maybe_leave_group()
        await closing

    GroupCoordinator.close = close
    setattr(GroupCoordinator, _PATCHED_LEAVE, True)



_PATCHED_STORES = "_faultline_stores_closed_before_exit"
_STORE_STOPPED = "_faultline_stopped"


def rocksdb_closed_before_exit() -> None:
    """16. A stopped RocksDB store opens nothing more, and `close_stores` closes every
    database still open before the process ends.

    Faust's RocksDB store drops its databases when its table stops (`Store.stop`), and the
    tables stop before the agents and the consumer do. A rebalance that completes during
    the stop (seen: a worker stopped just as another left the group) assigns partitions
    to the stopped stores, which open their databases again (`on_rebalance`), and a
    changelog write acknowledged during the stop writes its offset into a database it
    opens again (`set_persisted_offset`). Nothing closes those: the process exits with
    RocksDB's background threads alive while the C++ runtime tears down, RocksDB's known
    cause of a crash at exit (facebook/rocksdb#7327; seen once here: a worker stopped
    mid-rebalance exited on SIGSEGV). Here a stopped store takes no partitions and keeps
    no offset (a restart reads a little more of the changelog: states it already holds),
    an agent still folding may open a database as before, and `close_stores` closes
    whatever is open once the worker's event loop has ended. Applied once per process."""
    from faust.stores.rocksdb import Store

    if getattr(Store, _PATCHED_STORES, False):
        return
    stop, on_rebalance, set_persisted_offset = Store.stop, Store.on_rebalance, Store.set_persisted_offset

    async def stopped(self: Any) -> None:
        setattr(self, _STORE_STOPPED, True)
        await stop(self)

    async def rebalanced(self: Any, assigned: Any, revoked: Any, newly_assigned: Any, generation_id: int = 0) -> None:
        if not getattr(self, _STORE_STOPPED, False):  # a stopping worker reads no partition it takes now
            await on_rebalance(self, assigned, revoked, newly_assigned, generation_id)

    def persisted(self: Any, tp: Any, offset: int) -> None:
        if not getattr(self, _STORE_STOPPED, False):
            set_persisted_offset(self, tp, offset)

    Store.stop, Store.on_rebalance, Store.set_persisted_offset = stopped, rebalanced, persisted
    setattr(Store, _PATCHED_STORES, True)


def close_stores(app: Any) -> int:
    """16. Close every RocksDB database the app's tables still hold (nothing else may run:
    the worker's loop has ended); how many were closed. A database that fails to flush as
    it closes is logged: its changelog holds what it held."""
    from faust.stores.rocksdb import Store

    closed = 0
    for table in list(app.tables.values()):
        store = getattr(table, "_data", None)  # `table.data` would make a store that was never made
        if not isinstance(store, Store):
            continue
        dbs = list(store._dbs.values())
        store._dbs.clear()
        for db in dbs:
            try:
                db.close()
                closed += 1
            except Exception as exc:  # noqa: BLE001 - the process is ending: say it, close the rest
                log.warning("table %s: a RocksDB database did not close cleanly: %s", table.name, exc)
    return closed

# --- The fence: what the patches rely on ---------------------------------------------------------


class Target(NamedTuple):
    """One internal name a patch relies on, and the shape it expects of it.

    kind: `function`/`coroutine` (a callable whose parameters start with `expect`),
    `assigned` (an instance attribute the class sets and then reads: `self.<name> = `),
    `attribute` (it exists), `code` (the module's source holds each fragment of `expect`,
    whitespace aside: how Faust calls what a patch replaces)."""

    patch: str  # the function of this module that relies on it
    module: str
    name: str  # "Class.attribute", a module attribute, or "" for `code`
    kind: Literal["function", "coroutine", "assigned", "attribute", "code"]
    expect: tuple[str, ...] = ()


_AIOKAFKA_DRIVER = "faust.transport.drivers.aiokafka"
_CONSUMER = "faust.transport.consumer"
_COORDINATOR = "aiokafka.consumer.group_coordinator"

TARGETS: tuple[Target, ...] = (
    Target("seek_uncommitted_partitions_to_beginning", _AIOKAFKA_DRIVER, "AIOKafkaConsumerThread.seek_to_committed", "coroutine", ("self",)),
    Target("seek_uncommitted_partitions_to_beginning", _AIOKAFKA_DRIVER, "AIOKafkaConsumerThread.call_thread", "coroutine", ("self", "fun")),
    Target("seek_uncommitted_partitions_to_beginning", _AIOKAFKA_DRIVER, "AIOKafkaConsumerThread._ensure_consumer", "function", ("self",)),
    Target("seek_uncommitted_partitions_to_beginning", _AIOKAFKA_DRIVER, "AIOKafkaConsumerThread.consumer", "assigned"),
    Target("seek_uncommitted_partitions_to_beginning", _CONSUMER, "Consumer._is_changelog_tp", "function", ("self", "tp")),
    Target("seek_uncommitted_partitions_to_beginning", "aiokafka", "AIOKafkaConsumer.seek_to_beginning", "coroutine", ("self", "partitions")),
    Target("as_current_event", "faust.streams", "_current_event", "attribute"),
    Target("as_current_event", "faust.streams", "", "code", ("_current_event.set(",)),
    Target("in_partition", "faust.streams", "_current_event", "attribute"),
    Target("in_partition", "faust.stores.rocksdb", "", "code", ("partition = event.message.partition",)),
    Target("forget_unacked", _CONSUMER, "Consumer._unacked_messages", "assigned"),
    Target("short_fetch_wait_between_rebalances", "faust", "App.on_rebalance_start", "function", ("self",)),
    Target("short_fetch_wait_between_rebalances", "faust", "App.on_rebalance_end", "function", ("self",)),
    Target("short_fetch_wait_between_rebalances", _AIOKAFKA_DRIVER, "Consumer._thread", "assigned"),
    Target("short_fetch_wait_between_rebalances", _AIOKAFKA_DRIVER, "AIOKafkaConsumerThread._consumer", "assigned"),
    Target("short_fetch_wait_between_rebalances", "aiokafka", "AIOKafkaConsumer._fetcher", "assigned"),
    Target("short_fetch_wait_between_rebalances", "aiokafka.consumer.fetcher", "Fetcher._fetch_max_wait_ms", "assigned"),
    Target("short_fetch_wait_between_rebalances", "aiokafka.consumer.fetcher", "Fetcher._fetch_min_bytes", "assigned"),
    Target("take_assignment_made_for_an_earlier_url", "faust.assignor.partition_assignor", "PartitionAssignor.on_assignment", "function", ("self", "assignment")),
    Target("take_assignment_made_for_an_earlier_url", "faust.assignor.partition_assignor", "PartitionAssignor._decompress", "function", ("compressed",)),
    Target("take_assignment_made_for_an_earlier_url", "faust.assignor.partition_assignor", "PartitionAssignor._compress", "function", ("raw",)),
    Target("take_assignment_made_for_an_earlier_url", "faust.assignor.partition_assignor", "PartitionAssignor._url", "attribute"),
    Target("take_assignment_made_for_an_earlier_url", "faust.assignor.client_assignment", "ClientMetadata.loads", "function", ("s",)),
    Target("take_assignment_made_for_an_earlier_url", "faust.assignor.client_assignment", "ClientMetadata.dumps", "function", ("self",)),
    Target("take_assignment_made_for_an_earlier_url", "faust.assignor.client_assignment", "ClientMetadata.url", "attribute"),
    Target("rewind", _CONSUMER, "Consumer._read_offset", "assigned"),
    Target("rewind", _CONSUMER, "Consumer._gap", "assigned"),
    Target("rewind", _AIOKAFKA_DRIVER, "AIOKafkaConsumerThread.call_thread", "coroutine", ("self", "fun")),
    Target("rewind", "aiokafka", "AIOKafkaConsumer.seek", "function", ("self", "partition", "offset")),
    # HeldReadOffsets works only while the fetch loop sets read offsets through the mapping
    # it finds in `_read_offset` when it starts.
    Target("hold_read_offsets_on_rewind", _CONSUMER, "", "code", ("set_read_offset = self._read_offset.__setitem__", "set_read_offset(tp, offset)")),
    Target("bounded_rocksdb_memory", "faust.stores.rocksdb", "RocksDBOptions.as_options", "function", ("self",)),
    *(
        Target("bounded_rocksdb_memory", "faust.stores.rocksdb", f"RocksDBOptions.{name}", "assigned")
        for name in ("use_rocksdict", "max_open_files", "target_file_size_base", "bloom_filter_size")
    ),
    *(
        Target("bounded_rocksdb_memory", "rocksdict", name, "attribute")
        for name in ("Cache", "WriteBufferManager", "Options.set_write_buffer_manager", "BlockBasedOptions.set_block_cache",
                     "BlockBasedOptions.set_cache_index_and_filter_blocks", "BlockBasedIndexType.binary_search")
    ),  # fmt: skip
    Target("on_stop_signal", "mode", "Worker._schedule_shutdown", "function", ("self", "signal")),
    Target("deliver_records_without_tasks_when_nothing_can_wait", _CONSUMER, "Consumer.wait_first", "coroutine", ("self", "coros", "timeout")),
    Target("deliver_records_without_tasks_when_nothing_can_wait", _CONSUMER, "", "code", ("await self.wait_first( callback(message), self.suspend_flow.wait() )",)),
    Target("deliver_records_without_tasks_when_nothing_can_wait", "faust.transport.conductor", "", "code", ("async def on_message(message",)),
    Target("deliver_records_without_tasks_when_nothing_can_wait", "mode.services", "WaitResults._fields", "attribute"),
    Target("deliver_records_without_tasks_when_nothing_can_wait", _CONSUMER, "Consumer.suspend_flow", "assigned"),
    Target("deliver_records_without_tasks_when_nothing_can_wait", "faust.transport.conductor", "Conductor._tp_to_callback_lock", "assigned"),
    Target("deliver_records_without_tasks_when_nothing_can_wait", "faust.transport.conductor", "Conductor._tp_index", "assigned"),
    Target("deliver_records_without_tasks_when_nothing_can_wait", "faust.transport.producer", "ProducerBuffer.size", "attribute"),
    Target("deliver_records_without_tasks_when_nothing_can_wait", "faust.transport.producer", "ProducerBuffer.max_messages", "attribute"),
    Target("without_per_event_monitor", "faust", "App.on_init_dependencies", "function", ("self",)),
    Target("without_per_event_monitor", "faust.app.base", "", "code", ("self.sensors.add(self.monitor)",)),
    Target("read_offsets", _CONSUMER, "Consumer._read_offset", "assigned"),
    Target("hand_fetches_to_stages", _CONSUMER, "Consumer._wait_next_records", "coroutine", ("self", "timeout")),
    Target("hand_fetches_to_stages", _CONSUMER, "", "code", ("records, active_partitions = await self._wait_next_records(timeout)",
                                                             "active_partitions is None or tp in active_partitions or tp in self._buffered_partitions")),
    *(Target("hand_fetches_to_stages", _CONSUMER, f"Consumer.{name}", "assigned")
      for name in ("flow_active", "scheduler", "_buffered_partitions", "_read_offset", "suspend_flow")),
    Target("hand_fetches_to_stages", "faust.transport.utils", "DefaultSchedulingStrategy.iterate", "function", ("self", "records")),
    Target("track", _CONSUMER, "Consumer._unacked_messages", "assigned"),
    Target("track", _CONSUMER, "", "code", ("if message.acked",)),
    *(Target("ack_offsets", _CONSUMER, f"Consumer.{name}", "assigned")
      for name in ("_committed_offset", "_acked", "_acked_index", "_n_acked", "_unacked_messages", "_waiting_for_ack")),
    Target("ack_offsets", "faust.types.tuples", "ack_lock", "attribute"),
    Target("back_off_reconnects", "aiokafka.client", "AIOKafkaClient._get_conn", "coroutine", ("self", "node_id")),
    Target("back_off_reconnects", "aiokafka.client", "AIOKafkaClient._conns", "assigned"),
    Target("back_off_reconnects", "aiokafka.client", "AIOKafkaClient.cluster", "assigned"),
    Target("back_off_reconnects", "aiokafka.client", "", "code", ("conn_id = (node_id, group)", "async with self._get_conn_lock:", "return None")),
    Target("back_off_reconnects", "aiokafka.cluster", "ClusterMetadata.broker_metadata", "function", ("self", "broker_id")),
    Target("back_off_reconnects", "aiokafka.client", "ConnectionGroup.DEFAULT", "attribute"),
    Target("leave_the_group_when_stopping", _COORDINATOR, "GroupCoordinator.close", "coroutine", ("self",)),
    Target("leave_the_group_when_stopping", _COORDINATOR, "GroupCoordinator._maybe_leave_group", "coroutine", ("self",)),
    *(Target("leave_the_group_when_stopping", _COORDINATOR, f"GroupCoordinator.{name}", "assigned")
      for name in ("generation", "_group_instance_id")),
    # It leaves only after the coordination task: the reason for the patch.
    Target("leave_the_group_when_stopping", _COORDINATOR, "", "code", ("await self._coordination_task", "await self._maybe_leave_group()")),
    Target("rocksdb_closed_before_exit", "faust.stores.rocksdb", "Store.stop", "coroutine", ("self",)),
    Target("rocksdb_closed_before_exit", "faust.stores.rocksdb", "Store.on_rebalance", "coroutine", ("self", "assigned", "revoked", "newly_assigned")),
    Target("rocksdb_closed_before_exit", "faust.stores.rocksdb", "Store.set_persisted_offset", "function", ("self", "tp", "offset")),
    Target("rocksdb_closed_before_exit", "faust.stores.rocksdb", "Store._dbs", "assigned"),
    Target("rocksdb_closed_before_exit", "faust.tables.base", "Collection._data", "assigned"),
    Target("rocksdb_closed_before_exit", "rocksdict", "Rdict.close", "attribute"),
)


def target_problem(target: Target) -> str | None:
    """What is wrong with `target` in the installed packages, or None when it is as expected."""
    try:
        module = importlib.import_module(target.module)
    except ImportError as exc:
        return f"{target.module} cannot be imported ({exc})"
    where = f"{target.module}:{target.name}" if target.name else target.module
    if target.kind == "code":
        code = " ".join(inspect.getsource(module).split())
        absent = [fragment for fragment in target.expect if " ".join(fragment.split()) not in code]
        return f"{where} no longer holds {absent}" if absent else None
    owner: Any = module
    *path, name = target.name.split(".")
    for part in path:
        owner = getattr(owner, part, None)
        if owner is None:
            return f"{where}: {part} is missing"
    if target.kind == "assigned":
        return None if _sets_and_reads(owner, name) else f"{where}: no longer set and read as self.{name}"
    if not hasattr(owner, name):
        return f"{where} is missing"
    if target.kind == "attribute":
        return None
    value = getattr(owner, name)
    if getattr(value, "__isabstractmethod__", False):
        return f"{where} is missing (only an abstract base declares it)"
    if target.kind == "coroutine" and not inspect.iscoroutinefunction(value):
        return f"{where} is no longer a coroutine function"
    params = tuple(inspect.signature(value).parameters)
    if params[: len(target.expect)] != target.expect:
        return f"{where} takes {params}, expected {target.expect} first"
    return None


def _sets_and_reads(cls: type, name: str) -> bool:
    """`self.<name>` is assigned in the class (or a base of it) and used again."""
    source = "\n".join(inspect.getsource(c) for c in cls.__mro__ if c.__module__.split(".")[0] in _FENCED)
    assigned = re.search(rf"self\.{name}\s*(:[^=\n]+)?=(?!=)", source)
    return assigned is not None and len(re.findall(rf"self\.{name}\b", source)) >= 2


_FENCED = ("faust", "mode", "aiokafka")


def target_problems(targets: Iterable[Target] = TARGETS) -> list[str]:
    """Every target that is not as its patch expects, named with the patch."""
    return [f"{t.patch}: {problem}" for t in targets if (problem := target_problem(t)) is not None]


def require_targets() -> None:
    """Stop a worker whose Faust, mode or aiokafka is not the one the patches were written
    against (an upgrade past constraints.txt): a patch whose target moved would do nothing."""
    problems = target_problems()
    if problems:
        raise RuntimeError(
            "faultline's Faust patches (app/stream/faust_fixes.py) do not fit the installed packages: "
            + "; ".join(problems)
            + ". Install the versions of constraints.txt (pip install -c constraints.txt -e '.[stream]'), "
            "or update the patches (docs/streaming.md, Upgrading Faust)"
        )
