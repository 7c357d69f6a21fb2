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
  outputs are out, the offsets say the records were never read;
- `kill-before-outputs`: the worker kills itself once a batch's states are durable, before
  any of its outputs is sent, when one of those outputs (any stage's) contains the marker:
  the states say the records were folded, nothing they caused has left.

tests/integration/test_stream_crash_loop.py uses it to show that such a record is
dead-lettered after it stopped the worker twice (app/stream/in_flight.py), and that a
worker that stops exits within `stop_timeout`; tests/integration/test_stream_reorder.py
to kill a worker at the one point where a restart reading in another order could
contradict what was sent (app/stream/delivery.py); tests/integration/test_stream_unsent.py
to kill it where only the states' outboxes hold what a fold caused (app/stream/unsent.py).
"""

from __future__ import annotations

import os
import signal
from typing import Any

from app.model.envelope import SOURCE_TOPICS
from app.stream.codecs import Sent

ENV = "FAULTLINE_FAULT_INJECTION"
MODES = ("kill", "raise", "kill-after-outputs", "kill-before-outputs")


class InjectedFault(RuntimeError):
    """Raised by the `raise` mode."""


class FaultInjection:
    def __init__(self, spec: str | None = None) -> None:
        spec = os.environ.get(ENV, "") if spec is None else spec
        mode, _, marker = spec.partition(":")
        if spec and (mode not in MODES or not marker):
            raise ValueError(f"{ENV}={spec!r}: expected <mode>:<marker>, mode one of {', '.join(MODES)}")
        self.mode, self.marker = mode, marker.encode()

    @property
    def on(self) -> bool:
        return bool(self.marker)

    def check(self, logical_topic: str, message: Any) -> None:
        if self.mode not in ("kill", "raise") or logical_topic not in SOURCE_TOPICS or self.marker not in (message.value or b""):
            return
        if self.mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise InjectedFault(f"fault injected on {message.topic}[{message.partition}]@{message.offset}")

    def outputs_acknowledged(self, records: list[Any]) -> None:
        """`kill-after-outputs`: called once a batch's outputs are acknowledged, with the
        batch's input records."""
        if self.mode != "kill-after-outputs":
            return
        if any(r.topic.endswith(SOURCE_TOPICS) and self.marker in (r.value or b"") for r in records):
            os.kill(os.getpid(), signal.SIGKILL)

    def states_durable(self, outputs: list[Sent]) -> None:
        """`kill-before-outputs`: called once a batch's states are durable, before its
        outputs are sent."""
        if self.mode == "kill-before-outputs" and any(self.marker in bytes(r.value) for r in outputs):
            os.kill(os.getpid(), signal.SIGKILL)
