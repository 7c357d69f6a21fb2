"""Helpers of the bridge tests (shared with tests/integration/test_bridge_*.py): an
in-memory sink, a bridge run in a thread, waiting, and object builders."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import orjson

from app.bridge.positions import MemoryPositions
from app.bridge.records import BridgeGap, SourceRecord
from app.bridge.settings import BridgeSettings
from app.bridge.bridge import Bridge, BridgeStats
from tests.bridge.apiserver import FakeKube

CLUSTER = "test-a"


class MemorySink:
    """Keeps everything; `flushes` counts the checkpoints' flushes."""

    def __init__(self, positions: MemoryPositions | None = None) -> None:
        self.records: list[SourceRecord] = []
        self.gaps: list[BridgeGap] = []
        self.progress: list[tuple[str, str, bytes]] = []  # (topic, key, value), in order
        self.positions = positions if positions is not None else MemoryPositions()
        self.flushes = 0
        self._lock = threading.Lock()

    def publish(self, record: SourceRecord) -> None:
        self.records.append(record)

    def publish_gap(self, gap: BridgeGap) -> None:
        self.gaps.append(gap)

    def publish_progress(self, topic: str, key: str, value: bytes) -> None:
        self.progress.append((topic, key, value))

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
    "MPIJob": "mpijobs", "JAXJob": "jaxjobs", "JobSet": "jobsets", "Workload": "workloads", "TrainJob": "trainjobs", "Job": "jobs",
    "LeaderWorkerSet": "leaderworkersets",
}


class Operation(NamedTuple):
    op: str  # create | update | delete
    plural: str
    namespace: str
    name: str  # the name the object was created with
    obj: dict[str, Any]


def story_operations(records: list[dict[str, Any]]) -> list[Operation]:
    """A story's source records (tests/unit/stories.py) as the API calls clients of a real
    server make. Objects are told apart by their uid in the story: the first record of a
    uid is a create, then a status write (a create drops the status); a later one an
    update of that object; DELETED a delete."""
    operations: list[Operation] = []
    created: dict[str, tuple[str, str]] = {}  # story uid -> (namespace, name)
    for r in records:
        change, obj = r["value"]["type"], r["value"]["object"]
        plural = PLURAL_OF_KIND[obj["kind"]]
        meta = obj["metadata"]
        if meta["uid"] not in created:
            created[meta["uid"]] = (meta["namespace"], meta["name"])
            operations.append(Operation("create", plural, meta["namespace"], meta["name"], obj))
            if obj.get("status") and plural != "events":
                operations.append(Operation("update", plural, meta["namespace"], meta["name"], obj))
            if change != "DELETED":
                continue
        namespace, name = created[meta["uid"]]
        operations.append(Operation("delete" if change == "DELETED" else "update", plural, namespace, name, obj))
    return operations


def watched_changes(records: list[dict[str, Any]]) -> int:
    """How many changes the watches see when a story is played (a pod's deletion is two)."""
    return sum(2 if o.op == "delete" and o.plural == "pods" else 1 for o in story_operations(records))


def apply_story(kube: FakeKube, records: list[dict[str, Any]]) -> int:
    """Play a story on the double; returns how many changes the watches will see."""
    for o in story_operations(records):
        if o.op == "delete":
            kube.delete(o.plural, o.namespace, o.name)
        elif o.op == "create":
            kube.create(o.plural, o.obj)
        else:
            kube.update(o.plural, o.namespace, o.name, o.obj)
    return watched_changes(records)


def source_lines(data: bytes) -> list[bytes]:
    """The trace lines that are changes, not progress records."""
    return [line for line in data.splitlines() if b'"type":"BOOKMARK"' not in line]
