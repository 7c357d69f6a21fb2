"""Integration tests run against a real Kafka broker (ops/kafka/local_broker.py), never mocks.

Set FAULTLINE_KAFKA_BOOTSTRAP=host:port to use an already running broker instead.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

HERE = Path(__file__).resolve().parent
LOCAL_BROKER_PY = HERE.parents[1] / "ops" / "kafka" / "local_broker.py"


def _load_local_broker() -> ModuleType:
    # ops/ is not a package; load the standalone module by path (once per process).
    name = "faultline_local_broker"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, LOCAL_BROKER_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: needs a real Kafka broker (tests/integration)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # This hook sees the whole session's items: mark only those under tests/integration.
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """bootstrap.servers of a real broker: $FAULTLINE_KAFKA_BOOTSTRAP, else one LocalBroker per test run."""
    external = os.environ.get("FAULTLINE_KAFKA_BOOTSTRAP")
    if external:
        yield external
        return
    # A pytest-managed dir (not deleted by stop()) so the broker logs survive a failed run.
    broker = _load_local_broker().LocalBroker(tmp_path_factory.mktemp("kafka"))
    try:
        yield broker.start()
    finally:
        broker.stop()


@pytest.fixture
def topic_prefix() -> str:
    """A unique prefix per test, e.g. 't1a2b3c4d.', so tests never share topics or groups."""
    return f"t{uuid.uuid4().hex[:8]}."
