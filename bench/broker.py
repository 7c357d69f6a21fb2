"""A Kafka broker for the benchmarks: $FAULTLINE_KAFKA_BOOTSTRAP, else a local one."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCAL_BROKER_PY = Path(__file__).resolve().parents[1] / "ops" / "kafka" / "local_broker.py"


@contextmanager
def kafka() -> Iterator[str]:
    external = os.environ.get("FAULTLINE_KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    spec = importlib.util.spec_from_file_location("faultline_local_broker", LOCAL_BROKER_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with module.LocalBroker() as broker:
        yield broker.bootstrap
