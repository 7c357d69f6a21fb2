"""The bridge: one watch per (kind, namespace scope), drained in order into a sink.

The watches (`app.bridge.watch`) hand records and positions to one thread, the caller of
`Bridge.run`, which publishes them, flushes the sink and only then saves positions and
publishes progress. So neither a position nor a progress record ever overtakes the
records before it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from app.bridge.comeback import ServerProbe
from app.bridge.errors import BridgeError
from app.bridge.positions import PositionStore
from app.bridge.progress import StreamMark, slowest_per_topic, with_unwatched
from app.bridge.records import ALL_NAMESPACES, BridgePosition, EnvelopeWriter, now_rfc3339, rfc3339_us
from app.bridge.resources import KINDS, Kind
from app.bridge.settings import BridgeSettings
from app.bridge.sinks import Sink
from app.bridge.watch import Api, Batch, KindWatch

log = logging.getLogger("faultline.bridge")

OUTBOX_BATCHES = 256  # backpressure: watches wait when the sink falls this far behind
POLL = 0.2  # seconds: how often the draining thread looks at the clock and the stop flag
HEARTBEAT_EVERY = 5.0
JOIN_TIMEOUT = 10.0

# What each watch had handed over at one moment: (progress time, batches handed).
Snapshot = dict[KindWatch, tuple[int | None, int]]


class BridgeStats:
    def __init__(self) -> None:
        self.records = 0
        self.gaps = 0
        self.checkpoints = 0
        self.progress = 0  # progress records published (one per topic per round)
        self.by_topic: Counter[str] = Counter()
        self.started = time.monotonic()
        self.first_record: float | None = None
        self.last_record: float | None = None


class Bridge:
    """Runs one KindWatch per (kind, namespace scope) and drains them into `sink`."""

    def __init__(
        self,
        api: Api,
        sink: Sink,
        settings: BridgeSettings,
        *,
        kinds: tuple[Kind, ...] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.sink, self.settings, self.clock = api, sink, settings, clock
        names = settings.kind_list()
        self.kinds = kinds if kinds is not None else tuple(k for k in KINDS if not names or k.name in names)
        # A source topic none of these kinds feed, named by its first kind: it progresses
        # with the others (`with_unwatched`).
        fed = {k.topic for k in self.kinds}
        firsts: dict[str, Kind] = {}
        for k in KINDS:
            firsts.setdefault(k.topic, k)
        self._unwatched = tuple(StreamMark(t, k.name, k.api_version(k.versions[0]), "", None) for t, k in firsts.items() if t not in fed)
        self.outbox: queue.Queue = queue.Queue(maxsize=OUTBOX_BATCHES)
        self._stop = threading.Event()
        self.watches: list[KindWatch] = []
        self.stats = BridgeStats()
        self._dirty: set[str] = set()  # kinds whose position changed since the last checkpoint
        self._positions: dict[KindWatch, str] = {}
        self._writer = EnvelopeWriter(settings.cluster)
        self._delivered: Counter[KindWatch] = Counter()  # batches published, per watch
        self._pending: Snapshot | None = None  # progress waiting for its batches to be published
        self._progress_at: dict[str, int] = {}  # topic -> the last progress time published
        self._progress_ok = True  # false once a batch was cut short (max_records): progress would lie
        self._caught_up = False  # every watch has listed and been live once (said once in the log)
        self.probe = ServerProbe(api.ready)  # while watches retry: is the server back? (issue 29)

    @property
    def position_store(self) -> PositionStore:
        return self.sink.positions

    def run(self, stop: threading.Event | None = None, duration: float | None = None, max_records: int | None = None) -> BridgeStats:
        """Until `stop` is set, `duration` seconds pass or `max_records` source records
        were published; then stop the watches, publish what they had handed over (up to
        `max_records`), flush, and save the positions. Raises BridgeError on a fatal error."""
        stop = stop or threading.Event()
        self._start_watches()
        deadline = None if duration is None else self.clock() + duration
        next_checkpoint = self.clock() + self.settings.checkpoint_interval
        next_progress = self.clock() + self.settings.progress_interval
        next_heartbeat = 0.0
        failure: BaseException | None = None
        try:
            while not stop.is_set():
                if max_records is not None and self.stats.records >= max_records:
                    break
                now = self.clock()
                if deadline is not None and now >= deadline:
                    break
                if self._pending is None and self._progress_ok and now >= next_progress:
                    self._pending = self._snapshot()
                    next_progress = now + self.settings.progress_interval
                if self._pending is not None and self._published(self._pending):
                    self._publish_progress()
                elif now >= next_checkpoint:
                    self._checkpoint()
                    next_checkpoint = now + self.settings.checkpoint_interval
                if self.settings.heartbeat_file and now >= next_heartbeat:
                    _touch(self.settings.heartbeat_file)
                    next_heartbeat = now + HEARTBEAT_EVERY
                failure = next((w.error for w in self.watches if w.error is not None), None)
                if failure is not None:
                    break
                try:
                    item = self.outbox.get(timeout=POLL)
                except queue.Empty:
                    continue
                if item is not None:
                    self._deliver(item, max_records)
        finally:
            self._shutdown()
        self._drain(max_records)
        failure = failure or next((w.error for w in self.watches if w.error is not None), None)
        try:
            self._checkpoint()  # what was delivered need not be published again after a restart
            final = self._snapshot()  # the watches stopped: where each stood
            if failure is None and self._progress_ok and self._published(final):
                self._pending = final
                self._publish_progress()
                self.sink.flush()
        except BridgeError:
            if failure is None:
                raise
            log.error("the last checkpoint failed too")
        if failure is not None:
            if isinstance(failure, BridgeError):
                raise failure
            raise BridgeError(f"a watch failed: {type(failure).__name__}: {failure}") from failure
        return self.stats

    def _start_watches(self) -> None:
        saved = self.position_store.load(self.settings.cluster)
        namespaces: list[str | None] = list(self.settings.namespace_list()) or [None]
        for kind in self.kinds:
            for namespace in namespaces:
                position = saved.get(kind.name)
                start = position.resource_versions.get(namespace or ALL_NAMESPACES) if position else None
                watch = KindWatch(kind, namespace, self.api, self.settings, self.outbox, self._stop, start, self.probe)
                self.watches.append(watch)
                if start is not None:
                    self._positions[watch] = start
        log.info(
            "watching %s in %s for cluster %s",
            ", ".join(k.name for k in self.kinds),
            ", ".join(self.settings.namespace_list()) or "all namespaces",
            self.settings.cluster,
        )
        where = self.position_store.where
        fresh = [w.name for w in self.watches if w.rv is None]
        if where is not None and fresh:
            if len(fresh) == len(self.watches):
                log.info("no saved positions for cluster %s in %s: a first start, so every kind is listed from the start", self.settings.cluster, where)
            else:
                log.info("no saved position for %s in %s: listed from the start", ", ".join(fresh), where)
        for watch in self.watches:
            watch.thread.start()

    def _deliver(self, batch: Batch, max_records: int | None) -> None:
        records = batch.records
        if max_records is not None and self.stats.records + len(records) > max_records:
            records = records[: max_records - self.stats.records]
            complete = False
        else:
            complete = True
        publish, stats = self.sink.publish, self.stats
        for record in records:
            publish(record)
            stats.by_topic[record.topic] += 1
        if records:
            stats.records += len(records)
            stats.last_record = self.clock()
            if stats.first_record is None:
                stats.first_record = stats.last_record
        if not complete:
            self._progress_ok = False
            return  # the rest of the batch was not published: its position must not be saved
        self._delivered[batch.watch] += 1
        if batch.gap is not None:
            self.sink.publish_gap(batch.gap)
            stats.gaps += 1
        if batch.position is not None and self._positions.get(batch.watch) != batch.position:
            self._positions[batch.watch] = batch.position
            self._dirty.add(batch.watch.kind.name)

    def _checkpoint(self) -> None:
        if not self._dirty:
            return
        self.sink.flush()  # raises DeliveryError: then no position is saved
        self._save_positions()

    def _save_positions(self) -> None:
        now = now_rfc3339()
        by_kind: dict[str, dict[str, str]] = {}
        for watch, rv in self._positions.items():
            by_kind.setdefault(watch.kind.name, {})[watch.scope] = rv
        self.position_store.save(
            BridgePosition(cluster=self.settings.cluster, kind=name, resource_versions=by_kind[name], observed_at=now)
            for name in sorted(self._dirty)
        )
        self._dirty.clear()
        self.stats.checkpoints += 1

    # --- progress (SPEC R12.2) ----------------------------------------------------------

    def _snapshot(self) -> Snapshot:
        return {watch: watch.progress.snapshot() for watch in self.watches}

    def _published(self, snapshot: Snapshot) -> bool:
        """Has every batch handed over before the snapshot been published to the sink?"""
        return all(self._delivered[watch] >= handed for watch, (_, handed) in snapshot.items())

    def _publish_progress(self) -> None:
        """Flush (so everything before the snapshot is acknowledged), then write one
        progress record per source topic at the time of its slowest watch, to every
        partition of the topic."""
        snapshot, self._pending = self._pending, None
        assert snapshot is not None
        self.sink.flush()  # raises DeliveryError: then no progress is published
        if self._dirty:
            self._save_positions()
        if not self._caught_up and all(at is not None for at, _ in snapshot.values()):
            self._caught_up = True
            log.info("every watch has listed and is live: changes are published as they come")
        marks = (
            StreamMark(watch.kind.topic, watch.kind.name, watch.api_version(), watch.rv or "", at)
            for watch, (at, _) in snapshot.items()
        )
        for topic, mark in with_unwatched(slowest_per_topic(marks), self._unwatched).items():
            assert mark.at is not None
            if mark.at <= self._progress_at.get(topic, -1):
                continue  # no further than last time (a stalled watch, or the clock stepped back)
            self._progress_at[topic] = mark.at
            value = self._writer.bookmark(rfc3339_us(mark.at), mark.api_version, mark.kind, mark.resource_version)
            self.sink.publish_progress(topic, mark.kind, value)
            self.stats.progress += 1

    # --- stopping -------------------------------------------------------------------------

    def _shutdown(self) -> None:
        """Stop every watch thread and wait for it."""
        self._stop.set()
        for watch in self.watches:
            watch.interrupt()
        deadline = time.monotonic() + JOIN_TIMEOUT
        for watch in self.watches:
            watch.thread.join(max(0.0, deadline - time.monotonic()))
        alive = [w.name for w in self.watches if w.thread.is_alive()]
        if alive:
            log.warning("watch thread(s) still running after %gs: %s", JOIN_TIMEOUT, ", ".join(alive))

    def _drain(self, max_records: int | None) -> None:
        """Publish what the stopped watches had already handed over."""
        while True:
            try:
                item = self.outbox.get_nowait()
            except queue.Empty:
                return
            if item is None or (max_records is not None and self.stats.records >= max_records):
                continue
            self._deliver(item, max_records)


def _touch(path: str) -> None:
    try:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()
    except OSError as exc:
        log.warning("cannot touch the heartbeat file %s: %s", path, exc)
