"""Issue 23 (1) on the real broker: a worker killed at the one point where a restart that
reads a stage's partitions in another order could contradict what it sent — its batch's
outputs acknowledged by Kafka, its offsets not — restarts and ends with every verdict,
fault and gang transition the offline replay gives.

The order is forced, not hoped for. The pods stage reads k8s.pods and k8s.events of one
partition. Before the kill, the worker folds a burst of events naming the pod (400 that
are no GPU fault, then the third update of its fault Event: count 3) in one batch, and is
killed once that batch's outputs are acknowledged (the fault-injection seam). The pod's
Failed update is published while it is down. It restarts fetching 64 KiB per partition:
the pod's Failed update comes in the first fetch, the Event's third update many fetches
later. A stage whose state had not been made durable before its outputs were sent would
fold the Failed update over the count-2 state, send that view, and its later view (count
3) would be taken downstream as a repeat of the one already folded (the verdict stuck at
count 2, issue 23). States are durable before outputs (app/stream/delivery.py), so the
restart folds the Failed update over the count-3 state.
"""

from __future__ import annotations

from pathlib import Path

import orjson
from trace_gen import builders as b
from trace_gen import write_trace

from app.model.envelope import EVENTS
from app.model.records import CLASSIFIED_FAILURES, FAULTS
from app.stream.fault_injection import ENV

MARKER = "third-update-5b1e"
FILLERS = 400


def _story() -> tuple[list[dict], list[dict], list[dict]]:
    """(before: pod and two updates of its fault Event, burst: fillers then the third
    update, after: the pod's Failed update)."""
    b.reset_ids()
    labels = b.attempt_labels(run="reorder", action="train")
    running = b.pod("reorder-train-1", labels=labels)
    t = b.T0
    first = b.event(running, code=79, first=t - b.minutes(3), count=1)
    before = [b.record(running, t - b.minutes(5), "ADDED"), b.record(first, t - b.minutes(3), "ADDED")]
    second = {**first, "count": 2, "lastTimestamp": b.ts(t - b.minutes(2))}
    before.append(b.record(second, t - b.minutes(2), "MODIFIED"))
    burst = []
    for i in range(FILLERS):  # events about the pod that are no GPU fault, on the same partition
        noise = b.event(running, reason="Pulled", type_="Normal", message=f"image pulled ({i}) " + "x" * 900, first=t - b.minutes(2))
        burst.append(b.record(noise, t - b.minutes(2) + b.minutes(i / FILLERS), "ADDED"))
    third = {**first, "count": 3, "lastTimestamp": b.ts(t - b.minutes(1)), "metadata": {**first["metadata"], "annotations": {"note": MARKER}}}
    burst.append(b.record(third, t - b.minutes(1), "MODIFIED"))
    failed = b.pod("reorder-train-1", pod_uid=running["metadata"]["uid"], labels=labels, phase="Failed", containers={"main": b.terminated(1, finished=t)})
    after = [b.record(failed, t + b.minutes(1), "MODIFIED")]
    return before, burst, after


def test_r7_3_a_restart_reading_its_partitions_in_another_order_contradicts_nothing(stream_stack, outputs, tmp_path: Path) -> None:
    before, burst, after = _story()
    expected = outputs.offline(write_trace(tmp_path / "all.jsonl", before + burst + after))
    [verdict] = expected.latest[CLASSIFIED_FAILURES].values()
    assert verdict["gpu_fault"]["count"] == 3 and verdict["code"] == "GpuFallenOffBus"

    stream_stack.publish(write_trace(tmp_path / "before.jsonl", before))
    first = stream_stack.start_worker("w1", store="rocksdb")
    stream_stack.wait_for(FAULTS, lambda rs: any(orjson.loads(r.value)["fault"]["count"] == 2 for r in rs), timeout=120)
    stream_stack.wait_settled()
    stream_stack.stop_all()
    stream_stack.workers.remove(first)

    # The burst in one batch (one fetch of up to 4 MiB, batch_max above its size), killed
    # once that batch's outputs are acknowledged.
    events_partition = _partition_of(stream_stack, before[0]["key"])
    committed = _committed(stream_stack, EVENTS, events_partition)
    stream_stack.publish(write_trace(tmp_path / "burst.jsonl", burst))
    doomed = stream_stack.start_worker("w1", store="rocksdb", env={ENV: f"kill-after-outputs:{MARKER}"}, extra=("--batch-max", "2000"))
    assert doomed.proc.wait(timeout=180) == -9, doomed.log_tail()
    stream_stack.workers.remove(doomed)
    # Nothing of the burst was committed: the restart reads it all again, from its start.
    assert _committed(stream_stack, EVENTS, events_partition) == committed
    views = [orjson.loads(r.value) for r in stream_stack.read(FAULTS)]
    assert max(v["fault"]["count"] for v in views) == 3  # the third update's outputs were sent

    stream_stack.publish(write_trace(tmp_path / "after.jsonl", after))
    stream_stack.start_worker("w1", store="rocksdb", extra=("--fetch-partition-bytes", "65536"))
    stream_stack.wait_for(CLASSIFIED_FAILURES, lambda rs: len(rs) >= 1, timeout=120)
    stream_stack.wait_settled()
    outputs.streamed(stream_stack).assert_equal(expected, redelivered=True)
    written = [orjson.loads(r.value) for r in stream_stack.read(CLASSIFIED_FAILURES)]
    # No verdict went backwards: every one the worker wrote names the third update.
    assert {v["gpu_fault"]["count"] for v in written} == {3}, written


def _partition_of(stack, key: str) -> int:  # type: ignore[no-untyped-def]
    """Kafka's default partitioner (murmur2 of the key), as `faultline publish` uses it."""
    from aiokafka.partitioner import murmur2

    return (murmur2(key.encode()) & 0x7FFFFFFF) % stack.partitions


def _committed(stack, logical: str, partition: int) -> int:  # type: ignore[no-untyped-def]
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=stack.bootstrap, group_id=stack.app_id, enable_auto_commit=False)
    try:
        return consumer.committed(TopicPartition(stack.topic(logical), partition)) or 0
    finally:
        consumer.close()
