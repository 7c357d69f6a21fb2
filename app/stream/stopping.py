"""A worker that decides to stop exits within a bounded time, and says why.

Faust's shutdown waits on agents, streams, the consumer and the producer; one of them
can hang (seen: a worker that stopped itself on an offset hole still running after
100 s). Once the worker decides to stop — an agent raised, a batch could not be
written, a stop was requested — `StopDeadline.arm` logs the reason and starts a timer
thread that ends the process after `stop_timeout` seconds if the shutdown has not ended
it by then. A restart redelivers whatever was not committed (at-least-once).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable

log = logging.getLogger("faultline.stream")


class StopDeadline:
    def __init__(self, timeout: float, exit: Callable[[int], object] = os._exit) -> None:
        self.timeout, self._exit = timeout, exit
        self.reason: str | None = None
        self._lock = threading.Lock()

    def arm(self, reason: str, code: int = 1) -> None:
        """The worker is stopping because of `reason`: it exits with `code` if it has
        not stopped within the timeout. The first reason given is the one reported."""
        with self._lock:
            if self.reason is not None:
                return
            self.reason = reason
        level = logging.ERROR if code else logging.WARNING  # a requested stop is no error
        log.log(level, "faultline: worker stopping: %s (it exits within %g s)", reason, self.timeout)
        timer = threading.Timer(self.timeout, self._expire, args=(code,))
        timer.daemon = True
        timer.start()

    def _expire(self, code: int) -> None:
        log.critical("faultline: worker did not stop within %g s of: %s; exiting with code %d", self.timeout, self.reason, code)
        for handler in logging.getLogger().handlers + log.handlers:
            handler.flush()
        sys.stderr.flush()
        self._exit(code)
