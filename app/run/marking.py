"""`faultline run --mark` (SPEC R18, without a broker): the faults the embedded pipeline
emits are marked in this process, by the same rule and the same patch code as `faultline
mark` (app/mark/marker.py).

A fault is marked (or skipped) before the output is counted as delivered (the run's
`delivered` index, app/embedded/run_state.py), so a run stopped or killed mid-stream emits
the faults it had not finished again when it restarts, and finds the pods it had marked
marked (R18.2). Only critical faults cost a request (two: a read and a patch), and a pod
marked or ended is remembered: the watch waits on the API server that rarely.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from app.core.base.emit import Emit
from app.mark.marker import Marker, Stopped
from app.model.records import FAULTS

log = logging.getLogger("faultline.mark")


class MarkingOutput:
    """What the pipeline emits goes to `show` as before; each fault is then marked or
    skipped. An error that stops marking (RBAC, credentials, an API server unreachable
    for longer than `give_up_after`) is said once and kept in `failure`; the run goes on
    classifying."""

    def __init__(self, show: Callable[[Emit], None], marker: Marker) -> None:
        self._show, self.marker = show, marker
        self.failure: Exception | None = None

    def __call__(self, emit: Emit) -> None:
        self._show(emit)
        if emit.topic != FAULTS or self.failure is not None:
            return
        try:
            self.marker.handle([emit.value])
        except Stopped:
            log.warning("not marked: stopping while the API server failed (fault %s)", emit.key)
        except Exception as exc:  # MarkApiError, Unreachable: nothing more would be marked
            self.failure = exc
            log.error("marking stopped, classifying goes on: %s", exc)

    def close(self) -> None:
        self.marker.close()
        self.marker.api.close()
