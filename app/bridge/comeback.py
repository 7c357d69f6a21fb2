"""Is the API server back? One cheap probe shared by every watch of a bridge (issue 29).

A watch that fails backs off exponentially (`app.bridge.retry`), so a server that answers
and refuses (429, 5xx, 403 while RBAC warms up, a CRD not served yet) is not hammered.
But a server that was down and is back must get every watch again at once, not after a
delay that grew toward `--backoff-max` while it was down (a 14 s restart used to cost
another 11-14 s). So while watches wait to retry, one of them asks the server
`GET /readyz` (a 1 s timeout) every PROBE_INTERVAL; when a probe that saw the server not
ready (no answer, or not 200) is followed by one that sees it ready, that is a
*comeback*, and every watch whose outage it ends retries at once, with its backoff reset.
One comeback wakes a watch once: a server that is back and still refuses gets the backoff.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

PROBE_INTERVAL = 0.5  # seconds between probes while any watch waits
PROBE_TIMEOUT = 1.0  # seconds: connect and read; a server slower than this is not ready
POLL = 0.05  # seconds: how often a waiting watch looks for a comeback or its stop flag


class ServerProbe:
    """The server's readiness as the last probe saw it, and the comebacks so far.
    `ready` is the probe itself: True when the server answered ready (or answered at all
    where it does not tell readiness), False when it did not."""

    def __init__(self, ready: Callable[[], bool], interval: float = PROBE_INTERVAL, clock: Callable[[], float] = time.monotonic) -> None:
        self._ready, self.interval, self._clock = ready, interval, clock
        self._lock = threading.Lock()
        self._probing = False  # one probe at a time, whoever waits runs it
        self._last_probe = float("-inf")  # when the last probe ended
        self._down = False  # the last probe saw the server not ready
        self.comebacks = 0  # not ready, then ready: counted
        self.comeback_at = float("-inf")  # when the last comeback was seen
        self.probes = 0

    def comeback_since(self, since: float, seen: int) -> int | None:
        """The latest comeback seen at or after `since` and after comeback number `seen`,
        if there is one."""
        with self._lock:
            if self.comebacks > seen and self.comeback_at >= since:
                return self.comebacks
            return None

    def wait(self, seconds: float, since: float, seen: int, stop: threading.Event) -> int | None:
        """Wait up to `seconds` (or until `stop`), probing when a probe is due. Returns the
        number of a comeback seen at or after `since` (the start of the caller's outage)
        and after comeback number `seen` (the last one that woke the caller) as soon as
        there is one; None when the time is up."""
        deadline = self._clock() + seconds
        while not stop.is_set():
            found = self.comeback_since(since, seen)
            if found is not None:
                return found
            now = self._clock()
            if now >= deadline:
                return None
            if self._take_probe(now):
                self._probe()
                continue
            stop.wait(min(POLL, deadline - now))
        return None

    def _take_probe(self, now: float) -> bool:
        with self._lock:
            if self._probing or now - self._last_probe < self.interval:
                return False
            self._probing = True
            return True

    def _probe(self) -> None:
        try:
            ready = self._ready()
        except Exception:  # a probe that fails in an unforeseen way says nothing is ready
            ready = False
        with self._lock:
            self._probing = False
            self._last_probe = self._clock()
            self.probes += 1
            if ready and self._down:
                self.comebacks += 1
                self.comeback_at = self._last_probe
            self._down = not ready
