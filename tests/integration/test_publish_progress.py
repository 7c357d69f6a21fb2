"""`faultline publish` writes a trace's progress records (SPEC R12.1) to every partition
of their topic, as the bridge does; the other records keep their keys and order."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import orjson

from app.settings import Settings
from app.kafka.topics import create_topics
from tests.integration.test_bridge_kafka import read_all

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 3


def line(topic: str, key: str, change: str, kind: str, rv: str, at: str) -> bytes:
    obj = {"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": rv}}
    if change != "BOOKMARK":
        obj["metadata"].update({"name": key, "namespace": "ml", "uid": key})
    return orjson.dumps({"topic": topic, "key": key, "value": {"type": change, "observed_at": at, "cluster": "c", "object": obj}})


def test_r12_1_publish_writes_each_progress_record_to_every_partition(kafka_bootstrap, topic_prefix, tmp_path):
    settings = Settings(bootstrap=kafka_bootstrap, topic_prefix=topic_prefix, partitions=PARTITIONS)
    create_topics(settings)
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(b"\n".join([
        line("k8s.pods", "uid-a", "ADDED", "Pod", "10", "2026-12-01T10:00:00.000001Z"),
        line("k8s.pods", "uid-b", "ADDED", "Pod", "11", "2026-12-01T10:00:00.000002Z"),
        line("k8s.pods", "Pod", "BOOKMARK", "Pod", "11", "2026-12-01T10:00:01.000000Z"),
        line("k8s.pods", "uid-a", "MODIFIED", "Pod", "12", "2026-12-01T10:00:02.000000Z"),
    ]) + b"\n")
    result = subprocess.run([sys.executable, "-m", "app", "publish", str(trace), "--bootstrap", kafka_bootstrap, "--topic-prefix", topic_prefix,
                             "--partitions", str(PARTITIONS)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    # Progress on the pods only: the stages hearing the other topics would wait (R12.5), said.
    [warning] = [w for w in result.stderr.splitlines() if "warning" in w]
    assert "cluster 'c'" in warning and "none on k8s.events, k8s.jobs, k8s.workloads" in warning and "BOOKMARK" in warning
    records = read_all(kafka_bootstrap, settings.topic("k8s.pods"))
    marks = [r for r in records if orjson.loads(r.value)["type"] == "BOOKMARK"]
    assert sorted(r.partition for r in marks) == list(range(PARTITIONS)) and {r.key for r in marks} == {b"Pod"}
    by_key: dict[bytes, list[str]] = defaultdict(list)
    partition_of: dict[bytes, set[int]] = defaultdict(set)
    for r in records:
        if r not in marks:
            by_key[r.key].append(orjson.loads(r.value)["object"]["metadata"]["resourceVersion"])
            partition_of[r.key].add(r.partition)
    assert by_key == {b"uid-a": ["10", "12"], b"uid-b": ["11"]} and all(len(p) == 1 for p in partition_of.values())
    # On uid-a's partition the progress record stands between its two changes, as in the file.
    [p] = partition_of[b"uid-a"]
    mine = sorted((r for r in records if r.partition == p and r.key in (b"uid-a", b"Pod")), key=lambda r: r.offset)
    assert [orjson.loads(r.value)["type"] for r in mine] == ["ADDED", "BOOKMARK", "MODIFIED"]


def test_r12_5_publish_says_nothing_of_a_trace_with_progress_on_every_topic(kafka_bootstrap, topic_prefix, tmp_path):
    settings = Settings(bootstrap=kafka_bootstrap, topic_prefix=topic_prefix, partitions=PARTITIONS)
    create_topics(settings)
    kinds = {"k8s.pods": "Pod", "k8s.events": "Event", "k8s.jobs": "JobSet", "k8s.workloads": "Workload"}
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(b"\n".join(line(t, k, "BOOKMARK", k, "5", "2026-12-01T10:00:01.000000Z") for t, k in kinds.items()) + b"\n")
    result = subprocess.run([sys.executable, "-m", "app", "publish", str(trace), "--bootstrap", kafka_bootstrap, "--topic-prefix", topic_prefix,
                             "--partitions", str(PARTITIONS)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "warning" not in result.stderr, result.stderr
    assert "4 progress records" in result.stdout


def test_r12_1_a_progress_record_naming_no_readable_cluster_still_goes_to_every_partition(kafka_bootstrap, topic_prefix, tmp_path):
    # The worker dead-letters it (R11.1) on every partition, as any progress record: publish
    # neither reads nor judges it beyond its type.
    settings = Settings(bootstrap=kafka_bootstrap, topic_prefix=topic_prefix, partitions=PARTITIONS)
    create_topics(settings)
    value = {"type": "BOOKMARK", "observed_at": "2026-12-01T10:00:01.000000Z", "cluster": {"not": "a name"},
             "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"resourceVersion": "5"}}}
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(orjson.dumps({"topic": "k8s.pods", "key": "Pod", "value": value}) + b"\n")
    result = subprocess.run([sys.executable, "-m", "app", "publish", str(trace), "--bootstrap", kafka_bootstrap, "--topic-prefix", topic_prefix,
                             "--partitions", str(PARTITIONS)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "warning" not in result.stderr, result.stderr
    assert sorted(r.partition for r in read_all(kafka_bootstrap, settings.topic("k8s.pods"))) == list(range(PARTITIONS))
