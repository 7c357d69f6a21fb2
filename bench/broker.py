"""A Kafka broker for the benchmarks: $FAULTLINE_KAFKA_BOOTSTRAP, else a local one."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

LOCAL_BROKER_PY = Path(__file__).resolve().parents[1] / "ops" / "kafka" / "local_broker.py"


def load_local_broker() -> ModuleType:
    """ops/kafka/local_broker.py, which is a standalone script and no package, loaded by path
    once per process (the integration tests use it too)."""
    name = "faultline_local_broker"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, LOCAL_BROKER_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before it runs: its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@contextmanager
def kafka() -> Iterator[str]:
    external = os.environ.get("FAULTLINE_KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    with load_local_broker().LocalBroker() as broker:
        yield broker.bootstrap
