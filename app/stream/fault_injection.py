"""A fault-injection seam for tests: make one record kill or break the worker. Off unless
the environment variable below is set; no setting, flag or document of a user names it.

    FAULTLINE_FAULT_INJECTION=<mode>:<marker>

A source record (k8s.*) whose value contains the bytes `<marker>`, when the stage
reading it handles it (not the dead letter or any record quoting it later):
- `kill`: the worker process kills itself (SIGKILL), as a C-level crash or an OOM kill
  would end it: no handler, no shutdown, no flush;
- `raise`: the agent raises, as an error outside the fold policy would;
- `kill-after-outputs`: the worker kills itself once the batch holding that record has
  its outputs acknowledged by Kafka, before the batch's offsets are acknowledged: the
  outputs are out, the offsets say the records were never read.

tests/integration/test_stream_crash_loop.py uses it to show that such a record is
dead-lettered after it stopped the worker twice (app/stream/in_flight.py), and that a
worker that stops exits within `stop_timeout`; tests/integration/test_stream_reorder.py
to kill a worker at the one point where a restart reading in another order could
contradict what was sent (app/stream/delivery.py).
"""

from __future__ import annotations

import os
import signal

import faust

from app.model.envelope import SOURCE_TOPICS

ENV = "FAULTLINE_FAULT_INJECTION"


class InjectedFault(RuntimeError):
    """Raised by the `raise` mode."""


class FaultInjection:
    def __init__(self, spec: str | None = None) -> None:
        spec = os.environ.get(ENV, "") if spec is None else spec
        mode, _, marker = spec.partition(":")
        if spec and (mode not in ("kill", "raise", "kill-after-outputs") or not marker):
            raise ValueError(f"{ENV}={spec!r}: expected kill:<marker>, raise:<marker> or kill-after-outputs:<marker>")
        self.mode, self.marker = mode, marker.encode()

    @property
    def on(self) -> bool:
        return bool(self.marker)

    def check(self, logical_topic: str, message: faust.types.Message) -> None:
        if self.mode == "kill-after-outputs" or logical_topic not in SOURCE_TOPICS or self.marker not in (message.value or b""):
            return
        if self.mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise InjectedFault(f"fault injected on {message.topic}[{message.partition}]@{message.offset}")

    def outputs_acknowledged(self, events: list[faust.types.EventT]) -> None:
        """`kill-after-outputs`: called once a batch's outputs are acknowledged."""
        if self.mode != "kill-after-outputs":
            return
        if any(e.message.topic.endswith(SOURCE_TOPICS) and self.marker in (e.message.value or b"") for e in events):
            os.kill(os.getpid(), signal.SIGKILL)
