"""What the mark did (SPEC R18; docs/mark.md, *Metrics*): marks written, skips by reason,
patches refused, and the time from a fault to its mark. Counted from several threads;
`app.mark.server` serves them as /metrics, `faultline run --mark` prints them at the end."""

from __future__ import annotations

import bisect
import threading
from typing import Final, NamedTuple

from app.core.actions.marking import SKIP_REASONS, SkipReason

# Every metric name `faultline mark`'s /metrics exposes (ops/ tests check against it).
METRICS: Final = (
    "faultline_mark_records_total",
    "faultline_mark_marks_total",
    "faultline_mark_skips_total",
    "faultline_mark_refused_total",
    "faultline_mark_conflicts_total",
    "faultline_mark_unreadable_total",
    "faultline_mark_other_cluster_total",
    "faultline_mark_seconds",
)
# Upper bounds (seconds) of the time-to-mark histogram: the target is a p99 under 1 s.
BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class Snapshot(NamedTuple):
    records: int
    marks: int
    skips: dict[SkipReason, int]
    refused: int
    conflicts: int
    unreadable: int
    other_cluster: int
    buckets: tuple[int, ...]  # cumulative counts per BUCKETS bound (Prometheus `le`)
    seconds_sum: float
    seconds_count: int


class MarkMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records = self._marks = self._refused = self._conflicts = self._unreadable = self._other_cluster = 0
        self._skips: dict[SkipReason, int] = dict.fromkeys(SKIP_REASONS, 0)
        self._in_bucket = [0] * (len(BUCKETS) + 1)  # the last: above every bound
        self._sum = 0.0

    def read(self) -> None:
        with self._lock:
            self._records += 1

    def marked(self, seconds: float) -> None:
        """A pod marked, `seconds` after its fault was last seen (never below 0: a
        reporter's clock ahead of this one says nothing of how long marking took)."""
        seconds = max(0.0, seconds)
        with self._lock:
            self._marks += 1
            self._in_bucket[bisect.bisect_left(BUCKETS, seconds)] += 1
            self._sum += seconds

    def skipped(self, reason: SkipReason) -> None:
        with self._lock:
            self._skips[reason] += 1

    def refused(self) -> None:
        with self._lock:
            self._refused += 1

    def conflict(self) -> None:
        with self._lock:
            self._conflicts += 1

    def unreadable(self) -> None:
        with self._lock:
            self._unreadable += 1

    def other_cluster(self) -> None:
        with self._lock:
            self._other_cluster += 1

    def snapshot(self) -> Snapshot:
        with self._lock:
            cumulative, running = [], 0
            for count in self._in_bucket[:-1]:
                running += count
                cumulative.append(running)
            return Snapshot(
                self._records, self._marks, dict(self._skips), self._refused, self._conflicts, self._unreadable,
                self._other_cluster, tuple(cumulative), self._sum, self._marks,
            )  # fmt: skip
