"""Issue 16 on the real broker (SPEC R11.3-R11.5): a hostile tenant's records, each kind
that once stopped a worker or bent a verdict, interleaved with a generated valid trace.

The worker stays up; every record that cannot be used is dead-lettered with a reason and
every dead letter is small; the state those that can be used would have grown without
bound stays bounded, with what was dropped counted; every valid verdict is the offline
replay's of the valid trace alone; and `faultline replay` (from Kafka, and from a trace
file for the records a trace can hold) exits 0 with the same dead letters.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from kafka import KafkaProducer
from trace_gen import builders as b
from trace_gen import generate, write_trace

from app.model.records import DEAD_LETTER
from tests.unit import hostile

Lines = list[dict[str, Any]]

# Each kind of hostile record, built at the time of the valid record it follows (so that
# only the ones meant to be are clock faults). Those with `refused` are all dead-lettered;
# the others are folded, within bounds; a clock fault is folded too, moving no stream time
# (R11.4, amended).
KINDS: list[tuple[str, Callable[[datetime], Lines], bool]] = [
    ("nested", hostile.nested, True),
    ("garbage", lambda at: hostile.huge_garbage(), True),
    ("slash", hostile.slash_label, True),
    ("calendar-ends", hostile.out_of_range_times, True),
    ("decades-ahead", lambda at: [r for r in hostile.far_times("ahead", at, 400) if r["value"]["observed_at"] > "2040"], False),
    ("decades-late", lambda at: [r for r in hostile.far_times("late", at, 400) if r["value"]["observed_at"] < "2010"], False),
    ("flood", lambda at: hostile.fault_flood("flood", at, count=3_000), False),
    ("flood-elsewhere", lambda at: hostile.fault_flood("elsewhere", at, count=300, trusted=False), False),
    ("long-tokens", lambda at: hostile.long_tokens("tokens", at), False),
    ("restart-storm", lambda at: hostile.restart_storm("storm", at), False),
    ("calendar-in-object", lambda at: hostile.far_object_times("calendar", at), True),
]


def _time(line: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(line["value"]["observed_at"])


def _interleaved(valid: Lines) -> tuple[Lines, set[int]]:
    """The valid trace with each kind of hostile record after one of its records, once
    every topic has progress; and the indices of the records that must be refused."""
    first = next(i for i, line in enumerate(valid) if line["value"].get("type") == "BOOKMARK") + len(b.SOURCE_KINDS)
    step = (len(valid) - first) // (len(KINDS) + 1)
    lines: Lines = valid[:first]
    refused: set[int] = set()
    for k, (name, build, dead) in enumerate(KINDS):
        lines += valid[first + k * step : first + (k + 1) * step]
        for n, line in enumerate(build(_time(lines[-1]))):
            if dead and not (name == "calendar-in-object" and n < 2):  # its objects' first records are fine
                refused.add(len(lines))
            lines.append(line)
    return lines + valid[first + len(KINDS) * step :], refused


def _publish(bootstrap: str, prefix: str, lines: Lines, partitions: int) -> list[list[tuple[str, int, int]]]:
    """As `faultline publish` does (a BOOKMARK to every partition), raw values too; the
    position(s) of each line's record."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5, max_request_size=2 << 20)
    try:
        sent = []
        for line in lines:
            progress = isinstance(line["value"], dict) and line["value"].get("type") == "BOOKMARK"
            value = hostile.value_bytes(line)
            sent.append([producer.send(prefix + line["topic"], key=line["key"].encode(), value=value, partition=p) for p in (range(partitions) if progress else [None])])
        producer.flush()
        return [[(m.topic, m.partition, m.offset) for m in (f.get(timeout=60) for f in futures)] for futures in sent]
    finally:
        producer.close()


def _without_floods(latest: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Beyond `max_faults_per_pod`, which of a flood's faults a pod keeps (and so which
    are published once it is known, and which explains its failure) depends on how its pod
    and event records interleave, which differs between the worker and a replay."""
    def flooded(value: dict[str, Any]) -> bool:
        return value.get("run") in ("flood", "elsewhere") or (value.get("fault") or {}).get("pod", {}).get("name", "").startswith(("flood", "elsewhere"))

    return {topic: {k: v for k, v in by_key.items() if not flooded(v)} for topic, by_key in latest.items()}


def test_r11_hostile_records_never_stop_the_worker_nor_bend_a_valid_verdict(stream_stack, outputs, tmp_path: Path) -> None:
    valid = generate(attempts=60, seed=16, malformed=False)
    expected = outputs.offline(write_trace(tmp_path / "valid.jsonl", valid))
    lines, refused = _interleaved(valid)
    positions = _publish(stream_stack.bootstrap, stream_stack.prefix, lines, stream_stack.partitions)

    worker = stream_stack.start_worker("w1", store="rocksdb", sweep_interval=1.0)
    stream_stack.wait_settled(timeout=300)
    assert worker.proc.poll() is None, worker.log_tail()

    # Each record that cannot be used is a dead letter with a reason, and nothing else is.
    read = stream_stack.read(DEAD_LETTER)
    letters = {(x["topic"], x["partition"], x["offset"]): x for x in (orjson.loads(r.value) for r in read)}
    assert set(letters) == {p for i in refused for p in positions[i]}
    assert all(x["reason"] for x in letters.values())
    assert max(len(r.value) for r in read) < 150 * 1024  # the broker takes 1 MiB

    # Every valid verdict, fault and transition is the offline replay's of the valid trace.
    streamed = outputs.streamed(stream_stack)
    for topic, want in expected.latest.items():
        assert {k: v for k, v in streamed.latest[topic].items() if k in want} == want, topic
    assert not streamed.broken_chains

    # What was bounded was counted (the worker's counters, logged by its sweeps).
    counters = worker.counters()
    ahead = sum(1 for line in lines if isinstance(line["value"], dict) and "2040" < str(line["value"].get("observed_at")) < "9999")
    assert counters.get("dropped_faults", 0) >= 3_000 - 32 and counters.get("truncated_texts", 0) >= 7, counters
    assert counters.get("dropped_generations", 0) > 0 and counters.get("clock_faults") == ahead, counters

    # `faultline replay --from-kafka` exits 0 with the same outputs and dead letters.
    out = tmp_path / "replay.jsonl"
    result = stream_stack.faultline("replay", "--from-kafka", "--out", str(out), "--bootstrap", stream_stack.bootstrap,
                                    "--topic-prefix", stream_stack.prefix, timeout=300)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    replayed = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    records = [(r["topic"], r["key"], orjson.dumps(r["value"])) for r in replayed]
    from_kafka = outputs(_without_floods(outputs._latest(records)), outputs._letters([v for t, _, v in records if t == DEAD_LETTER]))
    streamed.latest = _without_floods(streamed.latest)
    streamed.assert_equal(from_kafka)

    # `faultline replay --trace` of every record a trace file can hold (the garbage is no
    # JSON): exit 0, the same dead letters.
    garbage = {line["key"] for line in hostile.huge_garbage()}
    trace = tmp_path / "hostile.jsonl"
    trace.write_bytes(b"".join(hostile.trace_line(line) + b"\n" for line in lines if line["key"] not in garbage))
    result = stream_stack.faultline("replay", "--trace", str(trace), "--out", str(tmp_path / "trace-out.jsonl"), timeout=300)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    offline = [orjson.loads(line) for line in (tmp_path / "trace-out.jsonl").read_bytes().splitlines()]
    from_trace = outputs._letters([orjson.dumps(r["value"]) for r in offline if r["topic"] == DEAD_LETTER])
    assert set(from_trace) == {letter for letter in streamed.dead_letters if letter[1] not in garbage}
