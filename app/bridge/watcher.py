"""List, then watch, each kind; hand records and positions to a sink in order.

One thread per (kind, namespace scope) lists and watches; one thread (the caller of
`Bridge.run`) drains their batches into the sink, flushes it and saves positions. A
position therefore never overtakes the records before it. The watcher knows neither
HTTP (that is `app.bridge.client`) nor Kafka (that is the sink).
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import orjson

from app.bridge.errors import BridgeError, Gone, NotServed, Transient
from app.bridge.known import KnownObjects
from app.bridge.positions import PositionStore
from app.bridge.records import (
    ALL_NAMESPACES,
    BridgeGap,
    BridgePosition,
    EnvelopeWriter,
    Page,
    SourceRecord,
    now_rfc3339,
)
from app.bridge.resources import KINDS, Kind, key_of
from app.bridge.settings import BridgeSettings
from app.bridge.sinks import Sink

log = logging.getLogger("faultline.bridge")

OUTBOX_BATCHES = 256  # backpressure: watchers wait when the sink falls this far behind
POLL = 0.2  # seconds: how often the draining thread looks at the clock and the stop flag
HEARTBEAT_EVERY = 5.0
JOIN_TIMEOUT = 10.0
# A watch that ends sooner than this without delivering anything counts as a failure
# (backoff), so a server that closes every watch at once is not hammered.
MIN_HEALTHY_WATCH = 1.0


class WatchStream(Protocol):
    """One watch response (`app.bridge.client.WatchStream`)."""

    def batches(self) -> Iterator[list[bytes]]: ...

    def interrupt(self) -> None: ...

    def close(self) -> None: ...


class Api(Protocol):
    """What the watcher needs from `app.bridge.client.KubeApi`."""

    def list_page(
        self,
        kind: Kind,
        version: str,
        namespace: str | None,
        *,
        limit: int,
        cont: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> Page: ...

    def watch(self, kind: Kind, version: str, namespace: str | None, *, resource_version: str, timeout_seconds: int) -> WatchStream: ...


class Stopped(Exception):
    """The bridge is stopping; unwind the watcher thread."""


class Batch:
    """Records of one stream, then (optionally) its position after them and a gap marker."""

    __slots__ = ("gap", "position", "records", "stream")

    def __init__(self, stream: Stream, records: list[SourceRecord], position: str | None = None, gap: BridgeGap | None = None):
        self.stream, self.records, self.position, self.gap = stream, records, position, gap


class Backoff:
    """Capped exponential backoff with jitter (each delay in [d/2, d])."""

    def __init__(self, initial: float, cap: float) -> None:
        self.initial, self.cap, self.failures = initial, cap, 0

    def next(self) -> float:
        delay = min(self.cap, self.initial * (2**self.failures))
        self.failures += 1
        return delay * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self.failures = 0


class Stream:
    """The list+watch of one kind in one namespace scope, run in its own thread."""

    def __init__(
        self,
        kind: Kind,
        namespace: str | None,
        api: Api,
        settings: BridgeSettings,
        outbox: queue.Queue,
        stop: threading.Event,
        start_rv: str | None,
    ) -> None:
        self.kind, self.namespace, self.api, self.settings = kind, namespace, api, settings
        self.outbox, self.stop = outbox, stop
        self.rv = start_rv  # the resourceVersion up to which every change was handed over
        self.version: str | None = None  # the served API version, once found
        self.known = KnownObjects()
        self.writer = EnvelopeWriter(settings.cluster)
        self.counts: Counter[str] = Counter()
        self._backoff = Backoff(settings.backoff_initial, settings.backoff_max)
        self._watch: WatchStream | None = None
        self._lock = threading.Lock()
        self._absent_logged = False
        self.error: BaseException | None = None  # why the thread ended, if not asked to
        self._needs_seed = start_rv is not None  # a resumed position needs the known set rebuilt first
        self._gone_from: str | None = None  # set while a relist after 410 Gone is due
        self._deletions_complete = True  # false once the known set could not be rebuilt
        self.thread = threading.Thread(target=self._main, name=f"faultline-watch-{self.name}", daemon=True)

    @property
    def scope(self) -> str:
        return self.namespace or ALL_NAMESPACES

    @property
    def name(self) -> str:
        return f"{self.kind.name}/{self.scope}"

    def describe(self) -> str:
        where = f"namespace {self.namespace}" if self.namespace else "all namespaces"
        return f"{self.kind.name} ({where})"

    # --- thread ---------------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._loop()
        except Stopped:
            pass
        except Exception as exc:  # a fatal error (RBAC, credentials) or a bug: report it
            self.error = exc
            try:
                self.outbox.put_nowait(None)  # wake the draining thread
            except queue.Full:
                pass

    def interrupt(self) -> None:
        with self._lock:
            if self._watch is not None:
                self._watch.interrupt()

    def _put(self, item: Batch) -> None:
        while True:
            if self.stop.is_set():
                raise Stopped
            try:
                self.outbox.put(item, timeout=POLL)
                return
            except queue.Full:
                continue

    def _sleep(self, seconds: float) -> None:
        if self.stop.wait(seconds):
            raise Stopped

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                if self.version is None:
                    self.version = self._served_version()
                if self._gone_from is not None:
                    self._sync(gone_from=self._gone_from)
                    self._gone_from, self._needs_seed = None, False
                elif self.rv is None:
                    self._sync(gone_from=None)
                    self._needs_seed = False
                elif self._needs_seed:
                    self._seed()
                    self._needs_seed = False
                self._watch_once()
            except Gone as exc:
                if self._gone_from is None:
                    log.warning("%s: resourceVersion %s is gone (%s); relisting", self.describe(), self.rv, exc)
                    self.counts["gone"] += 1
                    self._gone_from = self.rv or ""
                else:  # the relist itself was refused with 410: retry it after a pause
                    self._retry_later(f"relist refused ({exc})")
            except NotServed as exc:
                log.warning("%s: no longer served (%s); looking for it again", self.describe(), exc)
                self.version = None
                self._absent_logged = False
            except Transient as exc:
                self._retry_later(str(exc))

    def _retry_later(self, why: str) -> None:
        delay = self._backoff.next()
        self.counts["retries"] += 1
        log.warning("%s: %s; retrying in %.2fs", self.describe(), why, delay)
        self._sleep(delay)

    def _served_version(self) -> str:
        """The first of the kind's versions the API serves; waits (checking every
        crd_recheck seconds) while none is, with one log line per absence."""
        while True:
            for version in self.kind.versions:
                try:
                    self.api.list_page(self.kind, version, self.namespace, limit=1)
                except NotServed:
                    continue
                if self._absent_logged:
                    log.info("%s: now served as %s; watching it", self.describe(), self.kind.api_version(version))
                self._absent_logged = False
                return version
            if not self._absent_logged:
                tried = ", ".join(f"{self.kind.api_version(v)} {self.kind.plural}" for v in self.kind.versions)
                log.info(
                    "%s: not served (tried %s: is its CRD installed?); skipped, checking again every %gs",
                    self.describe(),
                    tried,
                    self.settings.crd_recheck,
                )
                self._absent_logged = True
            self.counts["absent_checks"] += 1
            self._sleep(self.settings.crd_recheck)

    # --- lists --------------------------------------------------------------------------

    def _pages(self, resource_version: str | None = None, match: str | None = None):
        """Every page of one consistent list. A continue token that expired (410) starts
        the list again from the first page."""
        assert self.version is not None
        cont: str | None = None
        while True:
            try:
                page = self.api.list_page(
                    self.kind,
                    self.version,
                    self.namespace,
                    limit=self.settings.page_size,
                    cont=cont,
                    resource_version=None if cont else resource_version,
                    resource_version_match=None if cont else match,
                )
            except Gone as exc:
                if cont is None:
                    raise
                log.info("%s: list continue token expired (%s); listing again from the start", self.describe(), exc)
                cont = None
                yield None  # tells the caller the pages restart
                continue
            yield page
            if not page.cont:
                return
            cont = page.cont

    def _item_json(self, item: dict[str, Any], page: Page) -> tuple[str, str, str, bytes]:
        """uid, resourceVersion, key and JSON of a list item. List items of built-in
        kinds come without kind/apiVersion; they get the list's, as a watch event has."""
        if "kind" not in item or "apiVersion" not in item:
            item = {"apiVersion": page.api_version, "kind": page.item_kind, **item}
        meta = item.get("metadata") or {}
        meta.pop("managedFields", None)
        return str(meta.get("uid") or ""), str(meta.get("resourceVersion") or ""), key_of(self.kind, item), orjson.dumps(item)

    def _sync(self, gone_from: str | None) -> None:
        """List everything and bring the known set up to date: each new object is
        published as ADDED, each changed one as MODIFIED, each vanished one as DELETED with
        its last published state; unchanged ones are not published again. After 410 Gone
        (`gone_from`: the position that was lost) a gap marker follows."""
        seen: set[str] = set()
        list_rv = ""
        for page in self._pages():
            if page is None:
                seen.clear()
                continue
            records: list[SourceRecord] = []
            now = now_rfc3339()
            for item in page.items:
                uid, rv, key, obj_json = self._item_json(item, page)
                seen.add(uid)
                previous = self.known.resource_version(uid)
                if previous != rv:
                    change = "ADDED" if previous is None else "MODIFIED"
                    records.append(SourceRecord(self.kind.topic, key, self.writer.envelope(change, now, obj_json)))
                    self.known.remember(uid, key, rv, obj_json)
            list_rv = page.resource_version
            self.counts["listed"] += len(page.items)
            self.counts["published"] += len(records)
            if records:
                self._put(Batch(self, records))
        records = []
        now = now_rfc3339()
        for uid in self.known.uids() - seen:
            key, obj_json = self.known.take(uid)
            records.append(SourceRecord(self.kind.topic, key, self.writer.envelope("DELETED", now, obj_json)))
        gap = None
        if gone_from is not None:
            gap = BridgeGap(
                cluster=self.settings.cluster,
                kind=self.kind.name,
                namespace=self.namespace,
                observed_at=now,
                from_resource_version=gone_from,
                relisted_resource_version=list_rv,
                deleted=len(records),
                deletions_complete=self._deletions_complete,
            )
            self._deletions_complete = True
        self.counts["published"] += len(records)
        self.rv = list_rv
        self.known.pack()
        self._put(Batch(self, records, position=list_rv, gap=gap))
        self._backoff.reset()

    def _seed(self) -> None:
        """Resuming from a saved position: rebuild the known set from the list AT that
        position (resourceVersionMatch=Exact), without publishing; the watch from the
        position then replays every change since. A later 410 relist can then name what
        vanished. If the server no longer has that state (410), the known set stays empty
        and the relist that follows republishes everything, unable to name deletions."""
        assert self.version is not None and self.rv is not None
        log.info("%s: resuming the watch at resourceVersion %s", self.describe(), self.rv)
        try:
            for page in self._pages(resource_version=self.rv, match="Exact"):
                if page is None:
                    self.known = KnownObjects()
                    continue
                for item in page.items:
                    uid, rv, key, obj_json = self._item_json(item, page)
                    self.known.remember(uid, key, rv, obj_json)
            self.known.pack()
        except Gone:
            log.warning(
                "%s: the API server no longer has the state at resourceVersion %s: objects deleted while the "
                "bridge was stopped will get no DELETED record",
                self.describe(),
                self.rv,
            )
            self.known = KnownObjects()
            self._deletions_complete = False
            raise

    # --- watch --------------------------------------------------------------------------

    def _watch_once(self) -> None:
        """One watch request from self.rv until the server ends it. Raises Gone, NotServed
        or Transient; returns when the server ended the watch normally."""
        assert self.version is not None and self.rv is not None
        started = time.monotonic()
        stream = self.api.watch(
            self.kind, self.version, self.namespace, resource_version=self.rv, timeout_seconds=self.settings.watch_timeout
        )
        with self._lock:
            self._watch = stream
        if self.stop.is_set():
            stream.interrupt()
        delivered = 0
        self.counts["watches"] += 1
        try:
            for lines in stream.batches():
                delivered += len(lines)
                self._handle(lines)
                self._backoff.reset()
        except Transient:
            if self.stop.is_set():
                raise Stopped from None  # our own interrupt() broke the connection
            raise
        finally:
            with self._lock:
                self._watch = None
            stream.close()
            self.known.pack()
        if self.stop.is_set():
            raise Stopped
        if not delivered and time.monotonic() - started < MIN_HEALTHY_WATCH:
            raise Transient("the server ended the watch at once")

    def _handle(self, lines: list[bytes]) -> None:
        records: list[SourceRecord] = []
        now = now_rfc3339()
        kind, known, writer, topic = self.kind, self.known, self.writer, self.kind.topic
        rv = self.rv
        try:
            for line in lines:
                try:
                    event = orjson.loads(line)
                    change = event["type"]
                    obj = event["object"]
                    meta = obj["metadata"]
                except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
                    raise Transient(f"watch {kind.resource()}: unreadable event ({exc}): {line[:200]!r}") from None
                if change == "BOOKMARK":
                    rv = meta.get("resourceVersion") or rv
                    self.counts["bookmarks"] += 1
                    known.pack()  # a quiet moment: compress what settled
                    continue
                if change == "ERROR":
                    code = obj.get("code")
                    detail = f"{code} {obj.get('reason', '')}: {obj.get('message', '')}"
                    if code == 410:
                        raise Gone(detail)
                    if code == 404:
                        raise NotServed(detail)
                    raise Transient(f"watch {kind.resource()}: ERROR event {detail}")
                if change not in ("ADDED", "MODIFIED", "DELETED"):
                    log.warning("%s: ignoring a watch event of unknown type %r", self.describe(), change)
                    continue
                meta.pop("managedFields", None)
                obj_json = orjson.dumps(obj)
                uid = str(meta.get("uid") or "")
                key = key_of(kind, obj)
                records.append(SourceRecord(topic, key, writer.envelope(change, now, obj_json)))
                rv = str(meta.get("resourceVersion") or rv)
                if change == "DELETED":
                    known.forget(uid)
                else:
                    known.remember(uid, key, rv, obj_json)
        finally:
            # Whatever was read before an ERROR event is handed over with its position.
            self.counts["published"] += len(records)
            if records or rv != self.rv:
                self.rv = rv
                self._put(Batch(self, records, position=rv))


class BridgeStats:
    def __init__(self) -> None:
        self.records = 0
        self.gaps = 0
        self.checkpoints = 0
        self.by_topic: Counter[str] = Counter()
        self.started = time.monotonic()
        self.first_record: float | None = None
        self.last_record: float | None = None


class Bridge:
    """Runs one Stream per (kind, namespace scope) and drains them into `sink`."""

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
        self.outbox: queue.Queue = queue.Queue(maxsize=OUTBOX_BATCHES)
        self._stop = threading.Event()
        self.streams: list[Stream] = []
        self.stats = BridgeStats()
        self._dirty: set[str] = set()  # kinds whose position changed since the last checkpoint
        self._positions: dict[Stream, str] = {}

    @property
    def position_store(self) -> PositionStore:
        return self.sink.positions

    def run(self, stop: threading.Event | None = None, duration: float | None = None, max_records: int | None = None) -> BridgeStats:
        """Until `stop` is set, `duration` seconds pass or `max_records` source records
        were published; then stop the watchers, publish what they had handed over (up to
        `max_records`), flush, and save the positions. Raises BridgeError on a fatal error."""
        stop = stop or threading.Event()
        saved = self.position_store.load(self.settings.cluster)
        namespaces: list[str | None] = list(self.settings.namespace_list()) or [None]
        for kind in self.kinds:
            for namespace in namespaces:
                position = saved.get(kind.name)
                start = position.resource_versions.get(namespace or ALL_NAMESPACES) if position else None
                self.streams.append(Stream(kind, namespace, self.api, self.settings, self.outbox, self._stop, start))
        for stream in self.streams:
            if stream.rv is not None:
                self._positions[stream] = stream.rv
        log.info(
            "watching %s in %s for cluster %s",
            ", ".join(k.name for k in self.kinds),
            ", ".join(self.settings.namespace_list()) or "all namespaces",
            self.settings.cluster,
        )
        for stream in self.streams:
            stream.thread.start()
        deadline = None if duration is None else self.clock() + duration
        next_checkpoint = self.clock() + self.settings.checkpoint_interval
        next_heartbeat = 0.0
        failure: BaseException | None = None
        try:
            while not stop.is_set():
                if max_records is not None and self.stats.records >= max_records:
                    break
                now = self.clock()
                if deadline is not None and now >= deadline:
                    break
                if now >= next_checkpoint:
                    self._checkpoint()
                    next_checkpoint = now + self.settings.checkpoint_interval
                if self.settings.heartbeat_file and now >= next_heartbeat:
                    _touch(self.settings.heartbeat_file)
                    next_heartbeat = now + HEARTBEAT_EVERY
                failure = next((s.error for s in self.streams if s.error is not None), None)
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
        failure = failure or next((s.error for s in self.streams if s.error is not None), None)
        try:
            self._checkpoint()  # what was delivered need not be published again after a restart
        except BridgeError:
            if failure is None:
                raise
            log.exception("the last checkpoint failed too")
        if failure is not None:
            if isinstance(failure, BridgeError):
                raise failure
            raise BridgeError(f"a watcher failed: {type(failure).__name__}: {failure}") from failure
        return self.stats

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
            return  # the rest of the batch was not published: its position must not be saved
        if batch.gap is not None:
            self.sink.publish_gap(batch.gap)
            stats.gaps += 1
        if batch.position is not None and self._positions.get(batch.stream) != batch.position:
            self._positions[batch.stream] = batch.position
            self._dirty.add(batch.stream.kind.name)

    def _checkpoint(self) -> None:
        if not self._dirty:
            return
        self.sink.flush()  # raises DeliveryError: then no position is saved
        now = now_rfc3339()
        by_kind: dict[str, dict[str, str]] = {}
        for stream, rv in self._positions.items():
            by_kind.setdefault(stream.kind.name, {})[stream.scope] = rv
        self.position_store.save(
            BridgePosition(cluster=self.settings.cluster, kind=name, resource_versions=by_kind[name], observed_at=now)
            for name in sorted(self._dirty)
        )
        self._dirty.clear()
        self.stats.checkpoints += 1

    def _shutdown(self) -> None:
        """Stop every watcher thread and wait for it."""
        self._stop.set()
        for stream in self.streams:
            stream.interrupt()
        deadline = time.monotonic() + JOIN_TIMEOUT
        for stream in self.streams:
            stream.thread.join(max(0.0, deadline - time.monotonic()))
        alive = [s.name for s in self.streams if s.thread.is_alive()]
        if alive:
            log.warning("watcher thread(s) still running after %gs: %s", JOIN_TIMEOUT, ", ".join(alive))

    def _drain(self, max_records: int | None) -> None:
        """Publish what the stopped watchers had already handed over."""
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
