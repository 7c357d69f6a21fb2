"""SPEC R7.4: a worker drops an attempt's state once the retention has passed in stream
time (the records' own `observed_at`), and only then; the wall clock only paces the sweep.

Stream time is kept per table partition, so the test sends late "tick" records into
every partition of every stage; the state dropped is visible as tombstones on the
tables' changelog topics, and matches what the offline runner drops.
"""

from __future__ import annotations

from pathlib import Path

import orjson
from kafka.partitioner.default import murmur2
from trace_gen import builders as b
from trace_gen import stories, write_trace

from app.core.identity.attempt import attempt_of
from app.core.stages.pods import pod_key
from app.core.base.rules import DEFAULT_RULES
from app.model.records import CLASSIFIED_FAILURES
from app.embedded.pipeline import Pipeline
from app.replay.trace import read_lines, replay


def _partition(key: str, partitions: int) -> int:
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions  # Kafka's default partitioner


def _ticks(at, partitions: int) -> list[dict]:
    """Running pod tasks, late in stream time, whose pod uids and attempt keys cover every
    partition of k8s.pods and of faultline.attempt-facts."""
    out: list[dict] = []
    pods, attempts = set(), set()
    i = 0
    while len(pods) < partitions or len(attempts) < partitions:
        labels = b.attempt_labels(run=f"tick-{i}", action="serve", attempt="1")
        p = b.pod(f"tick-{i}", labels=labels, containers={"main": b.running(at)}, created=at)
        attempt = attempt_of(b.CLUSTER, b.NS, labels, DEFAULT_RULES)
        assert attempt is not None
        pods.add(_partition(p["metadata"]["uid"], partitions))
        attempts.add(_partition(attempt.key, partitions))
        out.append(b.record(p, at, "ADDED"))
        i += 1
    return out


def test_r7_4_state_is_dropped_after_the_retention_in_stream_time(stream_stack, tmp_path: Path) -> None:
    b.reset_ids()
    early: list[dict] = []
    for i in range(12):
        early += stories.pod_task_plain_failure(run=f"early-{i}", t0=b.T0 + b.minutes(i))
    later = b.T0 + DEFAULT_RULES.retention + b.minutes(60)
    ticks = _ticks(later, stream_stack.partitions)
    trace = write_trace(tmp_path / "expiry.jsonl", early + ticks)
    early_pods = {pod_key(b.CLUSTER, r["key"]) for r in early}
    assert len(early_pods) == 12
    early_attempts = {
        attempt_of(b.CLUSTER, b.NS, r["value"]["object"]["metadata"]["labels"], DEFAULT_RULES).key for r in early  # type: ignore[union-attr]
    }

    # The offline runner drops exactly these (the streaming path must agree).
    pipeline = Pipeline()
    list(replay(read_lines(trace), pipeline))
    assert early_pods.isdisjoint(pipeline.states["pods"]) and early_attempts.isdisjoint(pipeline.states["attempts"])
    assert len(pipeline.states["pods"]) == len(ticks)
    assert len(pipeline.states["attempts"]) == len(ticks)

    stream_stack.publish(trace)
    stream_stack.start_worker(sweep_interval=0.5)
    stream_stack.wait_settled()
    verdicts = {r.key.decode() for r in stream_stack.read(CLASSIFIED_FAILURES)}
    assert verdicts == early_attempts  # every verdict was written before its state went

    def tombstones(table: str) -> set[str]:
        changelog = f"{stream_stack.app_id}-{table}-changelog"
        return {r.key.decode() for r in stream_stack.read(changelog, full_name=True) if r.value is None}

    stream_stack.poll(
        lambda: tombstones("pods") >= early_pods and tombstones("attempts") >= early_attempts,
        "the finished attempts' state dropped (tombstones on the changelogs)",
    )
    assert tombstones("pods") == early_pods  # the ticks' pods are running: kept
    assert tombstones("attempts") == early_attempts
    # The state left is the ticks' only (latest changelog value per key not a tombstone).
    live: dict[str, bytes | None] = {}
    for r in stream_stack.read(f"{stream_stack.app_id}-attempts-changelog", full_name=True):
        live[r.key.decode()] = r.value
    kept = {k for k, v in live.items() if v is not None}
    assert kept == set(pipeline.states["attempts"])
    assert all(orjson.loads(live[k])["state"]["key"] == k for k in kept)
