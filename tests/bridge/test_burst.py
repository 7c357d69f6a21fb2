"""A burst of 50,000 changes reaches the sink complete and in per-object order."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import orjson

from app.bridge.bridge import Bridge
from tests.bridge.helpers import MemorySink, Running, settings, wait_for

OBJECTS = 500
CHANGES = 50_000


def realistic_pod(i: int) -> dict:
    """About 1.5 KB of JSON, like a small training pod (without managedFields)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"trainer-{i:04d}",
            "namespace": "ml",
            "labels": {"flyte.org/managed": "true", "run": f"run-{i // 8}", "action": "train", "attempt": "1",
                       "training.kubeflow.org/job-name": f"run-{i // 8}", "training.kubeflow.org/replica-type": "worker"},
            "annotations": {"kubectl.kubernetes.io/default-container": "main", "primary_container_name": "main"},
            "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": f"run-{i // 8}", "uid": f"job-{i // 8}", "controller": True}],
        },
        "spec": {
            "nodeName": f"gpu-{i % 64:02d}",
            "containers": [{"name": "main", "image": "ghcr.io/acme/trainer:1.4", "resources": {"limits": {"nvidia.com/gpu": "8", "memory": "512Gi"}},
                            "env": [{"name": "WORLD_SIZE", "value": "64"}, {"name": "RANK", "value": str(i % 64)}]}],
            "restartPolicy": "Never", "schedulerName": "default-scheduler", "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
        "status": {
            "phase": "Running", "hostIP": "10.0.0.7", "podIP": f"10.1.{i // 250}.{i % 250}", "startTime": "2026-12-01T10:00:00Z",
            "conditions": [{"type": t, "status": "True", "lastTransitionTime": "2026-12-01T10:00:00Z"} for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0, "image": "ghcr.io/acme/trainer:1.4", "imageID": "sha256:abc",
                                   "state": {"running": {"startedAt": "2026-12-01T10:00:05Z"}}}],
            "step": 0,
        },
    }


def test_a_burst_of_50000_changes_arrives_complete_and_in_per_object_order(kube, api, record_property):
    names = [f"trainer-{i:04d}" for i in range(OBJECTS)]
    for i in range(OBJECTS):
        kube.create("pods", realistic_pod(i))
    sink = MemorySink()
    running = Running(Bridge(api, sink, settings(kinds="Pod", page_size=500, checkpoint_interval=0.5)))
    wait_for(lambda: len(sink.records) == OBJECTS and kube.watches, what="the initial list and the watch")

    expected: dict[str, list[str]] = defaultdict(list)
    started = time.monotonic()

    def step(obj: dict) -> None:
        obj["status"]["step"] = obj["status"].get("step", 0) + 1

    def burst() -> None:
        for n in range(CHANGES):
            name = names[n % OBJECTS]
            obj = kube.update("pods", "ml", name, step)
            expected[name].append(obj["metadata"]["resourceVersion"])

    producer = threading.Thread(target=burst)
    producer.start()
    wait_for(lambda: len(sink.records) == OBJECTS + CHANGES, timeout=120, what=f"{CHANGES} changes")
    elapsed = time.monotonic() - started
    producer.join()
    stats = running.stop()

    seen: dict[str, list[str]] = defaultdict(list)
    for record in sink.records[OBJECTS:]:
        envelope = orjson.loads(record.value)
        meta = envelope["object"]["metadata"]
        assert envelope["type"] == "MODIFIED" and record.key == meta["uid"]
        seen[meta["name"]].append(meta["resourceVersion"])
    assert seen == expected  # every change, once, in the order the server made them
    rate = CHANGES / elapsed
    stored = running.bridge.watches[0].known.stored_bytes()
    record_property("records_per_second", round(rate))
    print(f"\nburst: {CHANGES} changes in {elapsed:.2f}s = {rate:,.0f} records/s end to end "
          f"(server double and bridge in one process); known set {stored / OBJECTS:.0f} bytes per pod compressed")
    assert stats.records == OBJECTS + CHANGES
    assert elapsed < 60


def test_catching_up_on_50000_changes_after_a_restart_is_bridge_bound(kube, api, record_property):
    """The same burst, made while the bridge was stopped: the restarted bridge replays it
    from the server's history as fast as it can read, so this measures the bridge itself."""
    from app.bridge.positions import MemoryPositions

    names = [f"trainer-{i:04d}" for i in range(OBJECTS)]
    for i in range(OBJECTS):
        kube.create("pods", realistic_pod(i))
    positions = MemoryPositions()
    first = MemorySink(positions)
    running = Running(Bridge(api, first, settings(kinds="Pod", page_size=500)))
    wait_for(lambda: running.position("Pod") == str(kube.rv), what="the checkpoint")
    running.stop()

    expected: dict[str, list[str]] = defaultdict(list)

    def step(obj: dict) -> None:
        obj["status"]["step"] = obj["status"].get("step", 0) + 1

    for n in range(CHANGES):
        name = names[n % OBJECTS]
        expected[name].append(kube.update("pods", "ml", name, step)["metadata"]["resourceVersion"])

    sink = MemorySink(positions)
    started = time.monotonic()
    running = Running(Bridge(api, sink, settings(kinds="Pod", page_size=500, checkpoint_interval=0.5)))
    wait_for(lambda: len(sink.records) == CHANGES, timeout=120, what=f"{CHANGES} changes")
    elapsed = time.monotonic() - started
    running.stop()
    seen: dict[str, list[str]] = defaultdict(list)
    for record in sink.records:
        meta = orjson.loads(record.value)["object"]["metadata"]
        seen[meta["name"]].append(meta["resourceVersion"])
    assert seen == expected
    rate = CHANGES / elapsed
    record_property("catch_up_records_per_second", round(rate))
    print(f"\ncatch-up: {CHANGES} changes in {elapsed:.2f}s = {rate:,.0f} records/s (restart, seed list, watch replay)")
    assert elapsed < 60
