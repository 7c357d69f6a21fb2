"""The worker's log: an ERROR is something an operator must act on (issues 23 and 29).

What the Kafka client libraries write that is not, and what the worker writes instead:

- **A broker outage.** aiokafka writes an ERROR per attempt, per connection and per
  request while a broker is down (thousands a minute under two workers). They are counted
  here, not written: the worker says once that Kafka is unreachable (WARNING, with the
  first error), once a minute while it lasts (WARNING, with the count and the last error),
  and when it is over (INFO, how long, how many) — as the bridge says an API server
  outage (app/bridge/retry.py). It is said to be over `quiet` seconds after the broker
  answered again (a coordinator is discovered), or once nothing failed for `quiet`
  seconds; what fails meanwhile is the reconnection settling. The producer's retries of a
  batch while the broker comes back (its partitions without a leader for a moment: "Got
  error produce response …, retrying", a WARNING per batch and attempt, ~115 after a
  broker crash) are counted into the same line. (The attempts themselves are spaced out while it lasts:
  `faust_fixes.back_off_reconnects`.)
- **A group coordinator being elected** (`GroupCoordinatorNotAvailableError` at the first
  start of a group on a new broker, while Kafka creates `__consumer_offsets`): one INFO
  line, and a WARNING a minute later if it is still not there.
- **What Faust says because its Monitor is out of the record path** (app/stream/faust_fixes.py,
  patch 10): its idle-stream check reads the Monitor's per-record times, so it takes any
  partition with records not yet read for an idle stream ("Stream has not started
  processing TP(...)", an ERROR after some minutes for a quiet fleet-inputs partition);
  and each rebalance finds no sensor state ("Missing sensor state for rebalance", a
  WARNING). DEBUG, both.

Everything else passes as written. Only logger names and message texts are read here: no
library internals. `install()` puts the filter on the client libraries' loggers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger("faultline.kafka")

# Loggers of aiokafka's modules (`logging.getLogger(__name__)`; its client logs as
# "aiokafka") and of Faust's aiokafka driver; install() adds those already created.
LOGGERS = (
    "aiokafka",
    "aiokafka.conn",
    "aiokafka.cluster",
    "aiokafka.consumer.consumer",
    "aiokafka.consumer.fetcher",
    "aiokafka.consumer.group_coordinator",
    "aiokafka.producer.producer",
    "aiokafka.producer.sender",
    "faust.transport.drivers.aiokafka",
    "faust.app.base",
)
# A broker that cannot be reached (aiokafka's client.py, conn.py, fetcher.py,
# group_coordinator.py, sender.py; Faust's driver when fetching stopped).
UNREACHABLE = (
    "Unable connect to",
    "Unable to update metadata",
    "NodeNotReadyError",
    "KafkaConnectionError",
    "Connection refused",
    "Connection reset",
    "RequestTimedOutError",
    "Aiokafka stopped fetching",
    "Broker stopped responding",
)
# The group coordinator not there yet, or moving.
ELECTING = ("GroupCoordinatorNotAvailable", "CoordinatorNotAvailable", "CoordinatorLoadInProgress", "NotCoordinatorForGroup")
# What follows from either while it lasts: counted while an episode is open, else passed.
FOLLOWS = ("Marking the coordinator dead", "is either not started or not valid", "Heartbeat send request failed",
           "Group Coordinator Request failed", "Failed fetch", "Could not send", "Cannot send")  # fmt: skip
ANSWERED = ("Discovered coordinator",)  # the broker answered a FindCoordinator request
# The producer retrying a batch (aiokafka's producer/sender.py): counted while an episode is open.
RETRIES = ("Got error produce response",)
FAUST_MONITOR = ("Stream has not started processing", "Stream stopped processing, or is slow", "Missing sensor state for rebalance")


@dataclass
class Episode:
    kind: str  # "unreachable" or "electing"
    started: float
    first: str
    last: str
    failures: int = 1
    last_failure: float = 0.0
    said: float = 0.0  # when a line about it was last written
    answered: float | None = None  # when the broker answered again (it is over once things settle)
    retries: int = 0  # the producer's retries of a batch, counted in it


def _has(text: str, markers: Iterable[str]) -> bool:
    return any(marker in text for marker in markers)


class KafkaLogs(logging.Filter):
    """One filter on every client logger: folds outages and elections into a few lines
    (the module's docstring). `tick()` writes the minute lines and closes a quiet episode:
    `install()` calls it every second from a thread; tests call it with their clock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, still_every: float = 60.0, quiet: float = 10.0) -> None:
        super().__init__()
        self.clock, self.still_every, self.quiet = clock, still_every, quiet
        self.episode: Episode | None = None
        self.outages = 0  # outages said, for tests and counters
        self._settling_until = 0.0  # after an episode ends: the reconnection's own errors
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if _has(text, FAUST_MONITOR):
            log.debug("Faust, without its Monitor in the record path (faust_fixes patch 10): %s", text.splitlines()[0])
            return False
        with self._lock:
            now = self.clock()
            self._tick(now)
            if _has(text, ANSWERED):
                if self.episode is not None:
                    if self.episode.answered is None:
                        self.episode.answered = now  # over once what follows it has settled
                    return False  # the closing line says it
                return now >= self._settling_until  # else an echo of the reconnection
            if _has(text, RETRIES):
                if self.episode is not None:
                    self.episode.retries += 1
                    return False
                return now >= self._settling_until  # else an echo of the reconnection
            kind = "unreachable" if _has(text, UNREACHABLE) else "electing" if _has(text, ELECTING) else None
            follows = kind is None and record.levelno >= logging.WARNING and _has(text, FOLLOWS)
            if kind is None and not follows:
                return True
            if self.episode is not None:
                self._count(kind, text, now)
            elif now < self._settling_until:
                pass  # the reconnection's own errors, right after an episode was said over
            elif kind is None:
                return True  # what follows an outage, without one: as written
            else:
                self._open(kind, text, now)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("counted, not logged: %s", text)
            return False

    def tick(self) -> None:
        with self._lock:
            self._tick(self.clock())

    # --- under the lock ---------------------------------------------------------------------

    def _open(self, kind: str, text: str, now: float) -> None:
        self.episode = Episode(kind, now, text, text, 1, now, now)
        if kind == "unreachable":
            self.outages += 1
            log.warning(
                "Kafka is unreachable: %s. The worker keeps retrying; this is said again once a minute while it lasts "
                "and when it is over (the client's error for each attempt is counted, not logged)",
                text,
            )
        else:
            log.info("the consumer group's coordinator is not available yet (%s): Kafka is electing one; waiting", text)

    def _count(self, kind: str | None, text: str, now: float) -> None:
        episode = self.episode
        assert episode is not None
        episode.failures += 1
        episode.last, episode.last_failure = text, now
        if kind == "unreachable" and episode.kind == "electing":  # it was worse than an election
            self._open("unreachable", text, now)

    def _tick(self, now: float) -> None:
        episode = self.episode
        if episode is None:
            return
        if episode.answered is not None:
            if now - episode.answered >= self.quiet:
                self._close(episode.answered, "the broker answered")
        elif now - episode.last_failure >= self.quiet:
            self._close(episode.last_failure, f"nothing failed for {self.quiet:g}s")
        elif now - episode.said >= self.still_every:
            episode.said = now
            what = "Kafka still unreachable" if episode.kind == "unreachable" else "still no group coordinator"
            log.warning("%s after %.0fs: %d failed attempt(s) so far (last: %s)", what, now - episode.started, episode.failures, episode.last)

    def _close(self, ended: float, why: str) -> None:
        """Over at `ended`: when the broker answered, else at the last failure."""
        episode = self.episode
        assert episode is not None
        self.episode = None
        self._settling_until = self.clock() + self.quiet
        lasted = ended - episode.started
        if episode.kind == "unreachable":
            log.info(
                "Kafka reachable again (%s): unreachable for %.1fs, %d failed attempt(s), %d producer retries; last: %s",
                why, lasted, episode.failures, episode.retries, episode.last,
            )
        else:
            log.info("the consumer group's coordinator is available (%s, after %.1fs)", why, lasted)


_installed: KafkaLogs | None = None


def install(loggers: Iterable[str] = LOGGERS) -> KafkaLogs:
    """Put the filter on the client libraries' loggers (those named, and any aiokafka
    logger created already), once per process; a daemon thread ticks it every second."""
    global _installed
    if _installed is not None:
        return _installed
    logs = KafkaLogs()
    names = set(loggers) | {name for name in logging.root.manager.loggerDict if name.startswith("aiokafka")}
    for name in sorted(names):
        logging.getLogger(name).addFilter(logs)
    stop = threading.Event()

    def ticking() -> None:
        while not stop.wait(1.0):
            logs.tick()

    threading.Thread(target=ticking, name="faultline-kafka-logs", daemon=True).start()
    _installed = logs
    return logs
