"""The list+watch of one kind in one namespace scope, in its own thread.

It hands records and, after them, its position to the draining thread (`app.bridge.bridge`)
through a bounded outbox, and reports how far it has handed over every change it
received (`app.bridge.progress`). It knows neither HTTP (that is `app.bridge.client`) nor
Kafka (that is the sink).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any, Protocol

import orjson

from app.bridge.comeback import ServerProbe
from app.bridge.errors import Forbidden, Gone, NotServed, Transient
from app.bridge.known import KnownObjects
from app.bridge.progress import StreamProgress, revision_of
from app.bridge.records import ALL_NAMESPACES, BridgeGap, EnvelopeWriter, Page, SourceRecord, rfc3339_us
from app.bridge.relist import Listed, RelistOutcome, deleted_meanwhile, page_changes
from app.bridge.resources import Kind, key_of
from app.bridge.retry import FORBIDDEN_GRACE, Backoff, Outage
from app.bridge.settings import BridgeSettings

log = logging.getLogger("faultline.bridge")

POLL = 0.2  # seconds: how often a blocked hand-over looks at the stop flag
# A watch that ends sooner than this without delivering anything counts as a failure
# (backoff), so a server that closes every watch at once is not hammered.
MIN_HEALTHY_WATCH = 1.0


class WatchResponse(Protocol):
    """One watch response (`app.bridge.client.WatchStream`)."""

    def batches(self) -> Iterator[list[bytes]]: ...

    def interrupt(self) -> None: ...

    def close(self) -> None: ...


class Api(Protocol):
    """What a watch needs from `app.bridge.client.KubeApi`."""

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

    def watch(self, kind: Kind, version: str, namespace: str | None, *, resource_version: str, timeout_seconds: int) -> WatchResponse: ...

    def ready(self) -> bool: ...


class Stopped(Exception):
    """The bridge is stopping; unwind the watch thread."""


class Batch:
    """Records of one watch, then (optionally) its position after them and a gap marker."""

    __slots__ = ("gap", "position", "records", "watch")

    def __init__(self, watch: KindWatch, records: list[SourceRecord], position: str | None = None, gap: BridgeGap | None = None):
        self.watch, self.records, self.position, self.gap = watch, records, position, gap


class KindWatch:
    """The list+watch of one kind in one namespace scope."""

    def __init__(
        self,
        kind: Kind,
        namespace: str | None,
        api: Api,
        settings: BridgeSettings,
        outbox: queue.Queue,
        stop: threading.Event,
        start_rv: str | None,
        probe: ServerProbe | None = None,
    ) -> None:
        self.kind, self.namespace, self.api, self.settings = kind, namespace, api, settings
        self.probe = probe  # shared by the bridge's watches: is the server back? (issue 29)
        self._comeback_seen = 0  # the last comeback of the server that woke this watch
        self.outbox, self.stop = outbox, stop
        self.rv = start_rv  # the resourceVersion up to which every change was handed over
        self.version: str | None = None  # the served API version, once found
        self.known = KnownObjects()
        self.writer = EnvelopeWriter(settings.cluster)
        self.progress = StreamProgress()
        self.counts: Counter[str] = Counter()
        self._backoff = Backoff(settings.backoff_initial, settings.backoff_max)
        self._outage = Outage(self.describe(), settings.give_up_after)
        self._watch: WatchResponse | None = None
        self._lock = threading.Lock()
        self._absent_logged = False
        self._was_served = False  # this kind was served since the bridge started
        self._unserved_since: float | None = None  # when a kind that was served stopped being so
        self._granted: set[str] = set()  # the verbs (list, watch) the API server has granted this watch
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

    def api_version(self) -> str:
        return self.kind.api_version(self.version or self.kind.versions[0])

    # --- thread ---------------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._loop()
        except Stopped:
            pass
        except Exception as exc:  # a fatal error (RBAC, credentials, unreachable) or a bug: report it
            self.error = exc
            try:
                self.outbox.put_nowait(None)  # wake the draining thread
            except queue.Full:
                pass
        finally:
            self.progress.stalled()

    def interrupt(self) -> None:
        with self._lock:
            if self._watch is not None:
                self._watch.interrupt()

    def _hand_over(self, batch: Batch, resource_version: str | None = None) -> None:
        """Put a batch in the outbox (waiting while it is full), then tell the progress."""
        while True:
            if self.stop.is_set():
                raise Stopped
            try:
                self.outbox.put(batch, timeout=POLL)
                break
            except queue.Full:
                continue
        self.progress.handed(resource_version)

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
                    log.debug("%s: resourceVersion %s is gone (%s); relisting", self.describe(), self.rv, exc)
                    self.counts["gone"] += 1
                    self._gone_from = self.rv or ""
                else:  # the relist itself was refused with 410: retry it after a pause
                    self._retry_later(f"relist refused ({exc})")
            except NotServed as exc:
                log.debug("%s: not served (%s); looking for it again", self.describe(), exc)
                self.version = None
            except Forbidden as exc:
                # Fatal at once when the verb was never granted (a missing RBAC rule);
                # retried for a while when it was (a restarted API server syncing its caches).
                if exc.verb not in self._granted or self._outage.duration() > FORBIDDEN_GRACE:
                    raise
                self._retry_later(f"HTTP 403 ({exc.detail})")
            except Transient as exc:
                self._retry_later(exc.cause)

    def _retry_later(self, cause: str) -> None:
        """Wait before the next try: the backoff's delay, cut short when the server comes
        back (`app.bridge.comeback`): a server that was down and answers again gets the
        watch at once, and the backoff starts over for what it may still refuse."""
        self.progress.stalled()
        self._outage.failed(cause)
        delay = self._backoff.next()
        self.counts["retries"] += 1
        log.debug("%s: retrying in %.2fs", self.describe(), delay)
        if self.probe is None or self._outage.started is None:
            self._sleep(delay)
            return
        comeback = self.probe.wait(delay, since=self._outage.started, seen=self._comeback_seen, stop=self.stop)
        if self.stop.is_set():
            raise Stopped
        if comeback is not None:
            self._comeback_seen = comeback
            self._backoff.reset()
            self.counts["comebacks"] += 1
            log.debug("%s: the API server is ready again; retrying now", self.describe())

    def _succeeded(self, verb: str) -> None:
        self._granted.add(verb)
        self._outage.recovered()

    def _served_version(self) -> str:
        """The first of the kind's versions the API serves; waits (checking every
        crd_recheck seconds) while none is, with one log line per absence.

        A kind not served since the bridge started holds no progress back. One that was
        served and is not any more (404) is retried as an outage first: a restarting API
        server serves its CRDs a moment after the rest. Only after crd_recheck seconds of
        404 is it taken as removed."""
        while True:
            for version in self.kind.versions:
                try:
                    self.api.list_page(self.kind, version, self.namespace, limit=1)
                except NotServed:
                    continue
                self._succeeded("list")
                if self._absent_logged:
                    log.info("%s: now served as %s; watching it", self.describe(), self.kind.api_version(version))
                self._absent_logged, self._was_served, self._unserved_since = False, True, None
                self.progress.stalled()  # served: it holds its topic back until listed and watched
                return version
            if self._was_served:
                now = time.monotonic()
                self._unserved_since = self._unserved_since or now
                if now - self._unserved_since < self.settings.crd_recheck:
                    raise Transient(f"{self.kind.resource()} is not served (404)", cause="not served (HTTP 404)")
            self._succeeded("list")
            self.progress.absent()
            if not self._absent_logged:
                tried = ", ".join(f"{self.kind.api_version(v)} {self.kind.plural}" for v in self.kind.versions)
                log.info(
                    "%s: %s (tried %s: is its CRD installed?); skipped, checking again every %gs",
                    self.describe(),
                    "no longer served" if self._was_served else "not served",
                    tried,
                    self.settings.crd_recheck,
                )
                self._absent_logged = True
            self.counts["absent_checks"] += 1
            self._sleep(self.settings.crd_recheck)

    # --- lists --------------------------------------------------------------------------

    def _pages(self, resource_version: str | None = None, match: str | None = None) -> Iterator[Page | None]:
        """Every page of one consistent list. A continue token that expired (410) starts
        the list again from the first page (None is yielded first)."""
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
                yield None
                continue
            self._succeeded("list")
            yield page
            if not page.cont:
                return
            cont = page.cont

    def _listed(self, item: dict[str, Any], page: Page) -> Listed:
        """A list item as the relist diff sees it. List items of built-in kinds come
        without kind/apiVersion; they get the list's, as a watch event has."""
        if "kind" not in item or "apiVersion" not in item:
            item = {"apiVersion": page.api_version, "kind": page.item_kind, **item}
        meta = item.get("metadata") or {}
        meta.pop("managedFields", None)
        return Listed(str(meta.get("uid") or ""), str(meta.get("resourceVersion") or ""), key_of(self.kind, item), orjson.dumps(item))

    def _sync(self, gone_from: str | None) -> None:
        """List everything and bring the known set up to date (`app.bridge.relist`): new
        objects as ADDED, changed ones as MODIFIED, vanished ones as DELETED with their last
        published state. After 410 Gone (`gone_from`: the position that was lost), a gap
        marker follows if the list found anything to publish."""
        self.progress.stalled()
        seen: set[str] = set()
        list_rv = ""
        topic, writer, known = self.kind.topic, self.writer, self.known
        published = 0
        for page in self._pages():
            if page is None:
                seen.clear()
                continue
            items = [self._listed(item, page) for item in page.items]
            seen.update(item.uid for item in items)
            stamp = self.progress.receiving()
            observed_at = rfc3339_us(stamp)
            records = []
            for change, item in page_changes(known.resource_version, items):
                records.append(SourceRecord(topic, item.key, writer.envelope(change, observed_at, item.object_json)))
                known.remember(item.uid, item.key, item.resource_version, item.object_json)
            list_rv = page.resource_version
            self.counts["listed"] += len(items)
            published += len(records)
            if records:
                self._hand_over(Batch(self, records))
            else:
                self.progress.handed_nothing()
        vanished = deleted_meanwhile(known.uids(), seen)
        stamp = self.progress.receiving()
        observed_at = rfc3339_us(stamp)
        records = []
        for uid in vanished:
            key, obj_json = known.take(uid)
            records.append(SourceRecord(topic, key, writer.envelope("DELETED", observed_at, obj_json)))
        gap = None
        if gone_from is not None:
            outcome = RelistOutcome(published=published, deleted=len(records), deletions_complete=self._deletions_complete)
            gap = self._gap(gone_from, list_rv, outcome, observed_at)
            self._deletions_complete = True
        self.counts["published"] += published + len(records)
        self.rv = list_rv
        known.pack()
        self._hand_over(Batch(self, records, position=list_rv, gap=gap))
        self._backoff.reset()

    def _gap(self, gone_from: str, list_rv: str, outcome: RelistOutcome, observed_at: str) -> BridgeGap | None:
        where = f"{self.describe()}: watch position {gone_from or '(none)'} expired (410 Gone); relisted at {list_rv}"
        if not outcome.needs_gap:
            log.info("%s: nothing changed meanwhile, nothing published", where)
            return None
        self.counts["gaps"] += 1
        log.warning(
            "%s: %d object(s) new or changed, %d deleted meanwhile%s; published as their net result, with a gap marker",
            where,
            outcome.published,
            outcome.deleted,
            "" if outcome.deletions_complete else " (objects deleted while the bridge was stopped got no DELETED record)",
        )
        return BridgeGap(
            cluster=self.settings.cluster,
            kind=self.kind.name,
            namespace=self.namespace,
            observed_at=observed_at,
            from_resource_version=gone_from,
            relisted_resource_version=list_rv,
            deleted=outcome.deleted,
            deletions_complete=outcome.deletions_complete,
        )

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
                    listed = self._listed(item, page)
                    self.known.remember(listed.uid, listed.key, listed.resource_version, listed.object_json)
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
            self._succeeded("watch")
            # The server first replays what changed since self.rv; the watch is live once
            # it delivered the revision the server stands at now (or went quiet).
            fence = self.api.list_page(self.kind, self.version, self.namespace, limit=1).resource_version
            self.progress.catching_up(revision_of(fence))
            for lines in stream.batches():
                delivered += len(lines)
                self._handle(lines)
                self._backoff.reset()
        except Transient:
            if self.stop.is_set():
                raise Stopped from None  # our own interrupt() broke the connection
            raise
        finally:
            self.progress.stalled()
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
        stamp = self.progress.receiving()
        observed_at = rfc3339_us(stamp)
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
                    raise Transient(f"watch {kind.resource()}: unreadable event ({exc}): {line[:200]!r}", cause="an unreadable watch event") from None
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
                    raise Transient(f"watch {kind.resource()}: ERROR event {detail}", cause=f"watch ERROR event {detail}"[:200])
                if change not in ("ADDED", "MODIFIED", "DELETED"):
                    log.warning("%s: ignoring a watch event of unknown type %r", self.describe(), change)
                    continue
                meta.pop("managedFields", None)
                obj_json = orjson.dumps(obj)
                uid = str(meta.get("uid") or "")
                key = key_of(kind, obj)
                records.append(SourceRecord(topic, key, writer.envelope(change, observed_at, obj_json)))
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
                self._hand_over(Batch(self, records, position=rv), rv)
            else:
                self.progress.handed_nothing()
