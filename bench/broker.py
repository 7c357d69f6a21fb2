"""A Kafka broker for the benchmarks: $FAULTLINE_KAFKA_BOOTSTRAP, else a local one."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from ops.kafka.local_broker import LocalBroker


@contextmanager
def kafka() -> Iterator[str]:
    external = os.environ.get("FAULTLINE_KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    with LocalBroker() as broker:
        yield broker.bootstrap
