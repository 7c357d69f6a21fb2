"""Progress (SPEC R12.1, R12.2): how far in bridge-clock time each watch has handed over
every change it received, and the progress record a source topic gets from it.

A watch's progress time T means: every change of its kind (in its namespace scope) that
the bridge received before T has been handed to the sink. It moves with the clock while
the watch is live, and stops while it is not: disconnected, retrying, relisting after
410, or catching up after a reconnect (the server first replays what changed meanwhile).
The bridge publishes a progress record for T only after a flush covering everything
handed over before T, so T never runs ahead of an unacknowledged record.

Times are integer microseconds since the epoch (the resolution of `observed_at`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

import msgspec

from app.bridge.records import now_us

# After a reconnect the server replays the backlog at once; a watch that then delivered
# nothing for this long has caught up (a quiet kind gets no other sign: Events get no
# BOOKMARKs from a real API server).
CATCH_UP_QUIET_US = 500_000


class StreamProgress:
    """The progress of one watch. The watch thread reports what it does; the draining
    thread takes `snapshot()`s. All under one lock: the two threads meet here."""

    def __init__(self, clock: Callable[[], int] = now_us) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._mode = "down"  # down | catching_up | live | absent
        self._stalled_at: int | None = None  # progress while not live; None until first live
        self._receiving: int | None = None  # stamp of records read and not yet handed over
        self._activity = 0  # while catching up: when the watch was opened or last delivered
        self._fence: int | None = None  # while catching up: a revision the server had passed
        self._handed = 0  # batches handed over

    # --- the watch thread ---

    def receiving(self) -> int:
        """Records are being read now: the returned time is their `observed_at`, and
        progress does not pass it until `handed()`."""
        with self._lock:
            self._receiving = t = self._clock()
            return t

    def handed(self, resource_version: str | None = None) -> None:
        """The records read since `receiving()` are in the outbox (one batch)."""
        with self._lock:
            self._receiving = None
            self._handed += 1
            if self._mode == "catching_up":
                self._activity = self._clock()
                if self._fence is not None and _revision(resource_version) >= self._fence:
                    self._mode = "live"

    def handed_nothing(self) -> None:
        """What was read since `receiving()` called for no batch."""
        with self._lock:
            self._receiving = None

    def catching_up(self, fence: int | None = None) -> None:
        """A watch was opened; it is live once it handed over an event or BOOKMARK at a
        revision >= `fence` (the server's revision when the watch opened), or nothing
        for CATCH_UP_QUIET_US."""
        with self._lock:
            self._mode, self._activity, self._fence = "catching_up", self._clock(), fence

    def stalled(self) -> None:
        """The watch is not live (broken, ended, relisting, stopping): progress stops here."""
        with self._lock:
            self._promote(self._clock())
            if self._mode in ("live", "absent"):
                self._stalled_at = self._receiving if self._receiving is not None else self._clock()
            self._mode = "down"

    def absent(self) -> None:
        """The kind is not served (its CRD is not installed): it has no changes to wait
        for, so it holds nothing back."""
        with self._lock:
            self._mode = "absent"

    # --- the draining thread ---

    def snapshot(self) -> tuple[int | None, int]:
        """(progress time, batches handed over so far). The time is None until the watch
        was first live."""
        with self._lock:
            now = self._clock()
            self._promote(now)
            at = now if self._mode in ("live", "absent") else self._stalled_at
            if at is not None and self._receiving is not None:
                at = min(at, self._receiving)
            return at, self._handed

    def _promote(self, now: int) -> None:
        if self._mode == "catching_up" and now - self._activity >= CATCH_UP_QUIET_US:
            self._mode = "live"

    @property
    def live(self) -> bool:
        with self._lock:
            self._promote(self._clock())
            return self._mode in ("live", "absent")


def _revision(resource_version: str | None) -> int:
    """A resourceVersion as etcd's revision number; -1 when it is not one."""
    try:
        return int(resource_version or "")
    except ValueError:
        return -1


def revision_of(resource_version: str) -> int | None:
    value = _revision(resource_version)
    return value if value >= 0 else None


class StreamMark(msgspec.Struct, frozen=True):
    """A watch's progress at one snapshot, with what a progress record names."""

    topic: str
    kind: str
    api_version: str
    resource_version: str
    at: int | None


def with_unwatched(progressed: dict[str, StreamMark], unwatched: Iterable[StreamMark]) -> dict[str, StreamMark]:
    """`progressed` with each topic none of the bridge's kinds feed (`--kinds` left them
    out), at the latest of the others: it has published every change of those kinds it
    received (none), so it holds nothing back (R12.1). A stage's stream time waits for
    progress of every topic it hears (R12.5): without it, a bridge watching Pods and Events
    only would stop expiry for good. Nothing while no watched topic has progressed."""
    if not progressed:
        return progressed
    latest = max(mark.at or 0 for mark in progressed.values())
    return {**progressed, **{m.topic: msgspec.structs.replace(m, at=latest) for m in unwatched if m.topic not in progressed}}


def slowest_per_topic(marks: Iterable[StreamMark]) -> dict[str, StreamMark]:
    """Per topic, the mark of its slowest watch (R12.2: a topic fed by several kinds or
    namespace scopes progresses at the slowest). A topic with a watch that was never
    live gets no progress at all."""
    slowest: dict[str, StreamMark] = {}
    blocked: set[str] = set()
    for mark in marks:
        if mark.at is None:
            blocked.add(mark.topic)
            continue
        current = slowest.get(mark.topic)
        if current is None or mark.at < (current.at or 0):
            slowest[mark.topic] = mark
    return {topic: mark for topic, mark in slowest.items() if topic not in blocked}
