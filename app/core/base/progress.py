"""Event-time progress: watermarks per (cluster, source topic) (SPEC R12).

A stage learns from progress that nothing older is still coming: the bridge writes a
BOOKMARK to every partition of a source topic, a stage that re-keys forwards it to every
partition of its internal topics (as a `Progress`, tagged with the source partition it
came from, or as its own watermark tagged with its own partition: `topology.forwarded`),
and each stage keeps, per (cluster, topic), the latest progress time seen from each
partition. The watermark is the least of them, known once every partition has shown one
(R12.3). One implementation for every driver: the embedded runner keeps one `Watermarks`
per stage, a Faust worker one per stage partition.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import datetime, timezone

import msgspec

from app.model.decode import TypedEnvelope
from app.model.facts import END_OF_TIME, Progress


class Watermarks(msgspec.Struct, frozen=True, dict=True):
    """Progress seen by one stage (partition), per `<cluster>/<source topic>`. Immutable:
    its stream time per cluster is worked out once (`stream_time`, asked per record)."""

    latest: dict[str, dict[int, datetime]] = {}  # -> source partition -> latest progress time
    partitions: dict[str, int] = {}  # -> the source topic's partition count
    ended: frozenset[str] = frozenset()  # the input ended (a trace): the watermark is infinite
    marks: dict[str, datetime] = {}  # -> the watermark, where there is one (`of`, read per record)

    def observe(self, progress: Progress) -> Watermarks | None:
        """These watermarks with `progress` taken in; None when it changes nothing."""
        key = f"{progress.cluster}/{progress.topic}"
        if progress.final:
            if key in self.ended:
                return None
            if progress.partitions > 1:  # one partition of a stage's own (`topology.own_progress`)
                return self._partition_ended(key, progress)
            return msgspec.structs.replace(self, ended=self.ended | {key}, marks={**self.marks, key: END_OF_TIME})
        seen = self.latest.get(key, {})
        known = seen.get(progress.partition)
        count = progress.partitions
        if known is not None and known >= progress.observed_at and self.partitions.get(key) == count:
            return None
        seen = {**seen, progress.partition: progress.observed_at}
        partitions = self.partitions if self.partitions.get(key) == count else {**self.partitions, key: count}
        # The watermark of `key`: the least over its partitions, once each has shown one.
        mark: datetime | None = None
        if key in self.ended:
            mark = END_OF_TIME
        elif all(p in seen for p in range(count)):
            mark = min(seen[p] for p in range(count))
        marks = dict(self.marks)
        marks.pop(key, None)  # then last, as it always was (saved progress keeps its bytes)
        if mark is not None:
            marks[key] = mark
        return Watermarks({**self.latest, key: seen}, partitions, self.ended, marks)

    def _partition_ended(self, key: str, progress: Progress) -> Watermarks | None:
        """The end of the input in one of `progress.partitions`: the others may still have
        records to write, so the watermark is the least of theirs until every one has ended."""
        seen = self.latest.get(key, {})
        if all(seen.get(p) == END_OF_TIME for p in range(progress.partitions) if p != progress.partition):
            return msgspec.structs.replace(self, ended=self.ended | {key}, marks={**self.marks, key: END_OF_TIME})
        return self.observe(msgspec.structs.replace(progress, observed_at=END_OF_TIME, final=False))

    def expect(self, cluster: str, topic: str) -> Watermarks:
        """These watermarks waiting for (cluster, topic) too: no watermark, so no stream
        time, until it has shown progress (a second path of the same source's progress,
        R12.3: `topology.EXPECTED`)."""
        key = f"{cluster}/{topic}"
        if key in self.latest or key in self.ended:
            return self
        return msgspec.structs.replace(self, latest={**self.latest, key: {}})

    def keeping(self, topics: Collection[str]) -> Watermarks:
        """These watermarks of `topics` only: the names a stage hears progress under
        (`topology.HEARD`). Progress saved or sent under a name it no longer hears under (an
        older version's) would never move again and hold its stream time back for good."""
        kept = [k for k in (*self.latest, *self.ended) if k.partition("/")[2] in topics]
        if len(kept) == len(self.latest) + len(self.ended):
            return self
        keys = set(kept)
        return Watermarks(
            latest={k: v for k, v in self.latest.items() if k in keys},
            partitions={k: v for k, v in self.partitions.items() if k in keys},
            ended=frozenset(self.ended & keys),
            marks={k: v for k, v in self.marks.items() if k in keys},
        )

    def of(self, cluster: str, topic: str) -> datetime | None:
        """The watermark of (cluster, topic): every record of it observed before this
        time has been seen. None until every partition has shown progress."""
        return self.marks.get(f"{cluster}/{topic}")

    def known(self) -> list[tuple[str, str, datetime]]:
        """(cluster, topic, watermark) of every (cluster, topic) with one, in order."""
        out = []
        for key in sorted({*self.latest, *self.ended}):
            cluster, _, topic = key.partition("/")
            at = self.of(cluster, topic)
            if at is not None:
                out.append((cluster, topic, at))
        return out

    def stream_time(self, cluster: str) -> datetime | None:
        """R12.5: the least watermark over the topics of `cluster` this stage has heard of
        or expects (every topic it hears, once it has heard one: `topology.EXPECTED`);
        None while any of them has none. The end of an input is no time
        to run windows or expiry at: an ended topic does not count (None if all ended)."""
        known = self.__dict__
        at = known.get(cluster, _UNKNOWN)
        if at is _UNKNOWN:
            at = known[cluster] = self._stream_time(cluster)
        return at

    def waiting(self) -> list[tuple[str, str]]:
        """(cluster, name) of every topic whose watermark this stage waits for: heard of or
        expected (R12.5), not yet shown by every partition, not ended."""
        ended, marks = self.ended, self.marks
        return [tuple(key.split("/", 1)) for key in sorted(self.latest) if key not in marks and key not in ended]  # type: ignore[misc]

    def hears(self, cluster: str) -> bool:
        """Progress of `cluster` has come, of a topic whose input has not ended: its stream
        time is the watermarks' (None until each is known), never a record's time."""
        prefix = f"{cluster}/"
        return any(key.startswith(prefix) and key not in self.ended for key in self.latest)

    def _stream_time(self, cluster: str) -> datetime | None:
        prefix = f"{cluster}/"
        ended, marks = self.ended, self.marks
        least: datetime | None = None
        for key in self.latest:  # one pass: this runs once per new watermarks asked for it
            if key.startswith(prefix) and key not in ended:
                mark = marks.get(key)
                if mark is None:
                    return None
                if least is None or mark < least:
                    least = mark
        return least


def source_topic(name: str) -> str:
    """The source topic a name progress comes under stands for: a stage's own watermark
    forwarded as `<stage>:<source topic>` (R12.3) counts for its source topic."""
    return name.rpartition(":")[2]


def waiting_topics(stages: Iterable[Watermarks]) -> list[tuple[str, str]]:
    """(cluster, source topic) whose watermark any of these stages waits for (R12.5)."""
    return sorted({(cluster, source_topic(name)) for marks in stages for cluster, name in marks.waiting()})


_UNKNOWN = datetime.max  # naive: never a stream time
NO_PROGRESS = Watermarks()
# A state that waits for any progress at all (`Stage.waits_until`).
ANY_PROGRESS = datetime.min.replace(tzinfo=timezone.utc)


def settles(waits_until: datetime, stream_time: datetime | None) -> bool:
    """Does a state waiting until `waits_until` settle at this stream time?"""
    return waits_until == ANY_PROGRESS or (stream_time is not None and stream_time >= waits_until)


def progress_of(topic: str, partition: int, partitions: int, bookmark: TypedEnvelope) -> Progress:
    """A source BOOKMARK (R12.1), as read from `topic`[`partition`] of `partitions`."""
    return Progress(bookmark.cluster, topic, partition, partitions, bookmark.observed_at)


def end_of_input(cluster: str, topic: str) -> Progress:
    """The end of a trace: every decision still pending is taken (R12.3)."""
    return Progress(cluster, topic, 0, 1, END_OF_TIME, final=True)
