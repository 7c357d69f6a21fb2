"""One record through one stage: the per-record policy, written once for every driver.

A driver (the embedded runner in app/replay, the Faust agents in app/stream) reads a
stage's records and hands each to that stage's `Runner`, saying where it was read
(`Source`), with the stage's progress in that scope (`Scope`) and a `StateStore` over the
stage's states. The runner does the rest, the same way for every driver:

  decode -> time check (R11.3, R11.4) -> progress (R12) -> key -> redelivery check ->
  fold under the policy (`topology.apply`) -> dead letter | state write + records to send

and returns an `Outcome`: the records to write in order (dead letters and forwarded
progress included) and the states to store, each with the records its fold caused. It
writes nothing itself: a driver stores the states and sends the records its own way (a
hand-over in one process; Kafka, with the states made durable first, app/stream).

Stream time (R12.5) has one definition, `Scope.stream_time`: the scope's watermark for
the cluster, else the latest record time the stage folded in that scope. The embedded
driver has one scope per stage (it reads every partition); a Faust worker one per stage
and input partition, begun anew with each ownership of the partition (SPEC R12.3): it
takes up the progress the partition's states were last saved with, not what this worker
knew the last time it held it (docs/streaming.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from heapq import heapify, heappop, heappush
from datetime import datetime, timezone
from typing import Any, Protocol

import msgspec
from msgspec.structs import replace

from app.core.base.clock import out_of_range
from app.core.base.dead_letters import dead_letter
from app.core.base.emit import Emit
from app.core.base.progress import NO_PROGRESS, Watermarks, progress_of, settles
from app.core.base.rules import Rules
from app.core.engine.topology import EXPECTED, HEARD, INPUT_OF, Applied, Failed, Stage, StageRecord, apply, decode_record, forwarded, settle
from app.model.decode import BadRecord, encode_internal
from app.model.envelope import BOOKMARK
from app.model.facts import INTERNAL_TOPICS, Progress

Raw = bytes | Callable[[], bytes]  # a record's bytes, or how to find them (only a dead letter needs them)
_DAWN = datetime.min.replace(tzinfo=timezone.utc)


# The per-record values below are Structs, not NamedTuples: made several times per record,
# and a Struct is made in C (a NamedTuple's constructor is a Python function).


class Source(msgspec.Struct, frozen=True, gc=False):
    """Where a record was read. `name`: the topic as the driver names it (a dead letter
    quotes it); `partition` of `partitions`: the partition it came from (None: a trace)."""

    topic: str
    name: str
    key: str
    partition: int | None = None
    offset: int | None = None
    partitions: int | None = None


class Out(msgspec.Struct, frozen=True, gc=False):
    """A record to write, with its JSON when the policy has it already (None: encode it)."""

    emit: Emit
    raw: bytes | None


class Write(msgspec.Struct, frozen=True, gc=False):
    """A state to store: the key's new state (`raw`: its JSON, when the policy has it)
    and the records its fold caused, `Outcome.out[first:end]`."""

    key: str
    state: Any
    raw: bytes | None
    first: int
    end: int


class Outcome(msgspec.Struct, frozen=True, gc=False):
    out: list[Out]
    writes: list[Write]
    redelivered: list[str]  # keys the record was already folded into (a repeat after a crash)
    in_time: bool = True  # False: a record whose time could not be used (it moves no stream time)
    time: tuple[str, datetime] | None = None  # (cluster, observed_at) of a record in time


class StateStore(Protocol):
    """A stage's states as one scope of a driver holds them."""

    def load(self, key: str) -> tuple[Any | None, bool]:
        """The key's state (None: none yet), and whether the record in hand is already
        folded into it (a repeat after a crash: the embedded driver never has one)."""

    def items(self) -> Iterable[tuple[str, Any]]:
        """Every (key, state) of the scope: to rebuild the waiting and expiry indexes."""


class Progressed(msgspec.Struct, frozen=True):
    """What a scope knows of time, as a driver keeps it durably with the states it
    reflects (a Faust table partition), so the next owner of the partition starts there."""

    marks: Watermarks
    latest: dict[str, datetime]


class KeyTimes:
    """Key -> a time (until when a state waits, when it expires), and the same as one heap
    of (time, key) per cluster (a key's first part), so what is due is found without
    reading every key. A key stays until its time changes or it is discarded: one found
    due and kept by the driver is found again.

    The heap is kept lazily: every key has an entry no later than its time (`queued`), so
    a time that moves later — a state written again, its expiry pushed back — costs a dict
    write, not a push; the entry, found early, is pushed again at the key's time then."""

    __slots__ = ("times", "queued", "heaps")

    def __init__(self) -> None:
        self.times: dict[str, datetime] = {}
        self.queued: dict[str, datetime] = {}  # key -> the time of the heap entry it relies on
        self.heaps: dict[str, list[tuple[datetime, str]]] = {}

    def set(self, key: str, at: datetime | None) -> None:
        times = self.times
        if at is None:
            if times:
                times.pop(key, None)
            return
        times[key] = at
        queued = self.queued.get(key)
        if queued is None or at < queued:
            self._push(key, at)

    def _push(self, key: str, at: datetime) -> None:
        self.queued[key] = at
        cluster = key.partition("/")[0]
        heap = self.heaps.get(cluster)
        if heap is None:
            heap = self.heaps[cluster] = []
        heappush(heap, (at, key))
        if len(heap) > 2 * len(self.times) + 1024:  # mostly superseded or discarded: keep it in proportion
            queued = self.queued
            for gone in [k for k in queued if k.partition("/")[0] == cluster]:
                del queued[gone]
            heap[:] = [(t, k) for k, t in self.times.items() if k.partition("/")[0] == cluster]
            queued.update((k, t) for t, k in heap)
            heapify(heap)

    def discard(self, key: str) -> None:
        self.times.pop(key, None)  # its heap entry is dropped when it comes up

    def clusters(self) -> list[str]:
        return list(self.heaps)

    def due(self, cluster: str, is_due: Callable[[datetime], bool]) -> list[str]:
        """Keys of `cluster` whose time is due, in key order (deterministic); they stay."""
        heap, times, queued = self.heaps.get(cluster), self.times, self.queued
        if not heap:
            return []
        found: list[str] = []
        later: list[str] = []
        while heap and is_due(heap[0][0]):
            at, key = heappop(heap)
            if queued.get(key) != at:
                continue  # superseded by an earlier entry of the same key
            del queued[key]
            time = times.get(key)
            if time is None:
                continue  # discarded, or its state no longer waits or expires
            if time == at or is_due(time):
                found.append(key)
            else:
                later.append(key)  # its time moved later: pushed again at it
        for key in later:
            self._push(key, times[key])
        found.sort()
        for key in found:
            self._push(key, times[key])
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self.times)

    def __len__(self) -> int:
        return len(self.times)


class Scope:
    """What one stage knows in one scope (the whole stage, or one input partition): its
    watermarks (R12.3), the latest record time folded per cluster (R12.5), and which of
    its states wait on progress, until when (R12.4), and when each of its states expires
    (R7.4); both indexes None: rebuilt from the store; and the progress it last forwarded
    under each name (`topology.forwarded`)."""

    __slots__ = ("marks", "latest", "waiting", "expiring", "whole", "sent")

    def __init__(self, *, whole: bool, latest: dict[str, datetime] | None = None, waiting: bool = False) -> None:
        self.marks: Watermarks = NO_PROGRESS
        # cluster -> latest record time; a driver whose scopes see one stream of records
        # (the embedded one) shares one dict between them.
        self.latest: dict[str, datetime] = latest if latest is not None else {}
        # Until when each waiting state waits, and when each state expires: kept as states
        # are written (`waiting`: from the first record on), else built from the store when
        # first needed.
        self.waiting: KeyTimes | None = KeyTimes() if waiting else None
        self.expiring: KeyTimes | None = KeyTimes() if waiting else None
        # True: the scope reads every partition of its topics (the watermark waits for
        # all of them); False: one partition, whose own progress is the scope's.
        self.whole = whole
        # (cluster, name, partition) -> the progress this scope last forwarded under it: what
        # it would send again is not sent. Not kept durably: a new ownership or a restart
        # sends afresh, and a reader takes progress it has as nothing new (R12.3).
        self.sent: dict[tuple[str, str, int], Progress] = {}

    def snapshot(self) -> Progressed:
        return Progressed(self.marks, dict(self.latest))

    def restore(self, saved: Progressed) -> None:
        """Take up where a durable snapshot left off: progress only grows, so what it
        says is still true; what came after it is read again."""
        self.marks, self.latest = saved.marks, dict(saved.latest)
        self.sent = {}  # what was sent before may not have left: the next move goes out

    def stream_time(self, cluster: str) -> datetime | None:
        """R12.5: the watermark for the cluster, else, while no progress of it has come,
        the latest record time folded here; never a timestamp written inside an object.
        Once progress has come, a record's time would run ahead of a topic not yet heard."""
        marks = self.marks
        at = marks.stream_time(cluster)
        if at is None and not marks.hears(cluster):
            return self.latest.get(cluster)
        return at

    def clock(self, cluster: str) -> datetime:
        return self.stream_time(cluster) or _DAWN


_NONE: list[Any] = []
_NOTHING = Outcome(_NONE, _NONE, _NONE)


class Runner:
    """The per-record step of one stage (module docstring). `counts` are the driver's
    counters: records, dead letters, clock faults, progress, redelivered, and what the
    folds left out to stay bounded (R11.5)."""

    def __init__(self, stage: Stage, rules: Rules, counts: Counter[str]) -> None:
        self.stage, self.rules, self.counts = stage, rules, counts
        self.keeps_state = stage.state is not None
        self._waits_until = stage.waits_until
        self._expires_at = stage.expires_at
        self._usable = rules.usable_times  # R11.3
        self._skew = rules.max_clock_skew  # R11.4: only a record past it needs `clock_fault`
        self._inputs = {t: (INPUT_OF[t].key, INPUT_OF[t].fold) for t in stage.topics}  # as the topology says now
        self._expected = EXPECTED.get(stage.name, {})
        self._heard = HEARD[stage.name]

    # --- records ---------------------------------------------------------------------------

    def receive(self, scope: Scope, store: StateStore | None, source: Source, value: bytes) -> Outcome:
        """One record as read (bytes)."""
        try:
            record = decode_record(source.topic, value)
        except BadRecord as exc:
            return self._rejected(source, str(exc), value, None, False)
        return self.receive_decoded(scope, store, source, record, value)

    def receive_decoded(self, scope: Scope, store: StateStore | None, source: Source, record: StageRecord, raw: Raw) -> Outcome:
        """One record already decoded; `raw` is what a dead letter of it would quote.
        (`topology.time_fault` and `progress_in`, inlined: this runs for every record.)"""
        topic = source.topic
        cluster, at = record.cluster, record.observed_at
        if topic in INTERNAL_TOPICS:  # their times are source records' times, checked at the first stage
            if type(record) is Progress:
                return replace(self.progress(scope, store, source, record), time=(cluster, at))
        else:
            first, last = self._usable
            if not first <= at <= last:  # R11.3: neither folded nor moving stream time
                return self._rejected(source, out_of_range(at, self.rules) or "", raw, None, False)
            if record.type == BOOKMARK:
                return replace(self.progress(scope, store, source, record), time=(cluster, at))
            marks = scope.marks.marks
            if marks:  # R11.4: far ahead of its topic's watermark
                mark = marks.get(f"{cluster}/{topic}")
                if mark is not None and at - mark > self._skew:
                    # A watch that was down delivers its backlog like this (the watermark
                    # stopped with it): folded, counted, moving no stream time.
                    self.counts["clock_faults"] += 1
                    return self._fold(scope, store, source, record, raw, None)
        latest = scope.latest
        known = latest.get(cluster)
        if known is None or at > known:
            latest[cluster] = at
        return self._fold(scope, store, source, record, raw, (cluster, at))

    def _fold(self, scope: Scope, store: StateStore | None, source: Source, record: StageRecord, raw: Raw, time: tuple[str, datetime] | None) -> Outcome:
        """The record (in time, or `time` None: far ahead of its topic's progress) through
        its key's fold under the policy."""
        topic = source.topic
        keyed, fold = self._inputs[topic]
        key = keyed(source.key, record)
        if key is None:
            return Outcome(_NONE, _NONE, _NONE, True, time)
        state, repeat = store.load(key) if store is not None else (None, False)
        if repeat:
            self.counts["redelivered"] += 1
            return Outcome(_NONE, _NONE, [key], True, time)
        result = apply(self.stage, fold, state, key, record, self.rules, scope.marks)
        if type(result) is Failed:
            return self._rejected(source, result.reason, raw, time, True)
        if result.state_bytes is None and not result.emits and not result.dropped:
            return Outcome(_NONE, _NONE, _NONE, True, time)  # most records: nothing to write
        out: list[Out] = []
        writes: list[Write] = []
        self._applied(scope, key, result, out, writes)
        return Outcome(out, writes, _NONE, True, time)

    def _applied(self, scope: Scope, key: str, result: Applied, out: list[Out], writes: list[Write]) -> None:
        """A fold's result into `out` and `writes`: its records, and its state when it
        changed or said something (its position must be kept with it)."""
        if result.dropped:
            self.counts.update(result.dropped)
        first = len(out)
        out.extend(map(Out, result.emits, result.emit_bytes))
        state = result.state
        if self.keeps_state and state is not None and (result.state_bytes is not None or result.emits):
            writes.append(Write(key, state, result.state_bytes, first, len(out)))
            # `_index` and `_index_expiry`, inlined: this runs for every state written.
            waits_until, expires_at = self._waits_until, self._expires_at
            if waits_until is not None and scope.waiting is not None:
                scope.waiting.set(key, waits_until(state, self.rules))
            if expires_at is not None and scope.expiring is not None:
                scope.expiring.set(key, expires_at(state, self.rules))

    def _rejected(self, source: Source, reason: str, raw: Raw, time: tuple[str, datetime] | None = None, in_time: bool = True) -> Outcome:
        self.counts["dead_letters"] += 1
        value = raw if isinstance(raw, bytes) else raw()
        letter = dead_letter(source.name, source.key or None, source.partition, source.offset, reason, value)  # no key: None
        return Outcome([Out(letter, None)], _NONE, _NONE, in_time, time)

    # --- progress (SPEC R12) ---------------------------------------------------------------

    def progress(self, scope: Scope, store: StateStore | None, source: Source, record: StageRecord) -> Outcome:
        """R12.3, R12.4: move the watermark, forward the progress (tagged with the source
        partition it came from), decide again every state of its cluster that waited on it.
        (A driver calls it directly for the end of its input, which no record carries.)"""
        if isinstance(record, Progress):
            progress = own = record
        else:
            partition, partitions = source.partition or 0, source.partitions or 1
            progress = progress_of(source.topic, partition, partitions, record)
            # One partition read: its progress is the scope's; every partition: wait for all.
            own = progress if scope.whole else progress_of(source.topic, 0, 1, record)
        if own.topic not in self._heard:  # a name the topology sends here no more (an older worker's)
            return _NOTHING
        marks = scope.marks.observe(own)
        if marks is None:
            return _NOTHING  # nothing new (a repeat, or progress from behind)
        for other in self._expected.get(own.topic, ()):  # the same progress by another path
            marks = marks.expect(own.cluster, other)
        scope.marks = marks
        self.counts["progress"] += 1
        # Its own watermark goes out as its input partition's (one partition: all of them).
        mine, count = (0, 1) if scope.whole else (source.partition or 0, source.partitions or 1)
        ahead = [Out(emit, encode_internal(emit.value)) for emit in forwarded(self.stage, progress, marks, mine, count, scope.sent)]
        if self.stage.settle is None or store is None:
            return Outcome(ahead, _NONE, _NONE)
        out: list[Out] = []
        writes: list[Write] = []
        redelivered: list[str] = []
        now = marks.stream_time(progress.cluster)
        for key in self.waiting(scope, store, progress.cluster, now):
            state, repeat = store.load(key)
            if state is None:
                continue
            if repeat:
                redelivered.append(key)
                continue
            result = settle(self.stage, state, key, self.rules, marks)
            if isinstance(result, Failed):
                self.counts["dead_letters"] += 1
                out.append(Out(dead_letter(source.name, key, source.partition, source.offset, result.reason, encode_internal(progress)), None))
                continue
            self._applied(scope, key, result, out, writes)
        # The progress last: what the states decided at it is written before it vouches
        # for that time downstream (R12.3).
        out += ahead
        return Outcome(out, writes, redelivered)

    def waiting(self, scope: Scope, store: StateStore, cluster: str, stream_time: datetime | None) -> list[str]:
        """Keys of `cluster` whose state waits on progress that has come, in key order
        (deterministic). The index is built from the store once per scope. A key stays
        waiting until its state says otherwise: one settled without a change is decided
        again at the next progress."""
        if self.stage.waits_until is None:
            return []
        index = scope.waiting
        if index is None:
            index = scope.waiting = KeyTimes()
            for key, state in store.items():
                self._index(scope, key, state)
        return index.due(cluster, lambda until: settles(until, stream_time))  # ANY_PROGRESS sorts first

    def _index(self, scope: Scope, key: str, state: Any) -> None:
        waits_until, index = self.stage.waits_until, scope.waiting
        if waits_until is not None and index is not None:
            index.set(key, waits_until(state, self.rules))

    # --- expiry (SPEC R7.4) ----------------------------------------------------------------

    def expired(self, scope: Scope, store: StateStore) -> list[str]:
        """Keys of the scope whose state has expired at the stream time of its own cluster,
        in key order (deterministic). The index is built from the store once per scope; a
        key stays in it until `forget`: one the driver keeps is found again next sweep."""
        if self.stage.expires_at is None:
            return []
        index = scope.expiring
        if index is None:
            index = scope.expiring = KeyTimes()
            for key, state in store.items():
                self._index_expiry(scope, key, state)
        keys: list[str] = []
        for cluster in index.clusters():
            now = scope.stream_time(cluster)
            if now is not None:  # no stream time yet: nothing expires (R12.5)
                keys += index.due(cluster, lambda at, now=now: at <= now)
        return sorted(keys)

    def _index_expiry(self, scope: Scope, key: str, state: Any) -> None:
        expires_at, index = self._expires_at, scope.expiring
        if expires_at is not None and index is not None:
            index.set(key, expires_at(state, self.rules))

    def forget(self, scope: Scope, key: str) -> None:
        """A state the driver dropped neither waits nor expires."""
        if scope.waiting is not None:
            scope.waiting.discard(key)
        if scope.expiring is not None:
            scope.expiring.discard(key)


def encoded(out: Out) -> bytes:
    """The JSON of a record to write."""
    return out.raw if out.raw is not None else _encode(out.emit.value)


_encode = msgspec.json.Encoder().encode
