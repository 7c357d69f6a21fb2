"""Helpers of the bridge tests (shared with tests/integration/test_bridge_*.py): an
in-memory sink, a bridge run in a thread, waiting, and object builders."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import orjson

from app.bridge.positions import MemoryPositions
from app.bridge.records import BridgeGap, SourceRecord
from app.bridge.settings import BridgeSettings
from app.bridge.watcher import Bridge, BridgeStats
from tests.bridge.apiserver import FakeKube

CLUSTER = "test-a"


class MemorySink:
    """Keeps everything; `flushes` counts the checkpoints' flushes."""

    def __init__(self, positions: MemoryPositions | None = None) -> None:
        self.records: list[SourceRecord] = []
        self.gaps: list[BridgeGap] = []
        self.positions = positions if positions is not None else MemoryPositions()
        self.flushes = 0
        self._lock = threading.Lock()

    def publish(self, record: SourceRecord) -> None:
        self.records.append(record)

    def publish_gap(self, gap: BridgeGap) -> None:
        self.gaps.append(gap)

    def flush(self) -> None:
        self.flushes += 1

    def close(self) -> None:
        pass

    # --- reading it back ---

    def envelopes(self, topic: str | None = None) -> list[dict[str, Any]]:
        return [orjson.loads(r.value) for r in list(self.records) if topic is None or r.topic == topic]

    def changes(self, topic: str | None = None) -> list[tuple[str, str, str]]:
        """(type, name, resourceVersion) of each record, in order."""
        return [
            (e["type"], e["object"]["metadata"]["name"], e["object"]["metadata"]["resourceVersion"])
            for e in self.envelopes(topic)
        ]


_RUNNING: list[Running] = []


class Running:
    """A bridge running in a thread until stop() (or the end of the test)."""

    def __init__(self, bridge: Bridge, **run_kwargs: Any) -> None:
        _RUNNING.append(self)
        self.bridge = bridge
        self.stop_event = threading.Event()
        self.stats: BridgeStats | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, kwargs=run_kwargs, name="test-bridge")
        self.thread.start()

    def _run(self, **kwargs: Any) -> None:
        try:
            self.stats = self.bridge.run(self.stop_event, **kwargs)
        except BaseException as exc:
            self.error = exc

    def stop(self, timeout: float = 20.0) -> BridgeStats:
        self.stop_event.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the bridge did not stop"
        if self in _RUNNING:
            _RUNNING.remove(self)
        if self.error is not None:
            raise self.error
        assert self.stats is not None
        return self.stats

    def join(self, timeout: float = 20.0) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the bridge did not end"
        if self in _RUNNING:
            _RUNNING.remove(self)

    def position(self, kind: str, scope: str = "*") -> str | None:
        saved = self.bridge.sink.positions.load(self.bridge.settings.cluster).get(kind)
        return saved.resource_versions.get(scope) if saved else None


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def settings(**overrides: Any) -> BridgeSettings:
    """Fast settings for tests: short backoff, checkpoints and CRD rechecks."""
    values: dict[str, Any] = {
        "cluster": CLUSTER,
        "page_size": 50,
        "watch_timeout": 30,
        "backoff_initial": 0.02,
        "backoff_max": 0.2,
        "crd_recheck": 0.2,
        "checkpoint_interval": 0.05,
    }
    values.update(overrides)
    return BridgeSettings(**values)


def stop_leftover_bridges() -> None:
    """Stop the bridges a test that failed half-way left running."""
    while _RUNNING:
        running = _RUNNING.pop()
        running.stop_event.set()
        running.thread.join(20)


def pod(name: str, namespace: str = "ml", phase: str = "Running", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {"containers": [{"name": "main", "image": "trainer:1"}], "nodeName": "gpu-1"},
        "status": {"phase": phase},
    }


def set_phase(phase: str) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        obj["status"]["phase"] = phase

    return change


def bump(obj: dict[str, Any]) -> None:
    """Any change (as a controller's status update)."""
    status = obj.setdefault("status", {})
    status["n"] = status.get("n", 0) + 1


PLURAL_OF_KIND = {
    "Pod": "pods", "Event": "events", "RayJob": "rayjobs", "PyTorchJob": "pytorchjobs", "TFJob": "tfjobs",
    "MPIJob": "mpijobs", "JobSet": "jobsets", "Workload": "workloads",
}


def apply_story(kube: FakeKube, records: list[dict[str, Any]]) -> int:
    """Play a story's source records (tests/unit/stories.py) as API operations on the
    double: ADDED creates, MODIFIED replaces, DELETED deletes. Returns how many changes."""
    for r in records:
        change, obj = r["value"]["type"], r["value"]["object"]
        plural = PLURAL_OF_KIND[obj["kind"]]
        meta = obj["metadata"]
        exists = (meta["namespace"], meta["name"]) in kube.type(plural).objects
        if change == "DELETED":
            kube.delete(plural, meta["namespace"], meta["name"])
        elif exists:
            kube.update(plural, meta["namespace"], meta["name"], obj)
        else:
            kube.create(plural, obj)
    return len(records)
