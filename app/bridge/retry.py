"""Retrying a watch: capped exponential backoff, and an outage that is logged once when it
starts and once when it ends, and becomes fatal after `give_up_after` seconds."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

from app.bridge.errors import Unreachable

log = logging.getLogger("faultline.bridge")

# A restarted API server answers 403 for a moment until its RBAC caches sync (an upstream
# behaviour); a 403 of a watch that worked before is retried for this long first.
FORBIDDEN_GRACE = 15.0


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


class Outage:
    """The failures in a row of one watch, from the first to the next success."""

    def __init__(self, name: str, give_up_after: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.name, self.give_up_after, self.clock = name, give_up_after, clock
        self.started: float | None = None
        self.tries = 0
        self.cause = ""

    def duration(self) -> float:
        return 0.0 if self.started is None else self.clock() - self.started

    def failed(self, cause: str) -> None:
        """One more failure; the first is logged. Raises Unreachable once the outage has
        lasted longer than give_up_after (0: never)."""
        now = self.clock()
        if self.started is None:
            self.started, self.tries = now, 0
            limit = f"giving up after {self.give_up_after:g}s" if self.give_up_after else "retrying until it recovers"
            log.warning("%s: %s; retrying with backoff (%s)", self.name, cause, limit)
        else:
            log.debug("%s: still failing: %s", self.name, cause)
        self.tries += 1
        self.cause = cause
        if self.give_up_after and now - self.started > self.give_up_after:
            raise Unreachable(
                f"{self.name}: the API server has failed every request for {now - self.started:.0f}s ({self.tries} tries; "
                f"last error: {cause}); giving up. Check that the API server is up and reachable from here, "
                "or raise --give-up-after (FAULTLINE_GIVE_UP_AFTER; 0 retries forever)"
            )

    def recovered(self) -> None:
        """A request succeeded: the outage (if any) is over, and said so."""
        if self.started is None:
            return
        log.info("%s: recovered after %.1fs (%d failed tries; last error: %s)", self.name, self.duration(), self.tries, self.cause)
        self.started, self.tries, self.cause = None, 0, ""
