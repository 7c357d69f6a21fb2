"""SPEC R11: bad records interleaved with valid ones go to faultline.dead-letter with
their topic, partition, offset and reason; the worker goes on and every valid verdict
still arrives. R11.2: unknown kinds and fields are not errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import orjson
from kafka import KafkaProducer
from trace_gen import builders as b
from trace_gen import generate, send, write_trace

from app.model.records import CLASSIFIED_FAILURES, DEAD_LETTER

BAD_VALUES: list[tuple[str, bytes | None]] = [
    ("k8s.pods", b"{not json"),
    ("k8s.pods", b"\xff\xfe\x00 binary garbage"),  # not UTF-8 either
    ("k8s.events", b""),
    ("k8s.pods", None),  # a tombstone on a source topic
    ("k8s.jobs", b'"a JSON string"'),
    ("k8s.workloads", b'{"type": "ADDED"}'),
    ("k8s.pods", orjson.dumps({"type": "ADDED", "observed_at": "2026-08-25T12:00:00", "cluster": "prod-a", "object": {"metadata": {"uid": "u1"}}})),
    ("k8s.pods", orjson.dumps({"type": "ADDED", "observed_at": "2026-08-25T12:00:00Z", "cluster": "prod-a", "object": {"metadata": {"uid": 42}}})),
    ("k8s.events", orjson.dumps({"type": "ADDED", "observed_at": "2026-08-25T12:00:00Z", "cluster": "a/b", "object": {"reason": "GPUXidError"}})),
]


def _unknown_kind_record() -> tuple[str, bytes]:
    """R11.2: a kind faultline does not track, with fields it does not know: ignored."""
    obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "ml", "uid": "deploy-1"}, "spec": {"replicas": 3}, "extra": {"a": 1}}
    return "k8s.jobs", orjson.dumps({"type": "ADDED", "observed_at": b.ts(b.T0), "cluster": "prod-a", "object": obj, "unknown": True})


def test_r11_1_bad_records_are_dead_lettered_with_their_position_and_valid_verdicts_still_arrive(stream_stack, outputs, tmp_path: Path) -> None:
    valid = generate(attempts=60, seed=5, malformed=False)
    expected = outputs.offline(write_trace(tmp_path / "valid.jsonl", valid))
    assert len(expected.latest[CLASSIFIED_FAILURES]) >= 40 and not expected.dead_letters

    producer = KafkaProducer(bootstrap_servers=stream_stack.bootstrap, acks="all")
    bad: dict[tuple[str, int, int], tuple[str | None, bytes | None]] = {}
    try:
        for i, line in enumerate(valid):
            send(producer, stream_stack.topic(line["topic"]), line, stream_stack.partitions)
            if i % 7 == 3:  # interleave a bad record every few valid ones
                topic, value = BAD_VALUES[(i // 7) % len(BAD_VALUES)]
                key = None if i % 2 and value is not None else f"bad-{i}"
                meta = producer.send(stream_stack.topic(topic), key=key.encode() if key else None, value=value).get(timeout=30)
                bad[(meta.topic, meta.partition, meta.offset)] = (key, value)
        topic, value = _unknown_kind_record()
        producer.send(stream_stack.topic(topic), key=b"deploy-1", value=value)
        producer.flush()
    finally:
        producer.close()
    assert len(bad) >= len(BAD_VALUES)

    stream_stack.start_worker(store="memory")
    stream_stack.wait_settled()

    streamed = outputs.streamed(stream_stack)
    # every valid verdict, fault and transition (the bad records' letters are checked below)
    streamed.assert_equal(dataclasses.replace(expected, dead_letters=streamed.dead_letters))
    letters = {}
    for record in stream_stack.read(DEAD_LETTER):
        letter = orjson.loads(record.value)
        assert letter["schema"] == "faultline.DeadLetter/v1"
        letters[(letter["topic"], letter["partition"], letter["offset"])] = letter
    assert set(letters) == set(bad)  # each bad record once, found by its position; nothing else
    for position, (key, value) in bad.items():
        letter = letters[position]
        assert letter["key"] == key
        assert letter["value"] == (value or b"").decode("utf-8", "replace")
        assert letter["reason"], position

    # `faultline tail` shows the same records, as JSON Lines.
    res = stream_stack.faultline("tail", DEAD_LETTER, "--from-beginning", "--max", str(len(bad)), "--idle-timeout", "20",
                                 "--bootstrap", stream_stack.bootstrap, "--topic-prefix", stream_stack.prefix)
    tailed = [json.loads(line) for line in res.stdout.splitlines()]
    assert len(tailed) == len(bad)
    assert {(t["value"]["topic"], t["value"]["partition"], t["value"]["offset"]) for t in tailed} == set(bad)
